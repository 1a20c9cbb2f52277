//! The platform (DESIGN.md section 9, seeds 000 and 003): many people on many platforms. An
//! incoming message is resolved, in order, to a user (through platform links; an unknown one
//! becomes a guest), a persona (server → platform → default), a conversation (found by its
//! key: platform, server, channel, thread, and an email trigger's sender; never by an id), the
//! tools its caller may use and the session's trust — then it runs like any other message
//! ([`inbox::Inbox`]).

pub mod attachments;
pub mod inbox;
pub mod options;
pub mod persona;
pub mod place;

pub use attachments::{IncomingAttachment, READ_ATTACHMENT, register_attachments};
pub use inbox::{Inbox, InboxError, InboxSettings, IncomingMessage, MAX_TEXT_BYTES, Prepared};
pub use options::RunOptions;
pub use persona::{Persona, choose_persona};
pub use place::{
    ConversationKey, ConversationKind, PlatformPlace, SessionKind, Source, session_id_for,
};
