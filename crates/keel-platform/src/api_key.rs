//! API keys of the daemon: only a hash of each key is stored; the key itself is shown once,
//! when it is made.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A stored API key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApiKeyRecord {
    /// Public id, to list and revoke it by (never the key).
    pub id: String,
    /// Hex SHA-256 of the key.
    pub hash: String,
    /// The user the key acts as; `None` only for an admin key made for no user.
    pub user_id: Option<String>,
    /// Sees and acts on every conversation and run.
    pub admin: bool,
    /// The platforms it may post incoming messages for (`POST /v1/messages`), and whose
    /// conversations it sees: a channel key for `slack` cannot post as `telegram`. An admin key
    /// may post for any platform.
    #[serde(default)]
    pub platforms: Vec<String>,
    /// When it was made.
    pub created_at: DateTime<Utc>,
    /// When it was revoked: a revoked key authenticates nothing.
    pub revoked_at: Option<DateTime<Utc>>,
}
