//! Helpers for end-to-end tests: run the `keel` binary, start `keel mock-provider`.

#![allow(dead_code)]

pub mod bound;
pub mod daemon;
pub mod platform;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// The `keel` binary under test.
pub fn keel_bin() -> &'static str {
    env!("CARGO_BIN_EXE_keel")
}

/// What every test's KEEL_HOME holds unless a test writes its own `keel.toml`: backoffs of a
/// millisecond, so that tests exercise retries without waiting real seconds.
pub const FAST_RETRIES: &str =
    "[retry]\nbase_delay_ms = 1\nmax_delay_ms = 5\n\n[tools]\nretry_delays_ms = [1, 1, 1]\n";

/// A `keel` command with its own KEEL_HOME and none of the caller's provider settings.
pub fn keel(home: &Path) -> Command {
    bound::arm();
    let config = home.join("keel.toml");
    if !config.exists() {
        std::fs::write(&config, FAST_RETRIES).unwrap();
    }
    let mut command = Command::new(keel_bin());
    command
        .env("KEEL_HOME", home)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("KEEL_PROVIDER")
        .env_remove("KEEL_MODEL")
        .stdin(Stdio::null());
    command
}

/// A running `keel mock-provider`, killed when dropped.
pub struct Mock {
    child: Child,
    /// The address it printed, e.g. `http://127.0.0.1:41234`.
    pub url: String,
    _script_dir: tempfile::TempDir,
}

impl Mock {
    /// Starts a mock that answers with `script` (JSON text).
    pub fn start(script: &str) -> Mock {
        bound::arm();
        let script_dir = tempfile::tempdir().unwrap();
        let path = script_dir.path().join("script.json");
        std::fs::write(&path, script).unwrap();
        let mut child = Command::new(keel_bin())
            .args(["mock-provider", "--bind", "127.0.0.1:0", "--script"])
            .arg(&path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        bound::started(child.id());
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let read = move || {
            let mut line = String::new();
            stdout.read_line(&mut line).ok().map(|_| line)
        };
        let Some(line) = bound::first_line_within(read, Duration::from_secs(60)) else {
            let _ = child.kill();
            panic!("keel mock-provider printed no address within 60 s");
        };
        assert!(
            line.starts_with("http://"),
            "first stdout line is the address: {line:?}"
        );
        Mock {
            child,
            url: line.trim().to_string(),
            _script_dir: script_dir,
        }
    }

    /// Its process id (a bench reads its CPU time).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The request bodies the mock received, in order.
    pub fn requests(&self) -> Vec<serde_json::Value> {
        serde_json::from_value(self.get("/v1/_mock/requests")).unwrap()
    }

    /// `GET path` on the mock, as JSON, with a minimal HTTP/1.1 client over std.
    pub fn get(&self, path: &str) -> serde_json::Value {
        use std::io::{Read, Write};
        let host = self.url.trim_start_matches("http://");
        let mut stream = std::net::TcpStream::connect(host).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let body = response.split("\r\n\r\n").nth(1).unwrap_or("");
        serde_json::from_str(body).unwrap()
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        bound::ended(self.child.id());
    }
}

/// Runs a command to its end and returns its output; a command still running after
/// [`bound::PROCESS_DEADLINE`] is killed and fails the test.
pub fn run(command: &mut Command) -> Output {
    bound::output(command)
}

/// The id of the one run `keel runs` lists first in `home` (the newest).
pub fn only_run_id(home: &Path) -> String {
    let listed = stdout(&run(keel(home).arg("runs")));
    listed
        .split_whitespace()
        .next()
        .expect("a run is listed")
        .to_string()
}

/// Stdout as text.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Stderr as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A temporary directory path that lives as long as the returned guard.
pub fn temp() -> (tempfile::TempDir, PathBuf) {
    bound::arm();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    (dir, path)
}

/// Writes `$home/keel.toml`: `top` (top-level keys), then [`FAST_RETRIES`], then `tables`
/// (more tables), so a test's own configuration keeps the millisecond backoffs.
pub fn write_config(home: &Path, top: &str, tables: &str) -> PathBuf {
    let path = home.join("keel.toml");
    std::fs::write(&path, format!("{top}\n{FAST_RETRIES}\n{tables}\n")).unwrap();
    path
}

/// `keel run --json --events EVENTS --provider mock --base-url URL`; add flags and the prompt.
pub fn keel_run(home: &Path, mock: &Mock, events: &Path) -> Command {
    let mut command = keel(home);
    command
        .args(["run", "--json", "--events"])
        .arg(events)
        .args(["--provider", "mock", "--base-url", &mock.url]);
    command
}

/// The `--json` report on stdout.
pub fn report(output: &Output) -> serde_json::Value {
    serde_json::from_str(&stdout(output)).unwrap_or_else(|e| {
        panic!(
            "stdout is not a JSON report ({e}): {}\nstderr: {}",
            stdout(output),
            stderr(output)
        )
    })
}

/// Every event of an `--events` file, in order.
pub fn events(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The events named `name`.
pub fn find<'a>(events: &'a [serde_json::Value], name: &str) -> Vec<&'a serde_json::Value> {
    events.iter().filter(|e| e["event"] == name).collect()
}

/// The names of `events`, stream deltas left out.
pub fn names(events: &[serde_json::Value]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|e| e["event"].as_str())
        .filter(|name| *name != "agent.stream.delta")
        .collect()
}

/// Where the first event named `name` is, or a panic that shows the names.
pub fn position(events: &[serde_json::Value], name: &str) -> usize {
    events
        .iter()
        .position(|e| e["event"] == name)
        .unwrap_or_else(|| panic!("no {name} in {:?}", names(events)))
}

/// `keel sessions show ID`.
pub fn transcript(home: &Path, session: &str) -> String {
    let output = run(keel(home).args(["sessions", "show", session]));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    stdout(&output)
}

/// The last message of a request body the mock received (chat-completions shape).
pub fn last_message(request: &serde_json::Value) -> &serde_json::Value {
    request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .unwrap_or_else(|| panic!("a request without messages: {request}"))
}

/// What a monthly-budget refusal says of its reset: the first of next month, UTC.
pub fn budget_resets() -> String {
    use chrono::Datelike;
    let now = chrono::Utc::now();
    let (year, month) = if now.month() == 12 {
        (now.year() + 1, 1)
    } else {
        (now.year(), now.month() + 1)
    };
    format!("resets at {year}-{month:02}-01 00:00 UTC")
}
