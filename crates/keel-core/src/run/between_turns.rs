//! Compaction between turns (seed 004's gateway compression): a conversation whose stored
//! context already stands high after a run is compacted before the next message arrives, so
//! that message is answered without a summary call first.
//!
//! It is the run's own compaction, not a copy: a [`Run::between_turns`] holds the session's
//! stored history as the next run would load it (its system prompt, tools and window), and
//! [`Run::compact_between_turns`] climbs the same first rung of the ladder, asks the same
//! context strategy, and makes the same summary call ([`Step::Summarize`], fed back with
//! [`Run::on_summary`], retried and handed to the fallbacks as a run's is). The summary it
//! appends is the one a run would append: an internal message naming the seqs it stands in for,
//! the latest result of each tool pinned into it. Then the run finishes: no message of a person,
//! no model answer.
//!
//! What differs is what nobody is there for:
//! - no memory flush turn: that turn is a model call with tools, which is a person's run's work;
//!   the summary keeps what the flush would have saved from the model's view;
//! - no R3: nobody is asked; a strategy that wants the human gets nothing done now, and the
//!   next run climbs the ladder itself;
//! - a strategy that drops messages with no model call (the sliding window) changes nothing
//!   stored, so nothing is done now: the next run drops them as fast itself.

use chrono::{DateTime, Utc};

use super::{Run, Step};
use crate::run_settings::RunSettings;
use crate::store::StoredMessage;
use crate::tool::ToolSpec;

impl Run {
    /// A run of session `session_id` between turns: its stored `history` (what
    /// [`crate::Store::context_messages`] returns), the settings and tools its next run would
    /// have, and no new message. Its only work is [`Run::compact_between_turns`].
    pub fn between_turns(
        id: impl Into<String>,
        session_id: impl Into<String>,
        settings: RunSettings,
        tools: Vec<ToolSpec>,
        history: Vec<StoredMessage>,
        started_at: DateTime<Utc>,
    ) -> Run {
        let mut run = Run::loaded(id, session_id, settings, tools, history, started_at);
        run.between_turns = true;
        run
    }

    /// The estimate of the next request, as a fraction of the model's window: the system
    /// prompt, the tools, the summary and the verbatim history (a between-turns run's has no
    /// new message).
    pub fn context_share(&self) -> f64 {
        self.context_tokens() as f64 / f64::from(self.window().max(1))
    }

    /// Starts the compaction of a [`Run::between_turns`] when its context stands above `above`
    /// of the window: [`Step::Summarize`] (feed its result to [`Run::on_summary`], which
    /// answers [`Step::Finish`] once the summary is in, or the call again to retry it), or
    /// [`Step::Finish`] when there is nothing to do now. The summary is then among
    /// [`Run::unpersisted`], and the drained events say what it did
    /// ([`crate::EventKind::CompactionRun`]).
    pub fn compact_between_turns(&mut self, above: f64) -> Step {
        if !self.between_turns || self.pending_summary.is_some() {
            return Step::Finish;
        }
        let window = self.window();
        let limit = (f64::from(window) * above) as u64;
        if self.fixed_tokens >= window || self.context_tokens() <= limit {
            return Step::Finish;
        }
        // A between-turns run has made no call: the ladder stands at its first rung.
        if let Some(step @ Step::Summarize(_)) = self.recover() {
            return self.remember(step);
        }
        // A drop, nothing or a refusal: the live context stays as stored.
        self.events.clear();
        Step::Finish
    }
}
