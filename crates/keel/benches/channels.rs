//! A channel message in → its reply out, through the real `keel serve` (SQLite, `keel
//! mock-provider` as its model, one model call per message) polling the test tree's fake
//! Telegram Bot API (`tests/telegram/fake.rs`, in this process) at 1,000 chats.
//!
//! The fake hands out one private-chat message from each of `--chats` chats, in two phases, each
//! on a fresh daemon and home: `burst` queues them all at once; `rate` queues them at `--rate`
//! per second. A message's latency runs from the instant the fake handed its update to a
//! `getUpdates` to the instant the fake received the first `sendMessage` for its chat (keel's
//! own time), and also from the instant the bench queued it in the fake (the user's view: it
//! adds the wait in Telegram's queue until keel's poller asks for it); the
//! daemon's channel settings are its defaults (`[channels] poll_ms` 200, the long poll of 30 s,
//! which the fake shortens to 5), unless `--poll-ms` says otherwise. Reported per phase:
//! replies, both latencies p50/p90/p99/max, throughput (replies per second from the first
//! message queued to the last reply), the daemon's CPU per message and its RSS (now and peak), the
//! mock's CPU, and this process's (the fake and the generator).
//!
//! ```text
//! cargo bench -p keel --bench channels -- --chats 1000 --rate 100 --latency-ms 0
//! ```
//!
//! Under `cargo test` (no `--bench`) it runs 5 chats per phase and fails if one goes unanswered.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../tests/telegram/fake.rs"]
mod fake;
mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::daemon::daemon_config;
use common::{Mock, temp};
use fake::{FakeTelegram, TOKEN};
use serde_json::json;
use support::{Args, Serve, Spread, cpu_of, rss_of, table};

/// How long a phase waits without a new reply before it gives up on the rest.
const STALL: Duration = Duration::from_secs(60);

/// What one phase is asked to do.
struct Phase {
    name: &'static str,
    chats: usize,
    /// Messages per second; 0 for all at once.
    rate: f64,
    latency_ms: u64,
    poll_ms: Option<u64>,
    /// Chat ids start above this (each phase has its own).
    first_chat: i64,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let args = Args::read();
    let chats = args.get("chats", if args.measuring { 1_000 } else { 5 });
    let rate = args.get("rate", if args.measuring { 100.0 } else { 50.0 });
    let latency_ms = args.get("latency-ms", 0);
    let poll_ms = args.get("poll-ms", 0);
    let poll_ms = (poll_ms > 0).then_some(poll_ms);
    let phases: Vec<String> = args.list("phases", &["burst".to_string(), "rate".to_string()]);
    for (n, name) in phases.iter().enumerate() {
        let phase = Phase {
            name: if name == "burst" { "burst" } else { "rate" },
            chats,
            rate: if name == "burst" { 0.0 } else { rate },
            latency_ms,
            poll_ms,
            first_chat: 1_000_000 * (n as i64 + 1),
        };
        let missing = measure(&phase).await;
        assert!(
            args.measuring || missing == 0,
            "{missing} chats were never answered"
        );
    }
}

/// Runs one phase on a fresh fake, mock and daemon, prints its table; returns how many chats
/// got no reply.
async fn measure(phase: &Phase) -> usize {
    let fake = FakeTelegram::start().await;
    let script = json!({"steps": [
        {"text": "Hello from keel.", "forever": true, "delay_ms": phase.latency_ms}
    ]});
    let mock = Mock::start(&script.to_string());
    let (_home_guard, home) = temp();
    let (_workspace_guard, workspace) = temp();
    let poll = phase
        .poll_ms
        .map(|ms| format!("[channels]\npoll_ms = {ms}\n\n"))
        .unwrap_or_default();
    let channels = format!(
        "{poll}[channels.telegram]\napi_url = \"{}\"\nallow = \"everyone\"\n",
        fake.url
    );
    daemon_config(&home, &mock, &workspace, &channels);
    let serve = Serve::start(&home, &[("TELEGRAM_BOT_TOKEN", TOKEN)]);
    let started = Instant::now();
    while fake.offsets().is_empty() {
        assert!(
            started.elapsed() < STALL,
            "keel serve never polled the fake"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let daemon = serve.pid().to_string();
    let mock_pid = mock.pid().to_string();
    let (daemon_cpu, mock_cpu, own_cpu) = (cpu_of(&daemon), cpu_of(&mock_pid), cpu_of("self"));

    let start = Instant::now();
    let mut updates: HashMap<i64, i64> = HashMap::new();
    let mut queued: HashMap<i64, Instant> = HashMap::new();
    for i in 0..phase.chats {
        if phase.rate > 0.0 {
            let due = start + Duration::from_secs_f64(i as f64 / phase.rate);
            tokio::time::sleep_until(due.into()).await;
        }
        let chat = phase.first_chat + i as i64;
        let private = json!({"id": chat, "type": "private", "first_name": "P"});
        queued.insert(chat, Instant::now());
        updates.insert(chat, fake.message(private, chat, "hello"));
    }
    let replies = until_answered(&fake, &updates).await;
    let (daemon_cpu, mock_cpu, own_cpu) = (
        cpu_of(&daemon) - daemon_cpu,
        cpu_of(&mock_pid) - mock_cpu,
        cpu_of("self") - own_cpu,
    );
    let (rss, peak) = rss_of(&daemon);

    let mut latencies = Vec::new();
    let mut waits = Vec::new();
    let mut first_in: Option<Instant> = None;
    let mut last_out: Option<Instant> = None;
    for (chat, update) in &updates {
        let (Some(served), Some(replied)) = (fake.served_at(*update), replies.get(chat)) else {
            continue;
        };
        latencies.push(replied.saturating_duration_since(served));
        let sent = queued[chat];
        waits.push(replied.saturating_duration_since(sent));
        first_in = Some(first_in.map_or(sent, |at| at.min(sent)));
        last_out = Some(last_out.map_or(*replied, |at| at.max(*replied)));
    }
    let answered = latencies.len();
    let span = match (first_in, last_out) {
        (Some(first), Some(last)) => last.saturating_duration_since(first),
        _ => Duration::ZERO,
    };
    let per_message =
        |cpu: Duration| format!("{:.0} µs", cpu.as_secs_f64() * 1e6 / answered.max(1) as f64);
    let arrivals = if phase.rate > 0.0 {
        format!("{} chats, {}/s", phase.chats, phase.rate)
    } else {
        format!("{} chats, all at once", phase.chats)
    };
    table(
        &format!(
            "channels: Telegram, {} ({arrivals}), model latency {} ms",
            phase.name, phase.latency_ms
        ),
        &[
            ("replies", format!("{answered} of {}", phase.chats)),
            (
                "handed out → reply p50/p90/p99/max",
                format!("{} ms", Spread::of(latencies).show()),
            ),
            (
                "queued → reply p50/p90/p99/max",
                format!("{} ms", Spread::of(waits).show()),
            ),
            (
                "throughput",
                format!(
                    "{:.1} replies/s over {:.2} s",
                    answered as f64 / span.as_secs_f64().max(1e-9),
                    span.as_secs_f64()
                ),
            ),
            ("daemon CPU per message", per_message(daemon_cpu)),
            ("daemon RSS now / peak", format!("{rss:.1} / {peak:.1} MiB")),
            ("mock CPU per message", per_message(mock_cpu)),
            ("bench process CPU per message", per_message(own_cpu)),
            (
                "Bot API calls per message",
                calls_per_message(&fake, phase.chats),
            ),
        ],
    );
    drop(serve);
    phase.chats - answered
}

/// The calls the fake received, by method, per message sent (e.g. `getUpdates 0.02`).
fn calls_per_message(fake: &FakeTelegram, messages: usize) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for (method, _) in fake.calls() {
        match counts.iter_mut().find(|(m, _)| *m == method) {
            Some((_, n)) => *n += 1,
            None => counts.push((method, 1)),
        }
    }
    counts
        .iter()
        .map(|(method, n)| format!("{method} {:.2}", *n as f64 / messages.max(1) as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Waits until every chat of `updates` got a `sendMessage`, or no new one came for
/// [`STALL`]; the first reply's arrival per chat.
async fn until_answered(fake: &FakeTelegram, updates: &HashMap<i64, i64>) -> HashMap<i64, Instant> {
    let mut replies: HashMap<i64, Instant> = HashMap::new();
    let mut seen = 0;
    let mut progress = Instant::now();
    while replies.len() < updates.len() && progress.elapsed() < STALL {
        tokio::time::sleep(Duration::from_millis(5)).await;
        if fake.sends_count() == seen {
            continue;
        }
        let sends = fake.sends();
        for (chat, at) in &sends[seen..] {
            if updates.contains_key(chat) {
                replies.entry(*chat).or_insert(*at);
            }
        }
        seen = sends.len();
        progress = Instant::now();
    }
    replies
}
