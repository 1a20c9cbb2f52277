//! End to end: known facts across sessions through `keel run` against `keel mock-provider`,
//! with `[memory]` on and the mock's deterministic `/v1/embeddings`. A fact stated in session 1
//! is in the system prompt of session 40's question about it, an unrelated fact is not; a
//! superseding fact replaces the old one; `keel facts list|rm` shows and deletes them; the
//! `agent.memory.retrieved` event says what was recalled and why.

mod common;

use std::path::Path;

use common::{Mock, events, find, keel, keel_run, report, run, stderr, stdout, temp, write_config};
use serde_json::{Value, json};

const FILLER_SESSIONS: usize = 37;

fn remember(text: &str) -> Value {
    json!({"tool_calls": [{"name": "remember", "arguments": {"text": text}}]})
}

/// The system message of a chat-completions request.
fn system_prompt(request: &Value) -> String {
    request["messages"][0]["content"]
        .as_str()
        .filter(|_| request["messages"][0]["role"] == "system")
        .unwrap_or_default()
        .to_string()
}

/// What a run's message was sent with (its turn context) and the message: the last user
/// message of a chat-completions request.
fn recalled(request: &Value) -> String {
    request["messages"]
        .as_array()
        .and_then(|messages| messages.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// One `keel run` in a new session; its report.
fn turn(home: &Path, mock: &Mock, events: &Path, prompt: &str) -> Value {
    let output = run(keel_run(home, mock, events).arg(prompt));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    report(&output)
}

#[test]
fn a_fact_from_session_one_is_recalled_in_session_forty_and_a_newer_one_replaces_it() {
    let mut steps = vec![
        remember("The user's deploy target is eu-west-3"),
        json!({"text": "Noted."}),
        remember("The user takes their coffee black"),
        json!({"text": "Noted."}),
    ];
    steps.extend((0..FILLER_SESSIONS).map(|i| json!({"text": format!("Answer {i}.")})));
    steps.push(json!({"text": "You deploy to eu-west-3."}));
    steps.push(remember("The user's deploy target is us-east-1"));
    steps.push(json!({"text": "Noted."}));
    steps.push(json!({"text": "You deploy to us-east-1."}));
    let mock = Mock::start(&json!({ "steps": steps }).to_string());
    let (_h, home) = temp();
    write_config(
        &home,
        "",
        "[memory]\nfacts = true\nembeddings_model = \"mock-embed\"\n",
    );
    let (_e, dir) = temp();
    let log = |n: usize| dir.join(format!("events-{n}.jsonl"));

    turn(
        &home,
        &mock,
        &log(1),
        "Remember this: my deploy target is eu-west-3.",
    );
    turn(&home, &mock, &log(2), "Also, I take my coffee black.");
    for i in 0..FILLER_SESSIONS {
        turn(
            &home,
            &mock,
            &log(3 + i),
            &format!("Tell me something nice, number {i}."),
        );
    }
    let asked = turn(
        &home,
        &mock,
        &log(40),
        "Which region is my deploy target again?",
    );
    assert_eq!(asked["final_text"], "You deploy to eu-west-3.");

    let requests = mock.requests();
    let question = requests
        .iter()
        .rev()
        .find(|r| r.to_string().contains("Which region is my deploy target"))
        .expect("session 40's request");
    // The facts go with the message, never in the system prompt (which stays the same).
    assert!(!system_prompt(question).contains("Known facts"));
    let system = recalled(question);
    assert!(system.contains("Known facts about the user"), "{system}");
    assert!(
        system.contains("The user's deploy target is eu-west-3"),
        "{system}"
    );
    assert!(
        !system.contains("coffee"),
        "an unrelated fact is not recalled: {system}"
    );
    // Sessions are separate: session 40 holds only its own message.
    let users: Vec<&Value> = question["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .collect();
    assert_eq!(users.len(), 1, "{question}");

    // The event says what was recalled, and why.
    let events = events(&log(40));
    let retrieved = find(&events, "agent.memory.retrieved");
    assert_eq!(retrieved.len(), 1);
    let detail = &retrieved[0]["detail"];
    assert_eq!(detail["user_id"], "owner");
    assert_eq!(detail["facts"], 2);
    assert_eq!(detail["embeddings"], "mock-embed");
    let pieces = detail["pieces"].as_array().unwrap();
    assert_eq!(pieces.len(), 1, "{detail}");
    assert_eq!(pieces[0]["full_text"]["rank"], 1);
    assert_eq!(pieces[0]["vector"]["rank"], 1);
    assert!(
        detail["degraded"].as_array().unwrap().is_empty(),
        "{detail}"
    );

    // A newer fact with the same subject replaces the old one.
    turn(
        &home,
        &mock,
        &log(41),
        "Actually my deploy target is now us-east-1.",
    );
    turn(&home, &mock, &log(42), "What is my deploy target?");
    let requests = mock.requests();
    let system = recalled(requests.last().unwrap());
    assert!(system.contains("us-east-1"), "{system}");
    assert!(
        !system.contains("eu-west-3"),
        "the replaced fact is gone: {system}"
    );

    // `keel facts` lists the current facts, the replaced one on request, and deletes one.
    let listed = stdout(&run(keel(&home).args(["facts", "list"])));
    assert!(
        listed.contains("us-east-1") && listed.contains("coffee"),
        "{listed}"
    );
    assert!(!listed.contains("eu-west-3"), "{listed}");
    let all = stdout(&run(keel(&home).args(["facts", "list", "--all"])));
    assert!(
        all.contains("eu-west-3") && all.contains("replaced by"),
        "{all}"
    );
    let coffee = listed
        .lines()
        .find(|line| line.contains("coffee"))
        .and_then(|line| line.split_whitespace().next())
        .unwrap()
        .to_string();
    // Another user cannot delete it; its owner can, once.
    let other = run(keel(&home).args(["facts", "rm", &coffee, "--user", "mallory"]));
    assert_eq!(other.status.code(), Some(1), "{}", stdout(&other));
    let removed = run(keel(&home).args(["facts", "rm", &coffee]));
    assert_eq!(removed.status.code(), Some(0), "{}", stderr(&removed));
    let again = run(keel(&home).args(["facts", "rm", &coffee]));
    assert_eq!(again.status.code(), Some(1));
    let listed = stdout(&run(keel(&home).args(["facts", "list"])));
    assert!(!listed.contains("coffee"), "{listed}");
}

#[test]
fn facts_are_extracted_after_a_run_and_messages_rescored_by_the_model() {
    let steps = vec![
        json!({"text": "Noted."}),
        // The model rescoring the run's two messages, then naming the fact in them.
        json!({"text": "{\"scores\": [0.9, 0.1]}"}),
        json!({"text": "```json\n{\"facts\": [{\"key\": \"deploy target\", \"text\": \"The user's deploy target is eu-west-3\"}]}\n```"}),
        json!({"text": "You deploy to eu-west-3."}),
        json!({"text": "{\"scores\": [0.3, 0.3]}"}),
        json!({"text": "{\"facts\": []}"}),
    ];
    let mock = Mock::start(&json!({ "steps": steps }).to_string());
    let (_h, home) = temp();
    write_config(
        &home,
        "",
        "[memory]\nfacts = true\nextract = true\nimportance = \"model\"\nembeddings_model = \"mock-embed\"\n",
    );
    let (_e, dir) = temp();
    let log = |n: usize| dir.join(format!("events-{n}.jsonl"));
    let first = turn(
        &home,
        &mock,
        &log(1),
        "By the way, we ship from eu-west-3 these days; my deploy target is eu-west-3.",
    );
    assert_eq!(first["final_text"], "Noted.");
    let first_events = events(&log(1));
    let learned = find(&first_events, "agent.memory.learned");
    assert_eq!(learned.len(), 1);
    let detail = &learned[0]["detail"];
    assert_eq!(detail["scored"], 2, "{detail}");
    assert_eq!(detail["embedded"], 1, "{detail}");
    assert_eq!(
        detail["remembered"][0]["text"],
        "The user's deploy target is eu-west-3"
    );
    assert!(detail["errors"].as_array().unwrap().is_empty(), "{detail}");
    // The learning calls went to the run's model (no summary model is set), without tools.
    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    assert!(
        requests[2]
            .get("tools")
            .is_none_or(|t| t.as_array().is_some_and(|t| t.is_empty()))
    );
    assert!(system_prompt(&requests[2]).contains("durable facts about a user"));

    turn(&home, &mock, &log(2), "Which region is my deploy target?");
    let requests = mock.requests();
    let system = recalled(&requests[3]);
    assert!(
        system.contains("The user's deploy target is eu-west-3"),
        "{system}"
    );
    // The fact stands for the message it came from: it is not recalled twice.
    assert!(!system.contains("we ship from"), "{system}");
    let listed = stdout(&run(keel(&home).args(["facts", "list"])));
    assert!(listed.contains("eu-west-3"), "{listed}");
}
