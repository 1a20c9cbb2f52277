//! End to end: the real `keel serve` over real HTTP, with `keel mock-provider` as its model. A
//! tool-using run through the API and through `keel run --server`, its live events (and a
//! reconnect mid-run that misses nothing and repeats nothing), lanes (FIFO per conversation,
//! overlap across conversations, the interrupt policy, a full queue), keys and who sees what,
//! and bad input that is refused whole.

mod common;

use std::collections::HashSet;

use common::daemon::{Daemon, daemon_config, make_key, shown};
use common::{Mock, keel, run, temp};
use serde_json::{Value, json};

/// Each turn: a tool call, then the answer, each `delay_ms` at the model.
fn tool_turns(delay_ms: u64) -> String {
    json!({"per_turn": true, "steps": [
        {"text": "Looking.", "tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}],
         "delay_ms": delay_ms},
        {"text": "Done: one file.", "delay_ms": delay_ms}
    ]})
    .to_string()
}

/// Each turn: one answer after `delay_ms`.
fn answer_turns(delay_ms: u64) -> String {
    json!({"per_turn": true, "steps": [{"text": "ok", "delay_ms": delay_ms}]}).to_string()
}

/// A daemon on a mock answering `script`, with `extra` config; its home and workspace guards.
fn daemon(script: &str, extra: &str) -> (Daemon, Mock, Vec<tempfile::TempDir>) {
    let mock = Mock::start(script);
    let (home_guard, home) = temp();
    let (workspace_guard, workspace) = temp();
    std::fs::write(workspace.join("a.txt"), "hello").unwrap();
    daemon_config(&home, &mock, &workspace, extra);
    (
        Daemon::start(&home),
        mock,
        vec![home_guard, workspace_guard],
    )
}

fn ids(frames: &[(String, String, Value)]) -> Vec<String> {
    frames
        .iter()
        .filter(|(_, event, _)| event != "keel.stream.end")
        .map(|(id, _, _)| id.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_run_reports_and_streams_every_event_once_across_a_reconnect() {
    let (daemon, _mock, _guards) = daemon(&tool_turns(150), "");
    let key = make_key(&daemon.home, &["--user", "ann"]);
    let api = daemon.client(&key);
    let conversation = api.conversation(None).await;
    let run_id = api.send(&conversation, "what is in the workspace?").await;
    let path = format!("/v1/runs/{run_id}/events");

    // One subscriber reads it whole; another reads three frames, leaves, and comes back.
    let whole = tokio::spawn({
        let api = api.clone();
        let path = path.clone();
        async move { api.sse(&path, None).await }
    });
    let first = api.sse_until(&path, None, 3).await;
    assert_eq!(first.len(), 3);
    let rest = api.sse(&path, Some(&first[2].0)).await;
    let whole = whole.await.unwrap();

    let (_, end, data) = whole.last().unwrap();
    assert_eq!(end, "keel.stream.end", "{whole:?}");
    assert_eq!(data["state"], "completed");
    let names: Vec<&str> = whole.iter().map(|(_, e, _)| e.as_str()).collect();
    for name in [
        "agent_run.started",
        "agent.tool.started",
        "agent_run.completed",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    let mut resumed = ids(&first);
    resumed.extend(ids(&rest));
    assert_eq!(
        resumed,
        ids(&whole),
        "a reconnect misses nothing, repeats nothing"
    );
    let unique: HashSet<&String> = resumed.iter().collect();
    assert_eq!(unique.len(), resumed.len());

    let (status, report) = api.get(&format!("/v1/runs/{run_id}/report")).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["state"], "completed");
    assert_eq!(report["final_text"], "Done: one file.");
    assert_eq!(report["tool_calls"].as_array().unwrap().len(), 1);

    // The stored stream, read again after the end, has the same durable events.
    let again = api.sse(&path, None).await;
    let durable = |frames: &[(String, String, Value)]| -> Vec<String> {
        ids(frames)
            .into_iter()
            .filter(|id| !id.contains('.'))
            .collect()
    };
    assert_eq!(durable(&again), durable(&whole));

    // ?wait=true answers with the report; the transcript has both turns.
    let (status, waited) = api
        .post(
            &format!("/v1/conversations/{conversation}/messages?wait=true"),
            json!({"text": "and again?"}),
        )
        .await;
    assert_eq!(status, 200, "{waited}");
    assert_eq!(waited["state"], "completed");
    let (_, messages) = api
        .get(&format!("/v1/conversations/{conversation}/messages"))
        .await;
    let users = messages["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .count();
    assert_eq!(users, 2, "{messages}");
}

#[test]
fn keel_run_with_server_streams_the_run_and_prints_its_report() {
    let (daemon, _mock, _guards) = daemon(&tool_turns(0), "");
    let key = make_key(&daemon.home, &["--user", "ann"]);
    let (_client_home_guard, client_home) = temp();
    let output = run(keel(&client_home)
        .args(["run", "--json", "--server", &daemon.url])
        .env("KEEL_API_KEY", &key)
        .arg("what is in the workspace?"));
    assert_eq!(output.status.code(), Some(0), "{}", shown(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["state"], "completed");
    assert_eq!(report["tool_calls"][0]["name"], "list_dir");

    // Text mode streams the answer; a second turn continues the same conversation.
    let conversation = report["session_id"].as_str().unwrap();
    let output = run(keel(&client_home)
        .args(["run", "--server", &daemon.url, "--api-key", &key])
        .args(["--session", conversation, "again"]));
    assert_eq!(output.status.code(), Some(0), "{}", shown(&output));
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("Done: one file."),
        "{}",
        shown(&output)
    );

    // A wrong key is a usage error that says what to do, and no key leaks into the output.
    let output = run(keel(&client_home)
        .args(["run", "--server", &daemon.url, "--api-key", "keel_wrong"])
        .arg("hi"));
    assert_eq!(output.status.code(), Some(2), "{}", shown(&output));
    assert!(shown(&output).contains("API key"), "{}", shown(&output));
    assert!(!shown(&output).contains(&key));
}

/// `(started_at, finished_at)` of a stored run.
fn span(run: &Value) -> (String, String) {
    (
        run["started_at"].as_str().unwrap().to_string(),
        run["finished_at"].as_str().unwrap().to_string(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_conversation_runs_one_at_a_time_in_arrival_order_while_conversations_overlap() {
    let (daemon, _mock, _guards) = daemon(&answer_turns(100), "");
    let key = make_key(&daemon.home, &["--admin"]);
    let api = daemon.client(&key);

    let lane = api.conversation(None).await;
    let others: Vec<String> =
        futures::future::join_all((0..50).map(|_| api.conversation(None))).await;
    let to_lane = (0..5).map(|i| {
        let api = api.clone();
        let lane = lane.clone();
        async move {
            let (status, body) = api
                .post(
                    &format!("/v1/conversations/{lane}/messages"),
                    json!({"text": format!("message {i}")}),
                )
                .await;
            assert_eq!(status, 202, "{body}");
            (
                body["position"].as_u64().unwrap(),
                body["run_id"].as_str().unwrap().to_string(),
            )
        }
    });
    let to_others = others.iter().map(|c| api.send(c, "hello"));
    let (lane_runs, other_runs) = tokio::join!(
        futures::future::join_all(to_lane),
        futures::future::join_all(to_others)
    );

    // A message's position is how many lane runs were ahead of it when it arrived; runs may end
    // while the others are still arriving, so in start order the k-th saw at most k ahead.
    let mut started = Vec::new();
    for (position, run_id) in &lane_runs {
        started.push((
            span(&api.until_state(run_id, &["completed"]).await),
            *position,
        ));
    }
    started.sort();
    for (k, (_, position)) in started.iter().enumerate() {
        assert!(
            *position as usize <= k,
            "a run jumped its lane: {started:?}"
        );
    }
    assert!(
        lane_runs.iter().any(|(position, _)| *position > 0),
        "five messages at once queued: {started:?}"
    );
    for pair in started.windows(2) {
        assert!(
            pair[0].0.1 <= pair[1].0.0,
            "runs of one lane overlap: {started:?}"
        );
    }
    let mut other_spans = Vec::new();
    for run_id in &other_runs {
        other_spans.push(span(&api.until_state(run_id, &["completed"]).await));
    }
    let overlapping = other_spans
        .iter()
        .enumerate()
        .any(|(i, a)| other_spans[i + 1..].iter().any(|b| a.0 < b.1 && b.0 < a.1));
    assert!(overlapping, "different conversations run at once");
}

#[tokio::test(flavor = "multi_thread")]
async fn interrupt_policy_cancels_the_running_run_and_runs_the_new_message() {
    let (daemon, _mock, _guards) = daemon(&tool_turns(300), "");
    let key = make_key(&daemon.home, &["--user", "ann"]);
    let api = daemon.client(&key);
    let conversation = api.conversation(Some("interrupt")).await;
    let first = api.send(&conversation, "a long task").await;
    api.until_state(&first, &["running", "waiting_for_tool"])
        .await;
    let second = api.send(&conversation, "never mind, this instead").await;
    let first = api.until_state(&first, &["cancelled"]).await;
    let second = api.until_state(&second, &["completed"]).await;
    assert!(span(&first).1 <= span(&second).0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_lane_answers_429_with_retry_after_and_stores_nothing() {
    let (daemon, _mock, _guards) = daemon(&answer_turns(2_000), "[serve]\nqueue_limit = 2\n");
    let key = make_key(&daemon.home, &["--user", "ann"]);
    let api = daemon.client(&key);
    let conversation = api.conversation(None).await;
    let running = api.send(&conversation, "one").await;
    api.until_state(&running, &["running"]).await;
    api.send(&conversation, "two").await;
    api.send(&conversation, "three").await;
    let response = api
        .request(
            reqwest::Method::POST,
            &format!("/v1/conversations/{conversation}/messages"),
        )
        .json(&json!({"text": "four"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    let retry: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry >= 1);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "lane_full");
    let (_, runs) = api
        .get(&format!("/v1/runs?conversation={conversation}"))
        .await;
    assert_eq!(runs["items"].as_array().unwrap().len(), 3, "{runs}");
}

#[tokio::test(flavor = "multi_thread")]
async fn keys_decide_who_sees_what() {
    let (daemon, _mock, _guards) = daemon(&answer_turns(0), "");
    let ann = daemon.client(&make_key(&daemon.home, &["--user", "ann"]));
    let bob_key = make_key(&daemon.home, &["--user", "bob"]);
    let bob = daemon.client(&bob_key);
    let admin = daemon.client(&make_key(&daemon.home, &["--admin"]));
    let conversation = ann.conversation(None).await;
    let run_id = ann.send(&conversation, "mine").await;
    ann.until_state(&run_id, &["completed"]).await;

    let run_path = format!("/v1/runs/{run_id}");
    assert_eq!(ann.with_key(None).get(&run_path).await.0, 401);
    assert_eq!(
        ann.with_key(Some("keel_not_a_key")).get(&run_path).await.0,
        401
    );
    assert_eq!(ann.with_key(Some("Basic abc")).get(&run_path).await.0, 401);
    for path in [
        run_path.clone(),
        format!("{run_path}/report"),
        format!("{run_path}/events"),
        format!("/v1/conversations/{conversation}"),
        format!("/v1/conversations/{conversation}/messages"),
        format!("/v1/conversations/{conversation}/events"),
    ] {
        let (status, body) = bob.get(&path).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert_eq!(body["error"]["code"], "not_found");
    }
    for (path, body) in [
        (
            format!("/v1/conversations/{conversation}/messages"),
            json!({"text": "hi"}),
        ),
        (format!("{run_path}/cancel"), json!({})),
        (format!("{run_path}/answer"), json!({"text": "x"})),
        (format!("{run_path}/resume"), json!({})),
    ] {
        assert_eq!(bob.post(&path, body).await.0, 404, "{path}");
    }
    let (_, listed) = bob.get("/v1/conversations").await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 0, "{listed}");
    let (_, listed) = bob.get("/v1/runs").await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 0, "{listed}");
    assert_eq!(admin.get(&run_path).await.0, 200);
    let (_, listed) = admin.get("/v1/runs").await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 1);

    // A revoked key stops working at once.
    let listed = run(keel(&daemon.home).args(["keys", "list"]));
    let bob_id = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .find(|line| line.contains(" bob "))
        .and_then(|line| line.split_whitespace().next())
        .unwrap()
        .to_string();
    assert!(!String::from_utf8_lossy(&listed.stdout).contains(&bob_key));
    let revoked = run(keel(&daemon.home).args(["keys", "revoke", &bob_id]));
    assert_eq!(revoked.status.code(), Some(0), "{}", shown(&revoked));
    assert_eq!(bob.get("/v1/conversations").await.0, 401);
    assert_eq!(ann.get("/healthz").await.0, 200);
    assert!(!daemon.log().contains(&bob_key), "no key in the log");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_is_a_clear_json_error_and_stores_nothing() {
    let (daemon, _mock, _guards) = daemon(&answer_turns(0), "");
    let api = daemon.client(&make_key(&daemon.home, &["--user", "ann"]));
    let conversation = api.conversation(None).await;
    let messages = format!("/v1/conversations/{conversation}/messages");

    let malformed = api
        .request(reqwest::Method::POST, &messages)
        .header("content-type", "application/json")
        .body("{\"text\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(malformed.status(), 400);
    let body: Value = malformed.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_request");

    let (status, body) = api
        .post(&messages, json!({"text": "hi", "txet": "typo"}))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_request"))
    );
    let (status, _) = api.post(&messages, json!({"text": ""})).await;
    assert_eq!(status, 400);
    // 10 MB: refused with a JSON 413 before the body is read. The daemon answers and closes
    // while the client may still be sending, so the client can also see the connection reset
    // mid-upload (HTTP/1.1 without 100-continue); either way nothing is stored (checked below).
    let huge = json!({"text": "x".repeat(10 * 1024 * 1024)});
    let sent = api
        .request(reqwest::Method::POST, &messages)
        .json(&huge)
        .send()
        .await;
    if let Ok(response) = sent {
        assert_eq!(response.status(), 413);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "payload_too_large");
    }

    let (status, body) = api
        .post("/v1/conversations/nope/messages", json!({"text": "hi"}))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    assert_eq!(api.get("/v1/runs/nope").await.0, 404);
    let (status, body) = api.get("/v1/runs?limit=banana").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_request"))
    );

    let run_id = api.send(&conversation, "fine").await;
    api.until_state(&run_id, &["completed"]).await;
    let bad_id = api
        .request(reqwest::Method::GET, &format!("/v1/runs/{run_id}/events"))
        .header("Last-Event-ID", "not-an-id")
        .send()
        .await
        .unwrap();
    assert_eq!(bad_id.status(), 400);

    // Only the one good message became a run; nothing half-stored.
    let (_, runs) = api
        .get(&format!("/v1/runs?conversation={conversation}"))
        .await;
    assert_eq!(runs["items"].as_array().unwrap().len(), 1, "{runs}");
    let (_, transcript) = api.get(&messages).await;
    let users = transcript["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .count();
    assert_eq!(users, 1, "{transcript}");
    let (status, document) = api.get("/openapi.json").await;
    assert_eq!(status, 200);
    assert!(document["openapi"].as_str().unwrap().starts_with("3.1"));
    assert!(document["paths"]["/v1/conversations/{id}/messages"].is_object());
}

#[test]
fn keel_chat_with_server_talks_in_one_conversation_and_answers_questions() {
    use std::io::Write;
    let script = json!({"per_turn": true, "steps": [
        {"tool_calls": [{"name": "ask_human", "arguments": {"question": "Which file?"}}]},
        {"text": "Reading the one you named."}
    ]})
    .to_string();
    let (daemon, _mock, _guards) = daemon(&script, "");
    let key = make_key(&daemon.home, &["--user", "ann"]);
    let (_client_home_guard, client_home) = temp();
    let mut child = keel(&client_home)
        .args(["chat", "--server", &daemon.url, "--api-key", &key])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"edit a file\na.txt\n/exit\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", shown(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("? Which file?"), "{}", shown(&output));
    assert!(
        stdout.contains("Reading the one you named."),
        "{}",
        shown(&output)
    );
}

#[test]
fn a_second_daemon_on_the_same_home_is_refused() {
    let (daemon, _mock, _guards) = daemon(&answer_turns(0), "");
    let output = run(keel(&daemon.home).args(["serve", "--bind", "127.0.0.1:0"]));
    assert_eq!(output.status.code(), Some(2), "{}", shown(&output));
    assert!(
        shown(&output).contains("another keel serve is running"),
        "{}",
        shown(&output)
    );
}
