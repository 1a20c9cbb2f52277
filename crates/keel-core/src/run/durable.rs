//! What makes a run durable: the step it owes the driver and the boundary it last passed, its
//! checkpoint, and coming back from one — in another process, after a crash, after a human
//! answered, or refusing to guess when a side effect may be half done.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{Run, Step, ToolCallReport, ToolResult};
use crate::checkpoint::{Boundary, Checkpoint};
use crate::event::EventKind;
use crate::journal::Journal;
use crate::message::{Role, ToolCall};
use crate::run_settings::RunSettings;
use crate::state::{AgentState, ErrorReason};
use crate::store::StoredMessage;
use crate::tool::ToolSpec;

/// The step a run owes its driver: what a checkpoint resumes with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NextStep {
    /// Call the model.
    CallModel,
    /// Run the pending tool calls.
    RunTools,
    /// Ask for a compaction summary.
    Summarize,
    /// Wait for the human's answer.
    AskHuman,
    /// Wait for a person's approval of a pending tool call.
    AwaitApproval,
    /// Nothing: the run is over.
    Finish,
}

/// What a run keeps apart from its per-boundary state: it rarely changes (see
/// [`Checkpoint::frame`]).
#[derive(Serialize)]
struct FrameRef<'a> {
    settings: &'a RunSettings,
    tools: &'a [ToolSpec],
}

/// [`FrameRef`] read back. Checkpoints written before frames existed held these fields in
/// their state, so a frame is read from the state when there is none.
#[derive(Deserialize)]
struct Frame {
    settings: RunSettings,
    tools: Vec<ToolSpec>,
}

/// The frame of a run as JSON. The runs of one agent share their frame, so the last one written
/// is kept and handed out again while the settings and tools are the same.
fn frame_json(
    settings: &RunSettings,
    tools: &Arc<[ToolSpec]>,
) -> Result<String, serde_json::Error> {
    type Last = Option<(RunSettings, Arc<[ToolSpec]>, String)>;
    static LAST: Mutex<Last> = Mutex::new(None);
    if let Ok(last) = LAST.lock()
        && let Some((last_settings, last_tools, json)) = last.as_ref()
        && last_settings == settings
        && (Arc::ptr_eq(last_tools, tools) || last_tools[..] == tools[..])
    {
        return Ok(json.clone());
    }
    let json = serde_json::to_string(&FrameRef { settings, tools })?;
    if let Ok(mut last) = LAST.lock() {
        *last = Some((settings.clone(), tools.clone(), json.clone()));
    }
    Ok(json)
}

/// `tools` as a shared list: the runs of one agent build equal lists, so a run whose list
/// equals the last one built takes that one. Runs then hold one copy of their tool specs
/// between them, not one each, and a provider that keeps a list's JSON by its address (the
/// HTTP adapters) writes it once for all of them.
pub(super) fn shared_tools(tools: Vec<ToolSpec>) -> Arc<[ToolSpec]> {
    static LAST: Mutex<Option<Arc<[ToolSpec]>>> = Mutex::new(None);
    let last = LAST.lock().ok().and_then(|last| last.clone());
    if let Some(last) = last
        && last[..] == tools[..]
    {
        return last;
    }
    let tools: Arc<[ToolSpec]> = tools.into();
    if let Ok(mut last) = LAST.lock() {
        *last = Some(tools.clone());
    }
    tools
}

/// The tools a run holds between decoding its state and reading its frame.
pub(super) fn no_tools() -> Arc<[ToolSpec]> {
    Arc::new([])
}

/// The boundary of a state read without one: the checkpoint's column sets it (see
/// [`Run::restore`]).
pub(super) fn no_boundary() -> Boundary {
    Boundary::Input
}

/// The settings a run holds between decoding its state and reading its frame.
pub(super) fn unset_settings() -> RunSettings {
    RunSettings::new("", "")
}

/// Why a checkpoint could not be turned back into a run.
#[derive(Debug, thiserror::Error)]
#[error("cannot restore run `{run_id}` from checkpoint {seq}: {message}")]
pub struct RestoreError {
    /// The run.
    pub run_id: String,
    /// The checkpoint.
    pub seq: u32,
    /// What is wrong.
    pub message: String,
}

/// A stable hash of a system prompt (FNV-1a, 64 bits, hex): the same text gives the same hash
/// in every build, so a checkpoint can be checked by another process.
pub fn prompt_hash(prompt: Option<&str>) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in prompt.unwrap_or("").bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

impl Run {
    /// Records the step the run owes and finishes the boundary's label.
    pub(super) fn remember(&mut self, step: Step) -> Step {
        self.next = match &step {
            Step::CallModel(_) => NextStep::CallModel,
            Step::RunTools(_) => NextStep::RunTools,
            Step::Summarize(_) => NextStep::Summarize,
            Step::AskHuman(_) => NextStep::AskHuman,
            Step::AwaitApproval(_) => NextStep::AwaitApproval,
            Step::Finish => NextStep::Finish,
        };
        if self.state.is_terminal() {
            self.boundary = Boundary::Final;
        } else if self.journal_changed
            && matches!(self.boundary, Boundary::LlmResponse | Boundary::ToolResult)
        {
            self.boundary = Boundary::JournalUpdate;
        }
        step
    }

    /// The run with the session's journal, before it starts.
    pub fn with_journal(mut self, journal: Journal) -> Self {
        self.journal = journal;
        self.refresh_notes();
        self
    }

    /// The run whose journal changed before it started (an extension kept something in it):
    /// stored with the run's first commit.
    pub fn with_journal_changed(mut self) -> Self {
        self.journal_changed = true;
        self
    }

    /// The hash resume checks the configured prompt against, when the run's own prompt adds
    /// per-run parts to it (a persona's prompt, skills, facts), before it starts.
    pub fn with_prompt_hash(mut self, hash: String) -> Self {
        self.prompt_hash = hash;
        self
    }

    /// The run for `user_id`, before it starts.
    pub fn with_user(mut self, user_id: Option<String>) -> Self {
        self.user_id = user_id;
        self
    }

    /// The run with the events it emits as it starts, after the tools it offers (what was
    /// recalled for its message).
    pub fn with_opening_events(mut self, events: Vec<crate::event::EventKind>) -> Self {
        self.opening = events;
        self
    }

    /// The user the run is for.
    pub fn user_id(&self) -> Option<&str> {
        self.user_id.as_deref()
    }

    /// The session's run journal as the run sees it.
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// The journal, when this step changed it (then clears the mark).
    pub fn take_journal_change(&mut self) -> Option<Journal> {
        std::mem::take(&mut self.journal_changed).then(|| self.journal.clone())
    }

    /// The boundary the run last passed.
    pub fn boundary(&self) -> Boundary {
        self.boundary
    }

    /// The step the run owes.
    pub fn next_step(&self) -> NextStep {
        self.next
    }

    /// The hash of the system prompt the run started with.
    pub fn prompt_hash(&self) -> &str {
        &self.prompt_hash
    }

    /// The question waiting for the human, when the run is waiting for one.
    pub fn question(&self) -> Option<&str> {
        self.question
            .as_ref()
            .map(|(_, question)| question.as_str())
    }

    /// The choices the waiting question offers (`clarify`); empty for a free answer.
    pub fn question_choices(&self) -> &[String] {
        &self.question_choices
    }

    /// The tool calls of the batch in flight.
    pub fn pending_calls(&self) -> &[ToolCall] {
        &self.pending
    }

    /// The checkpoint of the boundary the run just passed: its state without its messages,
    /// covering every message so far (the driver stores the unpersisted ones with it), and its
    /// frame when the store does not have it yet.
    pub fn checkpoint(
        &mut self,
        seq: u32,
        now: DateTime<Utc>,
    ) -> Result<Checkpoint, serde_json::Error> {
        let frame = if self.frame_stored {
            None
        } else {
            self.frame_stored = true;
            Some(frame_json(&self.settings, &self.tools)?)
        };
        Ok(Checkpoint {
            run_id: self.id.clone(),
            seq,
            boundary: self.boundary,
            iteration: self.iteration,
            message_cursor: self.first_seq,
            // The boundary's own messages are written in the same transaction.
            persisted: self.seq_of(self.messages.len()).saturating_sub(1),
            prompt_hash: self.prompt_hash.clone(),
            // Nothing reads it back (a restore takes the calls from the state and the
            // envelope); listing every call so far made each checkpoint grow with the run.
            completed_calls: Vec::new(),
            state: self.state_json()?,
            frame,
            created_at: now,
        })
    }

    /// The run's state as JSON, written into a buffer the size of the last one: a state grows
    /// little from one boundary to the next, so it is written without growing the buffer step
    /// by step.
    fn state_json(&mut self) -> Result<String, serde_json::Error> {
        let mut buffer = Vec::with_capacity(self.state_len + self.state_len / 8 + 64);
        serde_json::to_writer(&mut buffer, &*self)?;
        self.state_len = buffer.len();
        String::from_utf8(buffer).map_err(serde::ser::Error::custom)
    }

    /// Rebuilds a run from its checkpoint and the stored messages from the checkpoint's
    /// cursor on (`Store::messages_since`).
    pub fn restore(
        checkpoint: &Checkpoint,
        stored: Vec<StoredMessage>,
    ) -> Result<Run, RestoreError> {
        let fail = |message: String| RestoreError {
            run_id: checkpoint.run_id.clone(),
            seq: checkpoint.seq,
            message,
        };
        let mut run: Run = serde_json::from_str(&checkpoint.state)
            .map_err(|e| fail(format!("the state does not decode: {e}")))?;
        // What the checkpoint's own columns hold is not repeated in its state.
        run.id.clone_from(&checkpoint.run_id);
        run.first_seq = checkpoint.message_cursor;
        run.iteration = checkpoint.iteration;
        run.boundary = checkpoint.boundary;
        run.prompt_hash.clone_from(&checkpoint.prompt_hash);
        let frame: Frame =
            serde_json::from_str(checkpoint.frame.as_deref().unwrap_or(&checkpoint.state))
                .map_err(|e| {
                    fail(format!(
                        "the frame (settings and tools) does not decode: {e}"
                    ))
                })?;
        run.guard.set_config(frame.settings.guard.clone());
        run.settings = frame.settings;
        run.tools = shared_tools(frame.tools);
        run.frame_stored = true;
        let stored: Vec<StoredMessage> = stored
            .into_iter()
            .filter(|m| m.seq >= checkpoint.message_cursor && m.seq <= checkpoint.persisted)
            .collect();
        let expected =
            checkpoint.persisted + 1 - checkpoint.message_cursor.min(checkpoint.persisted + 1);
        if stored.len() as u64 != expected {
            return Err(fail(format!(
                "the store holds {} of the {expected} messages it needs (seqs {}..={})",
                stored.len(),
                checkpoint.message_cursor,
                checkpoint.persisted
            )));
        }
        run.seqs = stored.iter().map(|m| m.seq).collect();
        run.next_seq = checkpoint.persisted + 1;
        let mut own_results = Vec::new();
        let mut own_input = None;
        for stored in stored {
            let mut message = stored.message;
            let own = stored.run_id.as_deref() == Some(run.id.as_str());
            if own && message.role == Role::User && !message.is_internal() {
                own_input = Some(run.messages.len());
            }
            if message.role == Role::Tool && stored.run_id.as_deref() == Some(run.id.as_str()) {
                own_results.push(run.messages.len());
            }
            let count = run.count_sent(&mut message);
            run.messages.push(Arc::new(message));
            run.counts.push(count);
        }
        run.persisted = run.messages.len();
        if run.turn.input.is_none() {
            // A state written before the turn context kept where the run's message is: the
            // message a person wrote in this run (its only one; the last, should there be more).
            run.turn.input = own_input;
        }
        run.events = Vec::new();
        run.rebuild_calls(&own_results);
        Ok(run)
    }

    /// Rebuilds the run's call reports and its loop guard's memory of results from its own
    /// tool results (at `results`, in order) and the calls they answer: what checkpoints leave
    /// out so that they do not grow with the run. A checkpoint from before that listed each
    /// call's success, which wins over the result's mark (older results have none).
    fn rebuild_calls(&mut self, results: &[usize]) {
        let listed: HashMap<String, bool> = std::mem::take(&mut self.tool_calls)
            .into_iter()
            .map(|report| (report.id, report.ok))
            .collect();
        // The calls made before each result, by id (the latest of an id wins), gathered in one
        // pass: a history of many results that answer nothing costs no search of it per result.
        let mut calls: HashMap<&str, &ToolCall> = HashMap::new();
        let mut seen = 0;
        let mut reports = Vec::with_capacity(results.len());
        for &at in results {
            for message in &self.messages[seen..at] {
                calls.extend(message.tool_calls.iter().map(|c| (c.id.as_str(), c)));
            }
            seen = seen.max(at);
            let result = &self.messages[at];
            let Some(id) = result.tool_call_id.as_deref() else {
                continue;
            };
            let call = calls.get(id);
            let ok = listed.get(id).copied().unwrap_or(!result.meta.failed);
            self.guard.learns(ok, &result.content);
            reports.push(ToolCallReport {
                id: id.to_string(),
                name: call.map(|c| c.name.clone()).unwrap_or_default(),
                arguments: call.map_or(serde_json::Value::Null, |c| {
                    ToolCallReport::arguments_of(&c.arguments)
                }),
                ok,
                output: result.content.clone(),
            });
        }
        self.tool_calls = reports;
    }

    /// The step a restored run owes, rebuilt from its state.
    pub fn resume(&mut self) -> Step {
        let step = match self.next {
            NextStep::CallModel => Step::CallModel(self.model_call(Duration::ZERO)),
            NextStep::RunTools => self.pending_tools(),
            NextStep::Summarize => match &self.pending_summary {
                Some(pending) => Step::Summarize(pending.call.clone()),
                None => self.next_model_call(),
            },
            NextStep::AskHuman => match self.question() {
                Some(question) => Step::AskHuman(crate::human::Question {
                    text: question.to_string(),
                    choices: self.question_choices.clone(),
                }),
                None => self.finish_batch(),
            },
            NextStep::AwaitApproval => match self.approval.clone() {
                Some(pending) => Step::AwaitApproval(pending),
                None => self.pending_tools(),
            },
            NextStep::Finish => Step::Finish,
        };
        if !self.state.is_terminal() && self.state != AgentState::WaitingOnHuman {
            self.state = match step {
                Step::RunTools(_) => AgentState::WaitingForTool,
                _ => AgentState::Running,
            };
        }
        self.remember(step)
    }

    /// The pending calls the loop did not answer itself, to run.
    pub(super) fn pending_tools(&self) -> Step {
        let answered = |call: &ToolCall| {
            self.answered_by_loop.iter().any(|r| r.call_id == call.id)
                || self.question.as_ref().is_some_and(|(id, _)| *id == call.id)
        };
        Step::RunTools(
            self.pending
                .iter()
                .filter(|c| !answered(c))
                .cloned()
                .collect(),
        )
    }

    /// Feeds back the human's answer to the pending `ask_human` or `clarify` call and returns
    /// the next step. With choices, a choice's number or text picks it (see
    /// [`crate::human::resolve`]; check the answer with it first to refuse a bad one).
    pub fn on_human_answer(&mut self, answer: impl Into<String>) -> Step {
        let answer = answer.into();
        let Some((call_id, _)) = self.question.take() else {
            return self.resume();
        };
        let choices = std::mem::take(&mut self.question_choices);
        let answer =
            crate::human::resolve(&answer, &choices).unwrap_or(crate::human::Answer::Own(answer));
        self.events.push(EventKind::HumanAnswered {
            answer: answer.text().to_string(),
        });
        self.answered_by_loop.push(ToolResult {
            call_id,
            ok: true,
            content: answer.for_model(),
        });
        self.state = AgentState::Running;
        self.reason = None;
        self.error = None;
        self.boundary = Boundary::ToolResult;
        let step = self.finish_batch();
        self.remember(step)
    }

    /// Halts a resumed run before `call`, a side-effecting call that started and may have done
    /// its work before the worker died: running it again could do it twice. The run waits for
    /// a human to decide (`keel resume RUN_ID --unsafe-call retry|skip`).
    pub fn halt_resume_unsafe(&mut self, call: &ToolCall) -> Step {
        self.state = AgentState::WaitingOnHuman;
        self.reason = Some(ErrorReason::ResumeUnsafe);
        self.boundary = Boundary::HumanPause;
        self.error = Some(format!(
            "resuming would run `{}` (call {}) again, and it may already have done its work \
             before the worker died; it is not safe to run twice. Check its effect, then resume \
             with --unsafe-call retry or --unsafe-call skip",
            call.name, call.id
        ));
        self.events.push(EventKind::ResumeUnsafe {
            call_id: call.id.clone(),
            tool: call.name.clone(),
        });
        // The batch is still owed: a decided resume runs it.
        self.next = NextStep::RunTools;
        Step::Finish
    }

    /// Halts a resumed run whose system prompt changed since it started.
    pub fn halt_prompt_drift(&mut self) -> Step {
        self.state = AgentState::WaitingOnHuman;
        self.reason = Some(ErrorReason::PromptDrift);
        self.boundary = Boundary::HumanPause;
        self.error = Some(
            "the system prompt changed since this run started; resume with \
             --accept-prompt-change to go on under the new one"
                .into(),
        );
        Step::Finish
    }

    /// Clears a halt (drift or unsafe call) so the run can be resumed. The human's decision is
    /// the run's new input: the resumed run's first checkpoint is an `input` one, so a worker
    /// that dies right after it leaves a run the reconciler offers for resume. `new_prompt`,
    /// when the human accepted a changed configuration: the prompt to send from now on, and
    /// the hash of the configured prompt later resumes are checked against.
    pub fn clear_halt(&mut self, new_prompt: Option<(String, String)>) {
        if self.boundary == Boundary::HumanPause {
            self.boundary = Boundary::Input;
        }
        if let Some((prompt, hash)) = new_prompt {
            self.prompt_hash = hash;
            self.settings.system_prompt = Some(prompt);
            self.frame_stored = false;
        }
        self.reason = None;
        self.error = None;
        self.state = AgentState::Running;
    }

    /// Records that a run is resuming from `boundary` with `replayed` calls answered from the
    /// envelope.
    pub fn note_resumed(&mut self, boundary: Boundary, replayed: usize) {
        self.events.push(EventKind::Resumed { boundary, replayed });
    }
}

/// The (id, name, ok) list of tool calls that checkpoints written before 2026-11-27 held.
pub(super) mod compact_calls {
    use serde::{Deserialize, Deserializer};

    use crate::run::ToolCallReport;

    #[derive(Deserialize)]
    struct Compact {
        id: String,
        name: String,
        ok: bool,
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ToolCallReport>, D::Error> {
        Ok(Vec::<Compact>::deserialize(d)?
            .into_iter()
            .map(|c| ToolCallReport {
                id: c.id,
                name: c.name,
                arguments: serde_json::Value::Null,
                ok: c.ok,
                output: String::new(),
            })
            .collect())
    }
}

#[cfg(test)]
#[path = "durable_tests.rs"]
mod tests;
