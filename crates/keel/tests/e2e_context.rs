//! End to end: a long research task whose tool output far exceeds the model's window runs to
//! completion through `keel mock-provider`, every request fitting the window, with compaction
//! summaries written by a separate summary model and nothing lost from the store.

mod common;

use common::{Mock, keel, run, stderr, stdout, temp};
use keel_core::tokens::{Encoding, MESSAGE_OVERHEAD, TOOL_CALL_OVERHEAD};
use serde_json::{Value, json};

const FILES: usize = 60;
// Every request carries the loop's own tools too (ask_human, clarify, the journal's, …) and
// session_search: the window leaves the task about 3,000 tokens beside them.
const WINDOW: u64 = 4400;

/// About 40 tokens of notes that differ from file to file.
fn notes(i: usize) -> String {
    format!(
        "notes of file {i:02}: sensor {} read {} at hour {}; status nominal; pressure steady; \
         valve closed; next check in {} minutes.",
        (i * 37) % 101,
        (i * 7919) % 10007,
        i % 24,
        (i * 13) % 60
    )
}

/// Tokens of a chat-completions request as keel estimates them: each message's text and tool
/// calls, plus the tool definitions.
fn request_tokens(request: &Value) -> u64 {
    let bpe = Encoding::Cl100kBase;
    let messages: u64 = request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let calls: u64 = m["tool_calls"]
                .as_array()
                .map(|calls| {
                    calls
                        .iter()
                        .map(|c| {
                            u64::from(TOOL_CALL_OVERHEAD)
                                + u64::from(bpe.count(c["function"]["name"].as_str().unwrap_or("")))
                                + u64::from(
                                    bpe.count(c["function"]["arguments"].as_str().unwrap_or("")),
                                )
                        })
                        .sum()
                })
                .unwrap_or(0);
            u64::from(MESSAGE_OVERHEAD)
                + u64::from(bpe.count(m["content"].as_str().unwrap_or("")))
                + calls
        })
        .sum();
    let tools = u64::from(bpe.count(&request["tools"].to_string()));
    messages + tools
}

#[test]
fn a_sixty_iteration_task_fits_a_4400_token_window_and_loses_nothing() {
    let (_w, workspace) = temp();
    for i in 0..FILES {
        std::fs::write(workspace.join(format!("f{i:02}.txt")), notes(i)).unwrap();
    }
    let mut steps: Vec<Value> = (0..FILES)
        .map(|i| {
            json!({"text": format!("Reading file {i:02}."),
                   "tool_calls": [{"name": "read_file", "arguments": {"path": format!("f{i:02}.txt")}}]})
        })
        .collect();
    steps.push(json!({"text": "Done: I read all 60 files; the facts are in the summaries."}));
    let script = json!({
        "steps": steps,
        "models": {"summary-model": {"steps": [
            {"text": "Summary: the agent is reading files f00..f59 one by one and noting their facts.", "forever": true}
        ]}}
    });
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    std::fs::write(
        home.join("keel.toml"),
        format!(
            // The windows are sized for the file tools alone: no shell, no memory (and its flush turns).
            "[models]\nsummary = \"summary-model\"\n\n[tools.shell]\nenabled = false\n\n[memory]\nenabled = false\n\n{}",
            common::FAST_RETRIES
        ),
    )
    .unwrap();
    let events = home.join("events.jsonl");
    let output = run(keel(&home)
        .args([
            "run",
            "--json",
            "--provider",
            "mock",
            "--base-url",
            &mock.url,
        ])
        .args([
            "--context-window",
            &WINDOW.to_string(),
            "--max-iterations",
            "70",
            "--events",
        ])
        .arg(&events)
        .arg("--workspace")
        .arg(&workspace)
        .arg("Read every file and collect the facts."));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["state"], "completed");
    assert_eq!(report["iterations"], FILES as u64 + 1);
    assert_eq!(report["tool_calls"].as_array().unwrap().len(), FILES);
    assert!(
        report["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["ok"] == true)
    );

    // Every request to the agent's model fits the window.
    let requests = mock.requests();
    let (agent, summaries): (Vec<&Value>, Vec<&Value>) =
        requests.iter().partition(|r| r["model"] == "mock-model");
    assert_eq!(agent.len(), FILES + 1);
    for (i, request) in agent.iter().enumerate() {
        let tokens = request_tokens(request);
        assert!(
            tokens <= WINDOW,
            "request {i} has {tokens} tokens, over the {WINDOW} window"
        );
    }
    // Without compaction the last request would hold every call and result: over the window.
    let last = agent.last().unwrap();
    assert!(
        !last["messages"].to_string().contains("notes of file 00:"),
        "file 00 was summarized away"
    );
    let first = request_tokens(agent[0]);
    let per_iteration = request_tokens(agent[2]) - request_tokens(agent[1]);
    assert!(
        first + FILES as u64 * per_iteration > WINDOW,
        "the task must need compaction: first {first}, per iteration {per_iteration}"
    );

    // Summaries went to the summary model and carried the pinned results.
    assert!(!summaries.is_empty(), "no summary call");
    let first_summary = summaries[0]["messages"][1]["content"].as_str().unwrap();
    assert!(first_summary.contains("Pinned results"), "{first_summary}");
    assert!(
        first_summary.contains("- read_file {\"path\":\""),
        "{first_summary}"
    );
    let later = agent
        .iter()
        .find(|r| {
            r["messages"]
                .to_string()
                .contains("Summary: the agent is reading files")
        })
        .expect("the agent's requests carry the summary");
    assert!(later["messages"].to_string().contains("Pinned results"));

    // The events say what happened.
    let lines: Vec<Value> = std::fs::read_to_string(&events)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let compactions: Vec<&Value> = lines
        .iter()
        .filter(|e| e["event"] == "agent.compaction.run")
        .collect();
    assert!(!compactions.is_empty());
    for c in &compactions {
        assert!(
            c["after_tokens"].as_u64() < c["before_tokens"].as_u64(),
            "{c}"
        );
        assert!(
            c["after_messages"].as_u64() < c["before_messages"].as_u64(),
            "{c}"
        );
        assert_eq!(c["summary_failed"], false);
    }

    // Nothing is lost: the stored transcript holds every read and every summary.
    let session = report["session_id"].as_str().unwrap();
    let transcript = stdout(&run(keel(&home).args(["sessions", "show", session])));
    for i in 0..FILES {
        assert!(
            transcript.contains(&format!("notes of file {i:02}:")),
            "file {i} missing"
        );
    }
    assert!(transcript.contains("(internal: compaction_summary, stands in for messages 1–"));
    let stored = transcript.lines().filter(|l| l.starts_with('[')).count();
    // The task, 60 calls with 60 results, the answer, and the summaries.
    assert_eq!(stored, 1 + 2 * FILES + 1 + summaries.len());
}

#[test]
fn a_failing_summary_model_falls_back_to_truncation_and_the_task_still_completes() {
    let (_w, workspace) = temp();
    for i in 0..30 {
        std::fs::write(workspace.join(format!("f{i:02}.txt")), notes(i)).unwrap();
    }
    let mut steps: Vec<Value> = (0..30)
        .map(|i| json!({"tool_calls": [{"name": "read_file", "arguments": {"path": format!("f{i:02}.txt")}}]}))
        .collect();
    steps.push(json!({"text": "done"}));
    let script = json!({
        "steps": steps,
        "models": {"summary-model": {"steps": [{"error": {"status": 500}, "forever": true}]}}
    });
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    std::fs::write(
        home.join("keel.toml"),
        format!(
            // The windows are sized for the file tools alone: no shell, no memory (and its flush turns).
            "[models]\nsummary = \"summary-model\"\n\n[tools.shell]\nenabled = false\n\n[memory]\nenabled = false\n\n{}",
            common::FAST_RETRIES
        ),
    )
    .unwrap();
    let events = home.join("events.jsonl");
    let output = run(keel(&home)
        .args([
            "run",
            "--json",
            "--provider",
            "mock",
            "--base-url",
            &mock.url,
        ])
        .args([
            // Sized for the file tools and the loop's own (journal, todo, ask_human).
            "--context-window",
            "3600",
            "--max-iterations",
            "40",
            "--events",
        ])
        .arg(&events)
        .arg("--workspace")
        .arg(&workspace)
        .arg("read them all"));
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&output),
        stderr(&output)
    );
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["state"], "completed");
    let events: Vec<Value> = std::fs::read_to_string(&events)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .collect();
    // The summary model is retried like the run's own, then the run's model is asked: here it
    // answers with a tool call, not a summary, so the messages are dropped with the note.
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "agent.provider.retry" && e["model"] == "mock:summary-model")
    );
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "agent.provider.fallback"
                && e["from"] == "mock:summary-model"
                && e["to"] == "mock:mock-model")
    );
    let failed = events
        .iter()
        .filter(|e| e["event"] == "agent.compaction.run" && e["summary_failed"] == true)
        .count();
    assert!(failed >= 1);
    let agent_requests: Vec<Value> = mock
        .requests()
        .into_iter()
        .filter(|r| r["model"] == "mock-model")
        .collect();
    assert!(agent_requests.iter().all(|r| request_tokens(r) <= 3600));
    assert!(agent_requests.iter().any(|r| {
        r["messages"]
            .to_string()
            .contains("earlier messages were dropped")
    }));
}

#[test]
fn a_context_overflow_error_deep_prunes_and_retries_once() {
    let (_w, workspace) = temp();
    for i in 0..6 {
        std::fs::write(workspace.join(format!("f{i:02}.txt")), notes(i)).unwrap();
    }
    let mut steps: Vec<Value> = (0..6)
        .map(|i| json!({"tool_calls": [{"name": "read_file", "arguments": {"path": format!("f{i:02}.txt")}}]}))
        .collect();
    steps.push(json!({"error": {"status": 400, "kind": "context_overflow"}}));
    steps.push(json!({"text": "done after the prune"}));
    let script = json!({
        "steps": steps,
        "models": {"summary-model": {"steps": [{"text": "Summary: six files read.", "forever": true}]}}
    });
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    std::fs::write(
        home.join("keel.toml"),
        format!(
            // The windows are sized for the file tools alone: no shell, no memory (and its flush turns).
            "[models]\nsummary = \"summary-model\"\n\n[tools.shell]\nenabled = false\n\n[memory]\nenabled = false\n\n{}",
            common::FAST_RETRIES
        ),
    )
    .unwrap();
    let events = home.join("events.jsonl");
    let output = run(keel(&home)
        .args([
            "run",
            "--json",
            "--provider",
            "mock",
            "--base-url",
            &mock.url,
            "--events",
        ])
        .arg(&events)
        .arg("--workspace")
        .arg(&workspace)
        .arg("read them"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["final_text"], "done after the prune");
    let fired: Vec<Value> = std::fs::read_to_string(&events)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == "agent.recovery.fired")
        .collect();
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0]["tier"], "r2");
    assert_eq!(fired[0]["reason"], "context_overflow");
    let agent: Vec<Value> = mock
        .requests()
        .into_iter()
        .filter(|r| r["model"] == "mock-model")
        .collect();
    // The refused request and its retry: the retry is the deep-pruned, shorter one.
    let (refused, retry) = (&agent[6], &agent[7]);
    assert!(request_tokens(retry) < request_tokens(refused));
    assert!(retry["messages"].to_string().contains("[deep pruned]"));
}
