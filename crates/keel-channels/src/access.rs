//! Who may talk to keel on a channel, and who may decide for a run.
//!
//! Talking: a sender linked to a user who is more than a guest (with `keel users link`, or
//! paired) always may; others as the channel says: `everyone` (as guests), `allowlist` (their
//! platform ids or names listed), or `pairing` (the default: an unknown sender gets a one-time
//! code, and talks once an admin approves it with `keel users pair CODE`).
//!
//! Deciding (approving a tool call, answering a question with a button) in a shared place:
//! the conversation's owner, unless a guest, and admins; never a guest.

use chrono::Utc;
use keel_core::{Permission, StoreError, UserRecord};
use keel_platform::{DaemonStore, IncomingMessage, Pairing};
use serde::Deserialize;

/// Who may talk on a channel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Allow {
    /// Anyone, as a guest.
    Everyone,
    /// Only the senders the allowlist names (and linked users).
    Allowlist,
    /// Unknown senders get a pairing code; an admin approves it (`keel users pair CODE`).
    #[default]
    Pairing,
}

/// A channel's access rules (`allow`, `allowlist` in its section).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Access {
    /// Who may talk.
    pub allow: Allow,
    /// Platform user ids or usernames allowed when `allow = "allowlist"`.
    pub allowlist: Vec<String>,
}

/// What the access check decided about a sender.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// The message goes on.
    Allowed,
    /// Not allowed; nothing is stored.
    Refused,
    /// Not allowed yet: the sender was given this pairing code.
    Pairing(String),
}

impl Access {
    /// Whether the sender of `message` may talk; under pairing, an unknown sender's code is
    /// made (or their earlier one kept).
    pub async fn admit(
        &self,
        store: &dyn DaemonStore,
        message: &IncomingMessage,
    ) -> Result<Admission, StoreError> {
        let linked = store
            .user_by_link(&message.platform, &message.platform_user_id)
            .await?;
        if linked.is_some_and(|user| user.permission > Permission::Guest) {
            return Ok(Admission::Allowed);
        }
        match self.allow {
            Allow::Everyone => Ok(Admission::Allowed),
            Allow::Allowlist => {
                let listed = self.allowlist.iter().any(|entry| {
                    entry == &message.platform_user_id
                        || message.platform_username.as_deref() == Some(entry.as_str())
                });
                Ok(if listed {
                    Admission::Allowed
                } else {
                    Admission::Refused
                })
            }
            Allow::Pairing => {
                if let Some(pairing) = store
                    .pairing_of(&message.platform, &message.platform_user_id)
                    .await?
                {
                    return Ok(Admission::Pairing(pairing.code));
                }
                let pairing = Pairing {
                    code: pairing_code()?,
                    platform: message.platform.clone(),
                    platform_user_id: message.platform_user_id.clone(),
                    username: message.platform_username.clone(),
                    created_at: Utc::now(),
                };
                store.save_pairing(&pairing).await?;
                Ok(Admission::Pairing(pairing.code))
            }
        }
    }
}

/// Whether `user` may decide for a run of a conversation owned by `owner`.
pub fn may_decide(user: Option<&UserRecord>, owner: Option<&str>) -> bool {
    let Some(user) = user else {
        return false;
    };
    match user.permission {
        Permission::Guest => false,
        Permission::Admin | Permission::Owner => true,
        _ => owner == Some(user.id.as_str()),
    }
}

/// A one-time code: eight characters of an alphabet without look-alikes, as `XXXX-XXXX`.
fn pairing_code() -> Result<String, StoreError> {
    const ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes)
        .map_err(|e| StoreError::Backend(format!("no randomness for a pairing code: {e}")))?;
    let mut code = String::with_capacity(9);
    for (n, byte) in bytes.iter().enumerate() {
        if n == 4 {
            code.push('-');
        }
        code.push(ALPHABET[usize::from(*byte) % ALPHABET.len()] as char);
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(id: &str, permission: Permission) -> UserRecord {
        UserRecord {
            id: id.into(),
            monthly_token_budget: None,
            created_at: Utc::now(),
            updated_at: Utc::now(),
            permission,
        }
    }

    #[test]
    fn owners_and_admins_decide_guests_never() {
        let owner = user("ann", Permission::User);
        let admin = user("root", Permission::Admin);
        let other = user("bob", Permission::User);
        let guest_owner = user("telegram:9", Permission::Guest);
        assert!(may_decide(Some(&owner), Some("ann")));
        assert!(may_decide(Some(&admin), Some("ann")));
        assert!(!may_decide(Some(&other), Some("ann")));
        assert!(!may_decide(Some(&guest_owner), Some("telegram:9")));
        assert!(!may_decide(None, Some("ann")));
    }

    #[test]
    fn pairing_codes_are_readable_and_differ() {
        let a = pairing_code().unwrap();
        let b = pairing_code().unwrap();
        assert_eq!(a.len(), 9);
        assert_eq!(&a[4..5], "-");
        assert!(a.chars().all(|c| c == '-' || c.is_ascii_alphanumeric()));
        assert_ne!(a, b);
    }
}
