//! Pluggable context strategies (seed 004's `ContextEngine`): what a run does when its context
//! crosses the threshold of the model's window.
//!
//! The kernel keeps the transcript, the token counts, the recovery ladder (R1 compact, R2 deep
//! prune, R3 ask the human, at most `max_recoveries` per turn), the memory flush before
//! messages leave the context, and every guarantee about what is sent (a tool call never
//! without its results, pinned messages kept). A [`ContextStrategy`] only decides: shown a
//! [`ContextView`] of the run, it answers with a [`Decision`] (summarize the live context up to
//! here, drop it up to here, ask the human, or nothing), and the kernel carries it out.
//!
//! Decisions are pure: a strategy does no I/O, and the same view gets the same decision, so a
//! run stays a state machine that checkpoints and resumes anywhere. What a strategy wants to
//! remember between decisions is its [state](ContextView::state), a JSON value the run keeps in
//! its checkpointed state. Everything a decision changes (where the live context starts, the
//! summary, the pinned messages kept) is the run's own state, which any strategy can go on from.
//!
//! Two strategies are built in, chosen by [`ContextSettings::strategy`]: [`Compaction`]
//! (`compact`, the default) and [`SlidingWindow`] (`sliding_window`). A library user registers
//! their own with `AgentBuilder::context_strategy`; it is carried in
//! [`ContextSettings::custom`], and a run's checkpoint names it (the frame's settings hold its
//! [name](ContextStrategy::name)). A resumed run gets its strategy back from the agent that
//! resumes it when that agent registered one of the same name. When it did not, the run goes on
//! with the built-in one `strategy` names (a fallback, never a refusal: a run must not be
//! stranded by how it is resumed); its checkpoints still name the registered one and keep its
//! state untouched, so a later resume by an agent that has it goes on with it again.

use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::context::{self, ContextSettings, Strategy};
use crate::message::{Message, Role};

/// Where the kernel's recovery ladder stands when a strategy is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rung {
    /// R1: no recovery within `recovery_gap` iterations.
    Compact,
    /// R2: an R1 fired within `recovery_gap` iterations: a deep prune is due. A summary decided
    /// now is marked "deep pruned".
    DeepPrune,
    /// R3: an R2 fired within `recovery_gap` iterations: the ladder says ask the human.
    AskHuman,
}

/// What a strategy wants done with a context over its threshold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing: the run goes on as it is (with the context notice when close to full).
    Nothing,
    /// Replace the live context before message `until` with one summary by the summary model
    /// (a cheap model when one is set). The kernel moves `until` back rather than split a tool
    /// call from its results, keeps pinned exchanges verbatim, and makes the call, with its
    /// retries and fallbacks; at [`Rung::Compact`] it is an R1, else an R2. With nothing to
    /// summarize, the kernel asks the human (R3).
    Summarize {
        /// The index (into [`ContextView::messages`]) of the first message kept verbatim.
        until: usize,
    },
    /// Drop the live context before message `until`, with no model call. The kernel drops whole
    /// exchanges (see [`next_start`]), never the last message, and keeps pinned exchanges.
    Drop {
        /// The index of the first message kept.
        until: usize,
    },
    /// R3: the model must ask the human (or the run ends where no human can answer).
    AskHuman,
}

/// A strategy's answer: the [`Action`], and its state afterwards.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// What to do.
    pub action: Action,
    /// The strategy's new state, kept with the run once the action is carried out; `None`
    /// leaves it as it was.
    pub state: Option<Value>,
}

impl Decision {
    /// Do nothing.
    pub fn nothing() -> Self {
        Self::of(Action::Nothing)
    }

    /// Summarize the live context before `until`.
    pub fn summarize(until: usize) -> Self {
        Self::of(Action::Summarize { until })
    }

    /// Drop the live context before `until`.
    pub fn drop_until(until: usize) -> Self {
        Self::of(Action::Drop { until })
    }

    /// Ask the human (R3).
    pub fn ask_human() -> Self {
        Self::of(Action::AskHuman)
    }

    /// The same decision, leaving the strategy with `state`.
    pub fn with_state(mut self, state: Value) -> Self {
        self.state = Some(state);
        self
    }

    fn of(action: Action) -> Self {
        Decision {
            action,
            state: None,
        }
    }
}

/// How a run keeps its context under the threshold of the model's window. Implement it to
/// plug in your own and register it with `AgentBuilder::context_strategy`.
///
/// [`decide`](Self::decide) must be pure: no I/O, no clock, no randomness, only the view. The
/// kernel may ask again for the same situation (a memory flush turn can come between a
/// decision and its execution; then the decision is dropped and asked anew), and a resumed run
/// asks again from its checkpoint.
pub trait ContextStrategy: Send + Sync {
    /// The name checkpoints record, and `compaction.run` events carry. Unique among the
    /// strategies a program registers; `compact` and `sliding_window` are the built-ins'.
    fn name(&self) -> &str;

    /// True when the first user message (the task) is sent whatever was dropped before it.
    fn keeps_first_user(&self) -> bool {
        false
    }

    /// What to do now that the context estimate is over [`ContextView::threshold`] (and the
    /// ladder has recoveries left this turn).
    fn decide(&self, view: &ContextView<'_>) -> Decision;
}

/// The run as a strategy sees it: its transcript, what is sent of it, and the numbers the
/// decision rests on. Indices are into [`messages`](Self::messages).
pub struct ContextView<'a> {
    pub(crate) messages: &'a [Arc<Message>],
    pub(crate) counts: &'a [u32],
    pub(crate) start: usize,
    pub(crate) summary: Option<usize>,
    pub(crate) kept: &'a [usize],
    pub(crate) rung: Rung,
    pub(crate) window: u32,
    pub(crate) threshold: u64,
    pub(crate) settings: &'a ContextSettings,
    pub(crate) state: &'a Value,
    pub(crate) tokens_from: &'a dyn Fn(usize) -> u64,
}

impl ContextView<'_> {
    /// The whole transcript: the session's loaded history and this turn. Nothing is ever
    /// removed from it; a decision changes what part of it is sent.
    pub fn messages(&self) -> &[Arc<Message>] {
        self.messages
    }

    /// The token count of each message as a request carries it.
    pub fn counts(&self) -> &[u32] {
        self.counts
    }

    /// Where the live context (sent verbatim) starts.
    pub fn start(&self) -> usize {
        self.start
    }

    /// The latest compaction summary, sent first, when there is one.
    pub fn summary(&self) -> Option<usize> {
        self.summary
    }

    /// The pinned messages before [`start`](Self::start) that are sent all the same, in order.
    pub fn kept(&self) -> &[usize] {
        self.kept
    }

    /// Where the recovery ladder stands.
    pub fn rung(&self) -> Rung {
        self.rung
    }

    /// The window of the model the next call goes to, in tokens.
    pub fn window(&self) -> u32 {
        self.window
    }

    /// The estimate above which the strategy is asked (`compact_threshold` of the window).
    pub fn threshold(&self) -> u64 {
        self.threshold
    }

    /// The estimate of the next request, in tokens.
    pub fn tokens(&self) -> u64 {
        (self.tokens_from)(self.start)
    }

    /// The estimate of the next request were the live context dropped before `until` (as
    /// [`Action::Drop`] would).
    pub fn tokens_from(&self, until: usize) -> u64 {
        (self.tokens_from)(until)
    }

    /// The run's context settings (`keep_last`, `deep_keep`, ...).
    pub fn settings(&self) -> &ContextSettings {
        self.settings
    }

    /// The strategy's own state, as its last decision left it (`null` at first).
    pub fn state(&self) -> &Value {
        self.state
    }

    /// Where the live context starts after dropping the exchange at `index`: see [`next_start`].
    pub fn next_start(&self, index: usize) -> usize {
        next_start(self.messages, index)
    }
}

/// Where a context starting at `index` starts once the message there is dropped: after it and
/// the tool results that follow it, never past the last message.
pub fn next_start<M: Borrow<Message>>(messages: &[M], index: usize) -> usize {
    let last = messages.len().saturating_sub(1);
    let mut start = index + 1;
    while start < last && messages[start].borrow().role == Role::Tool {
        start += 1;
    }
    start
}

/// The built-in default: everything but the last `keep_last` messages (`deep_keep` at R2) is
/// summarized by one model call, with the latest successful result of each tool pinned into
/// the summary; at R3 the human is asked.
#[derive(Clone, Copy, Debug, Default)]
pub struct Compaction;

impl ContextStrategy for Compaction {
    fn name(&self) -> &str {
        "compact"
    }

    fn decide(&self, view: &ContextView<'_>) -> Decision {
        let keep = match view.rung() {
            Rung::AskHuman => return Decision::ask_human(),
            Rung::Compact => view.settings().keep_last,
            Rung::DeepPrune => view.settings().deep_keep,
        };
        Decision::summarize(context::cut_point(view.messages(), view.start(), keep))
    }
}

/// The built-in sliding window: the oldest exchanges are dropped, with no model call, until
/// the context fits; the first user message is always sent. It never climbs to R3.
#[derive(Clone, Copy, Debug, Default)]
pub struct SlidingWindow;

impl ContextStrategy for SlidingWindow {
    fn name(&self) -> &str {
        "sliding_window"
    }

    fn keeps_first_user(&self) -> bool {
        true
    }

    fn decide(&self, view: &ContextView<'_>) -> Decision {
        let last = view.messages().len().saturating_sub(1);
        let mut start = view.start();
        while view.tokens_from(start) > view.threshold() && start < last {
            start = view.next_start(start);
        }
        Decision::drop_until(start)
    }
}

/// A registered strategy as run settings carry it: its name, and the strategy itself while a
/// process has it. It is written as its name alone; read back, it is that name with no
/// strategy until an agent that registered one of that name resumes the run.
#[derive(Clone)]
pub struct CustomStrategy {
    name: String,
    strategy: Option<Arc<dyn ContextStrategy>>,
}

impl CustomStrategy {
    /// `strategy`, under its name.
    pub fn new(strategy: Arc<dyn ContextStrategy>) -> Self {
        CustomStrategy {
            name: strategy.name().to_string(),
            strategy: Some(strategy),
        }
    }

    /// The strategy's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The strategy, when this process has it.
    pub fn strategy(&self) -> Option<&Arc<dyn ContextStrategy>> {
        self.strategy.as_ref()
    }
}

impl fmt::Debug for CustomStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CustomStrategy")
            .field("name", &self.name)
            .field("attached", &self.strategy.is_some())
            .finish()
    }
}

/// Two are equal when they have the same name: what a checkpoint tells apart.
impl PartialEq for CustomStrategy {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Serialize for CustomStrategy {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.name)
    }
}

impl<'de> Deserialize<'de> for CustomStrategy {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(CustomStrategy {
            name: String::deserialize(deserializer)?,
            strategy: None,
        })
    }
}

impl ContextSettings {
    /// The strategy that decides: the registered one when this process has it, else the
    /// built-in `strategy` names.
    pub fn context_strategy(&self) -> &dyn ContextStrategy {
        if let Some(strategy) = self.custom.as_ref().and_then(CustomStrategy::strategy) {
            return strategy.as_ref();
        }
        match self.strategy {
            Strategy::Compact => &Compaction,
            Strategy::SlidingWindow => &SlidingWindow,
        }
    }

    /// Gives a restored run's settings the registered strategy of `from` (the resuming agent's
    /// settings) when these name one of the same name and do not have it yet.
    pub fn reattach(&mut self, from: &ContextSettings) {
        if let Some(mine) = self.custom.as_mut()
            && mine.strategy.is_none()
            && let Some(theirs) = from.custom.as_ref()
            && theirs.name == mine.name
        {
            mine.strategy = theirs.strategy.clone();
        }
    }
}

#[cfg(test)]
#[path = "context_strategy_tests.rs"]
mod tests;
