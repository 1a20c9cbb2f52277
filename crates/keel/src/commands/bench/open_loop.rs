//! `keel bench --serve --rate R --duration S`: open-loop arrivals through a `keel serve` child
//! (SQLite, `keel mock-provider` as the model). Message `i` is scheduled at `start + i / R`,
//! each to a new conversation created before the clock starts, each a K-iteration run at L ms.
//! Every message is sent by a task of its own, spawned at its scheduled time, so a slow daemon
//! or a slow earlier request never delays a later send: what the generator cannot keep up with
//! shows as latency, never as fewer requests. Both latencies are counted from the scheduled
//! time (no coordinated omission): accept = scheduled → the `POST …/messages` 202, end to end
//! = scheduled → the run's `keel.stream.end` frame on `GET /v1/runs/{id}/events`.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use serde::Serialize;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::daemon::{Api, DaemonProcess, admin_key, prepare_home, script};
use super::mock_process::MockProcess;
use super::report::{cpu_time, cpu_time_of, nearest_rank, rss_kib};
use crate::cli::BenchArgs;
use crate::config::ConfigError;

/// How long after its scheduled time a message may take to end before it counts as failed
/// (on top of the ideal K × L).
const GIVE_UP_AFTER: Duration = Duration::from_secs(60);

/// Conversations created at once before the clock starts.
const CREATING_AT_ONCE: usize = 16;

/// Latency percentiles (nearest rank over the sorted samples), in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Tail {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Tail {
    /// The tail of `samples`; zeros when there are none.
    pub fn of(mut samples: Vec<Duration>) -> Tail {
        samples.sort_unstable();
        let ms = |q: f64| nearest_rank(&samples, q).as_secs_f64() * 1e3;
        Tail {
            p50: ms(0.50),
            p90: ms(0.90),
            p99: ms(0.99),
            max: ms(1.0),
        }
    }
}

/// What `keel bench --serve --rate R` measured.
#[derive(Debug, Serialize)]
pub struct OpenLoopReport {
    /// New messages scheduled per second.
    pub rate_per_s: f64,
    /// Seconds of arrivals.
    pub duration_s: f64,
    /// Iterations per run.
    pub iterations: u32,
    /// Model latency per call, in milliseconds.
    pub latency_ms: u64,
    /// The model's time alone per run, K × L, in milliseconds: the floor of end to end.
    pub ideal_end_to_end_ms: f64,
    /// Messages on the schedule (R × S).
    pub scheduled: usize,
    /// Messages whose `POST` was issued.
    pub sent: usize,
    /// Messages the daemon answered 202.
    pub accepted: usize,
    /// Runs that ended `completed`.
    pub completed: usize,
    /// Scheduled messages whose run did not complete (refused, broken, ended otherwise, or
    /// not ended in time).
    pub failed: usize,
    /// The first failure, if any.
    pub first_failure: Option<String>,
    /// Sends per second as they actually left (first send to last).
    pub achieved_rate_per_s: f64,
    /// How late the generator issued each `POST` after its scheduled time, in ms: its own lag,
    /// already inside the latencies below.
    pub send_lag_ms: Tail,
    /// Scheduled time → 202 of `POST …/messages`, in ms.
    pub accept_ms: Tail,
    /// Scheduled time → the run's `keel.stream.end` frame, in ms.
    pub end_to_end_ms: Tail,
    /// First scheduled time → the last run's end, in seconds.
    pub wall_s: f64,
    /// `[serve] workers` the daemon was given (runs at once).
    pub daemon_workers: usize,
    /// The daemon's CPU time (user + system) per completed iteration, in microseconds.
    pub daemon_cpu_per_iteration_us: f64,
    /// The daemon's peak resident memory, in MiB.
    pub daemon_peak_rss_mib: f64,
    /// The mock model's CPU time over the measured span, in seconds.
    pub mock_cpu_s: f64,
    /// The generator's (this process's) CPU time over the measured span, in seconds.
    pub generator_cpu_s: f64,
    /// The generator's CPU time per scheduled message, in microseconds.
    pub generator_cpu_per_message_us: f64,
    /// The generator's peak resident memory, in MiB.
    pub generator_peak_rss_mib: f64,
}

/// What became of one scheduled message.
struct Outcome {
    /// When its task began, to send.
    sent: Instant,
    /// Scheduled → its task began.
    lag: Duration,
    /// Scheduled → 202.
    accept: Option<Duration>,
    /// Scheduled → the end frame, when the run completed.
    end_to_end: Option<Duration>,
    /// Why it did not complete.
    failure: Option<String>,
}

/// Message `i`'s offset from the start of the schedule at `rate` per second.
fn offset(i: usize, rate: f64) -> Duration {
    Duration::from_secs_f64(i as f64 / rate)
}

/// Runs the open-loop benchmark on SQLite.
pub async fn bench(args: &BenchArgs, database: Option<&str>) -> anyhow::Result<ExitCode> {
    let rate = args.rate.context("--rate is required for the open loop")?;
    if !(rate.is_finite() && rate > 0.0 && args.duration.is_finite() && args.duration > 0.0) {
        return Err(ConfigError("--rate and --duration must be positive".into()).into());
    }
    if database.is_some() || args.daemons != 1 {
        return Err(ConfigError(
            "--rate runs one keel serve on SQLite: drop --database and --daemons".into(),
        )
        .into());
    }
    let scheduled = ((rate * args.duration).round() as usize).max(1);
    let ideal = Duration::from_millis(args.latency_ms) * args.iterations;
    // Runs in flight while the daemon keeps up, with a second's slack.
    let in_flight = (rate * (ideal.as_secs_f64() + 1.0)).ceil() as usize;
    // A message holds two connections (its POST, then its stream), and the daemon as many.
    super::raise_open_files(in_flight as u64 * 2 + 256)?;
    // More if the hard limit allows, for a daemon that falls behind (best effort: what is
    // missing then shows as failures).
    let _ = rlimit::increase_nofile_limit(scheduled as u64 * 2 + 256);
    let daemon_workers = in_flight + 64;
    let dir = tempfile::tempdir().context("cannot make a temporary directory")?;
    let mock = MockProcess::start(&script(args.iterations, args.latency_ms), dir.path())?;
    let mock_pid = mock.pid().to_string();
    let home = prepare_home(
        dir.path(),
        &mock,
        args.stream,
        args.iterations + 1,
        daemon_workers,
    )?;
    let key = admin_key(&home, None)?;
    let daemon = DaemonProcess::start(&home, None)?;
    keel_providers::install_crypto_provider();
    let api = Api {
        http: reqwest::Client::builder()
            .pool_max_idle_per_host(in_flight + 16)
            .build()?,
        base: daemon.url.clone(),
        key,
    };

    // Unmeasured: one run (tokenizer tables, statements, connections), then every
    // conversation, so creating them is not what is measured.
    api.warm_up().await?;
    let conversations: Vec<String> = futures::stream::iter(0..scheduled)
        .map(|_| api.conversation())
        .buffered(CREATING_AT_ONCE)
        .try_collect()
        .await
        .context("cannot create the conversations")?;

    let daemon_cpu_before = daemon.cpu_time();
    let mock_cpu_before = cpu_time_of(&mock_pid);
    let own_cpu_before = cpu_time();
    let start = Instant::now() + Duration::from_millis(20);
    let mut tasks = JoinSet::new();
    let mut outcomes = Vec::with_capacity(scheduled);
    for (i, conversation) in conversations.into_iter().enumerate() {
        let at = start + offset(i, rate);
        tokio::time::sleep_until(at).await;
        tasks.spawn(message(
            api.clone(),
            conversation,
            at,
            ideal + GIVE_UP_AFTER,
        ));
        while let Some(joined) = tasks.try_join_next() {
            outcomes.push(joined.context("a message's task panicked")?);
        }
    }
    while let Some(joined) = tasks.join_next().await {
        outcomes.push(joined.context("a message's task panicked")?);
    }
    let wall = start.elapsed();
    let daemon_cpu = daemon.cpu_time().saturating_sub(daemon_cpu_before);
    let mock_cpu = cpu_time_of(&mock_pid).saturating_sub(mock_cpu_before);
    let own_cpu = cpu_time().saturating_sub(own_cpu_before);
    let daemon_peak_rss_kib = daemon.peak_rss_kib();
    drop(daemon);

    let report = summarize(
        args,
        rate,
        scheduled,
        ideal,
        &outcomes,
        Measured {
            wall,
            daemon_workers,
            daemon_cpu,
            daemon_peak_rss_kib,
            mock_cpu,
            own_cpu,
        },
    );
    let failed = report.failed > 0;
    super::report::finish(&report, args.json, text, failed)
}

/// One scheduled message, sent as soon as its task runs: its POST, then its run's stream to
/// the end, every time counted from `at`; gives up `give_up` after `at`.
async fn message(api: Api, conversation: String, at: Instant, give_up: Duration) -> Outcome {
    let sent = Instant::now();
    let mut outcome = Outcome {
        sent,
        lag: sent.saturating_duration_since(at),
        accept: None,
        end_to_end: None,
        failure: None,
    };
    let at_std = at.into_std();
    let walk = async {
        let (answered, run_id) = api
            .post_message(&conversation)
            .await
            .context("POST …/messages")?;
        outcome.accept = Some(answered.saturating_duration_since(at_std));
        let state = api.follow(&run_id).await?;
        anyhow::ensure!(state == "completed", "run {run_id} ended {state}");
        outcome.end_to_end = Some(at.elapsed());
        anyhow::Ok(())
    };
    let ended = tokio::time::timeout_at(at + give_up, walk).await;
    match ended {
        Ok(Ok(())) => {}
        Ok(Err(error)) => outcome.failure = Some(format!("{error:#}")),
        Err(_) => {
            outcome.failure = Some(format!(
                "not ended {} s after its scheduled time",
                give_up.as_secs()
            ))
        }
    }
    outcome
}

/// The counters taken around the schedule.
struct Measured {
    wall: Duration,
    daemon_workers: usize,
    daemon_cpu: Duration,
    daemon_peak_rss_kib: u64,
    mock_cpu: Duration,
    own_cpu: Duration,
}

fn summarize(
    args: &BenchArgs,
    rate: f64,
    scheduled: usize,
    ideal: Duration,
    outcomes: &[Outcome],
    measured: Measured,
) -> OpenLoopReport {
    let mut sent_at: Vec<Instant> = outcomes.iter().map(|o| o.sent).collect();
    sent_at.sort_unstable();
    let achieved_rate_per_s = match (sent_at.first(), sent_at.last()) {
        (Some(first), Some(last)) if sent_at.len() > 1 && last > first => {
            (sent_at.len() - 1) as f64 / last.duration_since(*first).as_secs_f64()
        }
        _ => 0.0,
    };
    let completed = outcomes.iter().filter(|o| o.end_to_end.is_some()).count();
    let iterations = (completed as f64 * f64::from(args.iterations)).max(1.0);
    OpenLoopReport {
        rate_per_s: rate,
        duration_s: args.duration,
        iterations: args.iterations,
        latency_ms: args.latency_ms,
        ideal_end_to_end_ms: ideal.as_secs_f64() * 1e3,
        scheduled,
        sent: outcomes.len(),
        accepted: outcomes.iter().filter(|o| o.accept.is_some()).count(),
        completed,
        failed: scheduled - completed,
        first_failure: outcomes.iter().find_map(|o| o.failure.clone()),
        achieved_rate_per_s,
        send_lag_ms: Tail::of(outcomes.iter().map(|o| o.lag).collect()),
        accept_ms: Tail::of(outcomes.iter().filter_map(|o| o.accept).collect()),
        end_to_end_ms: Tail::of(outcomes.iter().filter_map(|o| o.end_to_end).collect()),
        wall_s: measured.wall.as_secs_f64(),
        daemon_workers: measured.daemon_workers,
        daemon_cpu_per_iteration_us: measured.daemon_cpu.as_secs_f64() * 1e6 / iterations,
        daemon_peak_rss_mib: measured.daemon_peak_rss_kib as f64 / 1024.0,
        mock_cpu_s: measured.mock_cpu.as_secs_f64(),
        generator_cpu_s: measured.own_cpu.as_secs_f64(),
        generator_cpu_per_message_us: measured.own_cpu.as_secs_f64() * 1e6
            / scheduled.max(1) as f64,
        generator_peak_rss_mib: rss_kib().1 as f64 / 1024.0,
    }
}

fn text(r: &OpenLoopReport) -> String {
    let tail = |t: &Tail| {
        format!(
            "p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            t.p50, t.p90, t.p99, t.max
        )
    };
    let failure = r
        .first_failure
        .as_ref()
        .map_or(String::new(), |f| format!("  first failure    {f}\n"));
    format!(
        "keel bench --serve, open loop: {} new messages/s for {} s, each a new conversation's \
         {}-iteration run at {} ms (ideal end to end {:.0} ms), keel serve on SQLite over HTTP\n  \
         messages         {} scheduled, {} sent, {} accepted, {} completed, {} failed\n\
         {failure}  arrival rate     {:.1}/s achieved; sends late by {}\n  \
         accept           {}\n  end to end       {}\n  wall             {:.2} s\n  \
         daemon           {:.0} µs CPU per iteration, {:.0} MiB peak, {} workers\n  \
         mock             {:.2} s CPU\n  generator        {:.2} s CPU ({:.0} µs per message), \
         {:.0} MiB peak\n",
        r.rate_per_s,
        r.duration_s,
        r.iterations,
        r.latency_ms,
        r.ideal_end_to_end_ms,
        r.scheduled,
        r.sent,
        r.accepted,
        r.completed,
        r.failed,
        r.achieved_rate_per_s,
        tail(&r.send_lag_ms),
        tail(&r.accept_ms),
        tail(&r.end_to_end_ms),
        r.wall_s,
        r.daemon_cpu_per_iteration_us,
        r.daemon_peak_rss_mib,
        r.daemon_workers,
        r.mock_cpu_s,
        r.generator_cpu_s,
        r.generator_cpu_per_message_us,
        r.generator_peak_rss_mib,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_is_fixed_by_the_rate_alone() {
        assert_eq!(offset(0, 500.0), Duration::ZERO);
        assert_eq!(offset(1, 500.0), Duration::from_millis(2));
        assert_eq!(offset(29_999, 500.0), Duration::from_micros(59_998_000));
    }

    #[test]
    fn a_tail_is_nearest_rank_over_the_samples_in_any_order() {
        let samples: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        let tail = Tail::of(samples);
        assert_eq!(
            tail,
            Tail {
                p50: 50.0,
                p90: 90.0,
                p99: 99.0,
                max: 100.0
            }
        );
        assert_eq!(Tail::of(Vec::new()), Tail::default());
    }
}
