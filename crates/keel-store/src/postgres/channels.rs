//! keel-platform's `ChannelStore` on PostgreSQL: the SQLite store's statements (and decoders)
//! where the text is the same, one statement or one transaction each.
//!
//! The outbox is read by every worker's courier, so reading it takes what it returns: a
//! store's [`ChannelStore::pending_outbox`] marks the items it returns as its own (`taken_by`,
//! the store's name, until [`TAKEN_FOR`] from now) and skips every target that has a pending
//! item another live worker took. Takers of one channel take turns (a transaction-scoped
//! advisory lock), so two workers reading at once never both get an item, and a target's items
//! go out from one worker, in order. The same store reading again gets its own items again (and
//! keeps them longer), as on SQLite; a worker that dies leaves its items to the others once
//! their time is up (a reply may then go out twice, never not at all).

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::StoreError;
use keel_platform::{
    ChannelStore, DeliveryRoute, InboundKey, Notice, OutboxItem, OutboxStats, Pairing,
};

use super::PgStore;
use crate::OrBackend;
use crate::channels::{
    ADD_NOTICE, DELIVERED, DELIVERY, FAILED, ITEM_COLUMNS, LAST_ERROR, RECORD_INBOUND, RETRY,
    SAVE_PAIRING, SET_DELIVERY, SET_STATE, STATE, STATES, STATS, decode_item, decode_pairing,
    decode_route, decode_state, decode_stats,
};
use crate::codec::{sql_limit, timestamp};

/// How long a worker keeps the outbox items it took without reading the outbox again (its
/// courier reads it several times a second).
pub(crate) const TAKEN_FOR: Duration = Duration::from_secs(60);

const INBOUND_RUN: &str = "SELECT run_id FROM inbound_events WHERE source = $1 AND event_id = $2";

/// Makes the takers of channel `$1`'s outbox take turns, until the transaction ends.
const TAKE_TURN: &str = "SELECT pg_advisory_xact_lock(1801807212, hashtext($1))";

/// Takes for `$2` (until `$4` seconds from now) up to `$3` of channel `$1`'s pending items,
/// oldest first, skipping the targets with a pending item another live taker holds; the
/// columns that follow `RETURNING` are [`ITEM_COLUMNS`].
const TAKE: &str = "WITH free AS (SELECT p.id AS free_id FROM outbox p \
     WHERE p.channel = $1 AND p.delivered_at IS NULL AND p.failed_at IS NULL \
     AND NOT EXISTS (SELECT 1 FROM outbox h WHERE h.channel = p.channel \
     AND h.target = p.target AND h.delivered_at IS NULL AND h.failed_at IS NULL \
     AND h.taken_by <> $2 AND h.taken_until > now()) \
     ORDER BY p.id LIMIT $3) \
     UPDATE outbox SET taken_by = $2, taken_until = now() + $4 * interval '1 second' \
     FROM free WHERE outbox.id = free.free_id \
     AND outbox.delivered_at IS NULL AND outbox.failed_at IS NULL RETURNING ";

/// Takes the pairing with code `$1`, returning it.
const TAKE_PAIRING: &str = "DELETE FROM pairings WHERE code = $1 \
     RETURNING code, platform, platform_user_id, username, created_at";

#[async_trait]
impl ChannelStore for PgStore {
    async fn inbound_run(&self, key: &InboundKey) -> Result<Option<String>, StoreError> {
        sqlx::query_scalar(INBOUND_RUN)
            .bind(&key.source)
            .bind(&key.event_id)
            .fetch_optional(&self.pool)
            .await
            .or_backend(|| format!("cannot read inbound event `{}`", key.event_id))
    }

    async fn record_inbound(
        &self,
        key: &InboundKey,
        run_id: &str,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let row = sqlx::query(RECORD_INBOUND)
            .bind(&key.source)
            .bind(&key.event_id)
            .bind(run_id)
            .bind(timestamp(at))
            .fetch_optional(&self.pool)
            .await
            .or_backend(|| "cannot record an inbound event".into())?;
        Ok(row.is_some())
    }

    async fn set_delivery(
        &self,
        session_id: &str,
        route: &DeliveryRoute,
    ) -> Result<(), StoreError> {
        sqlx::query(SET_DELIVERY)
            .bind(session_id)
            .bind(&route.channel)
            .bind(&route.target)
            .execute(&self.pool)
            .await
            .or_backend(|| "cannot keep a delivery route".into())
            .map(drop)
    }

    async fn delivery(&self, session_id: &str) -> Result<Option<DeliveryRoute>, StoreError> {
        let row = sqlx::query(DELIVERY)
            .bind(session_id)
            .fetch_optional(&self.pool)
            .await
            .or_backend(|| format!("cannot read the delivery route of `{session_id}`"))?;
        row.map(|row| decode_route(&row, session_id)).transpose()
    }

    async fn add_notice(&self, notice: &Notice) -> Result<(), StoreError> {
        sqlx::query(ADD_NOTICE)
            .bind(&notice.channel)
            .bind(&notice.target)
            .bind(&notice.session_id)
            .bind(&notice.body)
            .bind(timestamp(notice.at))
            .execute(&self.pool)
            .await
            .or_backend(|| "cannot add a notice to the outbox".into())
            .map(drop)
    }

    async fn pending_outbox(
        &self,
        channel: &str,
        limit: usize,
    ) -> Result<Vec<OutboxItem>, StoreError> {
        let doing = || format!("cannot take from the outbox of `{channel}`");
        let mut tx = self.pool.begin().await.or_backend(doing)?;
        sqlx::query(TAKE_TURN)
            .bind(channel)
            .execute(&mut *tx)
            .await
            .or_backend(doing)?;
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!("{TAKE}{ITEM_COLUMNS}")))
            .bind(channel)
            .bind(&self.taker)
            .bind(sql_limit(limit))
            .bind(TAKEN_FOR.as_secs_f64())
            .fetch_all(&mut *tx)
            .await
            .or_backend(doing)?;
        tx.commit().await.or_backend(doing)?;
        let mut items = rows
            .iter()
            .map(decode_item)
            .collect::<Result<Vec<_>, _>>()?;
        items.sort_by_key(|item| item.id);
        Ok(items)
    }

    async fn outbox_item(&self, id: i64) -> Result<Option<OutboxItem>, StoreError> {
        let sql = format!("SELECT {ITEM_COLUMNS} FROM outbox WHERE id = $1");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .or_backend(|| format!("cannot read outbox item {id}"))?;
        row.as_ref().map(decode_item).transpose()
    }

    async fn outbox_delivered(
        &self,
        id: i64,
        receipt: &str,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let row = sqlx::query(DELIVERED)
            .bind(id)
            .bind(timestamp(at))
            .bind(receipt)
            .fetch_optional(&self.pool)
            .await
            .or_backend(|| "cannot mark a reply delivered".into())?;
        Ok(row.is_some())
    }

    async fn outbox_retry(
        &self,
        id: i64,
        error: &str,
        next_attempt_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        sqlx::query(RETRY)
            .bind(id)
            .bind(error)
            .bind(timestamp(next_attempt_at))
            .execute(&self.pool)
            .await
            .or_backend(|| "cannot put a reply off".into())
            .map(drop)
    }

    async fn outbox_failed(
        &self,
        id: i64,
        error: &str,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        sqlx::query(FAILED)
            .bind(id)
            .bind(error)
            .bind(timestamp(at))
            .execute(&self.pool)
            .await
            .or_backend(|| "cannot give a reply up".into())
            .map(drop)
    }

    async fn outbox_stats(&self, channel: &str) -> Result<OutboxStats, StoreError> {
        let doing = || format!("cannot count the outbox of `{channel}`");
        let row = sqlx::query(STATS)
            .bind(channel)
            .fetch_one(&self.pool)
            .await
            .or_backend(doing)?;
        let last_error: Option<String> = sqlx::query_scalar(LAST_ERROR)
            .bind(channel)
            .fetch_optional(&self.pool)
            .await
            .or_backend(doing)?
            .flatten();
        decode_stats(&row, last_error)
    }

    async fn channel_state(&self, channel: &str, key: &str) -> Result<Option<String>, StoreError> {
        sqlx::query_scalar(STATE)
            .bind(channel)
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .or_backend(|| format!("cannot read `{key}` of channel `{channel}`"))
    }

    async fn channel_states(&self, channel: &str) -> Result<Vec<(String, String)>, StoreError> {
        let rows = sqlx::query(STATES)
            .bind(channel)
            .fetch_all(&self.pool)
            .await
            .or_backend(|| format!("cannot read the state of channel `{channel}`"))?;
        rows.iter().map(decode_state).collect()
    }

    async fn set_channel_state(
        &self,
        channel: &str,
        key: &str,
        value: &str,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        sqlx::query(SET_STATE)
            .bind(channel)
            .bind(key)
            .bind(value)
            .bind(timestamp(at))
            .execute(&self.pool)
            .await
            .or_backend(|| "cannot keep a channel's state".into())
            .map(drop)
    }

    async fn save_pairing(&self, pairing: &Pairing) -> Result<(), StoreError> {
        sqlx::query(SAVE_PAIRING)
            .bind(&pairing.code)
            .bind(&pairing.platform)
            .bind(&pairing.platform_user_id)
            .bind(pairing.username.as_deref())
            .bind(timestamp(pairing.created_at))
            .execute(&self.pool)
            .await
            .or_backend(|| "cannot keep a pairing code".into())
            .map(drop)
    }

    async fn pairing_of(
        &self,
        platform: &str,
        platform_user_id: &str,
    ) -> Result<Option<Pairing>, StoreError> {
        let sql = format!(
            "SELECT {} FROM pairings WHERE platform = $1 AND platform_user_id = $2",
            crate::channels::PAIRING_COLUMNS
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(platform)
            .bind(platform_user_id)
            .fetch_optional(&self.pool)
            .await
            .or_backend(|| "cannot read pairing codes".into())?;
        row.as_ref().map(decode_pairing).transpose()
    }

    async fn take_pairing(&self, code: &str) -> Result<Option<Pairing>, StoreError> {
        // Only the delete that removed it hands it out: a code works once.
        let row = sqlx::query(TAKE_PAIRING)
            .bind(code)
            .fetch_optional(&self.pool)
            .await
            .or_backend(|| "cannot take a pairing code".into())?;
        row.as_ref().map(decode_pairing).transpose()
    }
}
