//! What `keel run` and `keel chat` show: assistant text streams to stdout as it arrives; tool
//! activity goes to stderr, as a spinner on a terminal and as plain lines otherwise.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use keel_core::{Event, EventKind, EventSink, StreamDelta};

use crate::terminal_text::terminal_safe;

/// Prints a run for a human.
pub struct TerminalOutput {
    print_text: bool,
    spinner_allowed: bool,
    /// Show the model's reasoning on stderr (`--show-reasoning`), dimmed on a terminal.
    show_reasoning: bool,
    /// stderr is a terminal: reasoning is dimmed rather than only marked.
    stderr_terminal: bool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    spinner: Option<ProgressBar>,
    stdout_mid_line: bool,
    streamed_text: bool,
    /// Text of the model call in flight reached stdout: if that call fails, it is withdrawn.
    attempt_text: bool,
    /// Streamed reasoning of the model call in flight is being written to stderr.
    reasoning_open: bool,
    /// The model call in flight streamed its reasoning (so its whole text is not shown again).
    reasoning_streamed: bool,
}

/// Marks the model's reasoning on stderr, so it is never mistaken for the answer.
pub const REASONING_MARK: &str = "[reasoning] ";

/// Printed on stdout after the text of a model call that failed (a retry or fallback follows,
/// or the run ends): that text was cut off and is not the answer.
pub const WITHDRAWN: &str =
    "[keel: the text above is from a model call that failed; it is not the answer]";

impl TerminalOutput {
    /// `print_text`: write assistant text to stdout (off for `--json`).
    pub fn new(print_text: bool) -> Self {
        let stderr_terminal = std::io::stderr().is_terminal();
        TerminalOutput {
            print_text,
            spinner_allowed: stderr_terminal,
            show_reasoning: false,
            stderr_terminal,
            state: Mutex::new(State::default()),
        }
    }

    /// Also show the model's reasoning, on stderr: marked `[reasoning]`, and dimmed on a
    /// terminal; streamed as it arrives, or whole when the answer came whole.
    pub fn with_reasoning(mut self, show: bool) -> Self {
        self.show_reasoning = show;
        self
    }

    /// Writes a piece of reasoning to stderr, opening the block (its mark) when it is the first.
    fn write_reasoning(&self, state: &mut State, text: &str) {
        if text.is_empty() {
            return;
        }
        Self::stop_spinner(state);
        if state.stdout_mid_line {
            println!();
            state.stdout_mid_line = false;
        }
        let text = terminal_safe(text);
        let mut err = std::io::stderr().lock();
        if !state.reasoning_open {
            let _ = err.write_all(REASONING_MARK.as_bytes());
        }
        let _ = if self.stderr_terminal {
            write!(err, "\x1b[2m{text}\x1b[0m")
        } else {
            err.write_all(text.as_bytes())
        };
        let _ = err.flush();
        state.reasoning_open = true;
    }

    /// Ends the reasoning block on stderr, if one is open.
    fn close_reasoning(state: &mut State) {
        if std::mem::take(&mut state.reasoning_open) {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(b"\n");
            let _ = err.flush();
        }
    }

    /// Ends the run's output: stops the spinner, finishes the current stdout line, and resets
    /// for the next run. Returns true when answer text was streamed during the run.
    pub fn finish(&self) -> bool {
        let Ok(mut state) = self.state.lock() else {
            return false;
        };
        if let Some(spinner) = state.spinner.take() {
            spinner.finish_and_clear();
        }
        Self::close_reasoning(&mut state);
        if state.stdout_mid_line {
            println!();
        }
        let streamed = state.streamed_text;
        *state = State::default();
        streamed
    }

    fn write_text(&self, state: &mut State, text: &str) {
        if !self.print_text || text.is_empty() {
            return;
        }
        let text = terminal_safe(text);
        let write = || {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        };
        match &state.spinner {
            Some(spinner) => spinner.suspend(write),
            None => write(),
        }
        state.stdout_mid_line = !text.ends_with('\n');
        state.streamed_text = true;
        state.attempt_text = true;
    }

    /// Marks the text the failed call streamed as not the answer, on its own line of stdout.
    fn withdraw_attempt_text(&self, state: &mut State) {
        if !std::mem::take(&mut state.attempt_text) {
            return;
        }
        let write = || {
            let mut out = std::io::stdout().lock();
            let newline = if state.stdout_mid_line { "\n" } else { "" };
            let _ = writeln!(out, "{newline}{WITHDRAWN}");
            let _ = out.flush();
        };
        match &state.spinner {
            Some(spinner) => spinner.suspend(write),
            None => write(),
        }
        state.stdout_mid_line = false;
    }

    fn activity(&self, state: &mut State, line: String) {
        Self::close_reasoning(state);
        let line = terminal_safe(&line).into_owned();
        if state.stdout_mid_line {
            println!();
            state.stdout_mid_line = false;
        }
        match &state.spinner {
            Some(spinner) => spinner.println(line),
            None => eprintln!("{line}"),
        }
    }

    fn spin(&self, state: &mut State, message: String) {
        if !self.spinner_allowed {
            return;
        }
        let spinner = state.spinner.get_or_insert_with(|| {
            let bar = ProgressBar::new_spinner();
            if let Ok(style) = ProgressStyle::with_template("{spinner} {msg}") {
                bar.set_style(style);
            }
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        });
        spinner.set_message(terminal_safe(&message).into_owned());
    }

    fn stop_spinner(state: &mut State) {
        if let Some(spinner) = state.spinner.take() {
            spinner.finish_and_clear();
        }
    }
}

impl EventSink for TerminalOutput {
    fn emit(&self, event: &Event) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        match &event.kind {
            EventKind::ModelRequest { .. } => {
                state.attempt_text = false;
                state.reasoning_streamed = false;
                self.spin(&mut state, "thinking…".into());
            }
            EventKind::ModelResponse { .. } => {
                Self::close_reasoning(&mut state);
                state.attempt_text = false;
            }
            EventKind::ModelError { .. }
            | EventKind::RunCancelled { .. }
            | EventKind::RunFailed { .. } => {
                Self::close_reasoning(&mut state);
                self.withdraw_attempt_text(&mut state);
                Self::stop_spinner(&mut state);
            }
            EventKind::StreamDelta {
                delta: StreamDelta::Reasoning { text },
            } if self.show_reasoning => {
                state.reasoning_streamed = true;
                self.write_reasoning(&mut state, text);
            }
            EventKind::ModelReasoning(reasoning)
                if self.show_reasoning && !state.reasoning_streamed =>
            {
                self.write_reasoning(&mut state, &reasoning.text);
                Self::close_reasoning(&mut state);
            }
            EventKind::StreamDelta {
                delta: StreamDelta::Text { text },
            } => {
                Self::close_reasoning(&mut state);
                Self::stop_spinner(&mut state);
                self.write_text(&mut state, text);
            }
            EventKind::StreamDelta {
                delta: StreamDelta::ToolCallStarted { .. } | StreamDelta::Finished { .. },
            } => Self::close_reasoning(&mut state),
            EventKind::StreamDelta {
                delta: StreamDelta::Warning { message },
            } => self.activity(&mut state, format!("warning: {message}")),
            EventKind::ToolStarted {
                name, arguments, ..
            } => {
                let line = format!("→ {name} {}", one_line(arguments, 120));
                if self.spinner_allowed {
                    self.spin(&mut state, line);
                } else {
                    self.activity(&mut state, line);
                }
            }
            EventKind::ToolCompleted {
                name,
                ok,
                output,
                duration_ms,
                ..
            } => {
                let line = if *ok {
                    format!("✓ {name} ({duration_ms} ms)")
                } else {
                    format!("✗ {name} ({duration_ms} ms): {}", one_line(output, 160))
                };
                self.activity(&mut state, line);
            }
            EventKind::ProviderRetry {
                model,
                attempt,
                wait_ms,
                kind,
                ..
            } => self.activity(
                &mut state,
                format!(
                    "↻ {model} failed ({kind}); retry {attempt} in {:.1} s",
                    *wait_ms as f64 / 1000.0
                ),
            ),
            EventKind::ProviderFallback { from, to, kind, .. } => self.activity(
                &mut state,
                format!("↪ {from} failed ({kind}); falling back to {to}"),
            ),
            EventKind::ToolRetry {
                name,
                attempt,
                wait_ms,
                error,
                ..
            } => self.activity(
                &mut state,
                format!(
                    "↻ {name} failed ({}); retry {attempt} in {:.1} s",
                    one_line(error, 100),
                    *wait_ms as f64 / 1000.0
                ),
            ),
            EventKind::ToolHook {
                stage,
                tool,
                outcome,
                reason,
                ..
            } => {
                let why = one_line(reason.as_deref().unwrap_or(""), 100);
                let stage = stage.as_str();
                match outcome {
                    keel_core::HookOutcome::Deny => {
                        self.activity(&mut state, format!("⛔ {stage} hook denied {tool}: {why}"))
                    }
                    keel_core::HookOutcome::Error => self.activity(
                        &mut state,
                        format!("⚠ {stage} hook failed on {tool}: {why}"),
                    ),
                    keel_core::HookOutcome::Rewrite => self.activity(
                        &mut state,
                        format!("✎ {stage} hook rewrote {tool}'s arguments"),
                    ),
                    _ => {}
                }
            }
            EventKind::GuardrailEscalated { action, .. } => {
                self.activity(&mut state, format!("⚠ loop guard: {action}"))
            }
            EventKind::BudgetNear { tokens, cost, .. } => self.activity(
                &mut state,
                format!("⚠ close to the budget ({tokens} tokens, ${cost:.4} so far)"),
            ),
            EventKind::SoftLimit { .. } => self.activity(
                &mut state,
                "⚠ soft time limit reached: asking for a summary".to_string(),
            ),
            EventKind::MaxTokensRecovery { attempt, limit } => self.activity(
                &mut state,
                format!("… answer cut at max_tokens; continuing ({attempt} of {limit})"),
            ),
            EventKind::CompactionRun {
                strategy,
                before_tokens,
                after_tokens,
                before_messages,
                after_messages,
                summary_failed,
                ..
            } => self.activity(
                &mut state,
                format!(
                    "⟳ context {}: {before_tokens} → {after_tokens} tokens ({before_messages} → \
                     {after_messages} messages){}",
                    if strategy == "sliding_window" {
                        "trimmed"
                    } else {
                        "compacted"
                    },
                    if *summary_failed {
                        "; the summary model failed, truncated instead"
                    } else {
                        ""
                    }
                ),
            ),
            EventKind::RecoveryFired { tier, reason, .. } => {
                self.activity(&mut state, format!("⚠ context recovery {tier} ({reason})"))
            }
            EventKind::RunCompleted { .. } => Self::stop_spinner(&mut state),
            _ => {}
        }
    }
}

/// `text` on one line, cut to `max` characters.
pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    match flat.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}

/// Appends every event to a file as one JSON line `{ts, event, run_id, ...}`. A file that
/// cannot be opened is an error before the run starts (see `keel run`); one that fails later
/// (a full disk) is said once on stderr, and the run goes on.
pub struct JsonLinesSink {
    path: std::path::PathBuf,
    file: Mutex<std::io::LineWriter<std::fs::File>>,
    /// The first write failure, once it happened.
    failure: Mutex<Option<String>>,
}

impl JsonLinesSink {
    /// Opens `path` for appending (created if missing).
    pub fn open(path: &std::path::Path) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(JsonLinesSink {
            path: path.to_path_buf(),
            file: Mutex::new(std::io::LineWriter::new(file)),
            failure: Mutex::new(None),
        })
    }

    /// Why writing the file failed, when it did.
    #[cfg(test)]
    fn failure(&self) -> Option<String> {
        self.failure.lock().ok().and_then(|f| f.clone())
    }

    /// Notes a write failure; the first one is said on stderr.
    fn failed(&self, error: &std::io::Error) {
        let Ok(mut failure) = self.failure.lock() else {
            return;
        };
        if failure.is_none() {
            let message = format!(
                "cannot write events file {}: {error}; its events are incomplete",
                self.path.display()
            );
            eprintln!("keel: warning: {message}");
            *failure = Some(message);
        }
    }
}

impl EventSink for JsonLinesSink {
    fn emit(&self, event: &Event) {
        let Ok(line) = serde_json::to_string(event) else {
            return;
        };
        let written = match self.file.lock() {
            Ok(mut file) => writeln!(file, "{line}"),
            Err(_) => return,
        };
        if let Err(error) = written {
            self.failed(&error);
        }
    }
}

/// A test hook for crash tests: with `KEEL_TEST_PAUSE_AT_CHECKPOINT=N` set, the process freezes
/// right after its Nth checkpoint of a run is committed, says so on stderr, and waits to be
/// killed — so a test can kill keel at an exact boundary.
pub struct PauseAtCheckpoint {
    at: u32,
}

impl PauseAtCheckpoint {
    /// The hook, when the variable asks for it. Debug builds only (those the tests run): a
    /// release build never reads the variable.
    pub fn from_env() -> Option<Self> {
        if !cfg!(debug_assertions) {
            return None;
        }
        let at = std::env::var("KEEL_TEST_PAUSE_AT_CHECKPOINT").ok()?;
        Some(PauseAtCheckpoint {
            at: at.trim().parse().ok()?,
        })
    }
}

impl EventSink for PauseAtCheckpoint {
    fn emit(&self, event: &Event) {
        if let EventKind::Checkpoint { seq, boundary } = &event.kind
            && *seq == self.at
        {
            eprintln!(
                "keel: test hook: paused after checkpoint {seq} ({})",
                boundary.as_str()
            );
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started() -> Event {
        Event {
            ts: chrono::Utc::now(),
            run_id: "r".into(),
            session_id: "s".into(),
            kind: EventKind::RunStarted {
                provider: "mock".into(),
                model: "m".into(),
                context: Default::default(),
            },
        }
    }

    #[test]
    fn events_are_appended_as_json_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let sink = JsonLinesSink::open(&path).unwrap();
        sink.emit(&started());
        sink.emit(&started());
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(sink.failure().is_none());
    }

    #[test]
    fn a_file_that_fails_to_take_a_write_is_noted_once() {
        let full = std::path::Path::new("/dev/full");
        if !full.exists() {
            return; // Only Linux has a device that fails every write.
        }
        let sink = JsonLinesSink::open(full).unwrap();
        sink.emit(&started());
        sink.emit(&started());
        let failure = sink.failure().expect("the write failure is kept");
        assert!(
            failure.starts_with("cannot write events file /dev/full: "),
            "{failure}"
        );
    }
}
