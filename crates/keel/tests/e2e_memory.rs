//! End to end through `keel mock-provider`: the `todo` list survives a compaction, the model
//! gets its memory flush turn before the compaction's summary, what it saves with `memory`
//! shows in the system prompt of the next session (never of its own), and a full note is a
//! clear error that writes nothing.

mod common;

use common::{Mock, events, find, keel_run, position, report, run, stderr, temp, write_config};
use serde_json::{Value, json};

const WINDOW: &str = "8000";
const SAVED: &str = "the sensor logs live in f1.txt to f3.txt";

/// About `n` tokens of text, tagged.
fn words(tag: &str, n: usize) -> String {
    format!("{tag}:{}", " word".repeat(n))
}

fn system_prompt(request: &Value) -> &str {
    request["messages"][0]["content"].as_str().unwrap_or("")
}

fn tool_names(request: &Value) -> Vec<&str> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default()
}

fn contents(request: &Value) -> String {
    request["messages"].to_string()
}

#[test]
fn the_todo_list_survives_a_compaction_after_the_memory_flush_and_memory_reaches_the_next_session()
{
    let (_w, workspace) = temp();
    for i in 1..=3 {
        // Each read is cut to half the window's characters in requests: ~800 tokens.
        std::fs::write(
            workspace.join(format!("f{i}.txt")),
            words(&format!("f{i}"), 1000),
        )
        .unwrap();
    }
    let read = |i: usize| json!({"tool_calls": [{"name": "read_file", "arguments": {"path": format!("f{i}.txt")}}]});
    let script = json!({
        "steps": [
            // Run 1: a plan, three reads, an answer.
            {"tool_calls": [{"name": "todo", "arguments": {"action": "add", "items": [
                {"text": "read the three logs", "status": "in_progress"},
                {"text": "report the anomalies"}
            ]}}]},
            read(1), read(2), read(3),
            {"text": "Read all three."},
            // Run 2: its long message crosses the threshold; this is the flush turn.
            {"tool_calls": [
                {"name": "memory", "arguments": {"action": "add", "target": "memory", "text": SAVED}},
                {"name": "todo", "arguments": {"action": "update", "id": "1", "status": "done"}},
                {"name": "read_file", "arguments": {"path": "f1.txt"}}
            ]},
            {"text": "No anomalies."},
            // Run 3, a new session.
            {"text": "Hello again."}
        ],
        "models": {"summary-model": {"steps": [
            {"text": "Summary: the agent read f1..f3 for anomalies.", "forever": true}
        ]}}
    });
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    write_config(
        &home,
        "",
        "[models]\nsummary = \"summary-model\"\n\n[context]\nkeep_last = 4\n\n[tools.shell]\nenabled = false\n",
    );
    let events_path = home.join("events.jsonl");
    let keel = |args: &[&str], prompt: &str| {
        let output = run(keel_run(&home, &mock, &events_path)
            .args(["--context-window", WINDOW, "--workspace"])
            .arg(&workspace)
            .args(args)
            .arg(prompt));
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        report(&output)
    };

    let first = keel(&[], "Check the sensor logs.");
    assert_eq!(first["state"], "completed", "{first}");
    let session = first["session_id"].as_str().unwrap().to_string();
    assert!(
        find(&events(&events_path), "agent.compaction.run").is_empty(),
        "run 1 fits the window"
    );
    let before = mock.requests().len();

    let second = keel(&["--session", &session], &words("Also note", 2500));
    assert_eq!(second["state"], "completed", "{second}");
    let requests = mock.requests();
    let run2: Vec<&Value> = requests[before..].iter().collect();
    let summary = run2
        .iter()
        .position(|r| r["model"] == "summary-model")
        .expect("a compaction summary was asked for");
    let flush = run2
        .iter()
        .position(|r| contents(r).contains("about to be summarized"))
        .expect("a flush request");
    assert!(flush < summary, "the flush comes before the summary");
    assert_eq!(tool_names(run2[flush]), ["memory", "todo"]);
    // The read asked for on the flush turn was refused; the memory call saved the entry.
    let calls = second["tool_calls"].as_array().unwrap();
    let by_name = |name: &str| calls.iter().find(|c| c["name"] == name).unwrap();
    assert_eq!(by_name("memory")["ok"], true, "{second}");
    assert_eq!(by_name("read_file")["ok"], false);
    let saved = std::fs::read_to_string(home.join("memory/_local/MEMORY.md")).unwrap();
    assert_eq!(saved.trim(), SAVED);
    // After the summary, the task list is back, up to date.
    let after = contents(run2[summary + 1]);
    assert!(
        after.contains("Summary: the agent read f1..f3")
            && after.contains("Your task list (kept through the summary)")
            && after.contains("[x] 1: read the three logs (done)")
            && after.contains("[ ] 2: report the anomalies (pending)"),
        "{after}"
    );
    // The memory written in this session is not in its prompt.
    assert!(run2.iter().all(|r| !system_prompt(r).contains(SAVED)));
    let log = events(&events_path);
    let flushed = position(&log, "agent.memory.flushed");
    assert!(flushed < position(&log, "agent.compaction.run"));
    assert_eq!(log[flushed]["saved"], 1, "{}", log[flushed]);

    // A new session shows it in its system prompt.
    let before = mock.requests().len();
    let third = keel(&[], "Hi.");
    assert_eq!(third["state"], "completed");
    let requests = mock.requests();
    let prompt = system_prompt(&requests[before]);
    assert!(
        prompt.contains("# Your durable memory") && prompt.contains(SAVED),
        "{prompt}"
    );
}

#[test]
fn a_full_memory_note_is_a_clear_error_and_writes_nothing() {
    let entry = "x".repeat(40);
    let script = json!({"steps": [
        {"tool_calls": [{"name": "memory", "arguments": {"action": "add", "target": "memory", "text": "short note"}}]},
        {"tool_calls": [{"name": "memory", "arguments": {"action": "add", "target": "memory", "text": entry}}]},
        {"tool_calls": [{"name": "memory", "arguments": {"action": "replace", "target": "memory", "old_text": "nothing like it", "text": "y"}}]},
        {"tool_calls": [{"name": "memory", "arguments": {"action": "add", "target": "diary", "text": "y"}}]},
        {"tool_calls": [{"name": "memory", "arguments": "{not json"}]},
        {"text": "Done."}
    ]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    write_config(
        &home,
        "",
        "[memory]\nmemory_chars = 30\n\n[tools.shell]\nenabled = false\n",
    );
    let events_path = home.join("events.jsonl");
    let output = run(keel_run(&home, &mock, &events_path).arg("Remember things."));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = report(&output);
    let calls = report["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 5, "{report}");
    assert_eq!(calls[0]["ok"], true);
    for call in &calls[1..] {
        assert_eq!(call["ok"], false, "{call}");
    }
    let full = calls[1]["output"].as_str().unwrap();
    assert!(
        full.contains("MEMORY.md: the note is full: its limit is 30 characters, it holds 10"),
        "{full}"
    );
    assert!(
        calls[2]["output"]
            .as_str()
            .unwrap()
            .contains("no entry contains `nothing like it`")
    );
    assert!(
        calls[3]["output"].as_str().unwrap().contains("diary"),
        "{}",
        calls[3]
    );
    assert!(
        calls[4]["output"].as_str().unwrap().contains("JSON"),
        "{}",
        calls[4]
    );
    let saved = std::fs::read_to_string(home.join("memory/_local/MEMORY.md")).unwrap();
    assert_eq!(saved, "short note\n");
    // The model read the error.
    let requests = mock.requests();
    assert!(contents(&requests[2]).contains("the note is full"));
}
