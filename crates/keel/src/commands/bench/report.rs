//! What `keel bench` measured, summed up from the conversations' timelines and the process's
//! own counters, printed for a person or as JSON.

use std::time::Duration;

use std::process::ExitCode;

use serde::Serialize;

use super::timing::Timeline;

/// Percentiles of a set of durations, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Spread {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Mean.
    pub mean: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    /// The spread of `samples` (nearest-rank percentiles); zeros when there are none.
    pub fn of(mut samples: Vec<Duration>) -> Spread {
        if samples.is_empty() {
            return Spread::default();
        }
        samples.sort_unstable();
        let us = |d: Duration| d.as_nanos() as f64 / 1_000.0;
        let rank = |q: f64| us(nearest_rank(&samples, q));
        let total: Duration = samples.iter().sum();
        Spread {
            p50: rank(0.50),
            p99: rank(0.99),
            mean: us(total) / samples.len() as f64,
            max: us(samples[samples.len() - 1]),
        }
    }
}

/// The nearest-rank `q` quantile (0 < q ≤ 1) of `sorted` (ascending); zero when it is empty.
pub fn nearest_rank(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = (q * sorted.len() as f64).ceil() as usize;
    sorted[index.clamp(1, sorted.len()) - 1]
}

/// The setup a report describes.
#[derive(Clone, Debug, Serialize)]
pub struct Setup {
    /// Concurrent conversations.
    pub conversations: usize,
    /// Iterations (model calls) per conversation; all but the last ask for a tool.
    pub iterations: u32,
    /// Simulated model latency per call, in milliseconds.
    pub latency_ms: u64,
    /// `memory` or `sqlite`.
    pub store: String,
    /// `in-process` or `http` (`keel mock-provider` in a child process).
    pub transport: String,
    /// Streamed answers (HTTP only).
    pub stream: bool,
    /// `burst` (all at once) or `spread` (evenly over the first latency period).
    pub start: String,
}

/// Everything `keel bench` reports.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// What ran.
    pub setup: Setup,
    /// Conversations that completed with every iteration.
    pub completed: usize,
    /// The first failure's description, when some conversation did not complete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_failure: Option<String>,
    /// The loop's own time per iteration (from a model call's return to the next call's start),
    /// in µs, queueing behind other conversations included.
    pub overhead_us: Spread,
    /// Model calls as the loop saw them, minus the simulated latency, in µs: the adapter and
    /// HTTP round trip with `--http`, the scripted provider's own work in process.
    pub transport_us: Spread,
    /// CPU time of this process per iteration, in µs (the whole process: loop, store, runtime,
    /// and the in-process provider or the HTTP client).
    pub cpu_us_per_iteration: f64,
    /// Wall time of the whole bench, in milliseconds.
    pub wall_ms: f64,
    /// The ideal wall time: iterations × latency (plus the latency period with `spread`).
    pub ideal_ms: f64,
    /// `wall_ms / ideal_ms`.
    pub wall_ratio: f64,
    /// Conversations' own wall times, in milliseconds (p50, p99, mean, max).
    pub conversation_wall_ms: Spread,
    /// Iterations completed per second of wall time.
    pub iterations_per_sec: f64,
    /// Peak resident memory of this process, in MiB (Linux; 0 elsewhere).
    pub peak_rss_mib: f64,
    /// Resident memory before the conversations started, in MiB.
    pub baseline_rss_mib: f64,
    /// (peak − baseline) / conversations, in KiB.
    pub kib_per_conversation: f64,
}

/// The process counters around the measured part.
#[derive(Clone, Copy, Debug)]
pub struct Counters {
    /// Wall time from the first conversation's start to the last one's end.
    pub wall: Duration,
    /// CPU time of the process over the same span.
    pub cpu: Duration,
    /// Resident memory before the start, in KiB.
    pub baseline_rss_kib: u64,
    /// Peak resident memory, in KiB.
    pub peak_rss_kib: u64,
}

impl Report {
    /// Sums up the timelines of the conversations that completed.
    pub fn new(
        setup: Setup,
        timelines: &[Timeline],
        first_failure: Option<String>,
        counters: Counters,
    ) -> Report {
        let latency = Duration::from_millis(setup.latency_ms);
        let overheads = timelines.iter().flat_map(Timeline::overheads).collect();
        let transport = timelines
            .iter()
            .flat_map(Timeline::model_times)
            .map(|d| d.saturating_sub(latency))
            .collect();
        let walls = timelines.iter().map(Timeline::wall).collect();
        let iterations = timelines.len() as f64 * f64::from(setup.iterations);
        let mut ideal = latency * setup.iterations;
        if setup.start == "spread" {
            ideal += latency;
        }
        let ms = |d: Duration| d.as_secs_f64() * 1_000.0;
        let wall_ms = ms(counters.wall);
        let ideal_ms = ms(ideal);
        let grown = counters
            .peak_rss_kib
            .saturating_sub(counters.baseline_rss_kib);
        Report {
            completed: timelines.len(),
            first_failure,
            overhead_us: Spread::of(overheads),
            transport_us: Spread::of(transport),
            cpu_us_per_iteration: if iterations > 0.0 {
                counters.cpu.as_secs_f64() * 1e6 / iterations
            } else {
                0.0
            },
            wall_ms,
            ideal_ms,
            wall_ratio: if ideal_ms > 0.0 {
                wall_ms / ideal_ms
            } else {
                0.0
            },
            conversation_wall_ms: scale(Spread::of(walls), 1e-3),
            iterations_per_sec: iterations / counters.wall.as_secs_f64().max(1e-9),
            peak_rss_mib: counters.peak_rss_kib as f64 / 1024.0,
            baseline_rss_mib: counters.baseline_rss_kib as f64 / 1024.0,
            kib_per_conversation: grown as f64 / setup.conversations.max(1) as f64,
            setup,
        }
    }

    /// The report for a person.
    pub fn text(&self) -> String {
        let s = &self.setup;
        let o = &self.overhead_us;
        let t = &self.transport_us;
        let w = &self.conversation_wall_ms;
        let transport = if s.transport == "http" {
            format!(
                "keel mock-provider over HTTP ({})",
                if s.stream {
                    "streamed"
                } else {
                    "whole answers"
                }
            )
        } else {
            "in-process scripted provider".to_string()
        };
        let mut out = format!(
            "keel bench: {} conversations × {} iterations, {} ms model latency, {} store, {}, \
             {} start\n",
            s.conversations, s.iterations, s.latency_ms, s.store, transport, s.start
        );
        out += &format!(
            "  completed            {} of {}\n",
            self.completed, s.conversations
        );
        if let Some(failure) = &self.first_failure {
            out += &format!("  first failure        {failure}\n");
        }
        out += &format!(
            "  loop overhead/iter   p50 {:.1} µs   p99 {:.1} µs   mean {:.1} µs   max {:.1} µs\n",
            o.p50, o.p99, o.mean, o.max
        );
        out += &format!(
            "  model call − latency p50 {:.1} µs   p99 {:.1} µs\n",
            t.p50, t.p99
        );
        out += &format!(
            "  CPU per iteration    {:.1} µs (whole process)\n",
            self.cpu_us_per_iteration
        );
        out += &format!(
            "  wall                 {:.0} ms vs ideal {:.0} ms = {:.2}×   (per conversation: p50 \
             {:.0} ms, max {:.0} ms)\n",
            self.wall_ms, self.ideal_ms, self.wall_ratio, w.p50, w.max
        );
        out += &format!(
            "  throughput           {:.0} iterations/s\n",
            self.iterations_per_sec
        );
        out += &format!(
            "  memory               peak RSS {:.1} MiB (baseline {:.1} MiB), {:.1} KiB per \
             conversation\n",
            self.peak_rss_mib, self.baseline_rss_mib, self.kib_per_conversation
        );
        out
    }
}

fn scale(spread: Spread, factor: f64) -> Spread {
    Spread {
        p50: spread.p50 * factor,
        p99: spread.p99 * factor,
        mean: spread.mean * factor,
        max: spread.max * factor,
    }
}

/// This process's resident memory now and at its peak, in KiB (`VmRSS`, `VmHWM` of
/// `/proc/self/status`); zeros where there is no such file.
pub fn rss_kib() -> (u64, u64) {
    rss_kib_of("self")
}

/// The resident memory of process `pid` (a number, or `self`) now and at its peak, in KiB.
pub fn rss_kib_of(pid: &str) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// CPU time (user + system) this process has used, to the nanosecond
/// (`CLOCK_PROCESS_CPUTIME_ID`): a short bench uses less than one of `/proc`'s 10 ms ticks.
pub fn cpu_time() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

/// The CPU time process `pid` (a number, or `self`) has used (`/proc/<pid>/stat`, in clock
/// ticks of 1/100 s, the Linux default); zero where there is no such file.
pub fn cpu_time_of(pid: &str) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name (field 2) may hold spaces; the fields after its `)` are plain.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the `)`.
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// CPU time (user + system) of every process on this machine named `postgres`: a local
/// PostgreSQL server's postmaster, its helpers and its backends. A backend that exits takes its
/// time with it, so a difference over a benchmark counts what live connections spent.
pub fn postgres_cpu_time() -> Duration {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Duration::ZERO;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == "postgres")
        })
        .map(|pid| cpu_time_of(&pid))
        .sum()
}

/// Prints `report` (as JSON with `json`, else as `text` writes it) and gives the bench's exit
/// code: 3 when the bench `failed`, else success.
pub fn finish<R: Serialize>(
    report: &R,
    json: bool,
    text: impl FnOnce(&R) -> String,
    failed: bool,
) -> anyhow::Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        print!("{}", text(report));
    }
    Ok(if failed {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        let spread = Spread::of(samples);
        assert_eq!((spread.p50, spread.p99, spread.max), (50.0, 99.0, 100.0));
        assert!((spread.mean - 50.5).abs() < 1e-9);
        assert_eq!(Spread::of(Vec::new()), Spread::default());
        assert_eq!(Spread::of(vec![Duration::from_micros(7)]).p99, 7.0);
    }

    #[test]
    fn the_process_counters_read_something_on_linux() {
        if cfg!(target_os = "linux") {
            let (now, peak) = rss_kib();
            assert!(now > 0 && peak >= now, "{now} {peak}");
            let spin = std::time::Instant::now();
            while spin.elapsed() < Duration::from_millis(30) {}
            assert!(cpu_time() > Duration::ZERO);
        }
    }

    #[test]
    fn the_process_cpu_clock_is_finer_than_procs_ticks() {
        // Spin until the clock moves by under a millisecond between two reads: /proc's 10 ms
        // ticks only ever move by 10 ms or more. (A single span measured from the start could
        // take in other test threads' CPU while this one waits for a core.)
        let started = std::time::Instant::now();
        let mut last = cpu_time();
        let step = loop {
            let now = cpu_time();
            let step = now.saturating_sub(last);
            last = now;
            if (step > Duration::ZERO && step < Duration::from_millis(1))
                || started.elapsed() > Duration::from_secs(5)
            {
                break step;
            }
        };
        assert!(
            step > Duration::ZERO && step < Duration::from_millis(1),
            "{step:?}"
        );
    }
}
