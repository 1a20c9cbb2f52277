//! End to end: three `keel serve` workers, each in a home of its own, share one PostgreSQL
//! store (a fresh schema of `KEEL_TEST_PG`; skipped under `KEEL_TEST_PG=skip`) and act as one
//! service. Worker B drives two runs; a cancel sent to worker A stops one of them at once (the
//! heartbeat is set far beyond the test's patience, so only A's signal can have stopped it);
//! an approval posted to worker C resumes the other, paused on B; its events stream from
//! worker A to their end. A run queued on a worker with no place free is taken by another,
//! and run once.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::daemon::{Daemon, daemon_config, make_key};
use common::{Mock, keel, run, stderr, temp};
use serde_json::{Value, json};

/// The command the paused run waits to have approved.
const RM_HOME: &str = "rm -rf ~";

/// `[runs]` of every worker: heartbeats far apart, so a cancel that arrives in the test's
/// time arrived by the store's signal.
const SLOW_HEARTBEATS: &str = "[runs]\nheartbeat_secs = 600\nstale_after_secs = 1800\n";

/// A worker's home: the same model, workspace and runs settings as the others; the store
/// named by `[store] url` (`Some`), or left to the environment (`None`).
fn worker_home(
    mock: &Mock,
    workspace: &Path,
    store_url: Option<&str>,
) -> (tempfile::TempDir, PathBuf) {
    let (guard, home) = temp();
    let store = store_url.map_or_else(String::new, |url| format!("[store]\nurl = \"{url}\"\n"));
    daemon_config(&home, mock, workspace, &format!("{SLOW_HEARTBEATS}{store}"));
    (guard, home)
}

/// Waits (a few ms at a time) until the mock has received `count` requests.
async fn until_requests(mock: &Mock, count: usize) {
    for _ in 0..3000 {
        if mock.requests().len() >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the mock never received {count} request(s)");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_an_approval_and_a_stream_reach_a_run_through_any_worker() {
    let Some((_schema, url)) = keel_store::postgres::testing::fresh_schema().await else {
        return;
    };
    // The first model call never answers in time (the run to cancel); the second asks to run
    // a command that needs approval; the third answers a while after it ran (the model's
    // latency, so the run is seen running on C while A streams it).
    let script = json!({"steps": [
        {"text": "too late", "delay_ms": 600_000},
        {"tool_calls": [{"name": "shell", "arguments": {"command": RM_HOME}}]},
        {"text": "Cleaned.", "forever": true, "delay_ms": 1500},
    ]});
    let mock = Mock::start(&script.to_string());
    let (_w, workspace) = temp();
    let fake_home = workspace.join("home");
    std::fs::create_dir(&fake_home).unwrap();
    std::fs::write(fake_home.join("canary"), "still here").unwrap();
    let env_home = [("HOME", fake_home.to_str().unwrap())];
    let (_a, home_a) = worker_home(&mock, &workspace, Some(&url));
    let (_b, home_b) = worker_home(&mock, &workspace, Some(&url));
    // C finds the store through the environment.
    let (_c, home_c) = worker_home(&mock, &workspace, None);

    // Users and keys are made once, in the shared store, and hold on every worker.
    let output = run(keel(&home_a).args(["users", "set", "ann", "--permission", "admin"]));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let key = make_key(&home_a, &["--user", "ann"]);

    // B alone drives both runs.
    let worker_b = Daemon::start_with(&home_b, &env_home);
    let b = worker_b.client(&key);
    let slow = b.send(&b.conversation(None).await, "take your time").await;
    b.until_state(&slow, &["running"]).await;
    until_requests(&mock, 1).await;
    let paused = b.send(&b.conversation(None).await, "clean my home").await;
    let waiting = until_report(&b, &paused).await;
    assert_eq!(waiting["approval"]["pattern"], RM_HOME, "{waiting}");
    let call = waiting["approval"]["call_id"].as_str().unwrap().to_string();

    let worker_a = Daemon::start_with(&home_a, &env_home);
    let mut env_c = env_home.to_vec();
    env_c.push(("KEEL_DATABASE_URL", &url));
    let worker_c = Daemon::start_with(&home_c, &env_c);
    let a = worker_a.client(&key);
    let c = worker_c.client(&key);

    // A cancel sent to A stops the run B executes.
    let (status, body) = a.post(&format!("/v1/runs/{slow}/cancel"), json!({})).await;
    assert_eq!(status, 202, "{body}");
    let cancelled = a.until_state(&slow, &["cancelled"]).await;
    assert_eq!(cancelled["state"], "cancelled", "{cancelled}");

    // The approval posted to C resumes the run paused on B; A streams it while it runs.
    let (status, body) = c
        .post(
            &format!("/v1/runs/{paused}/approval"),
            json!({"decision": "approve_once", "call_id": call}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    a.until_state(&paused, &["running"]).await;
    let frames = a.sse(&format!("/v1/runs/{paused}/events"), None).await;
    let done = a.until_state(&paused, &["completed"]).await;
    assert_eq!(done["state"], "completed", "{done}");
    assert!(!fake_home.exists(), "the approved command did not run");

    let (_, end, data) = frames.last().unwrap();
    assert_eq!(end, "keel.stream.end", "{frames:?}");
    assert_eq!(data["state"], "completed", "{frames:?}");
    let names: Vec<&str> = frames.iter().map(|(_, name, _)| name.as_str()).collect();
    for name in ["agent.tool.started", "agent_run.completed"] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    let (_, report) = a.get(&format!("/v1/runs/{paused}/report")).await;
    assert_eq!(report["final_text"], "Cleaned.", "{report}");
    // The same runs, seen by a command on the store.
    let output = run(keel(&home_c).env("KEEL_DATABASE_URL", &url).args(["runs"]));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let listed = common::stdout(&output);
    assert!(
        listed.contains(&slow) && listed.contains(&paused),
        "{listed}"
    );
    drop((worker_a, worker_b, worker_c));
}

/// The report of a run once it waits or ends (polling a few ms apart).
async fn until_report(api: &common::daemon::Api, run_id: &str) -> Value {
    for _ in 0..3000 {
        let (status, report) = api.get(&format!("/v1/runs/{run_id}/report")).await;
        if status == 200 {
            return report;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("run {run_id} never had a report");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_queued_on_a_busy_worker_is_taken_by_another_once() {
    let Some((_schema, url)) = keel_store::postgres::testing::fresh_schema().await else {
        return;
    };
    let script = json!({"steps": [
        {"text": "too late", "delay_ms": 600_000},
        {"text": "Taken.", "forever": true},
    ]});
    let mock = Mock::start(&script.to_string());
    let (_w, workspace) = temp();
    // A drives one run at a time.
    let (_a, home_a) = temp();
    let store = format!("{SLOW_HEARTBEATS}[store]\nurl = \"{url}\"\n");
    daemon_config(
        &home_a,
        &mock,
        &workspace,
        &format!("{store}[serve]\nworkers = 1\n"),
    );
    let (_b, home_b) = worker_home(&mock, &workspace, Some(&url));
    let key = make_key(&home_a, &["--admin"]);

    let worker_a = Daemon::start(&home_a);
    let a = worker_a.client(&key);
    let slow = a.send(&a.conversation(None).await, "take your time").await;
    a.until_state(&slow, &["running"]).await;
    until_requests(&mock, 1).await;
    let worker_b = Daemon::start(&home_b);
    let b = worker_b.client(&key);

    // A has no place free: B takes the run A queued, and it runs once.
    let taken = a.send(&a.conversation(None).await, "quick one").await;
    let done = a.until_state(&taken, &["completed"]).await;
    assert_eq!(done["state"], "completed", "{done}");
    let (_, report) = b.get(&format!("/v1/runs/{taken}/report")).await;
    assert_eq!(report["final_text"], "Taken.", "{report}");
    // A's place frees: the run it queued is not run again there.
    let (status, body) = b.post(&format!("/v1/runs/{slow}/cancel"), json!({})).await;
    assert_eq!(status, 202, "{body}");
    a.until_state(&slow, &["cancelled"]).await;
    let quick = a
        .post(
            &format!(
                "/v1/conversations/{}/messages?wait=true",
                a.conversation(None).await
            ),
            json!({"text": "and now?"}),
        )
        .await;
    assert_eq!(quick.0, 200, "{}", quick.1);
    assert_eq!(
        mock.requests().len(),
        3,
        "a run was sent to the model twice"
    );
    drop((worker_a, worker_b));
}
