//! Schedules as the store keeps them (issue 34): a message that enters a conversation later —
//! once at an instant, every interval, or on a cron expression in a time zone — and the record
//! of each of its slots (the instants it was due at): fired (with the run it became), missed,
//! refused, or fired and failed. What a spec means and when it is next due is
//! `keel-schedules`'; here are only the records and the [`ScheduleStore`] that keeps them.
//!
//! Exactly once: a fire is a run queued with its [`SlotKey`] ([`crate::QueuedRun::slot`]); the
//! store records the slot `fired` in the transaction that queues the run, and a slot recorded
//! before (fired, missed or refused) queues nothing. Two daemons, a restart at the firing
//! instant or a clock step cannot fire one slot twice.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::AgentState;
use keel_core::store::StoreError;
use serde::{Deserialize, Serialize};

/// Declares a unit enum stored and shown by name (`as_str`, `parse`, serde in snake_case).
macro_rules! named {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $text:literal,)+ }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $($(#[$vdoc])* $variant,)+
        }

        impl $name {
            /// Its name, as stored and as the API writes it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The value named `name`.
            pub fn parse(name: &str) -> Option<Self> {
                match name {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

named! {
    /// Who made a schedule: the model (the `schedule` tool) may cancel only its own; the
    /// operator's word wins.
    Creator {
        /// The model, through the `schedule` tool of a run in the conversation.
        Model = "model",
        /// An operator, through `keel schedules` or the API.
        Operator = "operator",
    }
}

named! {
    /// What kind of time a schedule's [`Schedule::spec`] is.
    ScheduleKind {
        /// Once, at an RFC 3339 instant.
        Once = "once",
        /// Every interval (`90s`, `15m`, `2h`, `1d`).
        Every = "every",
        /// A 5-field cron expression, in [`Schedule::tz`].
        Cron = "cron",
    }
}

named! {
    /// What a schedule does with slots that passed while no daemon ran.
    CatchUp {
        /// Each is recorded missed; none runs.
        Skip = "skip",
        /// One run for all of them.
        Once = "once",
        /// One run each, in order, up to [`Schedule::catch_up_cap`]; the rest are missed.
        All = "all",
    }
}

named! {
    /// Whether a schedule fires.
    ScheduleState {
        /// It fires when due.
        Active = "active",
        /// It does not fire until resumed (an operator paused it, or too many fires failed).
        Paused = "paused",
        /// It has no slot left (a `once` that fired).
        Done = "done",
    }
}

named! {
    /// What became of one slot of a schedule.
    SlotOutcome {
        /// A run was queued for it.
        Fired = "fired",
        /// It passed without a run (the daemon was down; the catch-up policy left it out).
        Missed = "missed",
        /// It was refused before running (its owner was over budget); the reason says why.
        Refused = "refused",
        /// Its run ended badly; the reason says how.
        Failed = "failed",
    }
}

/// The catch-up policy of a schedule made without one: the missed slots' message arrives once,
/// late, rather than never (and the slots are listed).
pub const DEFAULT_CATCH_UP: CatchUp = CatchUp::Once;

/// The default [`Schedule::catch_up_cap`].
pub const DEFAULT_CATCH_UP_CAP: u32 = 10;

/// The default [`Schedule::max_failures`].
pub const DEFAULT_MAX_FAILURES: u32 = 3;

/// A schedule of a conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// Its id.
    pub id: String,
    /// The conversation it fires into.
    pub session_id: String,
    /// The user its runs are for (their budget applies); `None` for a conversation without one.
    pub owner: Option<String>,
    /// Who made it.
    pub created_by: Creator,
    /// What kind of time [`Schedule::spec`] is.
    pub kind: ScheduleKind,
    /// When: an RFC 3339 instant (`once`), an interval (`every`) or a cron expression (`cron`).
    pub spec: String,
    /// The IANA time zone of a cron expression and of the text's `{time}` and `{date}`.
    pub tz: Option<String>,
    /// The message each fire sends (a template with `{time}` and `{date}`).
    pub text: String,
    /// What it does with slots missed while no daemon ran.
    pub catch_up: CatchUp,
    /// Runs at most of one catch-up under [`CatchUp::All`].
    pub catch_up_cap: u32,
    /// Whether it fires.
    pub state: ScheduleState,
    /// Why it is paused, when it is.
    pub paused_reason: Option<String>,
    /// The next slot it is due at; `None` when it has none left.
    pub next_slot: Option<DateTime<Utc>>,
    /// Fires in a row whose runs ended badly.
    pub failures: u32,
    /// Failures in a row after which it pauses itself.
    pub max_failures: u32,
    /// When it was made.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

/// Which schedules to list, newest first (by creation, then id).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScheduleFilter {
    /// Only this conversation's.
    pub session_id: Option<String>,
    /// Only schedules of conversations this user owns (whoever made them: a schedule the model
    /// made at a group member's word is of that member, in the owner's conversation).
    pub owner: Option<String>,
    /// At most this many.
    pub limit: usize,
}

/// One slot of one schedule: the key a fire's run carries.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SlotKey {
    /// The schedule.
    pub schedule_id: String,
    /// The instant it was due at.
    pub slot: DateTime<Utc>,
}

/// What became of a slot, as recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlotRecord {
    /// The schedule.
    pub schedule_id: String,
    /// The instant it was due at.
    pub slot: DateTime<Utc>,
    /// What became of it.
    pub outcome: SlotOutcome,
    /// The run it became, when it fired.
    pub run_id: Option<String>,
    /// Why it was refused or failed (or a note on a miss).
    pub reason: Option<String>,
    /// When this was recorded.
    pub at: DateTime<Utc>,
}

/// A slot as listed: its record and, when it fired, its run's state now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlotEntry {
    /// The record.
    #[serde(flatten)]
    pub record: SlotRecord,
    /// The state of the run it became, when it fired.
    pub run_state: Option<AgentState>,
}

/// A fired slot whose run has ended and was not yet counted (see
/// [`ScheduleStore::unsettled_fires`]).
#[derive(Clone, Debug, PartialEq)]
pub struct EndedFire {
    /// The slot.
    pub key: SlotKey,
    /// The run it became.
    pub run_id: String,
    /// How the run ended.
    pub run_state: AgentState,
    /// The run's error or reason, when it has one.
    pub reason: Option<String>,
}

/// What [`ScheduleStore::settle_fire`] made of a schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct Settled {
    /// The schedule after the count.
    pub schedule: Schedule,
    /// True when this failure paused it (it had reached [`Schedule::max_failures`]).
    pub paused_now: bool,
}

/// Schedules and their slots. Part of [`crate::DaemonStore`].
#[async_trait]
pub trait ScheduleStore: Send + Sync {
    /// Stores a new schedule. An id already stored is a [`StoreError::Conflict`]; the
    /// conversation must exist ([`StoreError::NotFound`]).
    async fn create_schedule(&self, schedule: &Schedule) -> Result<(), StoreError>;

    /// The schedule with this id.
    async fn schedule(&self, id: &str) -> Result<Option<Schedule>, StoreError>;

    /// Schedules, newest first (by creation, then id), as `filter` says.
    async fn list_schedules(&self, filter: &ScheduleFilter) -> Result<Vec<Schedule>, StoreError>;

    /// Active schedules whose next slot is at or before `now`, the earliest due first.
    async fn due_schedules(&self, now: DateTime<Utc>) -> Result<Vec<Schedule>, StoreError>;

    /// Moves an active schedule's next slot from `expected` to `next`, at `at`, only if it is
    /// still `expected` (compare-and-set: of two daemons, one advances it). A `next` of `None`
    /// makes it [`ScheduleState::Done`]. False when it was not `expected` (or not active).
    async fn advance_schedule(
        &self,
        id: &str,
        expected: Option<DateTime<Utc>>,
        next: Option<DateTime<Utc>>,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    /// Sets a schedule's state, with the reason it is paused (cleared for any other state).
    /// Making it active again also forgets its failures in a row; `next_slot`, when given,
    /// replaces its next slot (a resumed schedule starts from now, not from where it stopped).
    /// False when there is no such schedule.
    async fn set_schedule_state(
        &self,
        id: &str,
        state: ScheduleState,
        reason: Option<&str>,
        next_slot: Option<DateTime<Utc>>,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    /// Deletes a schedule and its slots' records (a run it queued stays). False when there is
    /// no such schedule.
    async fn delete_schedule(&self, id: &str) -> Result<bool, StoreError>;

    /// Records what became of a slot, unless it was recorded before: the first word on a slot
    /// wins. False when it was recorded before. (A fire is recorded by
    /// [`crate::ConversationStore::enqueue_run`] with its run, not here.)
    async fn record_slot(&self, record: &SlotRecord) -> Result<bool, StoreError>;

    /// Up to `limit` of a schedule's slots, newest first, each fired one with its run's state.
    async fn slots(&self, schedule_id: &str, limit: usize) -> Result<Vec<SlotEntry>, StoreError>;

    /// Fired slots whose runs have ended (a terminal state) and were not yet counted by
    /// [`ScheduleStore::settle_fire`], the oldest slot first.
    async fn unsettled_fires(&self) -> Result<Vec<EndedFire>, StoreError>;

    /// Counts an ended fire, in one transaction, once: `failure` (its reason) records the slot
    /// `failed` and counts one more failure in a row, and at the schedule's `max_failures`
    /// pauses it with `"{n} fires in a row failed; the last: {reason}"`; `None` (a success)
    /// forgets the failures in a row. `None` when the fire was counted before (or its schedule
    /// is gone).
    async fn settle_fire(
        &self,
        key: &SlotKey,
        failure: Option<&str>,
        at: DateTime<Utc>,
    ) -> Result<Option<Settled>, StoreError>;
}

/// The reason a schedule paused itself after `failures` failed fires, the last for `reason`.
pub fn failures_reason(failures: u32, reason: &str) -> String {
    format!("{failures} fires in a row failed; the last: {reason}")
}
