//! The `Store` trait: what a run keeps durable — sessions, messages and runs, checkpoints and
//! the tool-call envelope, events, journals, approvals, heartbeats and cancel requests, session
//! lanes, users and their monthly usage, and the files runs produce. keel-store implements it
//! on SQLite and in memory. The daemon's own records (platform links, keys, personas,
//! conversations and their queue, the token log report, known facts and search) are
//! keel-platform's store traits.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::checkpoint::{Checkpoint, ToolCallRecord};
use crate::event::Event;
use crate::files::FileRecord;
use crate::journal::Journal;
use crate::lane::{LaneClaim, LaneOutcome};
use crate::message::Message;
pub use crate::message::StoredMessage;
use crate::provider::Usage;
use crate::state::{AgentState, ErrorReason};
use crate::token_log::TokenCharge;
use crate::worker::Worker;

/// A store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be opened, read or written.
    #[error("store: {0}")]
    Backend(String),
    /// Stored data could not be decoded.
    #[error("store: corrupt record: {0}")]
    Corrupt(String),
    /// A record that must exist does not.
    #[error("store: {0} not found")]
    NotFound(String),
    /// The write would break a uniqueness rule; the message says which. Nothing was written.
    #[error("store: {0}")]
    Conflict(String),
    /// The run's boundary was already written by another worker: this worker lost the run
    /// (it was resumed elsewhere while this one was stalled) and must stop writing.
    #[error(
        "store: run {run_id} was taken over by another worker (its checkpoint {seq} is already \
         stored); this worker stops without writing more"
    )]
    Superseded {
        /// The run.
        run_id: String,
        /// The checkpoint both workers wrote.
        seq: u32,
    },
    /// The run no longer holds its session's lane (see [`crate::lane`]): another run took the
    /// session over (this run's worker went silent, or it was paused and asked to stop), so
    /// this one must stop writing.
    #[error(
        "store: run {run_id} lost session {session_id} to run {holder}, which holds it now; \
         this worker stops without writing more"
    )]
    LaneLost {
        /// The run that tried to write.
        run_id: String,
        /// Its session.
        session_id: String,
        /// The run holding the session's lane now.
        holder: String,
    },
}

/// A conversation as listed by the store.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// Session id.
    pub id: String,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When a message was last added.
    pub updated_at: DateTime<Utc>,
    /// The first user message, shortened, as a title.
    pub title: Option<String>,
    /// How many messages it holds.
    pub message_count: u64,
    /// The user it belongs to, when it was made for one (by the daemon's API).
    #[serde(default)]
    pub owner: Option<String>,
    /// What a message that arrives while it runs does.
    #[serde(default)]
    pub lane_policy: crate::lane::LanePolicy,
    /// Its place on a platform, for a conversation an incoming platform message made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub place: Option<crate::place::PlatformPlace>,
    /// False when it came from an untrusted source (an email, an event) or is a sub-agent of
    /// one: its side-effecting tool calls need approval.
    #[serde(default = "trusted")]
    pub trusted: bool,
}

fn trusted() -> bool {
    true
}

/// A run as stored: what it is doing or how it ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Run id.
    pub id: String,
    /// The conversation it belongs to.
    pub session_id: String,
    /// Current or terminal state.
    pub state: AgentState,
    /// Why it ended in `error`.
    pub reason: Option<ErrorReason>,
    /// Provider name.
    pub provider: String,
    /// Model asked for.
    pub model: String,
    /// Model that last answered.
    pub model_used: Option<String>,
    /// Model calls made.
    pub iterations: u32,
    /// Tokens used.
    pub usage: Usage,
    /// The final answer, when there is one.
    pub final_text: Option<String>,
    /// What went wrong, when something did.
    pub error: Option<String>,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// When it reached a terminal state.
    pub finished_at: Option<DateTime<Utc>>,
    /// Dollars spent, at the price table's prices.
    #[serde(default)]
    pub cost: f64,
    /// When its worker last showed it was alive; a stale heartbeat means the worker died.
    #[serde(default)]
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// When someone asked it to stop. Owned by [`Store::request_cancel`]: committing a run
    /// never changes it.
    #[serde(default)]
    pub cancel_requested_at: Option<DateTime<Utc>>,
    /// Set by the reconciler on a run whose worker died after a resumable checkpoint.
    #[serde(default)]
    pub resume_available: bool,
    /// How it was launched, in its launcher's words (see [`RunSettings::launch`]).
    ///
    /// [`RunSettings::launch`]: crate::run_settings::RunSettings::launch
    #[serde(default)]
    pub launch: Option<String>,
    /// The process that last drove it: when that process is gone, it can be resumed at once.
    #[serde(default)]
    pub worker: Option<Worker>,
}

/// Everything one safe boundary writes, in one transaction: the run record, the run's new
/// messages, its checkpoint, envelope rows, events, the session's journal, and the token log
/// rows of its model calls (added to their users' months).
#[derive(Clone, Copy, Debug)]
pub struct Commit<'a> {
    /// The run record (inserted or replaced, except `cancel_requested_at`).
    pub run: &'a RunRecord,
    /// Messages to append to the run's session.
    pub messages: &'a [Message],
    /// The checkpoint of this boundary.
    pub checkpoint: Option<&'a Checkpoint>,
    /// Tool-call envelope rows, inserted or replaced by (run id, call id).
    pub tool_calls: &'a [ToolCallRecord],
    /// Events to keep with the run.
    pub events: &'a [Event],
    /// The session's journal, replaced when given.
    pub journal: Option<&'a Journal>,
    /// Model calls since the last commit: token log rows, each added to its user's month.
    pub charges: &'a [TokenCharge],
}

impl<'a> Commit<'a> {
    /// A commit of a run record and its new messages only.
    pub fn new(run: &'a RunRecord, messages: &'a [Message]) -> Self {
        Commit {
            run,
            messages,
            checkpoint: None,
            tool_calls: &[],
            events: &[],
            journal: None,
            charges: &[],
        }
    }
}

/// What a commit learned about the run from the store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitOutcome {
    /// Someone asked the run to stop.
    pub cancel_requested: bool,
}

/// A user known to keel, with their monthly token budget.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserRecord {
    /// User id (e.g. a login name or a platform user id).
    pub id: String,
    /// Most tokens (input + output) the user may spend per calendar month (UTC); `None` means
    /// unlimited.
    pub monthly_token_budget: Option<u64>,
    /// When the user was first stored.
    pub created_at: DateTime<Utc>,
    /// When the record last changed.
    pub updated_at: DateTime<Utc>,
    /// What the user may do: tools declare the permission they need (`guest` < `user` < `admin`
    /// < `owner`).
    #[serde(default)]
    pub permission: crate::tool::Permission,
}

pub use crate::token_log::usage_month;

/// Durable state of conversations and runs.
/// The user whose facts and notes a run without a user (the machine's owner, at the CLI)
/// reads and writes.
pub const OWNER: &str = "owner";

#[async_trait]
pub trait Store: Send + Sync {
    /// Creates the session if it does not exist yet.
    async fn ensure_session(&self, session_id: &str) -> Result<(), StoreError>;

    /// The session, if it exists.
    async fn session(&self, session_id: &str) -> Result<Option<SessionInfo>, StoreError>;

    /// Sessions, most recently updated first.
    async fn list_sessions(&self, limit: usize) -> Result<Vec<SessionInfo>, StoreError>;

    /// Every message of a session, in order.
    async fn messages(&self, session_id: &str) -> Result<Vec<StoredMessage>, StoreError>;

    /// What a new run of the session needs: every message after those the latest compaction
    /// summary replaces (the summary itself among them), in order; every message when there is
    /// no summary. When the summary replaced pinned messages, which survive compaction, from
    /// the first one's exchange on ([`crate::context::context_start_seq`]; the run sends only
    /// the pinned ones of the replaced). Stores should answer without reading the replaced
    /// messages when none of them is pinned.
    async fn context_messages(&self, session_id: &str) -> Result<Vec<StoredMessage>, StoreError> {
        let mut messages = self.messages(session_id).await?;
        if let Some(last) = latest_summary_end(&messages) {
            let from = crate::context::context_start_seq(&messages, last);
            messages.retain(|stored| stored.seq >= from);
        }
        Ok(messages)
    }

    /// Appends messages to a session (created if missing), in one transaction.
    async fn append_messages(
        &self,
        session_id: &str,
        run_id: Option<&str>,
        messages: &[Message],
    ) -> Result<(), StoreError>;

    /// Writes one safe boundary in one transaction (see [`Commit`]); the session is created if
    /// missing. Returns whether the run was asked to stop.
    async fn commit(&self, commit: &Commit<'_>) -> Result<CommitOutcome, StoreError>;

    /// Writes the run record and appends the run's new messages to its session, in one
    /// transaction.
    async fn save_run(&self, run: &RunRecord, new_messages: &[Message]) -> Result<(), StoreError> {
        self.commit(&Commit::new(run, new_messages))
            .await
            .map(|_| ())
    }

    /// The messages of a session from seq `from` on, in order.
    async fn messages_since(
        &self,
        session_id: &str,
        from: u64,
    ) -> Result<Vec<StoredMessage>, StoreError>;

    /// Inserts or replaces envelope rows outside a boundary (a side-effecting call about to
    /// start, or just finished).
    async fn record_tool_calls(&self, calls: &[ToolCallRecord]) -> Result<(), StoreError>;

    /// The envelope rows of a run, by start time.
    async fn tool_calls(&self, run_id: &str) -> Result<Vec<ToolCallRecord>, StoreError>;

    /// Every checkpoint of a run, oldest first, as written (a frame only where one was written).
    async fn checkpoints(&self, run_id: &str) -> Result<Vec<Checkpoint>, StoreError>;

    /// The latest checkpoint of a run, its frame filled in from the latest checkpoint that has
    /// one when it has none of its own: what a resume needs.
    async fn latest_checkpoint(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError>;

    /// The events kept with a run, in order.
    async fn events(&self, run_id: &str) -> Result<Vec<Event>, StoreError>;

    /// The session's run journal.
    async fn journal(&self, session_id: &str) -> Result<Option<Journal>, StoreError>;

    /// What a person approved for the rest of session `session_id`: keys made by
    /// [`crate::approval::session_key`].
    async fn session_approvals(&self, session_id: &str) -> Result<Vec<String>, StoreError>;

    /// Keeps an `approve_session` decision: calls of session `session_id` with this key run
    /// without asking from now on.
    async fn approve_for_session(
        &self,
        session_id: &str,
        key: &str,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError>;

    /// Shows the run's worker is alive; returns whether the run was asked to stop.
    async fn heartbeat(&self, run_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError>;

    /// Asks a run to stop; its loop sees the flag at its next boundary or heartbeat. Returns
    /// false when there is no such run.
    async fn request_cancel(&self, run_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError>;

    /// Claims the session's lane for a run, in one transaction, creating the session if
    /// missing: [`LaneOutcome::Busy`] while another run holds it (see [`crate::lane`] for when
    /// a holder's claim lapses). The lane is released by the run's terminal commit.
    async fn claim_session(&self, claim: &LaneClaim<'_>) -> Result<LaneOutcome, StoreError>;

    /// Releases the session's lane if `run_id` holds it (for a run that ends without a terminal
    /// commit); returns whether it did.
    async fn release_session(&self, session_id: &str, run_id: &str) -> Result<bool, StoreError>;

    /// Closes the store at the end of a process: what it committed is made durable in its
    /// final form (for SQLite: the write-ahead log is copied back and emptied), and every later
    /// call fails. Stores with nothing to close do nothing.
    async fn close(&self) {}

    /// Runs not in a terminal state, oldest first.
    async fn active_runs(&self) -> Result<Vec<RunRecord>, StoreError>;

    /// The run, if it exists.
    async fn run(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError>;

    /// Runs, newest first, optionally of one session.
    async fn list_runs(
        &self,
        session_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError>;

    /// The user, if stored.
    async fn user(&self, user_id: &str) -> Result<Option<UserRecord>, StoreError>;

    /// Creates or replaces the user's record.
    async fn save_user(&self, user: &UserRecord) -> Result<(), StoreError>;

    /// Every stored user, by id.
    async fn list_users(&self) -> Result<Vec<UserRecord>, StoreError>;

    /// What `user_id` spent in `month` (zero when nothing was recorded): the sum of their
    /// token log rows of that month, kept as a running total by [`Store::commit`].
    async fn monthly_usage(&self, user_id: &str, month: &str) -> Result<Usage, StoreError>;

    /// Up to `limit` messages of a session with a seq above `after`, in order.
    async fn messages_page(
        &self,
        session_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError>;

    /// The run's stored events with a seq (1-based, in the order emitted) above `after`.
    async fn events_after(&self, run_id: &str, after: u64)
    -> Result<Vec<(u64, Event)>, StoreError>;

    /// Keeps a file: its content once per SHA-256 (the same bytes again add only a record)
    /// and its record, in one transaction. `content` must hash to `record.sha256`.
    async fn save_file(&self, record: &FileRecord, content: &[u8]) -> Result<(), StoreError>;

    /// A file's record.
    async fn file(&self, file_id: &str) -> Result<Option<FileRecord>, StoreError>;

    /// The content kept under a SHA-256.
    async fn file_content(&self, sha256: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// The files a run produced, oldest first.
    async fn run_files(&self, run_id: &str) -> Result<Vec<FileRecord>, StoreError>;

    /// Makes `user_id` the owner of session `session_id` when it has no owner and no messages
    /// yet (a new session a run for that user starts), so that user's later searches find it.
    /// Returns whether it did; a session with an owner or with messages is left as it is.
    async fn adopt_session(&self, session_id: &str, user_id: &str) -> Result<bool, StoreError>;
}

/// The seq of the last message the latest compaction summary of `messages` replaces.
pub fn latest_summary_end(messages: &[StoredMessage]) -> Option<u64> {
    messages
        .iter()
        .rev()
        .find_map(|stored| stored.message.meta.summary_of.map(|range| range.last))
}

/// The title of a session: its first user message, cut to 60 characters.
pub fn session_title(first_user_message: &str) -> String {
    let line = first_user_message.lines().next().unwrap_or("").trim();
    match line.char_indices().nth(60) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_string(),
    }
}
