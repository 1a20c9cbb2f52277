//! Users and their month totals on PostgreSQL (the SQLite store's statements), and a new
//! session's adoption by its user.

use keel_core::{StoreError, Usage, UserRecord};
use sqlx::postgres::PgPool;

use crate::OrBackend;
use crate::codec;
use crate::session_search::ADOPT;
use crate::sqlite_store::{LIST_USERS, SAVE_USER, SELECT_USER};
use crate::token_log::SELECT_MONTH;

/// The user, if stored.
pub(super) async fn user(pool: &PgPool, user_id: &str) -> Result<Option<UserRecord>, StoreError> {
    let row = sqlx::query(SELECT_USER)
        .bind(user_id)
        .fetch_optional(pool)
        .await
        .or_backend(|| format!("cannot read user `{user_id}`"))?;
    row.as_ref().map(codec::decode_user).transpose()
}

/// Creates or replaces the user's record.
pub(super) async fn save(pool: &PgPool, user: &UserRecord) -> Result<(), StoreError> {
    let budget = user
        .monthly_token_budget
        .map(|b| codec::stored_count(b, "monthly_token_budget"))
        .transpose()?;
    sqlx::query(SAVE_USER)
        .bind(&user.id)
        .bind(budget)
        .bind(codec::timestamp(user.created_at))
        .bind(codec::timestamp(user.updated_at))
        .bind(codec::permission_name(user.permission))
        .execute(pool)
        .await
        .map(drop)
        .or_backend(|| format!("cannot save user `{}`", user.id))
}

/// Every stored user, by id.
pub(super) async fn users(pool: &PgPool) -> Result<Vec<UserRecord>, StoreError> {
    let rows = sqlx::query(LIST_USERS)
        .fetch_all(pool)
        .await
        .or_backend(|| "cannot list users".into())?;
    rows.iter().map(codec::decode_user).collect()
}

/// What `user_id` spent in `month` (zero when nothing was recorded).
pub(super) async fn monthly_usage(
    pool: &PgPool,
    user_id: &str,
    month: &str,
) -> Result<Usage, StoreError> {
    let row = sqlx::query(SELECT_MONTH)
        .bind(user_id)
        .bind(month)
        .fetch_optional(pool)
        .await
        .or_backend(|| format!("cannot read usage of user `{user_id}`"))?;
    Ok(row
        .as_ref()
        .map(|row| codec::decode_usage(row, user_id))
        .transpose()?
        .unwrap_or_default())
}

/// Gives an unowned, empty session its owner; whether it did.
pub(super) async fn adopt(
    pool: &PgPool,
    session_id: &str,
    user_id: &str,
) -> Result<bool, StoreError> {
    let adopted: Option<i32> = sqlx::query_scalar(ADOPT)
        .bind(session_id)
        .bind(user_id)
        .fetch_optional(pool)
        .await
        .or_backend(|| format!("cannot give session `{session_id}` its owner"))?;
    Ok(adopted.is_some())
}
