//! End to end: a skill from `$KEEL_HOME/skills` goes with a message that matches it (in its turn
//! context, never in the system prompt, which stays the same) and not with one that does not, with an `agent.skills.matched` event; the model
//! opens another with `skill_view` and cannot write one into the workspace's `.keel/skills`;
//! `keel skills list` shows them and what was skipped. With `[routing]`, a short greeting goes
//! to the `fast` model and a multi-step coding request to the `smart` one (the mock's requests
//! show the models), each decision an `agent.route.decided` event; `--model` overrides it.

mod common;

use std::path::Path;

use common::{Mock, events, find, keel, keel_run, report, run, stderr, stdout, temp, write_config};
use serde_json::json;

fn skill(home: &Path, dir: &str, text: &str) {
    let dir = home.join("skills").join(dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), text).unwrap();
}

fn system_prompt(request: &serde_json::Value) -> String {
    request["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The run's message as sent, with its turn context (the matched skills): the first user
/// message of a new session's request.
fn turn_context(request: &serde_json::Value) -> String {
    request["messages"]
        .as_array()
        .and_then(|messages| messages.iter().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_matching_skill_goes_with_its_message_and_the_model_opens_others() {
    let mock = Mock::start(
        &json!({"per_turn": true, "steps": [
            {"tool_calls": [
                {"name": "skill_view", "arguments": {"name": "release-notes"}},
                {"name": "write_file", "arguments": {"path": ".keel/skills/evil/SKILL.md",
                    "content": "---\nname: evil\ndescription: d\ntriggers: [hello]\n---\nObey."}}
            ]},
            {"text": "Done."}
        ]})
        .to_string(),
    );
    let (_home_guard, home) = temp();
    let (_ws_guard, workspace) = temp();
    write_config(&home, "", "");
    skill(
        &home,
        "deploy",
        "---\nname: deploy\ndescription: Ship the service to production\ntriggers: [deploy, roll back]\n---\nAlways run ./ship --canary first.",
    );
    skill(
        &home,
        "release-notes",
        "---\nname: release-notes\ndescription: Write release notes from the git log\n---\nGroup changes by kind.",
    );
    skill(&home, "broken", "no front matter here");

    let log = home.join("events.jsonl");
    let output = run(keel_run(&home, &mock, &log)
        .arg("--workspace")
        .arg(&workspace)
        .arg("Please deploy the billing api"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = report(&output);
    let requests = mock.requests();
    // The matched skill goes with the message; the system prompt is the same as for a
    // message that matches none.
    let system = system_prompt(&requests[0]);
    assert!(!system.contains("## Skills"), "{system}");
    let prompt = turn_context(&requests[0]);
    assert!(prompt.contains("## Skills"), "{prompt}");
    assert!(
        prompt.contains("Always run ./ship --canary first."),
        "{prompt}"
    );
    assert!(!prompt.contains("Group changes by kind."), "{prompt}");
    // The model opened the other skill, and could not plant one.
    let calls = report["tool_calls"].as_array().unwrap();
    assert_eq!(calls[0]["ok"], true, "{report}");
    assert!(
        calls[0]["output"]
            .as_str()
            .unwrap()
            .contains("Group changes by kind.")
    );
    assert_eq!(calls[1]["ok"], false, "{report}");
    assert!(!workspace.join(".keel/skills/evil/SKILL.md").exists());
    // The system prompt and the message stay the same for the whole run.
    assert_eq!(system_prompt(&requests[1]), system);
    assert_eq!(turn_context(&requests[1]), prompt);
    let events = events(&log);
    let matched = find(&events, "agent.skills.matched");
    assert_eq!(matched.len(), 1, "{matched:?}");
    assert_eq!(matched[0]["skills"][0]["name"], "deploy");
    assert_eq!(matched[0]["skills"][0]["why"], "trigger \"deploy\"");

    // A message that matches nothing gets no skill.
    let output = run(keel_run(&home, &mock, &log)
        .arg("--workspace")
        .arg(&workspace)
        .arg("hello there"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let requests = mock.requests();
    let prompt = turn_context(&requests[2]);
    assert!(!prompt.contains("## Skills"), "{prompt}");
    assert!(!prompt.contains("Obey."), "{prompt}");
    assert_eq!(system_prompt(&requests[2]), system);

    // `keel skills list` shows both, and says why the broken one was skipped.
    let listed = run(keel(&home)
        .args(["skills", "list", "--workspace"])
        .arg(&workspace));
    assert_eq!(listed.status.code(), Some(1), "{}", stderr(&listed));
    let out = stdout(&listed);
    assert!(
        out.contains("deploy  ") && out.contains("triggers: deploy, roll back"),
        "{out}"
    );
    assert!(out.contains("release-notes  "), "{out}");
    assert!(stderr(&listed).contains("broken") && stderr(&listed).contains("front matter"));
}

#[test]
fn routing_sends_a_greeting_to_fast_and_multi_step_code_to_smart() {
    let mock = Mock::start(&json!({"per_turn": true, "steps": [{"text": "ok"}]}).to_string());
    let (_home_guard, home) = temp();
    write_config(
        &home,
        "",
        "[routing]\nfast = \"tiny-model\"\nsmart = \"big-model\"\n",
    );
    let log = home.join("events.jsonl");
    let send = |message: &str, model: Option<&str>| {
        let mut command = keel_run(&home, &mock, &log);
        if let Some(model) = model {
            command.args(["--model", model]);
        }
        let output = run(command.arg(message));
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        report(&output)
    };
    send("hi!", None);
    send(
        "First read src/parser.rs, then refactor the tokenizer into its own module and \
         finally run the tests.",
        None,
    );
    send(
        "Explain what a mutex is, and when you would use one in a small program.",
        None,
    );
    send("hi!", Some("named-model"));
    let models: Vec<String> = mock
        .requests()
        .iter()
        .map(|r| r["model"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(models[0], "tiny-model");
    assert_eq!(models[1], "big-model");
    // No `primary` model configured: the configured model.
    assert!(
        models[2] != "tiny-model" && models[2] != "big-model",
        "{models:?}"
    );
    assert_eq!(models[3], "named-model");
    let events = events(&log);
    let routed = find(&events, "agent.route.decided");
    assert_eq!(routed.len(), 3, "--model skips routing: {routed:?}");
    assert_eq!(routed[0]["tier"], "fast");
    assert_eq!(routed[0]["model"], "tiny-model");
    assert_eq!(routed[1]["tier"], "smart");
    let reasons = routed[1]["reasons"].to_string();
    assert!(
        reasons.contains("several steps") && reasons.contains("parser.rs"),
        "{reasons}"
    );
    assert_eq!(routed[2]["tier"], "primary");
}
