//! What the run page shows, read from the store the way the API reads it: the run (only when
//! the viewer's key may see it, else 404), its conversation, its transcript, its stored events,
//! the journal's handoff, what it waits on (a pending call, a question), its delegates and its
//! files.

use keel_core::files::FileRecord;
use keel_core::{AgentState, ErrorReason, Event, Journal, PendingApproval, RunRecord};
use keel_extensions::delegation::{ChildRun, child_runs};
use keel_server::AppState;
use keel_server::engine::stored_report;

use super::transcript::{self, Entry};
use crate::ConsoleError;
use crate::Viewer;

/// Everything the run page shows of one run.
pub struct RunPageData {
    /// The run.
    pub run: RunRecord,
    /// Its place in its lane's queue, while queued.
    pub position: Option<usize>,
    /// Its transcript.
    pub transcript: Vec<Entry>,
    /// Its stored events, with their seq.
    pub events: Vec<(u64, Event)>,
    /// The conversation's journal, when the model wrote notes in it.
    pub journal: Option<Journal>,
    /// What the run waits on, when it waits for a person.
    pub waiting: Waiting,
    /// Its delegates (sub-agents), each with its own.
    pub children: Vec<ChildRun>,
    /// The files its tools produced or its message brought.
    pub files: Vec<FileRecord>,
    /// It is being driven here again (answered, approved or resumed a moment ago) although
    /// the store still has it waiting or ended: its newest events are live ones.
    pub moving: bool,
}

/// What a run waiting on a person waits for.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Waiting {
    /// Nothing: it is not waiting on a person.
    #[default]
    Nothing,
    /// A decision about a tool call.
    Approval(PendingApproval),
    /// An answer to a question, free or among choices (`clarify`).
    Question {
        /// The question.
        question: String,
        /// Its choices, in order; empty for a free answer.
        choices: Vec<String>,
    },
    /// A decision to resume it, halted for `reason` (`resume_unsafe`, `prompt_drift`).
    Halted(ErrorReason),
}

impl RunPageData {
    /// Whether the run can be stopped: it has not ended and is not waiting on a person.
    pub fn stoppable(&self) -> bool {
        matches!(
            self.shown_state(),
            AgentState::Queued | AgentState::Running | AgentState::WaitingForTool
        ) && self.run.cancel_requested_at.is_none()
    }

    /// Whether the run gets the failure panel: it ended without an answer (not cancelled by
    /// a person), or halted for a decision to resume it.
    pub fn failed(&self) -> bool {
        matches!(
            self.shown_state(),
            AgentState::Error
                | AgentState::TimedOut
                | AgentState::MaxSteps
                | AgentState::BudgetExceeded
        ) || matches!(self.waiting, Waiting::Halted(_))
    }

    /// Whether the engine would resume it now: halted for a decision, or left by a dead
    /// worker after a resumable checkpoint.
    pub fn resumable(&self) -> bool {
        matches!(self.waiting, Waiting::Halted(_))
            || (self.shown_state() == AgentState::TimedOut && self.run.resume_available)
    }

    /// Whether the page follows the run's live events: it may still change by itself.
    pub fn live(&self) -> bool {
        self.moving
            || !(self.run.state.is_terminal() || self.run.state == AgentState::WaitingOnHuman)
    }

    /// The state the page shows: `running` for a run driven again whose store still has it
    /// waiting or ended.
    pub fn shown_state(&self) -> AgentState {
        if self.moving {
            AgentState::Running
        } else {
            self.run.state
        }
    }

    /// The seq of the last stored event shown (the live stream goes on after it).
    pub fn last_seq(&self) -> u64 {
        self.events.last().map_or(0, |(seq, _)| *seq)
    }
}

/// The run page's data for run `id`, as `viewer` may see it; 404 when they may not.
pub async fn load(
    state: &AppState,
    viewer: &Viewer,
    id: &str,
) -> Result<RunPageData, ConsoleError> {
    let (run, conversation) = viewer.caller.run(state, id).await?;
    let store = state.store.as_ref();
    // The events first, then the run as it is after them: the page never shows a run older
    // than its events, so the live stream (from the last event shown) brings all the rest.
    let events = store.events_after(&run.id, 0).await?;
    let run = store.run(&run.id).await?.unwrap_or(run);
    let messages = store.messages(&conversation.id).await?;
    let transcript = transcript::of_run(&messages, &run.id);
    let journal = store
        .journal(&conversation.id)
        .await?
        .filter(Journal::has_notes);
    let moving = moving(state, &run, events.last().map_or(0, |(seq, _)| *seq));
    let waiting = if run.state == AgentState::WaitingOnHuman && !moving {
        waiting_of(state, &run).await?
    } else {
        Waiting::Nothing
    };
    let children = child_runs(store, &run).await?;
    let files = store.run_files(&run.id).await?;
    Ok(RunPageData {
        position: state.engine.position(&run.id),
        run,
        transcript,
        events,
        journal,
        waiting,
        children,
        files,
        moving,
    })
}

/// Whether `run`, waiting or ended in the store with its events stored up to `stored_seq`, is
/// being driven here again: the hub holds a newer durable event of it than the store.
pub fn moving(state: &AppState, run: &RunRecord, stored_seq: u64) -> bool {
    let waiting_or_ended = run.state == AgentState::WaitingOnHuman || run.state.is_terminal();
    // A durable event the store does not have yet: live-only ones (status changes, deltas)
    // come after the last stored event of a run that stopped, and mean nothing here.
    waiting_or_ended
        && state
            .hub
            .last_id(&run.id)
            .is_some_and(|last| last.seq > stored_seq)
}

/// What a run waiting on a person waits for, from its report as the API gives it.
async fn waiting_of(state: &AppState, run: &RunRecord) -> Result<Waiting, ConsoleError> {
    if let Some(reason @ (ErrorReason::ResumeUnsafe | ErrorReason::PromptDrift)) = run.reason {
        return Ok(Waiting::Halted(reason));
    }
    let Some(report) = stored_report(state.store.as_ref(), &run.id).await? else {
        return Ok(Waiting::Nothing);
    };
    Ok(match (report.approval, report.question) {
        (Some(approval), _) => Waiting::Approval(approval),
        (None, Some(question)) => Waiting::Question {
            question,
            choices: report.choices,
        },
        (None, None) => Waiting::Nothing,
    })
}
