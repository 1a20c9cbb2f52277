//! Platform links (seed 003, step 2): which keel user a person on a platform is. An incoming
//! message's sender is found by their link; an unknown sender becomes a guest, linked.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A user's identity on a platform: `(platform, platform_user_id)` names at most one user; a
/// user may have links on several platforms.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlatformLink {
    /// The platform, e.g. `telegram`, `slack`.
    pub platform: String,
    /// The user's id there.
    pub platform_user_id: String,
    /// The keel user it is.
    pub user_id: String,
    /// Their name there, when known.
    pub username: Option<String>,
    /// When the link was made.
    pub created_at: DateTime<Utc>,
}
