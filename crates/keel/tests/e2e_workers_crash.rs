//! End to end on PostgreSQL: three `keel serve` workers on one database are one service. 300
//! conversations × 3 messages go in through all three (each message of a conversation to
//! another worker than the one before), and one worker is SIGKILLed mid-run. Every run ends
//! (completed, or halted `resume_unsafe` where its envelope says a side effect may have
//! happened — those are cancelled, as a person would, so the messages behind them run), no
//! conversation ever had two runs at once (from the stored run times), no side effect was done
//! twice and no message was lost. Skipped under `KEEL_TEST_PG=skip`.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use common::daemon::{Api, Daemon, daemon_config, make_key};
use common::{Mock, temp};
use keel_core::{AgentState, Store};
use keel_platform::DaemonStore;
use keel_store::PgStore;
use serde_json::json;

const CONVERSATIONS: usize = 300;
const MESSAGES: usize = 3;
const LOG: &str = "log.txt";

/// Every turn: a side-effecting append after a slow model call, then an answer.
fn script() -> String {
    json!({"per_turn": true, "steps": [
        {"tool_calls": [{"id": "a1", "name": "append_file",
                         "arguments": {"path": LOG, "content": "x\n"}}], "delay_ms": 150},
        {"text": "Done.", "delay_ms": 50, "forever": true}
    ]})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_workers_one_killed_mid_run_lose_nothing_and_never_run_a_conversation_twice() {
    let Some((_schema, url)) = keel_store::postgres::testing::fresh_schema().await else {
        return;
    };
    let mock = Mock::start(&script());
    let (_home_guard, home) = temp();
    let (_workspace_guard, workspace) = temp();
    daemon_config(
        &home,
        &mock,
        &workspace,
        &format!(
            "[runs]\nheartbeat_secs = 1\nstale_after_secs = 30\ncancel_timeout_secs = 1\n\n[serve]\nworkers = 32\n\
             reconcile_every_secs = 1\n\n[store]\nurl = \"{url}\"\n"
        ),
    );
    let key = make_key(&home, &["--admin"]);
    let mut workers: Vec<Daemon> = (0..3).map(|_| Daemon::start(&home)).collect();
    let apis: Vec<Api> = workers.iter().map(|worker| worker.client(&key)).collect();
    let store = Arc::new(PgStore::open(&url).await.unwrap());

    // Each conversation is made on one worker, and its messages go to the next ones in turn.
    let mut sends = tokio::task::JoinSet::new();
    for c in 0..CONVERSATIONS {
        let apis = apis.clone();
        sends.spawn(async move {
            let conversation = apis[c % 3].conversation(None).await;
            let mut runs = Vec::new();
            for m in 0..MESSAGES {
                let api = &apis[(c + m + 1) % 3];
                runs.push(api.send(&conversation, &format!("c{c} m{m}")).await);
            }
            (conversation, runs)
        });
    }
    let mut sent: BTreeMap<String, Vec<String>> = BTreeMap::new();
    while let Some(done) = sends.join_next().await {
        let (conversation, runs) = done.unwrap();
        sent.insert(conversation, runs);
    }
    let all_runs = CONVERSATIONS * MESSAGES;

    // SIGKILL worker 0 once a third of the runs completed: it has runs in flight then.
    until(&*store, Duration::from_secs(240), |runs| {
        runs.iter()
            .filter(|run| run.state == AgentState::Completed)
            .count()
            >= all_runs / 3
    })
    .await;
    let in_flight_on_killed = active_runs_of(&*store, &workers[0]).await;
    workers[0].kill();

    // The survivors finish everything; a run halted `resume_unsafe` is cancelled by a person.
    let mut cancelled_unsafe = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    loop {
        let runs = store.list_runs(None, all_runs * 2).await.unwrap();
        for run in &runs {
            let unsafe_halt = run.state == AgentState::WaitingOnHuman
                && run.reason == Some(keel_core::ErrorReason::ResumeUnsafe);
            if unsafe_halt && !cancelled_unsafe.contains(&run.id) {
                let (status, body) = apis[1]
                    .post(&format!("/v1/runs/{}/cancel", run.id), json!({}))
                    .await;
                assert!(status < 300, "cancel {}: {status} {body}", run.id);
                cancelled_unsafe.push(run.id.clone());
            }
        }
        // A run the reconciler has just marked `timed_out` with a resume available is one a
        // survivor is about to resume, not one that ended: it is only done once resumed.
        let ended = |run: &keel_core::RunRecord| {
            run.state.is_terminal() && !(run.state == AgentState::TimedOut && run.resume_available)
        };
        if runs.len() == all_runs && runs.iter().all(ended) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not every run ended: {:?}",
            states(&runs)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let runs = store.list_runs(None, all_runs * 2).await.unwrap();
    let trouble: Vec<String> = workers
        .iter()
        .flat_map(|worker| {
            worker
                .log()
                .lines()
                .filter(|line| line.contains("ERROR") || line.contains("WARN"))
                .take(20)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    for run in &runs {
        let halted = cancelled_unsafe.contains(&run.id);
        assert!(
            run.state == AgentState::Completed || (halted && run.state == AgentState::Cancelled),
            "run {} ended {} ({:?}); killed worker had {} in flight; the workers said:\n{}",
            run.id,
            run.state,
            run.error,
            in_flight_on_killed,
            trouble.join("\n")
        );
    }

    // No conversation ever had two runs at once: each run's time, from its first checkpoint
    // to its last, is apart from every other run's of its conversation.
    let mut spans: HashMap<String, Vec<(String, String, String)>> = HashMap::new();
    for run in &runs {
        let checkpoints = store.checkpoints(&run.id).await.unwrap();
        let Some(first) = checkpoints.first() else {
            continue;
        };
        // Its last safe boundary: a halted run cancelled later by a person stopped there.
        let end = checkpoints
            .last()
            .map_or(first.created_at, |last| last.created_at);
        spans.entry(run.session_id.clone()).or_default().push((
            first.created_at.to_rfc3339(),
            end.to_rfc3339(),
            run.id.clone(),
        ));
    }
    for (conversation, mut times) in spans {
        times.sort();
        for pair in times.windows(2) {
            if pair[0].1 > pair[1].0 {
                let mut story = String::new();
                for (_, _, run_id) in pair {
                    for event in store.events(run_id).await.unwrap() {
                        let name = serde_json::to_value(&event.kind)
                            .ok()
                            .and_then(|v| {
                                v.get("type").and_then(|t| t.as_str()).map(str::to_string)
                            })
                            .unwrap_or_default();
                        story.push_str(&format!("{run_id} {} {name}\n", event.ts.to_rfc3339()));
                    }
                    let run = store.run(run_id).await.unwrap();
                    story.push_str(&format!("{run:?}\n"));
                }
                panic!(
                    "conversation {conversation} ran {} and {} at once: {pair:?}\n{story}",
                    pair[0].2, pair[1].2
                );
            }
        }
    }

    // No message lost, in the order sent; every conversation's runs are the ones it was given.
    for (conversation, run_ids) in &sent {
        let messages = store.messages(conversation).await.unwrap();
        let users: Vec<&str> = messages
            .iter()
            .filter(|stored| stored.message.role == keel_core::Role::User)
            .map(|stored| stored.message.content.as_str())
            .collect();
        let c: usize = users
            .first()
            .and_then(|text| text.strip_prefix('c'))
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{conversation}: {users:?}"));
        let expected: Vec<String> = (0..MESSAGES).map(|m| format!("c{c} m{m}")).collect();
        let halted = run_ids.iter().any(|id| cancelled_unsafe.contains(id));
        if halted {
            // A halted run's message stays; the runs behind it went on once it was cancelled.
            let mut sorted = users.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, expected, "conversation {conversation}");
        } else {
            assert_eq!(users, expected, "conversation {conversation}");
        }
        let mine = runs
            .iter()
            .filter(|run| &run.session_id == conversation)
            .count();
        assert_eq!(mine, MESSAGES, "conversation {conversation}");
    }

    // No side effect twice: one line per append the envelope saw finish, plus at most one per
    // run halted because its append may or may not have happened.
    let log = std::fs::read_to_string(workspace.join(LOG)).unwrap_or_default();
    let lines = log.lines().count();
    let mut finished_appends = 0;
    for run in &runs {
        finished_appends += store
            .tool_calls(&run.id)
            .await
            .unwrap()
            .iter()
            .filter(|call| call.name == "append_file" && call.completed_at.is_some())
            .count();
    }
    assert!(
        lines >= finished_appends && lines <= finished_appends + cancelled_unsafe.len(),
        "{lines} appends in the log, {finished_appends} finished in the envelope, {} halted",
        cancelled_unsafe.len()
    );
    eprintln!(
        "{all_runs} runs on 3 workers, {in_flight_on_killed} in flight on the killed one, {} halted \
         resume_unsafe, {lines} appends",
        cancelled_unsafe.len()
    );
    drop(workers);
}

/// Polls every run until `done` holds, or fails after `within`.
async fn until(
    store: &dyn DaemonStore,
    within: Duration,
    done: impl Fn(&[keel_core::RunRecord]) -> bool,
) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let runs = store.list_runs(None, 10_000).await.unwrap();
        if done(&runs) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never: {:?}",
            states(&runs)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How many runs are active on `worker` (by its pid in the runs' worker records).
async fn active_runs_of(store: &dyn DaemonStore, worker: &Daemon) -> usize {
    let pid = worker.pid();
    store
        .active_runs()
        .await
        .unwrap()
        .iter()
        .filter(|run| run.worker.as_ref().is_some_and(|w| Some(w.pid) == pid))
        .count()
}

/// Runs by state, for a failure's message.
fn states(runs: &[keel_core::RunRecord]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for run in runs {
        *counts.entry(run.state.to_string()).or_default() += 1;
    }
    counts
}
