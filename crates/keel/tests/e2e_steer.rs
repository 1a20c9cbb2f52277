//! End to end: the `steer` policy through the real `keel serve` and `keel mock-provider`. A
//! message sent while a run waits on its model joins that run: the tool call the model then asks
//! for is skipped (its result says the user changed course), the new message is stored after it
//! and sent with the next model call, the run answers both, and the message's own run ends
//! `cancelled`, steered into the running one.

mod common;

use common::daemon::{Daemon, daemon_config, make_key};
use common::{Mock, temp};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread")]
async fn a_message_sent_while_a_run_works_joins_it_and_skips_the_call_not_started() {
    // Each turn: a tool call, then the answer, each after 1.5 s at the model.
    let mock = Mock::start(
        &json!({"per_turn": true, "steps": [
            {"text": "Looking.", "tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}],
             "delay_ms": 1500},
            {"text": "Done, and noted.", "delay_ms": 200}
        ]})
        .to_string(),
    );
    let (_home_guard, home) = temp();
    let (_workspace_guard, workspace) = temp();
    daemon_config(&home, &mock, &workspace, "");
    let daemon = Daemon::start(&home);
    let key = make_key(&daemon.home, &["--user", "ann"]);
    let api = daemon.client(&key);
    let conversation = api.conversation(Some("steer")).await;

    let first = api.send(&conversation, "what is in the workspace?").await;
    api.until_state(&first, &["running"]).await;
    // The model is still thinking about its first answer.
    let second = api.send(&conversation, "only count the files").await;
    let first = api.until_state(&first, &["completed"]).await;
    let second = api.until_state(&second, &["cancelled"]).await;

    assert_eq!(first["final_text"], "Done, and noted.", "{first}");
    let expected_error = format!("steered into run {}", first["id"].as_str().unwrap());
    assert_eq!(second["error"], expected_error.as_str(), "{second}");
    let (status, page) = api
        .get(&format!("/v1/conversations/{conversation}/messages"))
        .await;
    assert_eq!(status, 200, "{page}");
    let shape: Vec<(String, String)> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (text(&m["role"]), text(&m["content"])))
        .collect();
    let pair = |role: &str, content: &str| (role.to_string(), content.to_string());
    assert_eq!(shape.len(), 5, "{shape:?}");
    assert_eq!(shape[0], pair("user", "what is in the workspace?"));
    assert_eq!(shape[1], pair("assistant", "Looking."));
    assert_eq!(shape[2].0, "tool");
    assert!(
        shape[2]
            .1
            .starts_with("skipped: the user sent a new message"),
        "{shape:?}"
    );
    assert_eq!(shape[3], pair("user", "only count the files"));
    assert_eq!(shape[4], pair("assistant", "Done, and noted."));
    // The model saw the new message with the skipped result, before it answered.
    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "one model call after the steer");
    let sent = requests[1].to_string();
    assert!(sent.contains("only count the files"), "{sent}");
    assert!(
        sent.contains("skipped: the user sent a new message"),
        "{sent}"
    );
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_string()
}
