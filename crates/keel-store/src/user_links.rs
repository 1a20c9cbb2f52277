//! Platform links on SQL (`migrations/0009_user_links.sql`): who a platform identity is.

use keel_core::{StoreError, UserRecord};
use keel_platform::PlatformLink;

use crate::OrBackend;
use crate::batch::Batch;
use crate::codec::{self, Columns, Place, column, time_column, timestamp};
use crate::connections::Connections;

/// Links, unless the identity is linked already; the user must exist (foreign key).
pub(crate) const LINK: &str = "INSERT INTO platform_links \
     (platform, platform_user_id, user_id, username, created_at) \
     SELECT $1, $2, $3, $4, $5 WHERE EXISTS (SELECT 1 FROM users WHERE id = $3) \
     ON CONFLICT (platform, platform_user_id) DO NOTHING";

/// Whether the identity is linked to the user now.
pub(crate) const LINKED_TO: &str = "SELECT EXISTS (SELECT 1 FROM platform_links \
     WHERE platform = $1 AND platform_user_id = $2 AND user_id = $3)";

/// The user identity `$1`:`$2` is linked to.
pub(crate) const USER_BY_LINK: &str = "SELECT u.id, u.monthly_token_budget, u.created_at, u.updated_at, \
     u.permission FROM platform_links l JOIN users u ON u.id = l.user_id \
     WHERE l.platform = $1 AND l.platform_user_id = $2";

/// User `$1`'s links.
pub(crate) const LINKS: &str = "SELECT platform, platform_user_id, user_id, username, created_at \
     FROM platform_links WHERE user_id = $1 ORDER BY platform, platform_user_id";

/// Links a platform identity (see [`keel_core::Store::link_user`]).
pub(crate) async fn link(conns: &Connections, link: &PlatformLink) -> Result<(), StoreError> {
    let mut batch = Batch::of(LINK)
        .bind(&link.platform)
        .bind(&link.platform_user_id)
        .bind(&link.user_id)
        .bind(link.username.as_deref())
        .bind(timestamp(link.created_at));
    batch.end_statement().sql(LINKED_TO);
    let linked = conns
        .transaction(vec![batch])
        .await
        .or_backend(|| format!("cannot link {}:{}", link.platform, link.platform_user_id))?;
    if linked == Some(true) {
        return Ok(());
    }
    match user_by_link(conns, &link.platform, &link.platform_user_id).await? {
        Some(other) => Err(StoreError::Backend(format!(
            "{}:{} is linked to user `{}` already",
            link.platform, link.platform_user_id, other.id
        ))),
        None => Err(StoreError::NotFound(format!("user `{}`", link.user_id))),
    }
}

/// The user an identity is linked to.
pub(crate) async fn user_by_link(
    conns: &Connections,
    platform: &str,
    platform_user_id: &str,
) -> Result<Option<UserRecord>, StoreError> {
    let row = sqlx::query(USER_BY_LINK)
        .bind(platform)
        .bind(platform_user_id)
        .fetch_optional(&mut *conns.reader().await?)
        .await
        .or_backend(|| format!("cannot read the link {platform}:{platform_user_id}"))?;
    row.as_ref().map(codec::decode_user).transpose()
}

/// A user's links.
pub(crate) async fn links(
    conns: &Connections,
    user_id: &str,
) -> Result<Vec<PlatformLink>, StoreError> {
    let rows = sqlx::query(LINKS)
        .bind(user_id)
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(|| format!("cannot read the links of user `{user_id}`"))?;
    rows.iter().map(|row| decode_link(row, user_id)).collect()
}

/// Decodes a row of [`LINKS`]' columns, a link of user `user_id`.
pub(crate) fn decode_link(row: &impl Columns, user_id: &str) -> Result<PlatformLink, StoreError> {
    let place = Place::User(user_id);
    Ok(PlatformLink {
        platform: column(row, "platform", place)?,
        platform_user_id: column(row, "platform_user_id", place)?,
        user_id: column(row, "user_id", place)?,
        username: column(row, "username", place)?,
        created_at: time_column(row, "created_at", place)?,
    })
}
