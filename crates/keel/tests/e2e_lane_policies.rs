//! The double-texting policies end to end, through `keel serve` and keel-mock over HTTP:
//! `reject` answers 409 and stores no run, `collect` runs the messages that arrive while a
//! run works as one follow-up run with every text, `rollback` cancels the running run and its
//! messages are listed `hidden` (the model never sees them again), and `PATCH
//! /v1/conversations/{id}` changes a conversation's policy for its owner only.

mod common;

use common::daemon::{Daemon, daemon_config, make_key};
use common::{Mock, temp};
use serde_json::{Value, json};

/// Each turn: one answer after `delay_ms`.
fn answer_turns(delay_ms: u64) -> String {
    json!({"per_turn": true, "steps": [{"text": "ok", "delay_ms": delay_ms}]}).to_string()
}

/// A daemon on a mock answering `script`, with `extra` config; its home and workspace guards.
fn daemon(script: &str, extra: &str) -> (Daemon, Mock, Vec<tempfile::TempDir>) {
    let mock = Mock::start(script);
    let (home_guard, home) = temp();
    let (workspace_guard, workspace) = temp();
    daemon_config(&home, &mock, &workspace, extra);
    (
        Daemon::start(&home),
        mock,
        vec![home_guard, workspace_guard],
    )
}

async fn messages(api: &common::daemon::Api, conversation: &str) -> Vec<Value> {
    let (status, page) = api
        .get(&format!(
            "/v1/conversations/{conversation}/messages?limit=200"
        ))
        .await;
    assert_eq!(status, 200, "{page}");
    page["items"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn reject_answers_409_while_the_conversation_works_and_stores_nothing() {
    let (daemon, _mock, _guards) = daemon(&answer_turns(1_500), "");
    let key = make_key(&daemon.home, &["--user", "ann"]);
    let api = daemon.client(&key);
    let conversation = api.conversation(Some("reject")).await;
    let first = api.send(&conversation, "one").await;
    api.until_state(&first, &["running"]).await;
    let (status, body) = api
        .post(
            &format!("/v1/conversations/{conversation}/messages"),
            json!({"text": "two"}),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "busy");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("still working on an earlier message"),
        "{body}"
    );
    api.until_state(&first, &["completed"]).await;
    let (_, runs) = api
        .get(&format!("/v1/runs?conversation={conversation}"))
        .await;
    assert_eq!(runs["items"].as_array().unwrap().len(), 1, "{runs}");
    // Free again, it takes a message.
    let third = api.send(&conversation, "three").await;
    api.until_state(&third, &["completed"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn collect_runs_the_messages_sent_meanwhile_as_one_follow_up_run() {
    let (daemon, mock, _guards) = daemon(&answer_turns(1_500), "[serve]\ncollect_quiet_ms = 100\n");
    let key = make_key(&daemon.home, &["--user", "ann"]);
    let api = daemon.client(&key);
    let conversation = api.conversation(Some("collect")).await;
    let first = api.send(&conversation, "one").await;
    api.until_state(&first, &["running"]).await;
    let second = api.send(&conversation, "two").await;
    let third = api.send(&conversation, "three").await;
    api.until_state(&first, &["completed"]).await;
    api.until_state(&second, &["completed"]).await;
    let absorbed = api.until_state(&third, &["cancelled"]).await;
    assert_eq!(
        absorbed["error"],
        format!("collected into run {second}"),
        "{absorbed}"
    );
    let users: Vec<Value> = messages(&api, &conversation)
        .await
        .into_iter()
        .filter(|m| m["role"] == "user")
        .collect();
    assert_eq!(users.len(), 2, "{users:?}");
    assert_eq!(users[1]["run_id"], second.as_str());
    let text = users[1]["content"].as_str().unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].starts_with('[') && lines[0].ends_with("] two"),
        "{text}"
    );
    assert!(lines[1].ends_with("] three"), "{text}");
    assert_eq!(mock.requests().len(), 2, "two model calls: one per run");
}

#[tokio::test(flavor = "multi_thread")]
async fn rollback_cancels_the_running_run_and_lists_its_messages_hidden() {
    let (daemon, mock, _guards) = daemon(&answer_turns(1_500), "");
    let key = make_key(&daemon.home, &["--user", "ann"]);
    let api = daemon.client(&key);
    let conversation = api.conversation(Some("rollback")).await;
    let first = api.send(&conversation, "write the long report").await;
    api.until_state(&first, &["running"]).await;
    let second = api.send(&conversation, "no, just say hi").await;
    let rolled_back = api.until_state(&first, &["cancelled"]).await;
    assert_eq!(
        rolled_back["rolled_back_by"],
        second.as_str(),
        "{rolled_back}"
    );
    api.until_state(&second, &["completed"]).await;
    let listed = messages(&api, &conversation).await;
    let of_first: Vec<&Value> = listed
        .iter()
        .filter(|m| m["run_id"] == first.as_str())
        .collect();
    assert!(!of_first.is_empty(), "kept: {listed:?}");
    assert!(of_first.iter().all(|m| m["hidden"] == true), "{listed:?}");
    assert!(
        listed
            .iter()
            .filter(|m| m["run_id"] == second.as_str())
            .all(|m| m.get("hidden").is_none()),
        "{listed:?}"
    );
    let requests = mock.requests();
    let last = requests.last().unwrap().to_string();
    assert!(last.contains("just say hi"));
    assert!(
        !last.contains("write the long report"),
        "the model saw it: {last}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn patch_changes_a_conversations_policy_for_its_owner_only() {
    let (daemon, _mock, _guards) = daemon(&answer_turns(10), "");
    let ann = daemon.client(&make_key(&daemon.home, &["--user", "ann"]));
    let bob = daemon.client(&make_key(&daemon.home, &["--user", "bob"]));
    let conversation = ann.conversation(None).await;
    let path = format!("/v1/conversations/{conversation}");
    let patch = |api: &common::daemon::Api, body: Value| {
        let request = api.request(reqwest::Method::PATCH, &path).json(&body);
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let (status, body) = patch(&ann, json!({"lane_policy": "collect"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["lane_policy"], "collect");
    let (status, body) = patch(&ann, json!({"lane_policy": "drop"})).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"rollback\"")
    );
    let (status, _) = patch(&bob, json!({"lane_policy": "queue"})).await;
    assert_eq!(status, 404, "another user's conversation is not found");
    let (_, seen) = ann.get(&path).await;
    assert_eq!(seen["lane_policy"], "collect");
}
