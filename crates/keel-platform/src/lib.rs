//! keel-platform owns the multi-person platform (DESIGN.md section 9, seeds 000 and 003): many
//! people on many platforms. An incoming message is resolved, in order, to a user (through
//! platform links; an unknown one becomes a guest), a persona (server → platform → default), a
//! conversation (found by its key: platform, server, channel, thread, and an email trigger's
//! sender; never by an id), the tools its caller may use and the session's trust — then it runs
//! like any other message ([`inbox::Inbox`]). It also owns the daemon's vocabulary around that:
//! API keys, conversation listings and the lane queue, schedules and their slots
//! ([`schedule`]), the token log report, attachments, known facts' records and session search,
//! and the store traits that keep them ([`store`]).
//!
//! It depends on keel-core only. It must not depend on a store, an adapter, a tool crate or the
//! daemon: keel-store implements its traits, keel-server and the `keel` binary use them. The loop
//! never names anything here: what a run needs of the platform (its [`keel_core::RunOptions`],
//! its [`keel_core::PlatformPlace`], trust by [`keel_core::SessionKind`]) is keel-core's.

#![warn(missing_docs)]

pub mod api_key;
pub mod attachments;
pub mod channel;
pub mod conversation;
pub mod inbox;
pub mod known_facts;
pub mod link;
pub mod persona;
pub mod place;
pub mod schedule;
pub mod session_search;
pub mod signals;
pub mod store;
pub mod usage;

pub use api_key::ApiKeyRecord;
pub use attachments::{IncomingAttachment, READ_ATTACHMENT, register_attachments};
pub use channel::{DeliveryRoute, InboundKey, Notice, OutboxItem, OutboxStats, Pairing};
pub use conversation::{
    ConversationFilter, EnqueueOutcome, NewConversation, QueueClaim, QueuedRun, RunFilter,
    absorbed_reason,
};
pub use inbox::{Inbox, InboxError, InboxSettings, IncomingMessage, MAX_TEXT_BYTES, Prepared};
pub use known_facts::{Fact, FactHit, MessageMemory};
pub use link::PlatformLink;
pub use persona::{Persona, choose_persona};
pub use place::{ChatKind, ConversationKey, ConversationKind, Source, session_id_for};
pub use schedule::{
    CatchUp, Creator, EndedFire, Schedule, ScheduleFilter, ScheduleKind, ScheduleState,
    ScheduleStore, Settled, SlotEntry, SlotKey, SlotOutcome, SlotRecord,
};
pub use session_search::{SessionHit, SessionSearch};
pub use signals::{StoreSignal, StoreSignals};
pub use store::{ChannelStore, ConversationStore, DaemonStore, MemoryIndex, PlatformStore};
pub use usage::{UsageLine, UsageQuery};
