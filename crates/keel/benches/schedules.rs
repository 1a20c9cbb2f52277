//! Schedule fires per second through the real `keel serve` (SQLite, `keel mock-provider` as
//! its model): `--schedules` schedules (1,000, then 10,000), each a `once` in a conversation of
//! its own, all due at the same instant.
//!
//! They are written through the store's API (`keel_store::SqliteStore`: a conversation and a
//! schedule each, 64 at a time) before the daemon starts; seeding is not measured. The daemon
//! reads "now" from a file (`[schedules] clock_file`, the hook keel's schedule tests use):
//! an hour before the slot while it starts, then the slot itself, written at an instant the
//! bench notes. From then on every schedule is due; a schedule is fired when the daemon logs its
//! `schedule.fired` line (after the transaction that queues its run and records the slot), and
//! the bench times each line as it arrives on the daemon's stderr. due → fired therefore
//! includes the wait for the scheduler's next tick (`--tick-ms`, the daemon's default 1,000).
//! The fired runs then run (a model call each, at `--latency-ms`) while later schedules fire,
//! as they would in production.
//!
//! Reported per size: fired (of scheduled), first fire after due, due → fired p50/p90/p99/max,
//! fires per second (over the firing span, and from due to the last fire), slots the daemon put
//! off to a later tick, the daemon's CPU per fire and its RSS, the mock's CPU.
//!
//! ```text
//! cargo bench -p keel --bench schedules -- --schedules 1000,10000 --tick-ms 1000
//! ```
//!
//! Under `cargo test` (no `--bench`) it fires 5 schedules and fails if one does not fire.

#[path = "../tests/common/mod.rs"]
mod common;
mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, SubsecRound, Utc};
use common::daemon::daemon_config;
use common::{Mock, temp};
use futures::StreamExt;
use keel_core::lane::LanePolicy;
use keel_platform::conversation::NewConversation;
use keel_platform::schedule::{DEFAULT_CATCH_UP_CAP, DEFAULT_MAX_FAILURES};
use keel_platform::{
    CatchUp, ConversationStore, Creator, Schedule, ScheduleKind, ScheduleState, ScheduleStore,
};
use keel_store::SqliteStore;
use serde_json::json;
use support::{Args, Serve, Spread, cpu_of, rss_of, table};

/// How long the bench waits without a new fire before it gives up on the rest.
const STALL: Duration = Duration::from_secs(60);

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let args = Args::read();
    let default: &[usize] = if args.measuring {
        &[1_000, 10_000]
    } else {
        &[5]
    };
    let sizes = args.list("schedules", default);
    let tick_ms = args.get("tick-ms", if args.measuring { 1_000 } else { 50 });
    let latency_ms = args.get("latency-ms", 0u64);
    for schedules in sizes {
        let fired = measure(schedules, tick_ms, latency_ms).await;
        assert!(
            args.measuring || fired == schedules,
            "{fired} of {schedules} schedules fired"
        );
    }
}

/// Seeds `count` schedules, starts a daemon, makes them due, times their fires and prints the
/// table; returns how many fired.
async fn measure(count: usize, tick_ms: u64, latency_ms: u64) -> usize {
    let script = json!({"steps": [{"text": "Done.", "forever": true, "delay_ms": latency_ms}]});
    let mock = Mock::start(&script.to_string());
    let (_home_guard, home) = temp();
    let (_workspace_guard, workspace) = temp();
    let slot = Utc::now().trunc_subsecs(0) + chrono::Duration::hours(1);
    let clock = home.join("now");
    set_clock(&clock, slot - chrono::Duration::hours(1));
    daemon_config(
        &home,
        &mock,
        &workspace,
        &format!(
            "[schedules]\ntick_ms = {tick_ms}\nclock_file = \"{}\"\n",
            clock.display()
        ),
    );
    let seeding = Instant::now();
    seed(&home, count, slot).await;
    eprintln!(
        "seeded {count} conversations and schedules in {:.1} s",
        seeding.elapsed().as_secs_f64()
    );

    let serve = Serve::start(&home, &[]);
    let daemon = serve.pid().to_string();
    let mock_pid = mock.pid().to_string();
    // Let the daemon settle (its first ticks find nothing due), then make the slot due half a
    // tick after one: made due right after its address, the slot would wait a whole tick
    // every time, the ticks keeping the phase of the daemon's start.
    tokio::time::sleep(Duration::from_millis(3 * tick_ms.min(1_000) + tick_ms / 2)).await;
    let (daemon_cpu, mock_cpu) = (cpu_of(&daemon), cpu_of(&mock_pid));
    let due = Instant::now();
    set_clock(&clock, slot);

    let mut fires: Vec<Instant> = Vec::with_capacity(count);
    let mut deferred = 0usize;
    let mut failures: Vec<String> = Vec::new();
    while fires.len() < count {
        let Ok((at, line)) = serve.lines.recv_timeout(STALL) else {
            break;
        };
        if line.contains("schedule.fired") {
            fires.push(at);
        } else if line.contains("waits for the next tick") {
            deferred += 1;
        } else if line.contains("cannot fire") || line.contains("tick failed") {
            failures.push(line);
        }
    }
    let (daemon_cpu, mock_cpu) = (cpu_of(&daemon) - daemon_cpu, cpu_of(&mock_pid) - mock_cpu);
    let (rss, peak) = rss_of(&daemon);

    let fired = fires.len();
    let latencies: Vec<Duration> = fires
        .iter()
        .map(|at| at.saturating_duration_since(due))
        .collect();
    let first = latencies.first().copied().unwrap_or_default();
    let last = latencies.last().copied().unwrap_or_default();
    let span = last.saturating_sub(first);
    let rate = |over: Duration| fired as f64 / over.as_secs_f64().max(1e-9);
    let per_fire =
        |cpu: Duration| format!("{:.0} µs", cpu.as_secs_f64() * 1e6 / fired.max(1) as f64);
    let mut rows = vec![
        ("fired", format!("{fired} of {count}")),
        (
            "first fire after due",
            format!("{:.1} ms", first.as_secs_f64() * 1e3),
        ),
        (
            "due → fired p50/p90/p99/max",
            format!("{} ms", Spread::of(latencies).show()),
        ),
        (
            "fires/s, first to last fire",
            format!("{:.0} over {:.2} s", rate(span), span.as_secs_f64()),
        ),
        (
            "fires/s, due to last fire",
            format!("{:.0} over {:.2} s", rate(last), last.as_secs_f64()),
        ),
        ("put off to a later tick", deferred.to_string()),
        ("daemon CPU per fire", per_fire(daemon_cpu)),
        ("daemon RSS now / peak", format!("{rss:.1} / {peak:.1} MiB")),
        ("mock CPU per fire", per_fire(mock_cpu)),
    ];
    if let Some(failure) = failures.first() {
        rows.push(("first failure", failure.clone()));
    }
    table(
        &format!(
            "schedules: {count} due at once, tick {tick_ms} ms, model latency {latency_ms} ms"
        ),
        &rows,
    );
    fired
}

/// Writes `count` conversations, each with a `once` schedule at `slot`, through the store.
async fn seed(home: &Path, count: usize, slot: DateTime<Utc>) {
    let store = Arc::new(
        SqliteStore::open(&home.join("keel.db"))
            .await
            .expect("cannot open the bench's store"),
    );
    let now = Utc::now();
    futures::stream::iter(0..count)
        .map(|i| {
            let store = store.clone();
            async move {
                let conversation = uuid::Uuid::now_v7().to_string();
                store
                    .create_conversation(&NewConversation {
                        id: conversation.clone(),
                        owner: Some("bench".into()),
                        lane_policy: LanePolicy::Queue,
                        at: now,
                        place: None,
                        trusted: true,
                    })
                    .await
                    .expect("cannot seed a conversation");
                store
                    .create_schedule(&Schedule {
                        id: format!("sch-{i:06}"),
                        session_id: conversation,
                        owner: Some("bench".into()),
                        created_by: Creator::Operator,
                        kind: ScheduleKind::Once,
                        spec: slot.to_rfc3339(),
                        tz: None,
                        text: "the report for {date}".into(),
                        catch_up: CatchUp::Once,
                        catch_up_cap: DEFAULT_CATCH_UP_CAP,
                        state: ScheduleState::Active,
                        paused_reason: None,
                        next_slot: Some(slot),
                        failures: 0,
                        max_failures: DEFAULT_MAX_FAILURES,
                        created_at: now,
                        updated_at: now,
                    })
                    .await
                    .expect("cannot seed a schedule");
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<()>>()
        .await;
}

/// Writes `at` to the daemon's clock file whole, then renames it into place, so the scheduler
/// never reads half an instant.
fn set_clock(path: &Path, at: DateTime<Utc>) {
    let next = path.with_extension("next");
    std::fs::write(&next, at.to_rfc3339()).expect("cannot write the clock file");
    std::fs::rename(&next, path).expect("cannot move the clock file into place");
}
