//! What the crash tests share (`e2e_crash.rs`): the task's script, a scenario of a fresh home,
//! workspace and mock, the transcript as `keel` shows it, and a `keel` process to pause at a
//! checkpoint or kill.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Mock, keel, run, stderr, stdout, temp};
/// The hook that freezes `keel` right after its Nth checkpoint.
pub(crate) const PAUSE: &str = "KEEL_TEST_PAUSE_AT_CHECKPOINT";
/// What the hook prints on stderr.
pub(crate) const PAUSED: &str = "keel: test hook: paused after checkpoint ";
/// How long a test waits for a line it expects before it fails (never reached when all is well).
pub(crate) const PATIENCE: Duration = Duration::from_secs(15);

/// The file the task appends to, and the line each `append_file` call appends.
pub(crate) const LOG: &str = "log.txt";
pub(crate) const APPENDS: [(&str, &str); 3] =
    [("a1", "alpha\n"), ("a2", "beta\n"), ("a3", "gamma\n")];

/// Six model steps: read, append, a parallel batch (append + read), append, read the log back,
/// answer. Each step takes `delay_ms` at the mock; the answer repeats forever when asked (a kill
/// during a model call may have consumed a step).
pub(crate) fn task_script(delay_ms: u64, forever: bool) -> String {
    let append = |id: &str, line: &str| json!({"id": id, "name": "append_file", "arguments": {"path": LOG, "content": line}});
    let read =
        |id: &str, path: &str| json!({"id": id, "name": "read_file", "arguments": {"path": path}});
    json!({"steps": [
        {"text": "Reading the plan.", "tool_calls": [read("r1", "plan.txt")], "delay_ms": delay_ms},
        {"tool_calls": [append("a1", "alpha\n")], "delay_ms": delay_ms},
        {"text": "Two at once.", "tool_calls": [append("a2", "beta\n"), read("r2", "notes.txt")], "delay_ms": delay_ms},
        {"tool_calls": [append("a3", "gamma\n")], "delay_ms": delay_ms},
        {"text": "Checking the log.", "tool_calls": [read("r3", LOG)], "delay_ms": delay_ms},
        {"text": "Done: the log has its three lines.", "delay_ms": delay_ms, "forever": forever}
    ]})
    .to_string()
}

/// A fresh KEEL_HOME, workspace and mock for one run of the task.
pub(crate) struct Scenario {
    pub(crate) mock: Mock,
    pub(crate) home: PathBuf,
    pub(crate) workspace: PathBuf,
    pub(crate) processes: usize,
    pub(crate) _guards: (tempfile::TempDir, tempfile::TempDir),
}

impl Scenario {
    pub(crate) fn new(script: &str) -> Scenario {
        let mock = Mock::start(script);
        let (home_guard, home) = temp();
        let (workspace_guard, workspace) = temp();
        std::fs::write(
            home.join("keel.toml"),
            format!(
                "{}\n[runs]\nstale_after_secs = 0.001\n",
                crate::common::FAST_RETRIES
            ),
        )
        .unwrap();
        std::fs::write(workspace.join("plan.txt"), "append alpha, beta, gamma\n").unwrap();
        std::fs::write(workspace.join("notes.txt"), "one line each\n").unwrap();
        Scenario {
            mock,
            home,
            workspace,
            processes: 0,
            _guards: (home_guard, workspace_guard),
        }
    }

    /// `keel` with this scenario's home, provider and workspace flags after `args`, and a fresh
    /// events file (so that its first line is this process's first event).
    pub(crate) fn command(&mut self, args: &[&str]) -> (Command, PathBuf) {
        self.processes += 1;
        let events = self.home.join(format!("events-{}.jsonl", self.processes));
        let mut command = keel(&self.home);
        command
            .args(args)
            .args(["--json", "--provider", "mock", "--base-url", &self.mock.url])
            .arg("--workspace")
            .arg(&self.workspace)
            .arg("--events")
            .arg(&events);
        (command, events)
    }

    pub(crate) fn run_command(&mut self) -> (Command, PathBuf) {
        let (mut command, events) = self.command(&["run"]);
        command.arg("append three lines to log.txt");
        (command, events)
    }

    pub(crate) fn resume_command(
        &mut self,
        run_id: &str,
        decision: Option<&str>,
    ) -> (Command, PathBuf) {
        let mut args = vec!["resume", "--force", run_id];
        if let Some(decision) = decision {
            args.extend(["--unsafe-call", decision]);
        }
        self.command(&args)
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.workspace.join(LOG)).unwrap_or_default()
    }

    /// The one run of this home, with its state (`running`, `completed`,
    /// `waiting_on_human (resume_unsafe)`, …), if one was stored.
    pub(crate) fn the_run(&self) -> Option<(String, String)> {
        let listed = run(keel(&self.home).arg("runs"));
        assert_eq!(listed.status.code(), Some(0), "{}", stderr(&listed));
        let listed = stdout(&listed);
        let runs: Vec<&str> = listed
            .lines()
            .filter(|line| !line.starts_with("no runs yet"))
            .collect();
        assert!(runs.len() <= 1, "one run per home: {listed}");
        let line = runs.first()?;
        let mut words = line.split_whitespace();
        let id = words.next().unwrap().to_string();
        let mut state = words.next().unwrap().to_string();
        if let Some(reason) = words.next().filter(|w| w.starts_with('(')) {
            state = format!("{state} {reason}");
        }
        Some((id, state))
    }

    pub(crate) fn show(&self, run_id: &str) -> Shown {
        let output = run(keel(&self.home).args(["runs", "show", run_id]));
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        Shown::parse(&stdout(&output))
    }

    pub(crate) fn messages(&self, session: &str) -> Vec<Message> {
        let output = run(keel(&self.home).args(["sessions", "show", session]));
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        parse_transcript(&stdout(&output))
    }
}

/// What `keel runs show` says about a run.
pub(crate) struct Shown {
    pub(crate) text: String,
    /// The run's id and state, e.g. `waiting_on_human (resume_unsafe)`.
    pub(crate) id: String,
    pub(crate) state: String,
    pub(crate) session: String,
    pub(crate) checkpoints: Vec<String>,
    /// (call id, tool name, status) per envelope row.
    pub(crate) envelope: Vec<(String, String, Status)>,
    pub(crate) events: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Ok,
    Failed,
    Unfinished,
}

impl Shown {
    pub(crate) fn parse(text: &str) -> Shown {
        let mut shown = Shown {
            text: text.to_string(),
            id: String::new(),
            state: String::new(),
            session: String::new(),
            checkpoints: Vec::new(),
            envelope: Vec::new(),
            events: Vec::new(),
        };
        let mut words = text.lines().next().unwrap_or_default().split_whitespace();
        shown.id = words.next().unwrap_or_default().to_string();
        shown.state = words.next().unwrap_or_default().to_string();
        if let Some(reason) = words.next().filter(|w| w.starts_with('(')) {
            shown.state = format!("{} {reason}", shown.state);
        }
        let mut section = "";
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("session ") {
                shown.session = rest.split_whitespace().next().unwrap().to_string();
            }
            match line {
                "checkpoints:" | "tool envelope:" | "events:" => section = line,
                "" => {}
                _ if line.starts_with("  ") => {
                    let mut words = line.split_whitespace();
                    match section {
                        "checkpoints:" => shown.checkpoints.push(words.nth(1).unwrap().into()),
                        "tool envelope:" => {
                            let id = words.next().unwrap().to_string();
                            let name = words.next().unwrap().to_string();
                            let status = if line.contains("[STARTED, NOT COMPLETED]") {
                                Status::Unfinished
                            } else if line.contains("ok]") {
                                Status::Ok
                            } else {
                                Status::Failed
                            };
                            shown.envelope.push((id, name, status));
                        }
                        "events:" => shown.events.push(words.nth(1).unwrap().into()),
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        assert!(!shown.session.is_empty(), "no session in:\n{text}");
        shown
    }

    pub(crate) fn status_of(&self, call_id: &str) -> Option<Status> {
        self.envelope
            .iter()
            .find(|(id, _, _)| id == call_id)
            .map(|(_, _, status)| *status)
    }
}

/// One message of `keel sessions show`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Message {
    pub(crate) seq: u64,
    /// `user`, `assistant`, `tool result [a1]`, `assistant (internal: …)`, …
    pub(crate) label: String,
    /// Its content and tool-call lines.
    pub(crate) body: Vec<String>,
}

impl Message {
    pub(crate) fn internal(&self) -> bool {
        self.label.contains("(internal")
    }
}

pub(crate) fn parse_transcript(text: &str) -> Vec<Message> {
    let mut messages: Vec<Message> = Vec::new();
    for line in text.lines().skip(1) {
        if let Some(header) = line.strip_prefix('[') {
            let (seq, label) = header.split_once("] ").expect("a message header");
            messages.push(Message {
                seq: seq.parse().unwrap(),
                label: label.trim_end_matches(':').to_string(),
                body: Vec::new(),
            });
        } else if let Some(body) = line.strip_prefix("  ") {
            messages
                .last_mut()
                .expect("a line inside a message")
                .body
                .push(body.to_string());
        }
    }
    messages
}

/// Roles and contents (and tool calls), without seqs or internal notes.
pub(crate) fn conversation(messages: &[Message]) -> Vec<(String, Vec<String>)> {
    messages
        .iter()
        .filter(|m| !m.internal())
        .map(|m| (m.label.clone(), m.body.clone()))
        .collect()
}

/// A `keel` process whose stderr arrives line by line on a channel.
pub(crate) struct Running {
    pub(crate) child: Child,
    pub(crate) lines: Receiver<String>,
    pub(crate) stderr: Vec<String>,
    pub(crate) stdout: Option<JoinHandle<String>>,
}

/// How a process ended.
pub(crate) struct Ended {
    pub(crate) code: Option<i32>,
    pub(crate) signal: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Ended {
    pub(crate) fn report(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "exit {:?}: stdout is not a JSON report ({e}): {}\nstderr: {}",
                self.code, self.stdout, self.stderr
            )
        })
    }
}

impl Running {
    pub(crate) fn spawn(command: &mut Command) -> Running {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut out = child.stdout.take().unwrap();
        let stdout = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = out.read_to_string(&mut text);
            text
        });
        Running {
            child,
            lines,
            stderr: Vec::new(),
            stdout: Some(stdout),
        }
    }

    /// Waits until a stderr line passes `wanted` (and returns it), or stderr closes (`None`:
    /// the process is ending), or `deadline` passes (`None`, when given one); past [`PATIENCE`]
    /// the test fails.
    pub(crate) fn wait_for(
        &mut self,
        mut wanted: impl FnMut(&str) -> bool,
        deadline: Option<Instant>,
    ) -> Option<String> {
        let patience = Instant::now() + PATIENCE;
        loop {
            let until = deadline.map_or(patience, |d| d.min(patience));
            match self
                .lines
                .recv_timeout(until.saturating_duration_since(Instant::now()))
            {
                Ok(line) => {
                    self.stderr.push(line.clone());
                    if wanted(&line) {
                        return Some(line);
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return None,
                Err(RecvTimeoutError::Timeout) if deadline.is_some_and(|d| Instant::now() >= d) => {
                    return None;
                }
                Err(RecvTimeoutError::Timeout) => panic!(
                    "no stderr line came in {PATIENCE:?}; so far:\n{}",
                    self.stderr.join("\n")
                ),
            }
        }
    }

    /// Waits until `events` (this process's own events file) has a line, i.e. the process
    /// reached its first boundary; false when it ended first.
    pub(crate) fn wait_until_live(&mut self, events: &Path) -> bool {
        let patience = Instant::now() + PATIENCE;
        loop {
            if std::fs::metadata(events).is_ok_and(|m| m.len() > 0) {
                return true;
            }
            if self.child.try_wait().unwrap().is_some() {
                return false;
            }
            assert!(
                Instant::now() < patience,
                "the process reached no boundary in {PATIENCE:?}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// SIGKILL: `None` when the kill ended it, how it ended when it ended on its own first.
    pub(crate) fn kill(mut self) -> Option<Ended> {
        let _ = self.child.kill();
        let ended = self.finish();
        (ended.signal != Some(9)).then_some(ended)
    }

    pub(crate) fn finish(mut self) -> Ended {
        let status = self.child.wait().unwrap();
        while let Ok(line) = self.lines.recv_timeout(PATIENCE) {
            self.stderr.push(line);
        }
        Ended {
            code: status.code(),
            signal: status.signal(),
            stdout: self.stdout.take().unwrap().join().unwrap(),
            stderr: self.stderr.join("\n"),
        }
    }
}

pub(crate) fn is_hook(line: &str) -> bool {
    line.starts_with(PAUSED)
}

/// Runs `command` with the pause hook at checkpoint `at`: kills it there and returns `None`,
/// or returns how it ended when it ended first.
pub(crate) fn run_and_kill_at(command: &mut Command, at: u32) -> Option<Ended> {
    let mut process = Running::spawn(command.env(PAUSE, at.to_string()));
    match process.wait_for(is_hook, None) {
        Some(line) => {
            assert!(
                line.starts_with(&format!("{PAUSED}{at} (")),
                "paused at the wrong checkpoint: {line}"
            );
            if let Some(ended) = process.kill() {
                panic!("the paused process ended before the kill: {}", ended.stderr);
            }
            None
        }
        None => Some(process.finish()),
    }
}
