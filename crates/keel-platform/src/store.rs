//! The daemon's store traits, by concept, beside keel-core's kernel [`Store`]: platform
//! identity ([`PlatformStore`]: links, API keys, personas, the token log report), conversations
//! ([`ConversationStore`]: creating and finding them, listing them and their runs, the lane
//! queue, their attachments) and what memory finds ([`MemoryIndex`]: known facts, messages as
//! memories, session search). The daemon holds one store that is all of them: [`DaemonStore`].
//! keel-store implements every one for SQLite and in memory.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::files::FileRecord;
use keel_core::store::{RunRecord, SessionInfo, Store, StoreError, UserRecord};

use crate::api_key::ApiKeyRecord;
use crate::channel::{DeliveryRoute, InboundKey, Notice, OutboxItem, OutboxStats, Pairing};
use crate::conversation::{
    ConversationFilter, EnqueueOutcome, NewConversation, QueueClaim, QueuedRun, RunFilter,
};
use crate::known_facts::{Fact, FactHit, MessageMemory};
use crate::link::PlatformLink;
use crate::persona::Persona;
use crate::place::ConversationKey;
use crate::schedule::ScheduleStore;
use crate::session_search::{SessionHit, SessionSearch};
use crate::usage::{UsageLine, UsageQuery};

/// Who is who on the platforms: users' platform links, the daemon's API keys, personas, and
/// the token log read back per user and model.
#[async_trait]
pub trait PlatformStore: Send + Sync {
    /// Links a platform identity to a stored user. Linking it again to the same user is
    /// nothing; to another user, or to a user not stored, an error (nothing changes).
    async fn link_user(&self, link: &PlatformLink) -> Result<(), StoreError>;

    /// The user a platform identity is linked to.
    async fn user_by_link(
        &self,
        platform: &str,
        platform_user_id: &str,
    ) -> Result<Option<UserRecord>, StoreError>;

    /// A user's platform links, by platform.
    async fn user_links(&self, user_id: &str) -> Result<Vec<PlatformLink>, StoreError>;

    /// Stores a new API key (its hash only).
    async fn save_api_key(&self, key: &ApiKeyRecord) -> Result<(), StoreError>;

    /// The key with this hash, revoked or not.
    async fn api_key_by_hash(&self, hash: &str) -> Result<Option<ApiKeyRecord>, StoreError>;

    /// Every stored key, oldest first.
    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError>;

    /// Revokes the key with this id at `at`. False when there is no such key or it was
    /// revoked already.
    async fn revoke_api_key(&self, id: &str, at: DateTime<Utc>) -> Result<bool, StoreError>;

    /// Creates or replaces the persona with this name. A default persona makes any other one
    /// not the default, in the same transaction; a second persona serving the same platform
    /// and server is a [`StoreError::Conflict`] (nothing changes).
    async fn save_persona(&self, persona: &Persona) -> Result<(), StoreError>;

    /// Every persona, by name.
    async fn personas(&self) -> Result<Vec<Persona>, StoreError>;

    /// The token log of a month, summed per user and model (by user, then model).
    async fn usage_lines(&self, query: &UsageQuery) -> Result<Vec<UsageLine>, StoreError>;
}

/// Conversations as the daemon keeps them: made for a user or a platform place, listed with
/// their runs, the queue of runs waiting for a conversation's lane, and the attachments sent
/// to them.
#[async_trait]
pub trait ConversationStore: Send + Sync {
    /// Creates a conversation with its owner and lane policy. `Ok(None)` when the id is taken
    /// (nothing is changed then).
    async fn create_conversation(
        &self,
        conversation: &NewConversation,
    ) -> Result<Option<SessionInfo>, StoreError>;

    /// The platform conversation whose identity is `key`, if one was made (with
    /// [`ConversationStore::create_platform_conversation`]). Found by the whole key, never by an id.
    async fn platform_conversation(
        &self,
        key: &ConversationKey,
    ) -> Result<Option<SessionInfo>, StoreError>;

    /// Creates a conversation with the platform identity `key`, in one transaction. Its place
    /// must be the key's (else [`StoreError::Conflict`]). `Ok(None)` when its id is taken or a
    /// conversation has that key already (nothing is changed then).
    async fn create_platform_conversation(
        &self,
        conversation: &NewConversation,
        key: &ConversationKey,
    ) -> Result<Option<SessionInfo>, StoreError>;

    /// Sets a conversation's lane policy (the API's override). False when it does not exist.
    async fn set_lane_policy(
        &self,
        session_id: &str,
        policy: keel_core::LanePolicy,
    ) -> Result<bool, StoreError>;

    /// Conversations, newest first (by creation, then id), as `filter` says.
    async fn list_conversations(
        &self,
        filter: &ConversationFilter,
    ) -> Result<Vec<SessionInfo>, StoreError>;

    /// Runs, newest first (by start, then id), as `filter` says.
    async fn find_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError>;

    /// Queues a run behind the session's lane, in one transaction: the queue row and a run
    /// record in state `queued` (started at `enqueued_at`), unless the session's queue holds
    /// `limit` runs already. The session must exist. A run with an [`QueuedRun::inbound`] key
    /// records it in the same transaction; a key recorded before queues nothing and answers
    /// [`EnqueueOutcome::Duplicate`]. A run with a [`QueuedRun::slot`] records the slot `fired`
    /// (with the run) in the same transaction; a slot recorded before queues nothing and
    /// answers [`EnqueueOutcome::Duplicate`] too.
    async fn enqueue_run(
        &self,
        run: &QueuedRun,
        limit: usize,
    ) -> Result<EnqueueOutcome, StoreError>;

    /// The session's queued runs, oldest first. A run leaves the queue in its first commit
    /// (the one that stores its message), or when cancelled before it started.
    async fn queued_runs(&self, session_id: &str) -> Result<Vec<QueuedRun>, StoreError>;

    /// Sessions with queued runs, the one with the oldest queued run first.
    async fn queued_sessions(&self) -> Result<Vec<String>, StoreError>;

    /// Takes up to `claim.limit` queued runs, oldest first, each the oldest queued run of its
    /// session, whose session's lane is free (or its holder lapsed, by the rules of
    /// [`keel_core::lane::lane_is_held`]): claims each lane for its run and `claim.worker` in the
    /// same transaction. A run returned is never returned to anyone again while its lane is
    /// held: workers taking at once take different runs, and a lane held by the queued run
    /// itself is taken again only when that claim lapsed (its worker died before starting it).
    /// A lapsed holder that is still executing is left to the reconciler (a second executing
    /// run of one conversation is never made here). The runs stay queued until their first
    /// commit.
    async fn claim_queued(&self, claim: &QueueClaim<'_>) -> Result<Vec<QueuedRun>, StoreError>;

    /// Cancels a run still in the queue: it leaves the queue and its record becomes
    /// `cancelled`, finished at `at`. False when it is not queued (it started, or never was).
    async fn cancel_queued(&self, run_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError>;

    /// Folds queued runs into run `into` (the double-texting policies `steer` and `collect`),
    /// in one transaction: each run of `absorbed` that is still queued in `into`'s conversation
    /// leaves the queue and ends `cancelled` at `at`, its error saying `"{how} into run
    /// {into}"` (`how`: `steered`, `collected`). No outbox row is written for them: the user is
    /// answered by `into`. With `message`, the queued run `into`'s stored message becomes it
    /// (so a crash after a collect loses nothing), and nothing is absorbed unless `into` is
    /// still queued (a run that started has stored its message already). Returns the ids it
    /// absorbed, in `absorbed`'s order: a run cancelled, started or absorbed meanwhile is
    /// skipped.
    async fn absorb_queued(
        &self,
        into: &str,
        absorbed: &[String],
        message: Option<&str>,
        how: &str,
        at: DateTime<Utc>,
    ) -> Result<Vec<String>, StoreError>;

    /// Marks run `run_id` rolled back by run `by` (the `rollback` policy), at `at`: its
    /// messages stay stored, but [`Store::context_messages`] leaves them out from now on,
    /// those it commits later included. False when there is no such run or it was marked
    /// already.
    async fn roll_back_run(
        &self,
        run_id: &str,
        by: &str,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    /// The runs of `session_id` rolled back, each with the run that replaced it, by run id.
    async fn rolled_back_runs(&self, session_id: &str)
    -> Result<Vec<(String, String)>, StoreError>;

    /// Every file of a conversation (its attachments and what its runs produced), oldest first.
    async fn session_files(&self, session_id: &str) -> Result<Vec<FileRecord>, StoreError>;

    /// Forgets the attachments kept for a message that was then refused, in one transaction:
    /// their records (an attachment's only: a produced file, or one a run has taken, stays),
    /// and each content no record keeps any more. The same content kept for another message,
    /// before or at the same time, stays.
    async fn forget_attachments(&self, files: &[FileRecord]) -> Result<(), StoreError>;
}

/// What memory finds: known facts about users, stored messages as memories (their importance
/// and embeddings), and full-text search over past sessions.
#[async_trait]
pub trait MemoryIndex: Send + Sync {
    /// Stores a new fact, in one transaction: a current fact of the same user with the same
    /// key is superseded by it (its `superseded_by` set to the new id). Returns the id of the
    /// fact it superseded. An id already stored is a [`StoreError::Conflict`].
    async fn save_fact(&self, fact: &Fact) -> Result<Option<String>, StoreError>;

    /// A user's facts, oldest first: the current ones only unless `with_superseded`.
    async fn facts(&self, user_id: &str, with_superseded: bool) -> Result<Vec<Fact>, StoreError>;

    /// Deletes one of `user_id`'s facts (and any it superseded, so nothing of it comes back).
    /// False when that user has no such fact: another user's fact is never touched.
    async fn forget_fact(&self, user_id: &str, fact_id: &str) -> Result<bool, StoreError>;

    /// Full-text search over a user's current facts: up to `limit` that share a word with
    /// `text`, best first (BM25). `text` is user text: it is never read as query syntax.
    async fn search_facts(
        &self,
        user_id: &str,
        text: &str,
        limit: usize,
    ) -> Result<Vec<FactHit>, StoreError>;
    // --- Session search (`session_search`, issue 16) ---

    /// The sessions that best match `search`, best first, each with its best passages: only
    /// sessions of `search.owner` (see [`crate::session_search`] for whose those are), never
    /// `search.exclude_session`. A query without search terms finds nothing.
    async fn search_sessions(&self, search: &SessionSearch) -> Result<Vec<SessionHit>, StoreError>;

    // A store without a message index (the in-memory store) recalls facts only: the message
    // methods below default to finding and keeping nothing.

    /// Up to `limit` messages of sessions of `owner` (`None`: sessions without one) other than
    /// `exclude_session`, scored at least `min_importance` (unscored ones count as 0.3),
    /// matching `text` by full text, best first.
    async fn search_messages(
        &self,
        _owner: Option<&str>,
        _text: &str,
        _exclude_session: Option<&str>,
        _min_importance: f32,
        _limit: usize,
    ) -> Result<Vec<MessageMemory>, StoreError> {
        Ok(Vec::new())
    }

    /// Up to `limit` of `owner`'s messages (as for [`MemoryIndex::search_messages`]) scored at
    /// least `min_importance`, newest first. SQLite keeps an index of the messages scoring
    /// 0.9 or more only, and finds no others.
    async fn important_messages(
        &self,
        _owner: Option<&str>,
        _min_importance: f32,
        _exclude_session: Option<&str>,
        _limit: usize,
    ) -> Result<Vec<MessageMemory>, StoreError> {
        Ok(Vec::new())
    }

    /// Replaces the importance of messages of `session_id`, by seq (a model's scores).
    async fn set_message_importance(
        &self,
        _session_id: &str,
        _scores: &[(u64, f32)],
    ) -> Result<(), StoreError> {
        Ok(())
    }

    /// Keeps the embeddings of messages of `session_id`, by seq, computed by `model`.
    async fn save_message_embeddings(
        &self,
        _session_id: &str,
        _model: &str,
        _vectors: &[(u64, Vec<f32>)],
    ) -> Result<(), StoreError> {
        Ok(())
    }

    /// Every embedded message of `owner`'s sessions (as for [`MemoryIndex::search_messages`], no
    /// session left out), with its embedding, oldest first.
    async fn message_embeddings(
        &self,
        _owner: Option<&str>,
    ) -> Result<Vec<(MessageMemory, Vec<f32>)>, StoreError> {
        Ok(Vec::new())
    }
}

/// What channels keep (see [`crate::channel`]): inbound events already received, where each
/// conversation's replies go, the outbox, each channel's own state and pairing codes.
///
/// The outbox is written by the store itself: a commit that moves a run of a conversation with
/// a [`DeliveryRoute`] into an ending state (`completed`, `error`, `cancelled`, …) or into
/// `waiting_on_human` adds one [`OutboxItem`] in the same transaction. An inbound event is
/// recorded by [`ConversationStore::enqueue_run`] when the run carries its key.
#[async_trait]
pub trait ChannelStore: Send + Sync {
    /// The run an inbound event became, when it was received before.
    async fn inbound_run(&self, key: &InboundKey) -> Result<Option<String>, StoreError>;

    /// Records an inbound event that queues no run (an answer, a button press) as handled by
    /// `run_id`, at `at`. False when it was recorded before: the event is a redelivery.
    async fn record_inbound(
        &self,
        key: &InboundKey,
        run_id: &str,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    /// Sets where `session_id`'s replies go from now on (replacing the route it had).
    async fn set_delivery(&self, session_id: &str, route: &DeliveryRoute)
    -> Result<(), StoreError>;

    /// Where `session_id`'s replies go, if anywhere.
    async fn delivery(&self, session_id: &str) -> Result<Option<DeliveryRoute>, StoreError>;

    /// Adds a notice to the outbox, after every reply of its channel written before.
    async fn add_notice(&self, notice: &Notice) -> Result<(), StoreError>;

    /// Up to `limit` of `channel`'s pending replies (neither delivered nor given up), oldest
    /// first, due or not.
    async fn pending_outbox(
        &self,
        channel: &str,
        limit: usize,
    ) -> Result<Vec<OutboxItem>, StoreError>;

    /// One outbox item, whatever its state.
    async fn outbox_item(&self, id: i64) -> Result<Option<OutboxItem>, StoreError>;

    /// Marks a reply delivered with the platform's receipt. False when it was not pending.
    async fn outbox_delivered(
        &self,
        id: i64,
        receipt: &str,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    /// Counts a failed attempt and puts the next one off until `next_attempt_at`.
    async fn outbox_retry(
        &self,
        id: i64,
        error: &str,
        next_attempt_at: DateTime<Utc>,
    ) -> Result<(), StoreError>;

    /// Gives a reply up (a permanent error): it stays, with the error, and is not tried again.
    async fn outbox_failed(
        &self,
        id: i64,
        error: &str,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError>;

    /// `channel`'s outbox, counted.
    async fn outbox_stats(&self, channel: &str) -> Result<OutboxStats, StoreError>;

    /// A value a channel keeps (its offset, its last event, its last error).
    async fn channel_state(&self, channel: &str, key: &str) -> Result<Option<String>, StoreError>;

    /// Every value `channel` keeps, by key.
    async fn channel_states(&self, channel: &str) -> Result<Vec<(String, String)>, StoreError>;

    /// Keeps a value of a channel, replacing the one it had.
    async fn set_channel_state(
        &self,
        channel: &str,
        key: &str,
        value: &str,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError>;

    /// Keeps a pairing code for a sender, replacing any earlier code of theirs.
    async fn save_pairing(&self, pairing: &Pairing) -> Result<(), StoreError>;

    /// The pending pairing of a sender, if they were given a code.
    async fn pairing_of(
        &self,
        platform: &str,
        platform_user_id: &str,
    ) -> Result<Option<Pairing>, StoreError>;

    /// Takes the pairing with this code: it is removed, so a code works once.
    async fn take_pairing(&self, code: &str) -> Result<Option<Pairing>, StoreError>;
}

/// Everything the daemon keeps: the kernel's [`Store`] and each of keel-platform's (schedules:
/// [`ScheduleStore`]). Any type that is all of them is one; an `Arc<dyn DaemonStore>` upcasts
/// to the `Arc<dyn Store>` an agent runs on.
pub trait DaemonStore:
    Store
    + PlatformStore
    + ConversationStore
    + MemoryIndex
    + ChannelStore
    + ScheduleStore
    + crate::StoreSignals
{
}

impl<
    T: Store
        + PlatformStore
        + ConversationStore
        + MemoryIndex
        + ChannelStore
        + ScheduleStore
        + crate::StoreSignals
        + ?Sized,
> DaemonStore for T
{
}
