//! Who is calling: every endpoint but the health checks takes a [`Caller`], made from the
//! `Authorization: Bearer KEY` header. A missing, malformed, unknown or revoked key is 401 with
//! the same message, so keys cannot be probed.

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use keel_core::SessionKind;
use keel_core::{RunRecord, SessionInfo};

use crate::error::ApiError;
use crate::keys::hash_key;
use crate::state::AppState;

/// The authenticated caller of a request.
#[derive(Clone, Debug, PartialEq)]
pub struct Caller {
    /// The key's public id.
    pub key_id: String,
    /// The user the key acts as.
    pub user_id: Option<String>,
    /// Sees and acts on everything.
    pub admin: bool,
    /// The platforms it speaks for: it may post their incoming messages and sees their
    /// conversations.
    pub platforms: Vec<String>,
}

impl Caller {
    /// Whether the caller may see and act on this conversation: an admin sees all, a user
    /// the conversations they own, a key for platforms the conversations on those platforms.
    pub fn sees(&self, conversation: &SessionInfo) -> bool {
        self.admin
            || (self.user_id.is_some() && conversation.owner == self.user_id)
            || conversation
                .place
                .as_ref()
                .is_some_and(|place| self.speaks_for(&place.platform))
    }

    /// Whether the caller may let a call of a run in `conversation` go ahead (approve it): an
    /// admin, the conversation's owner, or a key that sees it through its platform when the
    /// conversation is trusted. An untrusted conversation's (an email's, an event's) calls wait
    /// for a person, and the platform key that brought its message in is not one: whoever
    /// drives that key (a bridge relaying the email, a button any chat member can press) would
    /// let the untrusted message approve its own calls. Denying is anyone's who sees it.
    pub fn may_approve_in(&self, conversation: &SessionInfo) -> bool {
        let untrusted = !conversation.trusted || SessionKind::of(&conversation.id).untrusted();
        self.admin
            || (self.user_id.is_some() && conversation.owner == self.user_id)
            || (!untrusted && self.sees(conversation))
    }

    /// The run `id` and its conversation, as [`Caller::run`], for a decision about its pending
    /// call: 403 when `decision` lets the call go ahead and the caller may not approve in that
    /// conversation ([`Caller::may_approve_in`]).
    pub async fn run_to_decide(
        &self,
        state: &AppState,
        id: &str,
        decision: &str,
    ) -> Result<(RunRecord, SessionInfo), ApiError> {
        let (run, conversation) = self.run(state, id).await?;
        if decision != "deny" && !self.may_approve_in(&conversation) {
            return Err(ApiError::forbidden(format!(
                "run `{id}` is of an untrusted conversation (an email or an event): its calls \
                 are approved by an admin or the conversation's user, never by a key that \
                 speaks for its platform; this key may deny"
            )));
        }
        Ok((run, conversation))
    }

    /// Whether the caller may post incoming messages for `platform`.
    pub fn speaks_for(&self, platform: &str) -> bool {
        self.admin || self.platforms.iter().any(|name| name == platform)
    }

    /// The owner filter for listings: `None` (everything) for an admin, else the user.
    pub fn owner_filter(&self) -> Option<String> {
        if self.admin {
            None
        } else {
            // A key with neither user nor admin is never made; it would see nothing.
            Some(self.user_id.clone().unwrap_or_default())
        }
    }

    /// The conversation `id`, when it exists and the caller may see it; 404 otherwise.
    pub async fn conversation(&self, state: &AppState, id: &str) -> Result<SessionInfo, ApiError> {
        match state.store.session(id).await? {
            Some(conversation) if self.sees(&conversation) => Ok(conversation),
            _ => Err(ApiError::not_found(format!("conversation `{id}`"))),
        }
    }

    /// The run `id` and its conversation, when both exist and the caller may see them; 404
    /// otherwise.
    pub async fn run(
        &self,
        state: &AppState,
        id: &str,
    ) -> Result<(RunRecord, SessionInfo), ApiError> {
        let missing = || ApiError::not_found(format!("run `{id}`"));
        let run = state.store.run(id).await?.ok_or_else(missing)?;
        match state.store.session(&run.session_id).await? {
            Some(conversation) if self.sees(&conversation) => Ok((run, conversation)),
            _ => Err(missing()),
        }
    }
}

const REFUSED: &str = "a valid API key is needed: send `Authorization: Bearer KEY` (make one with \
                       `keel keys create`)";

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let header = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .ok_or_else(|| ApiError::unauthorized(REFUSED))?;
        let key = header
            .strip_prefix("Bearer ")
            .map(str::trim)
            .filter(|key| !key.is_empty())
            .ok_or_else(|| ApiError::unauthorized(REFUSED))?;
        match state.store.api_key_by_hash(&hash_key(key)).await? {
            Some(record) if record.revoked_at.is_none() => Ok(Caller {
                key_id: record.id,
                user_id: record.user_id,
                admin: record.admin,
                platforms: record.platforms,
            }),
            _ => Err(ApiError::unauthorized(REFUSED)),
        }
    }
}
