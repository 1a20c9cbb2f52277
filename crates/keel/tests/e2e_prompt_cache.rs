//! End to end: the prompt cache. Over Anthropic's Messages API (prompt caching on, as by
//! default), every request of a session — both calls of a first turn that matched a skill and
//! wrote the journal, a second turn, a third that asked a question, and the resumed call after
//! `keel answer` in another process — carries the same system prompt, byte for byte, with its
//! cache breakpoint on its last block, and the same tools. What changes per message (the
//! matched skill, the journal) goes with the run's own message, and a run's later call starts
//! with exactly what its earlier call sent, so the provider reads it from its cache.

mod common;

use common::{Mock, keel, keel_run, only_run_id, report, run, stderr, temp};
use serde_json::{Value, json};

/// `value` without its `cache_control` marks: where the breakpoints fall moves with the last
/// user turns; what is cached is the text before them.
fn unmarked(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, _)| *key != "cache_control")
                .map(|(key, value)| (key.clone(), unmarked(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(unmarked).collect()),
        other => other.clone(),
    }
}

/// The text of a request's first user turn.
fn first_user_text(request: &Value) -> String {
    request["messages"][0]["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

#[test]
fn the_system_prompt_is_the_same_bytes_for_every_call_of_a_session_and_its_resume() {
    let mock = Mock::start(
        &json!({"steps": [
            {"tool_calls": [{"name": "update_run_journal",
                "arguments": {"objective": "Ship the billing api", "handoff_next_action": "watch it"}}]},
            {"text": "Deployed."},
            {"text": "Hi."},
            {"tool_calls": [{"name": "ask_human", "arguments": {"question": "Whose name?"}}]},
            {"text": "Done.", "forever": true}
        ]})
        .to_string(),
    );
    let (_home_guard, home) = temp();
    let (_ws_guard, workspace) = temp();
    let skill = home.join("skills/deploy");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: deploy\ndescription: Ship a service\ntriggers: [deploy]\n---\nAlways run ./ship --canary first.",
    )
    .unwrap();
    let log = home.join("events.jsonl");
    let send = |session: Option<&str>, message: &str| {
        let mut command = keel_run(&home, &mock, &log);
        command
            .args(["--api", "anthropic-messages", "--workspace"])
            .arg(&workspace);
        if let Some(session) = session {
            command.args(["--session", session]);
        }
        run(command.arg(message))
    };

    let first = send(None, "Please deploy the billing api");
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let session = report(&first)["session_id"].as_str().unwrap().to_string();
    let second = send(Some(&session), "hello there");
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
    let third = send(Some(&session), "greet someone");
    assert_eq!(third.status.code(), Some(3), "{}", stderr(&third));
    // The answer resumes the run in another process, from its checkpoint.
    let run_id = only_run_id(&home);
    let answered = run(keel(&home).args(["answer", &run_id, "--json", "Ada"]));
    assert_eq!(answered.status.code(), Some(0), "{}", stderr(&answered));

    let requests = mock.requests();
    assert_eq!(requests.len(), 5, "{requests:#?}");
    let system = &requests[0]["system"];
    let blocks = system.as_array().expect("a system prompt");
    assert_eq!(
        blocks.last().unwrap()["cache_control"],
        json!({"type": "ephemeral"}),
        "the breakpoint closes the system prompt: {system}"
    );
    for (i, request) in requests.iter().enumerate() {
        assert_eq!(
            request["system"].to_string(),
            system.to_string(),
            "request {i} sends the same system prompt, breakpoint and all"
        );
        assert_eq!(
            request["tools"].to_string(),
            requests[0]["tools"].to_string(),
            "request {i} offers the same tools"
        );
    }
    let system_text = system.to_string();
    assert!(
        !system_text.contains("## Skills") && !system_text.contains("Run journal"),
        "nothing per message in the system prompt: {system_text}"
    );

    // The skill matched the first message and goes with it; the run's second call sends the
    // first call's messages again as they were, then what is new.
    let turn1 = first_user_text(&requests[0]);
    assert!(
        turn1.starts_with("<turn-context>\n## Skills")
            && turn1.contains("Always run ./ship --canary first.")
            && turn1.ends_with("Please deploy the billing api"),
        "{turn1}"
    );
    let earlier = unmarked(&requests[0]["messages"]);
    let later = unmarked(&requests[1]["messages"]);
    let earlier = earlier.as_array().unwrap();
    assert_eq!(
        earlier[..],
        later.as_array().unwrap()[..earlier.len()],
        "the second call starts with what the first sent"
    );
    // The journal the first turn wrote goes with the second turn's message.
    let turn2 = requests[2]["messages"].as_array().unwrap().last().unwrap();
    let turn2 = turn2.to_string();
    assert!(
        turn2.contains("Your run journal so far") && turn2.contains("Ship the billing api"),
        "{turn2}"
    );
    // The resumed call starts with what the asking call sent.
    let asked = unmarked(&requests[3]["messages"]);
    let resumed = unmarked(&requests[4]["messages"]);
    let asked = asked.as_array().unwrap();
    assert_eq!(asked[..], resumed.as_array().unwrap()[..asked.len()]);
}
