//! Channels on SQL (`migrations/0028_channels.sql`): inbound events received, delivery routes,
//! the outbox, channel state and pairing codes. The outbox rows of runs are written by the
//! commit itself ([`OUTBOX_IN_COMMIT`]); an inbound event by the enqueue
//! ([`crate::conversations`]).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::StoreError;
use keel_platform::{
    ChannelStore, DeliveryRoute, InboundKey, Notice, OutboxItem, OutboxStats, Pairing,
};

use crate::OrBackend;
use crate::SqliteStore;
use crate::batch::Batch;
use crate::codec::{
    Columns, Place, column, optional_time_column, sql_limit, time_column, timestamp,
};

/// In a commit (`$1` session, `$2` now, `$5` run), before the run is upserted: an outbox row
/// for the run's new state (the parameter whose number follows) when its conversation has a
/// delivery route and the run was not in that state already. The run's `updated_at` (the
/// parameter after) tells one change of state from another, and is the row's `created_at`.
pub(crate) const OUTBOX_IN_COMMIT: &str = "INSERT INTO outbox (channel, target, session_id, \
     run_id, run_state, marker, created_at, next_attempt_at) \
     SELECT d.channel, d.target, $1, $5, $";

/// The rest of [`OUTBOX_IN_COMMIT`], after the state's and the marker's numbers.
pub(crate) const OUTBOX_IN_COMMIT_TAIL: &str = ", $2 FROM deliveries d WHERE d.session_id = $1 \
     AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = $5 AND r.state = $";

/// Records inbound event (`$1` source, `$2` id) as handled by run `$3` at `$4`; a row when new.
pub(crate) const RECORD_INBOUND: &str = "INSERT INTO inbound_events (source, event_id, run_id, \
     received_at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING RETURNING 1";

/// Sets session `$1`'s delivery route (`$2` channel, `$3` target).
pub(crate) const SET_DELIVERY: &str = "INSERT INTO deliveries (session_id, channel, target) \
     VALUES ($1, $2, $3) ON CONFLICT (session_id) DO UPDATE SET channel = excluded.channel, \
     target = excluded.target";

/// Session `$1`'s delivery route.
pub(crate) const DELIVERY: &str = "SELECT channel, target FROM deliveries WHERE session_id = $1";

/// Adds a notice (`$1` channel, `$2` target, `$3` session, `$4` body) written at `$5`.
pub(crate) const ADD_NOTICE: &str = "INSERT INTO outbox (channel, target, session_id, body, \
     created_at, next_attempt_at) VALUES ($1, $2, $3, $4, $5, $5)";

/// The columns [`decode_item`] reads.
pub(crate) const ITEM_COLUMNS: &str = "id, channel, target, session_id, run_id, run_state, body, \
     created_at, attempts, next_attempt_at, delivered_at, receipt, failed_at, last_error";

/// Marks item `$1` delivered at `$2` with receipt `$3`; a row when it was pending.
pub(crate) const DELIVERED: &str = "UPDATE outbox SET delivered_at = $2, receipt = $3, \
     attempts = attempts + 1 WHERE id = $1 AND delivered_at IS NULL AND failed_at IS NULL \
     RETURNING 1";

/// Counts a failed attempt of item `$1` (error `$2`) and puts the next off until `$3`.
pub(crate) const RETRY: &str = "UPDATE outbox SET attempts = attempts + 1, last_error = $2, \
     next_attempt_at = $3 WHERE id = $1 AND delivered_at IS NULL";

/// Gives item `$1` up with error `$2` at `$3`.
pub(crate) const FAILED: &str = "UPDATE outbox SET attempts = attempts + 1, last_error = $2, \
     failed_at = $3 WHERE id = $1 AND delivered_at IS NULL";

/// Channel `$1`'s outbox counted: `pending`, `delivered`, `failed` and `oldest` pending.
pub(crate) const STATS: &str = "SELECT \
     count(*) FILTER (WHERE delivered_at IS NULL AND failed_at IS NULL) AS pending, \
     count(*) FILTER (WHERE delivered_at IS NOT NULL) AS delivered, \
     count(*) FILTER (WHERE failed_at IS NOT NULL) AS failed, \
     min(created_at) FILTER (WHERE delivered_at IS NULL AND failed_at IS NULL) AS oldest \
     FROM outbox WHERE channel = $1";

/// The last error of channel `$1`'s undelivered items.
pub(crate) const LAST_ERROR: &str = "SELECT last_error FROM outbox WHERE channel = $1 \
     AND delivered_at IS NULL AND last_error IS NOT NULL ORDER BY id DESC LIMIT 1";

/// Keeps value `$3` of channel `$1` under key `$2`, at `$4`.
pub(crate) const SET_STATE: &str = "INSERT INTO channel_state (channel, key, value, updated_at) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (channel, key) DO UPDATE SET \
     value = excluded.value, updated_at = excluded.updated_at";

/// Keeps a pairing code (`$1`…`$5` in [`PAIRING_COLUMNS`] order), replacing the sender's
/// earlier one.
pub(crate) const SAVE_PAIRING: &str = "INSERT INTO pairings (code, platform, platform_user_id, \
     username, created_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (platform, platform_user_id) \
     DO UPDATE SET code = excluded.code, username = excluded.username, \
     created_at = excluded.created_at";

/// The value of channel `$1` under key `$2`.
pub(crate) const STATE: &str = "SELECT value FROM channel_state WHERE channel = $1 AND key = $2";

/// Every key and value of channel `$1`, by key.
pub(crate) const STATES: &str =
    "SELECT key, value FROM channel_state WHERE channel = $1 ORDER BY key";

/// The columns [`decode_pairing`] reads.
pub(crate) const PAIRING_COLUMNS: &str = "code, platform, platform_user_id, username, created_at";

const TAKE_PAIRING: &str = "DELETE FROM pairings WHERE code = $1 RETURNING 1";

/// Adds the outbox row of a commit of `state` to `batch` (see [`OUTBOX_IN_COMMIT`]).
pub(crate) fn add_outbox_row(batch: &mut Batch, state: usize, marker: &str) {
    let marker = batch.param(marker);
    batch
        .end_statement()
        .sql(OUTBOX_IN_COMMIT)
        .number(state)
        .sql(", $")
        .number(marker)
        .sql(", $")
        .number(marker)
        .sql(OUTBOX_IN_COMMIT_TAIL)
        .number(state)
        .sql(") ON CONFLICT DO NOTHING");
}

/// Decodes a row of [`ITEM_COLUMNS`] of `outbox`.
pub(crate) fn decode_item(row: &impl Columns) -> Result<OutboxItem, StoreError> {
    let place = Place::Table("outbox");
    let attempts: i64 = column(row, "attempts", place)?;
    Ok(OutboxItem {
        id: column(row, "id", place)?,
        channel: column(row, "channel", place)?,
        target: column(row, "target", place)?,
        session_id: column(row, "session_id", place)?,
        run_id: column(row, "run_id", place)?,
        run_state: column(row, "run_state", place)?,
        body: column(row, "body", place)?,
        created_at: time_column(row, "created_at", place)?,
        attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
        next_attempt_at: time_column(row, "next_attempt_at", place)?,
        delivered_at: optional_time_column(row, "delivered_at", place)?,
        receipt: column(row, "receipt", place)?,
        failed_at: optional_time_column(row, "failed_at", place)?,
        last_error: column(row, "last_error", place)?,
    })
}

/// Decodes a row of [`PAIRING_COLUMNS`] of `pairings`.
pub(crate) fn decode_pairing(row: &impl Columns) -> Result<Pairing, StoreError> {
    let place = Place::Table("pairings");
    Ok(Pairing {
        code: column(row, "code", place)?,
        platform: column(row, "platform", place)?,
        platform_user_id: column(row, "platform_user_id", place)?,
        username: column(row, "username", place)?,
        created_at: time_column(row, "created_at", place)?,
    })
}

/// Decodes a row of [`DELIVERY`] of session `session_id`.
pub(crate) fn decode_route(
    row: &impl Columns,
    session_id: &str,
) -> Result<DeliveryRoute, StoreError> {
    let place = Place::Session(session_id);
    Ok(DeliveryRoute {
        channel: column(row, "channel", place)?,
        target: column(row, "target", place)?,
    })
}

/// Decodes a row of [`STATS`], with the channel's last error.
pub(crate) fn decode_stats(
    row: &impl Columns,
    last_error: Option<String>,
) -> Result<OutboxStats, StoreError> {
    let place = Place::Table("outbox");
    let count = |name: &str| -> Result<u64, StoreError> {
        let n: i64 = column(row, name, place)?;
        Ok(u64::try_from(n).unwrap_or(0))
    };
    Ok(OutboxStats {
        pending: count("pending")?,
        delivered: count("delivered")?,
        failed: count("failed")?,
        oldest_pending_at: optional_time_column(row, "oldest", place)?,
        last_error,
    })
}

/// Decodes a row of [`STATES`]: a key and its value.
pub(crate) fn decode_state(row: &impl Columns) -> Result<(String, String), StoreError> {
    let place = Place::Table("channel_state");
    Ok((column(row, "key", place)?, column(row, "value", place)?))
}

impl SqliteStore {
    /// Runs one write of this module's constants.
    async fn channel_write(&self, batch: Batch, doing: &str) -> Result<Option<bool>, StoreError> {
        self.conns
            .transaction(vec![batch])
            .await
            .or_backend(|| doing.to_string())
    }
}

#[async_trait]
impl ChannelStore for SqliteStore {
    async fn inbound_run(&self, key: &InboundKey) -> Result<Option<String>, StoreError> {
        crate::conversations::inbound_run(&self.conns, key).await
    }

    async fn record_inbound(
        &self,
        key: &InboundKey,
        run_id: &str,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let batch = Batch::of(RECORD_INBOUND)
            .bind(key.source.as_str())
            .bind(key.event_id.as_str())
            .bind(run_id)
            .bind(timestamp(at));
        Ok(self
            .channel_write(batch, "cannot record an inbound event")
            .await?
            .is_some())
    }

    async fn set_delivery(
        &self,
        session_id: &str,
        route: &DeliveryRoute,
    ) -> Result<(), StoreError> {
        let batch = Batch::of(SET_DELIVERY)
            .bind(session_id)
            .bind(route.channel.as_str())
            .bind(route.target.as_str());
        self.channel_write(batch, "cannot keep a delivery route")
            .await
            .map(drop)
    }

    async fn delivery(&self, session_id: &str) -> Result<Option<DeliveryRoute>, StoreError> {
        let row = sqlx::query(DELIVERY)
            .bind(session_id)
            .fetch_optional(&mut *self.conns.reader().await?)
            .await
            .or_backend(|| format!("cannot read the delivery route of `{session_id}`"))?;
        row.map(|row| decode_route(&row, session_id)).transpose()
    }

    async fn add_notice(&self, notice: &Notice) -> Result<(), StoreError> {
        let batch = Batch::of(ADD_NOTICE)
            .bind(notice.channel.as_str())
            .bind(notice.target.as_str())
            .bind(notice.session_id.as_str())
            .bind(notice.body.as_str())
            .bind(timestamp(notice.at));
        self.channel_write(batch, "cannot add a notice to the outbox")
            .await
            .map(drop)
    }

    async fn pending_outbox(
        &self,
        channel: &str,
        limit: usize,
    ) -> Result<Vec<OutboxItem>, StoreError> {
        let sql = format!(
            "SELECT {ITEM_COLUMNS} FROM outbox WHERE channel = $1 AND delivered_at IS NULL \
             AND failed_at IS NULL ORDER BY id LIMIT $2"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(channel)
            .bind(sql_limit(limit))
            .fetch_all(&mut *self.conns.reader().await?)
            .await
            .or_backend(|| format!("cannot read the outbox of `{channel}`"))?;
        rows.iter().map(decode_item).collect()
    }

    async fn outbox_item(&self, id: i64) -> Result<Option<OutboxItem>, StoreError> {
        let sql = format!("SELECT {ITEM_COLUMNS} FROM outbox WHERE id = $1");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(&mut *self.conns.reader().await?)
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
        let batch = Batch::of(DELIVERED)
            .bind(id)
            .bind(timestamp(at))
            .bind(receipt);
        Ok(self
            .channel_write(batch, "cannot mark a reply delivered")
            .await?
            .is_some())
    }

    async fn outbox_retry(
        &self,
        id: i64,
        error: &str,
        next_attempt_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let batch = Batch::of(RETRY)
            .bind(id)
            .bind(error)
            .bind(timestamp(next_attempt_at));
        self.channel_write(batch, "cannot put a reply off")
            .await
            .map(drop)
    }

    async fn outbox_failed(
        &self,
        id: i64,
        error: &str,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let batch = Batch::of(FAILED).bind(id).bind(error).bind(timestamp(at));
        self.channel_write(batch, "cannot give a reply up")
            .await
            .map(drop)
    }

    async fn outbox_stats(&self, channel: &str) -> Result<OutboxStats, StoreError> {
        let doing = || format!("cannot count the outbox of `{channel}`");
        let mut reader = self.conns.reader().await?;
        let row = sqlx::query(STATS)
            .bind(channel)
            .fetch_one(&mut *reader)
            .await
            .or_backend(doing)?;
        let last_error: Option<String> = sqlx::query_scalar(LAST_ERROR)
            .bind(channel)
            .fetch_optional(&mut *reader)
            .await
            .or_backend(doing)?
            .flatten();
        decode_stats(&row, last_error)
    }

    async fn channel_state(&self, channel: &str, key: &str) -> Result<Option<String>, StoreError> {
        sqlx::query_scalar(STATE)
            .bind(channel)
            .bind(key)
            .fetch_optional(&mut *self.conns.reader().await?)
            .await
            .or_backend(|| format!("cannot read `{key}` of channel `{channel}`"))
    }

    async fn channel_states(&self, channel: &str) -> Result<Vec<(String, String)>, StoreError> {
        let rows = sqlx::query(STATES)
            .bind(channel)
            .fetch_all(&mut *self.conns.reader().await?)
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
        let batch = Batch::of(SET_STATE)
            .bind(channel)
            .bind(key)
            .bind(value)
            .bind(timestamp(at));
        self.channel_write(batch, "cannot keep a channel's state")
            .await
            .map(drop)
    }

    async fn save_pairing(&self, pairing: &Pairing) -> Result<(), StoreError> {
        let batch = Batch::of(SAVE_PAIRING)
            .bind(pairing.code.as_str())
            .bind(pairing.platform.as_str())
            .bind(pairing.platform_user_id.as_str())
            .bind(pairing.username.as_deref())
            .bind(timestamp(pairing.created_at));
        self.channel_write(batch, "cannot keep a pairing code")
            .await
            .map(drop)
    }

    async fn pairing_of(
        &self,
        platform: &str,
        platform_user_id: &str,
    ) -> Result<Option<Pairing>, StoreError> {
        let sql = format!(
            "SELECT {PAIRING_COLUMNS} FROM pairings WHERE platform = $1 AND platform_user_id = $2"
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(platform)
            .bind(platform_user_id)
            .fetch_optional(&mut *self.conns.reader().await?)
            .await
            .or_backend(|| "cannot read pairing codes".to_string())?;
        row.as_ref().map(decode_pairing).transpose()
    }

    async fn take_pairing(&self, code: &str) -> Result<Option<Pairing>, StoreError> {
        let sql = format!("SELECT {PAIRING_COLUMNS} FROM pairings WHERE code = $1");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(code)
            .fetch_optional(&mut *self.conns.reader().await?)
            .await
            .or_backend(|| "cannot read pairing codes".to_string())?;
        let Some(pairing) = row.as_ref().map(decode_pairing).transpose()? else {
            return Ok(None);
        };
        // Only the delete that removed it hands it out: a code works once.
        let taken = self
            .channel_write(
                Batch::of(TAKE_PAIRING).bind(code),
                "cannot take a pairing code",
            )
            .await?;
        Ok(taken.map(|_| pairing))
    }
}
