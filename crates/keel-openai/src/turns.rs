//! Which keel conversation a client's turn belongs to, and whether the turn was received
//! before.
//!
//! - A conversation the client names (`X-Keel-Conversation` or `metadata.keel_conversation`):
//!   a conversation id the caller sees, else a name of the caller's own, mapped to a
//!   conversation made on first use. Another user's conversation id is only a name here: a new
//!   conversation of the caller's, never theirs.
//! - Otherwise the history: a turn's key is SHA-256 over the caller, the model and every
//!   message (role and text) up to its user message. A turn whose history, less its new user
//!   message and the answer before it, is the key of a turn recorded earlier continues that
//!   turn's conversation; anything else starts a new one.
//! - A turn's key (with the conversation, for a named one) is the run's inbound key, so a
//!   repeated request finds the run it became ([`Redelivery`]).
//!
//! All of it is kept in the channel state of the pseudo-channel `openai`: `name:<caller>:<name>`
//! and `turn:<key>` (the conversations and runs that turn became, newest last).

use chrono::{DateTime, Duration, Utc};
use keel_core::SessionInfo;
use keel_platform::{InboundKey, NewConversation};
use keel_server::{AppState, Caller};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::CHANNEL;
use crate::errors::OpenAiError;
use crate::wire::Turn;

/// How many times one turn key may start a new run (each after the window of the one
/// before); past it, the last one answers.
const MAX_GENERATIONS: u32 = 64;

/// How many conversations one turn key remembers.
const MAX_REMEMBERED: usize = 16;

/// Who a turn is of: the caller's user, or its key when it acts as no user.
pub fn identity(caller: &Caller) -> String {
    match &caller.user_id {
        Some(user) => format!("user:{user}"),
        None => format!("key:{}", caller.key_id),
    }
}

/// Hex SHA-256 over the caller, the model and `messages` (each field length-prefixed, so no
/// two different turns write the same bytes).
pub fn turn_key(identity: &str, model: &str, messages: &[(String, String)]) -> String {
    let mut hash = Sha256::new();
    let mut field = |text: &str| {
        hash.update((text.len() as u64).to_le_bytes());
        hash.update(text.as_bytes());
    };
    field(identity);
    field(model);
    for (role, text) in messages {
        field(role);
        field(text);
    }
    hex(&hash.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The inbound event id of generation `generation` of a turn: its key (hashed with the
/// conversation for a named one), suffixed from the second generation on.
pub fn event_id(key: &str, named: Option<&str>, generation: u32) -> String {
    let base = match named {
        Some(conversation) => turn_key(conversation, "named", &[("turn".into(), key.into())]),
        None => key.to_string(),
    };
    if generation == 0 {
        base
    } else {
        format!("{base}.{generation}")
    }
}

/// One conversation a turn became, as kept under `turn:<key>`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Recorded {
    /// The conversation.
    pub conversation: String,
    /// The run the turn became there.
    pub run: String,
}

/// What the turn resolution found before anything is stored.
pub struct Found {
    /// The conversation, when the turn names or continues one.
    pub conversation: Option<SessionInfo>,
    /// Named by the client (header or metadata), not found by history.
    pub named: bool,
}

/// The conversation named `name` for `caller`: a conversation id it sees, else its own name,
/// made on first use.
pub async fn named(
    state: &AppState,
    caller: &Caller,
    name: &str,
) -> Result<SessionInfo, OpenAiError> {
    if let Some(conversation) = state.store.session(name).await?
        && caller.sees(&conversation)
    {
        return Ok(conversation);
    }
    let key = format!("name:{}:{name}", identity(caller));
    if let Some(id) = state.store.channel_state(CHANNEL, &key).await?
        && let Some(conversation) = state.store.session(&id).await?
        && caller.sees(&conversation)
    {
        return Ok(conversation);
    }
    let made = new_conversation(state, caller).await?;
    state
        .store
        .set_channel_state(CHANNEL, &key, &made.id, Utc::now())
        .await?;
    Ok(made)
}

/// The conversation the turn's history continues, when it continues one the caller sees.
pub async fn by_history(
    state: &AppState,
    caller: &Caller,
    turn: &Turn,
) -> Result<Option<SessionInfo>, OpenAiError> {
    let previous = turn.previous();
    if previous.is_empty() {
        return Ok(None);
    }
    let key = turn_key(&identity(caller), &turn.model, previous);
    let recorded = remembered(state, &key).await?;
    // Two chats that began alike: the one whose last answer the client shows, else the newest.
    let answer = turn.last_answer();
    let answer = answer.trim();
    let mut chosen = None;
    for candidate in recorded.iter().rev() {
        let matches = match state.store.run(&candidate.run).await? {
            Some(run) => run
                .final_text
                .as_deref()
                .map(str::trim)
                .is_some_and(|text| !text.is_empty() && answer.ends_with(text)),
            None => false,
        };
        if matches {
            chosen = Some(candidate);
            break;
        }
    }
    let Some(chosen) = chosen.or(recorded.last()) else {
        return Ok(None);
    };
    match state.store.session(&chosen.conversation).await? {
        Some(conversation) if caller.sees(&conversation) => Ok(Some(conversation)),
        _ => Ok(None),
    }
}

async fn remembered(state: &AppState, key: &str) -> Result<Vec<Recorded>, OpenAiError> {
    Ok(state
        .store
        .channel_state(CHANNEL, &format!("turn:{key}"))
        .await?
        .and_then(|value| serde_json::from_str(&value).ok())
        .unwrap_or_default())
}

/// Remembers that the turn with `key` became `run` in `conversation` (once).
pub async fn remember(
    state: &AppState,
    key: &str,
    conversation: &str,
    run: &str,
) -> Result<(), OpenAiError> {
    let mut recorded = remembered(state, key).await?;
    if recorded.iter().any(|r| r.run == run) {
        return Ok(());
    }
    recorded.push(Recorded {
        conversation: conversation.to_string(),
        run: run.to_string(),
    });
    let excess = recorded.len().saturating_sub(MAX_REMEMBERED);
    recorded.drain(..excess);
    let value = serde_json::to_string(&recorded)
        .map_err(|error| OpenAiError::internal(format!("cannot keep a turn: {error}")))?;
    state
        .store
        .set_channel_state(CHANNEL, &format!("turn:{key}"), &value, Utc::now())
        .await?;
    Ok(())
}

/// A new conversation of the caller's user.
pub async fn new_conversation(
    state: &AppState,
    caller: &Caller,
) -> Result<SessionInfo, OpenAiError> {
    let conversation = NewConversation {
        id: uuid::Uuid::now_v7().to_string(),
        owner: caller.user_id.clone(),
        lane_policy: state.engine.default_lane_policy(),
        at: Utc::now(),
        place: None,
        trusted: true,
    };
    state
        .store
        .create_conversation(&conversation)
        .await?
        .ok_or_else(|| OpenAiError::internal("a new conversation id was taken; try again"))
}

/// Whether a request repeats one received before.
pub enum Redelivery {
    /// It does: the run it became (still going, or ended within the window).
    Of(String),
    /// It does not: the inbound key its run is to carry.
    New(InboundKey),
}

/// Finds the run an identical request became: the newest generation of its key whose run
/// is still going (queued, running or waiting on a person) or ended less than `window` ago.
pub async fn redelivery(
    state: &AppState,
    key: &str,
    named: Option<&str>,
    window: Duration,
    now: DateTime<Utc>,
) -> Result<Redelivery, OpenAiError> {
    let mut last = None;
    for generation in 0..MAX_GENERATIONS {
        let inbound = InboundKey::new(CHANNEL, event_id(key, named, generation));
        let Some(run_id) = state.store.inbound_run(&inbound).await? else {
            return Ok(Redelivery::New(inbound));
        };
        let fresh = match state.store.run(&run_id).await? {
            Some(run) if !run.state.is_terminal() => true,
            Some(run) => run.finished_at.unwrap_or(run.updated_at) + window > now,
            None => false,
        };
        if fresh {
            return Ok(Redelivery::Of(run_id));
        }
        last = Some(run_id);
    }
    // A turn sent again more than MAX_GENERATIONS times, each after the window: the last.
    Ok(Redelivery::Of(last.unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(role: &str, text: &str) -> (String, String) {
        (role.to_string(), text.to_string())
    }

    #[test]
    fn a_turn_key_depends_on_everything_it_covers() {
        let base = turn_key("user:ann", "keel", &[m("user", "hi")]);
        assert_eq!(base.len(), 64);
        assert_eq!(base, turn_key("user:ann", "keel", &[m("user", "hi")]));
        for other in [
            turn_key("user:bob", "keel", &[m("user", "hi")]),
            turn_key("user:ann", "writer", &[m("user", "hi")]),
            turn_key("user:ann", "keel", &[m("system", "hi")]),
            turn_key("user:ann", "keel", &[m("user", "h"), m("i", "")]),
            turn_key("user:ann", "keel", &[m("user", "hi"), m("user", "")]),
        ] {
            assert_ne!(base, other);
        }
    }

    #[test]
    fn event_ids_differ_by_conversation_and_generation() {
        let key = turn_key("user:ann", "keel", &[m("user", "hi")]);
        assert_eq!(event_id(&key, None, 0), key);
        assert_eq!(event_id(&key, None, 2), format!("{key}.2"));
        assert_ne!(event_id(&key, Some("c1"), 0), event_id(&key, Some("c2"), 0));
        assert_ne!(event_id(&key, Some("c1"), 0), key);
    }
}
