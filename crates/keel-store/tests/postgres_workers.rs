//! Two `keel serve` workers on one PostgreSQL database (two stores on one schema) sharing
//! session lanes: the claim rules (a free lane is taken by one of many racing claims; the same
//! worker renews its claim, another is refused while the run is driven; a paused run is
//! continued by exactly one of the workers an answer reaches; a silent holder is taken over, an
//! executing one marked `timed_out` as the reconciler would; a queued run waits for those queued
//! before it), the commit's fence (a stalled worker that wakes up cannot write), the unique
//! index refusing a second executing run of a conversation, and the signals a commit, a cancel
//! request and a release send. `KEEL_TEST_PG` names the database (`skip` skips).

use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use keel_core::store::Commit;
use keel_core::worker::Worker;
use keel_core::{
    AgentState, Boundary, EventKind, LaneClaim, LaneOutcome, Message, RunRecord, Store, StoreError,
    StreamDelta,
};
use keel_store::PgStore;
use sqlx::postgres::{PgConnectOptions, PgListener};
use tokio::sync::Barrier;

mod common;
use common::{at, checkpoint, event, run_record};

/// How many claims race at once.
const RACERS: usize = 40;

/// Two workers' stores on one fresh schema (`None` when skipped).
async fn two_workers() -> Option<[Arc<PgStore>; 2]> {
    let (_, url) = keel_store::postgres::testing::fresh_schema().await?;
    let options = PgConnectOptions::from_str(&url).unwrap();
    let first = PgStore::open_with(options.clone(), 8).await.unwrap();
    let second = PgStore::open_with(options, 8).await.unwrap();
    Some([Arc::new(first), Arc::new(second)])
}

/// Worker `n`, as a run records it.
fn worker(n: u32) -> Worker {
    Worker {
        host: "box".into(),
        pid: 100 + n,
        started: None,
        namespace: None,
    }
}

/// Worker `n` as it claims lanes: its record's words (`pid N on host`).
fn name(n: u32) -> String {
    worker(n).to_string()
}

/// A claim of session `s1` for `run_id` by `worker` at `when`, stale after a minute.
fn claim<'a>(run_id: &'a str, worker: &'a str, when: DateTime<Utc>) -> LaneClaim<'a> {
    LaneClaim {
        session_id: "s1",
        run_id,
        worker,
        at: when,
        stale_after: Duration::minutes(1),
    }
}

/// Run `id` of session `s1` in `state`, driven by worker `n`, last changed at `updated`.
fn run(id: &str, state: AgentState, n: u32, updated: DateTime<Utc>) -> RunRecord {
    RunRecord {
        state,
        worker: Some(worker(n)),
        updated_at: updated,
        heartbeat_at: Some(updated),
        ..run_record(id, "s1", at(0))
    }
}

fn busy_with(outcome: LaneOutcome) -> String {
    match outcome {
        LaneOutcome::Busy(holder) => holder.run_id,
        LaneOutcome::Claimed => panic!("claimed, expected busy"),
    }
}

/// Runs `claims` at once, alternating between the workers; how many were claimed.
async fn race(workers: &[Arc<PgStore>; 2], claims: Vec<(String, String, DateTime<Utc>)>) -> usize {
    let barrier = Arc::new(Barrier::new(claims.len()));
    let tasks: Vec<_> = claims
        .into_iter()
        .enumerate()
        .map(|(i, (run_id, worker, when))| {
            let store = Arc::clone(&workers[i % 2]);
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                store.claim_session(&claim(&run_id, &worker, when)).await
            })
        })
        .collect();
    let mut claimed = 0;
    for task in tasks {
        if task.await.unwrap().unwrap() == LaneOutcome::Claimed {
            claimed += 1;
        }
    }
    claimed
}

#[tokio::test]
async fn of_many_claims_of_a_free_lane_exactly_one_wins() {
    let Some(workers) = two_workers().await else {
        return;
    };
    let claims = (0..RACERS)
        .map(|i| (format!("r{i}"), name(i as u32 % 2), at(1)))
        .collect();
    assert_eq!(race(&workers, claims).await, 1);
}

#[tokio::test]
async fn the_same_worker_renews_its_claim_and_another_waits_while_it_drives_the_run() {
    let Some([a, b]) = two_workers().await else {
        return;
    };
    let (w1, w2) = (name(1), name(2));
    assert_eq!(
        a.claim_session(&claim("r1", &w1, at(0))).await.unwrap(),
        LaneOutcome::Claimed
    );
    a.commit(&Commit::new(&run("r1", AgentState::Running, 1, at(0)), &[]))
        .await
        .unwrap();
    // Rule b: the same worker again, from either store.
    assert_eq!(
        b.claim_session(&claim("r1", &w1, at(0))).await.unwrap(),
        LaneOutcome::Claimed
    );
    // The run is driven (seen within a minute): another worker may not take it, nor another run.
    let outcome = b.claim_session(&claim("r1", &w2, at(0))).await.unwrap();
    assert_eq!(busy_with(outcome), "r1");
    let outcome = b.claim_session(&claim("r2", &w2, at(0))).await.unwrap();
    assert_eq!(busy_with(outcome), "r1");
    // Silent for longer than a minute (rule c, stale): another worker takes the run over.
    assert_eq!(
        b.claim_session(&claim("r1", &w2, at(2))).await.unwrap(),
        LaneOutcome::Claimed
    );
}

#[tokio::test]
async fn a_paused_run_answered_on_many_workers_continues_once_and_the_old_worker_is_fenced() {
    let Some(workers) = two_workers().await else {
        return;
    };
    let [a, b] = &workers;
    assert_eq!(
        a.claim_session(&claim("r1", &name(1), at(0)))
            .await
            .unwrap(),
        LaneOutcome::Claimed
    );
    let paused = run("r1", AgentState::WaitingOnHuman, 1, at(1));
    a.commit(&Commit::new(&paused, &[])).await.unwrap();
    // The paused run keeps its lane from other runs.
    let outcome = b
        .claim_session(&claim("r2", &name(2), at(2)))
        .await
        .unwrap();
    assert_eq!(busy_with(outcome), "r1");

    // The answer reaches many workers at once: one of them continues the run (rule c).
    let claims = (0..RACERS)
        .map(|i| ("r1".to_string(), name(10 + i as u32), at(2)))
        .collect();
    assert_eq!(race(&workers, claims).await, 1);
    let holder = match b
        .claim_session(&claim("r1", &name(99), at(2)))
        .await
        .unwrap()
    {
        LaneOutcome::Busy(holder) => holder,
        LaneOutcome::Claimed => panic!("a second continuation"),
    };
    assert_eq!(holder.run_id, "r1");
    let winner: u32 = holder.worker["pid ".len()..holder.worker.find(" on").unwrap()]
        .parse::<u32>()
        .unwrap()
        - 100;

    // The winner drives it on; the first worker, waking up, can no longer write the run.
    let resumed = run("r1", AgentState::Running, winner, at(3));
    b.commit(&Commit::new(&resumed, &[Message::user("yes")]))
        .await
        .unwrap();
    let stale = run("r1", AgentState::Running, 1, at(3));
    for messages in [vec![], vec![Message::assistant("late")]] {
        let error = a.commit(&Commit::new(&stale, &messages)).await.unwrap_err();
        assert!(
            matches!(&error, StoreError::LaneLost { run_id, holder, .. } if run_id == "r1" && holder == "r1"),
            "{error:?}"
        );
    }
    let stored = a.run("r1").await.unwrap().unwrap();
    assert_eq!(stored.worker, Some(worker(winner)));
    assert_eq!(a.messages("s1").await.unwrap().len(), 1);
    // Until it pauses again nobody else continues it.
    let outcome = a
        .claim_session(&claim("r1", &name(1), at(3)))
        .await
        .unwrap();
    assert_eq!(busy_with(outcome), "r1");
}

#[tokio::test]
async fn a_silent_executing_holder_is_timed_out_and_keeps_its_lane_for_its_resume() {
    let Some([a, b]) = two_workers().await else {
        return;
    };
    assert_eq!(
        a.claim_session(&claim("r1", &name(1), at(0)))
            .await
            .unwrap(),
        LaneOutcome::Claimed
    );
    let r1 = run("r1", AgentState::WaitingForTool, 1, at(0));
    let saved = checkpoint(&r1, 1, "h", "{}");
    a.commit(&Commit {
        checkpoint: Some(&saved),
        ..Commit::new(&r1, &[])
    })
    .await
    .unwrap();
    // Rule d: silent for longer than a minute, it is no longer executing (which the unique
    // index would refuse to a second one) — but it can resume, so the conversation's next run
    // waits for that resume instead of overtaking it.
    let outcome = b
        .claim_session(&claim("r2", &name(2), at(5)))
        .await
        .unwrap();
    assert_eq!(busy_with(outcome), "r1");
    let timed_out = b.run("r1").await.unwrap().unwrap();
    assert_eq!(timed_out.state, AgentState::TimedOut);
    assert_eq!(timed_out.finished_at, Some(at(5)));
    assert!(timed_out.resume_available, "{saved:?} is resumable");
    assert!(timed_out.error.unwrap().contains("stopped responding"));
    assert!(Boundary::ToolResult.resumable());
    // Another worker's resume takes it; once it ends, the next run has the lane.
    assert_eq!(
        b.claim_session(&claim("r1", &name(2), at(5)))
            .await
            .unwrap(),
        LaneOutcome::Claimed
    );
    let done = keel_core::RunRecord {
        finished_at: Some(at(6)),
        ..run("r1", AgentState::Completed, 2, at(6))
    };
    b.commit(&Commit::new(&done, &[Message::assistant("done")]))
        .await
        .unwrap();
    assert_eq!(
        b.claim_session(&claim("r2", &name(2), at(6)))
            .await
            .unwrap(),
        LaneOutcome::Claimed
    );
    b.commit(&Commit::new(
        &run("r2", AgentState::Running, 2, at(6)),
        &[Message::user("hi")],
    ))
    .await
    .unwrap();
    // The old worker's run lost its lane: its messages are refused.
    let error = a
        .commit(&Commit::new(&r1, &[Message::assistant("later")]))
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::LaneLost { holder, .. } if holder == "r2"));
}

#[tokio::test]
async fn a_timed_out_run_nobody_resumes_lets_its_lane_go_after_stale_after() {
    let Some([a, b]) = two_workers().await else {
        return;
    };
    a.claim_session(&claim("r1", &name(1), at(0)))
        .await
        .unwrap();
    let r1 = run("r1", AgentState::WaitingForTool, 1, at(0));
    let saved = checkpoint(&r1, 1, "h", "{}");
    a.commit(&Commit {
        checkpoint: Some(&saved),
        ..Commit::new(&r1, &[])
    })
    .await
    .unwrap();
    let outcome = b
        .claim_session(&claim("r2", &name(2), at(5)))
        .await
        .unwrap();
    assert_eq!(busy_with(outcome), "r1");
    // A minute after it was timed out, nobody having resumed it, the lane is free again.
    assert_eq!(
        b.claim_session(&claim("r2", &name(2), at(7)))
            .await
            .unwrap(),
        LaneOutcome::Claimed
    );
}

#[tokio::test]
async fn a_second_executing_run_of_a_conversation_is_refused_whole() {
    let Some([a, b]) = two_workers().await else {
        return;
    };
    a.commit(&Commit::new(&run("r1", AgentState::Running, 1, at(0)), &[]))
        .await
        .unwrap();
    let second = run("r2", AgentState::WaitingForTool, 2, at(0));
    let error = b
        .commit(&Commit::new(&second, &[Message::user("also")]))
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::Conflict(_)), "{error:?}");
    assert_eq!(b.run("r2").await.unwrap(), None);
    assert!(b.messages("s1").await.unwrap().is_empty());
    // Stopped, it is stored; once the first ends, it may execute.
    let queued = RunRecord {
        state: AgentState::Queued,
        ..second.clone()
    };
    b.commit(&Commit::new(&queued, &[])).await.unwrap();
    let done = RunRecord {
        finished_at: Some(at(1)),
        ..run("r1", AgentState::Completed, 1, at(1))
    };
    a.commit(&Commit::new(&done, &[])).await.unwrap();
    b.commit(&Commit::new(&second, &[])).await.unwrap();
}

#[tokio::test]
async fn a_queued_run_waits_for_the_runs_queued_before_it() {
    let Some([a, b]) = two_workers().await else {
        return;
    };
    a.ensure_session("s1").await.unwrap();
    for run_id in ["q1", "q2"] {
        sqlx::query(
            "INSERT INTO run_queue (run_id, session_id, message, enqueued_at, provider, model) \
             VALUES ($1, 's1', 'hi', $2, 'p', 'm')",
        )
        .bind(run_id)
        .bind(keel_core::timestamp::rfc3339(
            at(0),
            keel_core::timestamp::Fraction::Nine,
        ))
        .execute(a.pool())
        .await
        .unwrap();
    }
    // Rule e: the lane is free, but q1 was queued first.
    let outcome = b
        .claim_session(&claim("q2", &name(2), at(1)))
        .await
        .unwrap();
    assert_eq!(busy_with(outcome), "q1");
    assert_eq!(
        a.claim_session(&claim("q1", &name(1), at(1)))
            .await
            .unwrap(),
        LaneOutcome::Claimed
    );
    let first = run("q1", AgentState::Running, 1, at(1));
    a.commit(&Commit::new(&first, &[Message::user("hi")]))
        .await
        .unwrap();
    let outcome = b
        .claim_session(&claim("q2", &name(2), at(1)))
        .await
        .unwrap();
    assert_eq!(busy_with(outcome), "q1");
    // q1 left the queue with its first commit and the lane with its last.
    let done = RunRecord {
        finished_at: Some(at(2)),
        ..run("q1", AgentState::Completed, 1, at(2))
    };
    a.commit(&Commit::new(&done, &[])).await.unwrap();
    assert_eq!(
        b.claim_session(&claim("q2", &name(2), at(2)))
            .await
            .unwrap(),
        LaneOutcome::Claimed
    );
}

#[tokio::test]
async fn commits_cancel_requests_and_releases_signal_every_worker() {
    let Some([a, b]) = two_workers().await else {
        return;
    };
    let mut listener = PgListener::connect_with(b.pool()).await.unwrap();
    listener
        .listen(keel_platform::signals::CHANNEL)
        .await
        .unwrap();
    // Notifications are the database's, not the schema's: ids of this test's own, so the other
    // tests' signals are told apart.
    let lane = |run_id: &'static str, when| LaneClaim {
        session_id: "signals",
        ..claim(run_id, "pid 101 on box", when)
    };
    let r1 = RunRecord {
        session_id: "signals".into(),
        ..run("signal-r1", AgentState::Running, 1, at(0))
    };
    assert_eq!(
        a.claim_session(&lane("signal-r1", at(0))).await.unwrap(),
        LaneOutcome::Claimed
    );
    // A commit without events says nothing; one with events says so.
    a.commit(&Commit::new(&r1, &[])).await.unwrap();
    let events = [event(
        &r1,
        0,
        EventKind::StreamDelta {
            delta: StreamDelta::Text { text: "hi".into() },
        },
    )];
    a.commit(&Commit {
        events: &events,
        ..Commit::new(&r1, &[])
    })
    .await
    .unwrap();
    assert!(a.request_cancel("signal-r1", at(1)).await.unwrap());
    assert!(!a.request_cancel("nobody", at(1)).await.unwrap());
    let done = RunRecord {
        state: AgentState::Cancelled,
        updated_at: at(2),
        finished_at: Some(at(2)),
        ..r1.clone()
    };
    a.commit(&Commit::new(&done, &[])).await.unwrap();
    assert_eq!(
        a.claim_session(&lane("signal-r2", at(3))).await.unwrap(),
        LaneOutcome::Claimed
    );
    assert!(a.release_session("signals", "signal-r2").await.unwrap());
    assert!(!a.release_session("signals", "signal-r2").await.unwrap());
    let mut heard = Vec::new();
    while heard.len() < 4 {
        let notification =
            tokio::time::timeout(std::time::Duration::from_secs(10), listener.recv())
                .await
                .expect("a signal")
                .unwrap();
        let payload = notification.payload();
        if payload.contains("signal") {
            heard.push(payload.to_string());
        }
    }
    assert_eq!(
        heard,
        [
            "events:signal-r1",
            "cancel:signal-r1",
            "freed:signals",
            "freed:signals"
        ]
    );
}

#[tokio::test]
async fn runs_taking_turns_on_one_conversation_from_two_workers_never_overlap_or_deadlock() {
    let Some(workers) = two_workers().await else {
        return;
    };
    const RUNS: usize = 12;
    let barrier = Arc::new(Barrier::new(RUNS));
    let tasks: Vec<_> = (0..RUNS)
        .map(|i| {
            let store = Arc::clone(&workers[i % 2]);
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                let (id, n) = (format!("r{i}"), 1 + (i % 2) as u32);
                let me = name(n);
                barrier.wait().await;
                while store
                    .claim_session(&claim(&id, &me, Utc::now()))
                    .await
                    .unwrap()
                    != LaneOutcome::Claimed
                {
                    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                }
                let mut record = RunRecord {
                    started_at: Utc::now(),
                    ..run(&id, AgentState::Running, n, Utc::now())
                };
                let messages = [Message::user(&id), Message::assistant(&id)];
                store
                    .commit(&Commit::new(&record, &messages[..1]))
                    .await
                    .unwrap();
                store
                    .commit(&Commit::new(&record, &messages[1..]))
                    .await
                    .unwrap();
                record.state = AgentState::Completed;
                record.finished_at = Some(Utc::now());
                store.commit(&Commit::new(&record, &[])).await.unwrap();
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let [a, _] = &workers;
    let messages = a.messages("s1").await.unwrap();
    assert_eq!(messages.len(), 2 * RUNS);
    // Each run's two messages are next to each other: no turn interleaved with another.
    for pair in messages.chunks(2) {
        assert_eq!(pair[0].run_id, pair[1].run_id);
        assert_eq!(pair[0].message.content, pair[1].message.content);
    }
    let runs = a.list_runs(Some("s1"), 100).await.unwrap();
    assert_eq!(runs.len(), RUNS);
    assert!(runs.iter().all(|run| run.state == AgentState::Completed));
}

#[tokio::test]
async fn another_workers_reconciler_times_out_a_silent_run_and_frees_its_lane() {
    let Some([a, b]) = two_workers().await else {
        return;
    };
    assert_eq!(
        a.claim_session(&claim("r1", &name(1), at(0)))
            .await
            .unwrap(),
        LaneOutcome::Claimed
    );
    let r1 = run("r1", AgentState::Running, 1, at(0));
    a.commit(&Commit::new(&r1, &[Message::user("hi")]))
        .await
        .unwrap();
    // Worker 2's reconciler finds worker 1's run silent: its commit (as worker 1's record says)
    // passes the fence, ends the run and lets the lane go.
    let policy = keel_core::reconcile::ReconcilePolicy::default();
    let report = keel_core::reconcile::reconcile(b.as_ref(), at(5), &policy)
        .await
        .unwrap();
    assert_eq!(report.timed_out, 1);
    assert_eq!(
        a.run("r1").await.unwrap().unwrap().state,
        AgentState::TimedOut
    );
    assert_eq!(
        b.claim_session(&claim("r2", &name(2), at(5)))
            .await
            .unwrap(),
        LaneOutcome::Claimed
    );
}
