//! End to end: a daemon that dies or is stopped mid-run. SIGKILL during a model call and during
//! a side-effecting tool, SIGTERM mid-run: the next `keel serve` on the same store resumes what
//! it can without a human, halts what it cannot prove safe, starts the queued runs — and no
//! side effect is done twice, no message is lost.

mod common;

use common::daemon::{Daemon, daemon_config, make_key};
use common::{Mock, temp};
use serde_json::json;

const LOG: &str = "log.txt";

/// A model call that takes `slow_ms` (the one a test kills; its step is used up), then an
/// append to the log, then "Done." for every later call.
fn slow_call_then_append(slow_ms: u64) -> String {
    json!({"steps": [
        {"text": "Thinking it over.", "delay_ms": slow_ms},
        {"tool_calls": [{"id": "a1", "name": "append_file",
                         "arguments": {"path": LOG, "content": "alpha\n"}}]},
        {"text": "Done.", "forever": true}
    ]})
    .to_string()
}

/// An append to the log at once, then "Done." for every later call.
fn append_then_answer() -> String {
    json!({"steps": [
        {"tool_calls": [{"id": "a1", "name": "append_file",
                         "arguments": {"path": LOG, "content": "alpha\n"}}]},
        {"text": "Done.", "forever": true}
    ]})
    .to_string()
}

struct Setup {
    mock: Mock,
    home: std::path::PathBuf,
    workspace: std::path::PathBuf,
    _guards: Vec<tempfile::TempDir>,
}

fn setup(script: &str, extra: &str) -> Setup {
    let mock = Mock::start(script);
    let (home_guard, home) = temp();
    let (workspace_guard, workspace) = temp();
    daemon_config(&home, &mock, &workspace, extra);
    Setup {
        mock,
        home,
        workspace,
        _guards: vec![home_guard, workspace_guard],
    }
}

/// Waits (a few ms at a time) until the mock received `n` requests: a model call is in
/// flight at the model, not only announced.
async fn until_requests(mock: &Mock, n: usize) {
    for _ in 0..3000 {
        if mock.requests().len() >= n {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the mock never got {n} request(s)");
}

impl Setup {
    fn log(&self) -> String {
        std::fs::read_to_string(self.workspace.join(LOG)).unwrap_or_default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_during_a_model_call_the_run_resumes_and_the_queued_run_starts() {
    let setup = setup(&slow_call_then_append(60_000), "");
    let mut first = Daemon::start(&setup.home);
    let key = make_key(&setup.home, &["--user", "ann"]);
    let api = first.client(&key);
    let conversation = api.conversation(None).await;
    let running = api.send(&conversation, "append alpha to the log").await;
    let queued = api.send(&conversation, "then say hi").await;
    api.sse_until_event(&format!("/v1/runs/{running}/events"), "agent.model.request")
        .await;
    until_requests(&setup.mock, 1).await;
    first.kill();

    let second = Daemon::start(&setup.home);
    let api = second.client(&key);
    let resumed = api.until_state(&running, &["completed"]).await;
    assert_eq!(resumed["final_text"], "Done.");
    api.until_state(&queued, &["completed"]).await;
    assert_eq!(setup.log(), "alpha\n", "the side effect happened once");
    let (_, transcript) = api
        .get(&format!(
            "/v1/conversations/{conversation}/messages?limit=200"
        ))
        .await;
    let users: Vec<&str> = transcript["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(
        users,
        ["append alpha to the log", "then say hi"],
        "{transcript}"
    );
    assert!(setup.mock.requests().len() >= 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_during_a_side_effecting_tool_the_run_halts_until_someone_decides() {
    let setup = setup(&append_then_answer(), "");
    let mut first = Daemon::start_with(&setup.home, &[("KEEL_TEST_PAUSE_IN_TOOL", "append_file")]);
    let key = make_key(&setup.home, &["--user", "ann"]);
    let api = first.client(&key);
    let conversation = api.conversation(None).await;
    let run_id = api.send(&conversation, "append alpha to the log").await;
    first.until_logged("keel: test hook: paused in tool append_file");
    first.kill();

    let second = Daemon::start(&setup.home);
    let api = second.client(&key);
    // The append may or may not have happened: the run halts for a person to decide.
    let halted = api.until_state(&run_id, &["waiting_on_human"]).await;
    assert_eq!(halted["reason"], "resume_unsafe", "{halted}");
    let (status, report) = api.get(&format!("/v1/runs/{run_id}/report")).await;
    assert_eq!(
        (status, report["state"].as_str()),
        (200, Some("waiting_on_human"))
    );
    let resume = format!("/v1/runs/{run_id}/resume");
    let (status, body) = api.post(&resume, json!({"unsafe_call": "sometimes"})).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = api.post(&resume, json!({"unsafe_call": "retry"})).await;
    assert_eq!(status, 202, "{body}");
    api.until_state(&run_id, &["completed"]).await;
    assert_eq!(setup.log(), "alpha\n", "never twice, never lost");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_stops_at_a_boundary_and_the_next_daemon_completes_the_run() {
    let setup = setup(
        &slow_call_then_append(60_000),
        "[serve]\nshutdown_grace_secs = 5\n",
    );
    let mut first = Daemon::start(&setup.home);
    let key = make_key(&setup.home, &["--user", "ann"]);
    let api = first.client(&key);
    let conversation = api.conversation(None).await;
    let run_id = api.send(&conversation, "append alpha to the log").await;
    api.sse_until_event(&format!("/v1/runs/{run_id}/events"), "agent.model.request")
        .await;
    until_requests(&setup.mock, 1).await;
    let code = first.terminate();
    assert_eq!(code, Some(0), "{}", first.log());
    let second = Daemon::start(&setup.home);
    let run = second
        .client(&key)
        .until_state(&run_id, &["completed"])
        .await;
    assert_eq!(run["final_text"], "Done.");
    assert_eq!(setup.log(), "alpha\n");
}
