//! API keys: made from 32 random bytes, shown once, stored as a SHA-256 hash. A key with that
//! much entropy needs no slow password hash; the lookup is by hash, so no key is compared
//! byte by byte against a secret.

use chrono::{DateTime, Utc};
use keel_platform::ApiKeyRecord;
use sha2::{Digest, Sha256};

/// The prefix of every key keel makes, so a leaked one is recognisable.
pub const KEY_PREFIX: &str = "keel_";

/// A new key: the key itself (shown once) and the record to store.
pub struct NewKey {
    /// The key, to give to the caller; never stored.
    pub key: String,
    /// What is stored.
    pub record: ApiKeyRecord,
}

/// Could not make a key.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The system's random source failed.
    #[error("cannot make an API key: no randomness from the system: {0}")]
    Random(String),
    /// A key must act as a user, be an admin, or speak for platforms.
    #[error(
        "say what the key may do: act as a user (--user ID), speak for platforms (--platform \
         NAME) or everything (--admin)"
    )]
    NoUser,
}

/// Makes a key for `user` (or an admin key, or a channel key speaking for `platforms`) at
/// `now`.
pub fn new_key(
    user_id: Option<String>,
    admin: bool,
    platforms: Vec<String>,
    now: DateTime<Utc>,
) -> Result<NewKey, KeyError> {
    if user_id.is_none() && !admin && platforms.is_empty() {
        return Err(KeyError::NoUser);
    }
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).map_err(|e| KeyError::Random(e.to_string()))?;
    let key = format!("{KEY_PREFIX}{}", hex(&secret));
    let record = ApiKeyRecord {
        id: format!("key_{}", uuid::Uuid::now_v7().simple()),
        hash: hash_key(&key),
        user_id,
        admin,
        platforms,
        created_at: now,
        revoked_at: None,
    };
    Ok(NewKey { key, record })
}

/// Hex SHA-256 of a key, as stored.
pub fn hash_key(key: &str) -> String {
    hex(&Sha256::digest(key.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_random_prefixed_and_stored_only_as_its_hash() {
        let a = new_key(Some("ann".into()), false, Vec::new(), Utc::now()).unwrap();
        let b = new_key(Some("ann".into()), false, Vec::new(), Utc::now()).unwrap();
        assert_ne!(a.key, b.key);
        assert!(a.key.starts_with(KEY_PREFIX) && a.key.len() == KEY_PREFIX.len() + 64);
        assert_eq!(a.record.hash, hash_key(&a.key));
        assert!(!format!("{:?}", a.record).contains(&a.key));
    }

    #[test]
    fn a_user_key_names_its_user() {
        assert!(matches!(
            new_key(None, false, Vec::new(), Utc::now()),
            Err(KeyError::NoUser)
        ));
        assert!(new_key(None, true, Vec::new(), Utc::now()).is_ok());
    }
}
