//! What the platform benches (`channels`, `schedules`) share: their few flags, a `keel serve`
//! child whose stderr lines are timed as they arrive, a process's CPU and RSS read from /proc,
//! nearest-rank percentiles, and the table they print.
//!
//! Run by `cargo bench`, a bench gets `--bench` and measures at the size its flags say; run by
//! `cargo test` (no `--bench`), it runs once at a tiny size as its own smoke test. The daemon
//! is the `keel` built with the bench, or the one `KEEL_BENCH_BIN` names (e.g. a release
//! binary measured by a bench built in debug).

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The bench's arguments: `--name value` pairs, and whether `cargo bench` started it.
pub struct Args {
    pairs: Vec<(String, String)>,
    /// `--bench` was given: measure at full size; otherwise a smoke test at a tiny size.
    pub measuring: bool,
}

impl Args {
    /// The process's arguments. Unknown flags are kept (and ignored unless asked for), so that
    /// `cargo bench`'s own (`--bench`) and libtest's pass through.
    pub fn read() -> Args {
        let mut pairs = Vec::new();
        let mut measuring = false;
        let mut args = std::env::args().skip(1).peekable();
        while let Some(arg) = args.next() {
            if arg == "--bench" {
                measuring = true;
            } else if let Some(name) = arg.strip_prefix("--") {
                match args.peek() {
                    Some(value) if !value.starts_with("--") => {
                        pairs.push((name.to_string(), args.next().unwrap_or_default()));
                    }
                    _ => pairs.push((name.to_string(), String::new())),
                }
            }
        }
        Args { pairs, measuring }
    }

    /// The value of `--name`, parsed; `default` when absent. A value that does not parse stops
    /// the bench with a clear line.
    pub fn get<T: std::str::FromStr>(&self, name: &str, default: T) -> T {
        match self.pairs.iter().rev().find(|(n, _)| n == name) {
            None => default,
            Some((_, value)) => value.parse().unwrap_or_else(|_| {
                eprintln!("--{name} {value:?}: not a value this bench reads");
                std::process::exit(2)
            }),
        }
    }

    /// The comma-separated list of `--name` (e.g. `--schedules 1000,10000`).
    pub fn list<T: std::str::FromStr + Clone>(&self, name: &str, default: &[T]) -> Vec<T> {
        match self.pairs.iter().rev().find(|(n, _)| n == name) {
            None => default.to_vec(),
            Some((_, value)) => value
                .split(',')
                .map(|item| {
                    item.trim().parse().unwrap_or_else(|_| {
                        eprintln!("--{name} {value:?}: not a list this bench reads");
                        std::process::exit(2)
                    })
                })
                .collect(),
        }
    }
}

/// A `keel serve` child: its address, and each stderr line with the instant it arrived.
pub struct Serve {
    child: Child,
    /// Its address, e.g. `http://127.0.0.1:41234`.
    pub url: String,
    /// Its stderr, line by line, timed on arrival.
    pub lines: mpsc::Receiver<(Instant, String)>,
}

impl Serve {
    /// Starts `keel serve --bind 127.0.0.1:0` in `home` with `env`, and waits for its address.
    pub fn start(home: &Path, env: &[(&str, &str)]) -> Serve {
        let mut child = Command::new(keel_bin())
            .env("KEEL_HOME", home)
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("KEEL_PROVIDER")
            .env_remove("KEEL_MODEL")
            .envs(env.iter().copied())
            .args(["serve", "--bind", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start keel serve");
        let (line_tx, lines) = mpsc::channel();
        let stderr = child.stderr.take().expect("piped");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line_tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        let (found, address) = mpsc::channel();
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        std::thread::spawn(move || {
            let mut line = String::new();
            while stdout.read_line(&mut line).unwrap_or(0) > 0 {
                if let Some(at) = line.find("http://") {
                    let _ = found.send(line[at..].trim().to_string());
                    break;
                }
                line.clear();
            }
            for _ in stdout.lines() {}
        });
        let Ok(url) = address.recv_timeout(Duration::from_secs(120)) else {
            let _ = child.kill();
            let log: Vec<String> = lines.try_iter().map(|(_, line)| line).collect();
            panic!(
                "keel serve printed no address within 120 s; stderr:\n{}",
                log.join("\n")
            );
        };
        Serve { child, url, lines }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `keel` the daemon runs: `KEEL_BENCH_BIN`, else the one built with the bench.
pub fn keel_bin() -> String {
    std::env::var("KEEL_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_keel").to_string())
}

/// User plus system CPU time of process `pid` (`self` for this one), from /proc; zero where
/// there is no /proc.
pub fn cpu_of(pid: &str) -> Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    // The fields after the command's closing parenthesis; utime and stime are 14th and 15th.
    let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields
        .get(11..13)
        .map(|f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum())
        .unwrap_or(0);
    // USER_HZ is 100 on every Linux keel runs on.
    Duration::from_millis(ticks * 10)
}

/// The `VmRSS` and `VmHWM` (peak) of process `pid`, in MiB; zeros where there is no /proc.
pub fn rss_of(pid: &str) -> (f64, f64) {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return (0.0, 0.0);
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Nearest-rank percentiles of durations, in milliseconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct Spread {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    /// The spread of `samples`; zeros when there are none.
    pub fn of(mut samples: Vec<Duration>) -> Spread {
        if samples.is_empty() {
            return Spread::default();
        }
        samples.sort_unstable();
        let ms = |d: Duration| d.as_secs_f64() * 1_000.0;
        let rank = |q: f64| {
            let index = (q * samples.len() as f64).ceil() as usize;
            ms(samples[index.clamp(1, samples.len()) - 1])
        };
        Spread {
            p50: rank(0.50),
            p90: rank(0.90),
            p99: rank(0.99),
            max: ms(samples[samples.len() - 1]),
        }
    }

    /// `p50 / p90 / p99 / max` in ms.
    pub fn show(&self) -> String {
        format!(
            "{:.1} / {:.1} / {:.1} / {:.1}",
            self.p50, self.p90, self.p99, self.max
        )
    }
}

/// Prints a two-column table under `title`.
pub fn table(title: &str, rows: &[(&str, String)]) {
    let width = rows.iter().map(|(name, _)| name.len()).max().unwrap_or(0);
    println!("\n{title}");
    println!("{}", "-".repeat(title.len()));
    for (name, value) in rows {
        println!("{name:<width$}  {value}");
    }
}
