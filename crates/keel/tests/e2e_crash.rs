//! End to end: crashes. A `keel run` is killed with SIGKILL — exactly at each safe boundary in
//! turn, then at random instants (its resumes too) — and `keel resume --force` brings it back.
//! Whatever the instant, a side effect that finished is never done twice, an interrupted one
//! halts the run for a human decision, no stored message is lost, and the run completes.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{Mock, keel, run, stderr, stdout, temp};
use serde_json::{Value, json};

/// The hook that freezes `keel` right after its Nth checkpoint.
const PAUSE: &str = "KEEL_TEST_PAUSE_AT_CHECKPOINT";
/// What the hook prints on stderr.
const PAUSED: &str = "keel: test hook: paused after checkpoint ";
/// How long a test waits for a line it expects before it fails (never reached when all is well).
const PATIENCE: Duration = Duration::from_secs(15);

/// The file the task appends to, and the line each `append_file` call appends.
const LOG: &str = "log.txt";
const APPENDS: [(&str, &str); 3] = [("a1", "alpha\n"), ("a2", "beta\n"), ("a3", "gamma\n")];

/// Six model steps: read, append, a parallel batch (append + read), append, read the log back,
/// answer. Each step takes `delay_ms` at the mock; the answer repeats forever when asked (a kill
/// during a model call may have consumed a step).
fn task_script(delay_ms: u64, forever: bool) -> String {
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
struct Scenario {
    mock: Mock,
    home: PathBuf,
    workspace: PathBuf,
    processes: usize,
    _guards: (tempfile::TempDir, tempfile::TempDir),
}

impl Scenario {
    fn new(script: &str) -> Scenario {
        let mock = Mock::start(script);
        let (home_guard, home) = temp();
        let (workspace_guard, workspace) = temp();
        std::fs::write(
            home.join("keel.toml"),
            format!(
                "{}\n[runs]\nstale_after_secs = 0.001\n",
                common::FAST_RETRIES
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
    fn command(&mut self, args: &[&str]) -> (Command, PathBuf) {
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

    fn run_command(&mut self) -> (Command, PathBuf) {
        let (mut command, events) = self.command(&["run"]);
        command.arg("append three lines to log.txt");
        (command, events)
    }

    fn resume_command(&mut self, run_id: &str, decision: Option<&str>) -> (Command, PathBuf) {
        let mut args = vec!["resume", "--force", run_id];
        if let Some(decision) = decision {
            args.extend(["--unsafe-call", decision]);
        }
        self.command(&args)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.workspace.join(LOG)).unwrap_or_default()
    }

    /// The one run of this home, with its state (`running`, `completed`,
    /// `waiting_on_human (resume_unsafe)`, …), if one was stored.
    fn the_run(&self) -> Option<(String, String)> {
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

    fn show(&self, run_id: &str) -> Shown {
        let output = run(keel(&self.home).args(["runs", "show", run_id]));
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        Shown::parse(&stdout(&output))
    }

    fn messages(&self, session: &str) -> Vec<Message> {
        let output = run(keel(&self.home).args(["sessions", "show", session]));
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        parse_transcript(&stdout(&output))
    }
}

/// What `keel runs show` says about a run.
struct Shown {
    text: String,
    /// The run's id and state, e.g. `waiting_on_human (resume_unsafe)`.
    id: String,
    state: String,
    session: String,
    checkpoints: Vec<String>,
    /// (call id, tool name, status) per envelope row.
    envelope: Vec<(String, String, Status)>,
    events: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Ok,
    Failed,
    Unfinished,
}

impl Shown {
    fn parse(text: &str) -> Shown {
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

    fn status_of(&self, call_id: &str) -> Option<Status> {
        self.envelope
            .iter()
            .find(|(id, _, _)| id == call_id)
            .map(|(_, _, status)| *status)
    }
}

/// One message of `keel sessions show`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Message {
    seq: u64,
    /// `user`, `assistant`, `tool result [a1]`, `assistant (internal: …)`, …
    label: String,
    /// Its content and tool-call lines.
    body: Vec<String>,
}

impl Message {
    fn internal(&self) -> bool {
        self.label.contains("(internal")
    }
}

fn parse_transcript(text: &str) -> Vec<Message> {
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
fn conversation(messages: &[Message]) -> Vec<(String, Vec<String>)> {
    messages
        .iter()
        .filter(|m| !m.internal())
        .map(|m| (m.label.clone(), m.body.clone()))
        .collect()
}

/// A `keel` process whose stderr arrives line by line on a channel.
struct Running {
    child: Child,
    lines: Receiver<String>,
    stderr: Vec<String>,
    stdout: Option<JoinHandle<String>>,
}

/// How a process ended.
struct Ended {
    code: Option<i32>,
    signal: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Ended {
    fn report(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "exit {:?}: stdout is not a JSON report ({e}): {}\nstderr: {}",
                self.code, self.stdout, self.stderr
            )
        })
    }
}

impl Running {
    fn spawn(command: &mut Command) -> Running {
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
    fn wait_for(
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
    fn wait_until_live(&mut self, events: &Path) -> bool {
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
    fn kill(mut self) -> Option<Ended> {
        let _ = self.child.kill();
        let ended = self.finish();
        (ended.signal != Some(9)).then_some(ended)
    }

    fn finish(mut self) -> Ended {
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

fn is_hook(line: &str) -> bool {
    line.starts_with(PAUSED)
}

/// Runs `command` with the pause hook at checkpoint `at`: kills it there and returns `None`,
/// or returns how it ended when it ended first.
fn run_and_kill_at(command: &mut Command, at: u32) -> Option<Ended> {
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

#[test]
fn a_run_killed_at_any_boundary_resumes_to_the_same_end() {
    let script = task_script(0, false);

    // The reference: the same task, never interrupted.
    let mut reference = Scenario::new(&script);
    let (mut command, _) = reference.run_command();
    let output = run(&mut command);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["state"], "completed");
    let final_text = report["final_text"].clone();
    let (run_id, _) = reference.the_run().unwrap();
    let shown = reference.show(&run_id);
    let boundaries = shown.checkpoints.clone();
    assert_eq!(boundaries.first().map(String::as_str), Some("input"));
    assert_eq!(boundaries.last().map(String::as_str), Some("final"));
    assert!(boundaries.len() >= 12, "{boundaries:?}");
    let log = reference.log();
    assert_eq!(log, "alpha\nbeta\ngamma\n");
    let transcript = conversation(&reference.messages(&shown.session));
    assert_eq!(transcript.len(), 13, "{transcript:#?}");
    drop(reference);

    for (n, boundary) in (1..).zip(&boundaries) {
        let context = format!("killed after checkpoint {n} ({boundary})");
        let mut scenario = Scenario::new(&script);
        let (mut command, _) = scenario.run_command();
        if let Some(ended) = run_and_kill_at(&mut command, n) {
            panic!("{context}: the run ended first: {}", ended.stderr);
        }
        let (run_id, state) = scenario.the_run().expect("the run is stored");

        if boundary == "final" {
            // Killed after its last commit: the run is over and there is nothing to resume.
            assert_eq!(state, "completed", "{context}");
            let (mut command, _) = scenario.resume_command(&run_id, None);
            let refused = run(&mut command);
            assert_eq!(refused.status.code(), Some(2), "{context}");
            assert!(
                stderr(&refused).contains("nothing to resume"),
                "{context}: {}",
                stderr(&refused)
            );
        } else {
            assert!(state == "running" || state == "timed_out", "{context}");
            // The first resume is killed too, two boundaries further on (when it gets there);
            // the next one goes to the end.
            let mut pause = Some(n + 2);
            let mut resumes = 0;
            let ended = loop {
                resumes += 1;
                assert!(resumes <= 3, "{context}: too many resumes");
                let (_, state) = scenario.the_run().unwrap();
                if state == "completed" {
                    break None;
                }
                assert!(
                    state == "running" || state == "timed_out",
                    "{context}: resume #{resumes}"
                );
                let (mut command, _) = scenario.resume_command(&run_id, None);
                match pause.take() {
                    Some(at) => match run_and_kill_at(&mut command, at) {
                        Some(ended) => break Some(ended),
                        None => continue,
                    },
                    None => break Some(Running::spawn(&mut command).finish()),
                }
            };
            if let Some(ended) = ended {
                assert_eq!(ended.code, Some(0), "{context}: {}", ended.stderr);
                let report = ended.report();
                assert_eq!(report["state"], "completed", "{context}");
                assert_eq!(report["final_text"], final_text, "{context}");
            }
            let shown = scenario.show(&run_id);
            assert!(
                shown.events.iter().any(|e| e == "agent_run.resumed"),
                "{context}: no agent_run.resumed in\n{}",
                shown.text
            );
        }

        let (_, state) = scenario.the_run().unwrap();
        assert_eq!(state, "completed", "{context}");
        assert_eq!(scenario.log(), log, "{context}: every append exactly once");
        let shown = scenario.show(&run_id);
        assert!(
            shown
                .envelope
                .iter()
                .all(|(_, _, status)| *status == Status::Ok),
            "{context}:\n{}",
            shown.text
        );
        assert_eq!(
            conversation(&scenario.messages(&shown.session)),
            transcript,
            "{context}: the stored transcript"
        );
        // The mock saw exactly one request per step: none lost, none repeated.
        assert_eq!(scenario.mock.requests().len(), 6, "{context}");
    }
}

/// xorshift64*: a fixed seed gives the same sequence of instants on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform-ish in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// When to kill a process.
#[derive(Clone, Copy, Debug)]
enum Kill {
    /// This long after it reached its first boundary.
    AfterLive(Duration),
    /// This long after it started (often before it stored anything).
    AfterSpawn(Duration),
    /// The moment it says it starts its Nth `append_file` call: mid side effect.
    AtAppend(u32),
    /// Never: let it end.
    Never,
}

impl Kill {
    fn draw(rng: &mut Rng, attempt: u32) -> Kill {
        if attempt > 8 {
            return Kill::Never;
        }
        match rng.below(10) {
            0 => Kill::AfterSpawn(Duration::from_millis(rng.below(500))),
            1..=3 => Kill::AtAppend(1 + rng.below(2) as u32),
            _ => Kill::AfterLive(Duration::from_millis(rng.below(41))),
        }
    }
}

/// Tallies over the whole test, printed at the end.
#[derive(Debug, Default)]
struct Tally {
    processes: u32,
    kills: u32,
    runs_restarted: u32,
    unsafe_halts: u32,
    skips: u32,
    retries: u32,
}

/// The invariants after any process of an iteration ended, killed or not.
fn check_invariants(
    scenario: &Scenario,
    run_id: &str,
    retried: &HashMap<String, u32>,
    seen: &mut Vec<Message>,
    context: &str,
) -> Shown {
    let shown = scenario.show(run_id);
    let log = scenario.log();
    let lines: Vec<&str> = log.split_inclusive('\n').collect();
    for line in &lines {
        assert!(
            APPENDS.iter().any(|(_, l)| l == line),
            "{context}: a stray or torn line {line:?} in {log:?}"
        );
    }
    for (call, line) in APPENDS {
        let count = lines.iter().filter(|l| **l == line).count() as u32;
        let allowed = 1 + retried.get(call).copied().unwrap_or(0);
        assert!(
            count <= allowed,
            "{context}: {line:?} appended {count} times ({} retry decisions for {call}): \
             {log:?}\n{}",
            allowed - 1,
            shown.text
        );
        if shown.status_of(call) == Some(Status::Ok) {
            assert!(
                count >= 1,
                "{context}: {call} completed but {line:?} is not in {log:?}\n{}",
                shown.text
            );
        }
    }
    // A run whose worker died must be resumable from where it stopped: its latest checkpoint is
    // one the reconciler offers for resume, unless the run is over or waits for a human.
    let state = &shown.state;
    if !state.starts_with("completed") && !state.starts_with("waiting_on_human") {
        let last = shown.checkpoints.last().map(String::as_str);
        assert!(
            matches!(
                last,
                Some("input" | "llm_response" | "tool_result" | "compaction" | "journal_update")
            ),
            "{context}: the run is {state} but its latest checkpoint is {last:?}: it could not \
             be resumed\n{}",
            shown.text
        );
    }
    let messages = scenario.messages(&shown.session);
    assert!(
        messages.len() >= seen.len() && messages[..seen.len()] == seen[..],
        "{context}: stored messages were lost or changed\nbefore: {seen:#?}\nnow: {messages:#?}"
    );
    *seen = messages;
    shown
}

/// One task, killed at random instants until it completes.
fn crash_until_done(rng: &mut Rng, iteration: u32, tally: &mut Tally) {
    let decision = if iteration.is_multiple_of(2) {
        "skip"
    } else {
        "retry"
    };
    let mut scenario = Scenario::new(&task_script(4, true));
    let mut retried: HashMap<String, u32> = HashMap::new();
    let mut seen: Vec<Message> = Vec::new();
    let mut last_decision: Option<&str> = None;
    let mut report = None;
    // The run as `keel runs show` last showed it (none before the first process stored it).
    let mut current: Option<Shown> = None;
    for attempt in 1.. {
        let context = format!("iteration {iteration} ({decision}), process {attempt}");
        assert!(attempt <= 40, "{context}: the run never completed");
        let (mut command, events) = match current.as_ref().map(|s| (&s.id, s.state.as_str())) {
            None => {
                // Killed before its first boundary: nothing was stored, start again.
                if attempt > 1 {
                    tally.runs_restarted += 1;
                }
                scenario.run_command()
            }
            Some((_, "completed")) => break,
            Some((run_id, "waiting_on_human (resume_unsafe)")) => {
                let shown = current.as_ref().unwrap();
                let unfinished: Vec<String> = shown
                    .envelope
                    .iter()
                    .filter(|(_, _, status)| *status == Status::Unfinished)
                    .map(|(id, _, _)| id.clone())
                    .collect();
                if last_decision != Some("skip") {
                    // Until a skip is recorded, the call shows as started and never completed.
                    assert!(
                        !unfinished.is_empty(),
                        "{context}: halted, yet no call shows STARTED, NOT COMPLETED:\n{}",
                        shown.text
                    );
                }
                for call in &unfinished {
                    assert!(
                        APPENDS.iter().any(|(id, _)| id == call),
                        "{context}: only appends are unsafe, not {call}"
                    );
                    if decision == "retry" {
                        *retried.entry(call.clone()).or_default() += 1;
                    }
                }
                match decision {
                    "skip" => tally.skips += 1,
                    _ => tally.retries += 1,
                }
                last_decision = Some(decision);
                let run_id = run_id.clone();
                scenario.resume_command(&run_id, Some(decision))
            }
            Some((run_id, state)) => {
                assert!(
                    ["running", "waiting_for_tool", "timed_out"].contains(&state),
                    "{context}: the run is {state}"
                );
                last_decision = None;
                let run_id = run_id.clone();
                scenario.resume_command(&run_id, None)
            }
        };
        tally.processes += 1;
        let mut process = Running::spawn(&mut command);
        let kill = Kill::draw(rng, attempt);
        let go = match kill {
            Kill::Never => false,
            Kill::AfterSpawn(wait) => process
                .wait_for(|_| false, Some(Instant::now() + wait))
                .is_none(),
            Kill::AfterLive(wait) => {
                process.wait_until_live(&events)
                    && process
                        .wait_for(|_| false, Some(Instant::now() + wait))
                        .is_none()
            }
            Kill::AtAppend(nth) => {
                let mut found = 0;
                process
                    .wait_for(
                        |line| {
                            found += u32::from(line.starts_with("→ append_file"));
                            found == nth
                        },
                        None,
                    )
                    .is_some()
            }
        };
        let ended = if go {
            let ended = process.kill();
            tally.kills += u32::from(ended.is_none());
            ended
        } else {
            Some(process.finish())
        };
        if let Some(ended) = &ended {
            match ended.code {
                Some(0) => {
                    let r = ended.report();
                    assert_eq!(r["state"], "completed", "{context}");
                    report = Some(r);
                }
                Some(3) => {
                    let r = ended.report();
                    assert_eq!(r["state"], "waiting_on_human", "{context}: {r}");
                    assert_eq!(r["reason"], "resume_unsafe", "{context}: {r}");
                    tally.unsafe_halts += 1;
                }
                code => panic!("{context}: exit {code:?}: {}", ended.stderr),
            }
        }
        let run_id = match current.take() {
            Some(shown) => Some(shown.id),
            None => scenario.the_run().map(|(id, _)| id),
        };
        current = run_id.map(|id| check_invariants(&scenario, &id, &retried, &mut seen, &context));
    }
    let shown = current.expect("the run is stored");
    assert!(
        shown.checkpoints.last().is_some_and(|b| b == "final"),
        "iteration {iteration}:\n{}",
        shown.text
    );
    if let Some(report) = report {
        assert!(report["final_text"].is_string(), "{report}");
    }
}

#[test]
fn a_run_killed_at_random_instants_never_repeats_a_finished_side_effect() {
    let started = Instant::now();
    let mut rng = Rng(0x5eed_cafe_f00d_d00d);
    let mut tally = Tally::default();
    for iteration in 0..20 {
        crash_until_done(&mut rng, iteration, &mut tally);
    }
    eprintln!("{tally:?} in {:?}", started.elapsed());
}
