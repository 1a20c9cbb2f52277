//! keel-platform's `ScheduleStore` on PostgreSQL: the SQLite store's statements and decoders
//! where the text is the same. Every write happens once however many workers try: advancing a
//! schedule is compare-and-set (the second of two workers ticking at once waits for the first's
//! row and then finds its slot moved), a slot's first record wins on the primary key, and a
//! fire is settled (and counted) by the one transaction whose update found it unsettled.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::StoreError;
use keel_platform::schedule::{
    EndedFire, Schedule, ScheduleFilter, ScheduleState, ScheduleStore, Settled, SlotEntry, SlotKey,
    SlotRecord,
};
use sqlx::postgres::PgRow;

use super::PgStore;
use crate::OrBackend;
use crate::codec::{sql_limit, timestamp};
use crate::schedules::{
    CREATE, DELETE, DELETE_SLOTS, RECORD_SLOT, SET_STATE, SETTLE, SLOTS, UNSETTLED, decode_ended,
    decode_schedule, decode_slot, due_sql, list_sql, one_sql,
};

/// Moves schedule `$1`'s next slot from `$2` to `$3` at `$4` (done when `$3` is NULL).
const ADVANCE: &str = "UPDATE schedules SET next_slot = $3, updated_at = $4, \
     state = CASE WHEN $3 IS NULL THEN 'done' ELSE state END \
     WHERE id = $1 AND state = 'active' AND next_slot IS NOT DISTINCT FROM $2 RETURNING 1";

const SESSION_EXISTS: &str = "SELECT 1 FROM sessions WHERE id = $1";

/// After [`SETTLE`] changed its row (schedule `$1`, at `$2`, failed for reason `$3` unless
/// NULL): counts the failure, or forgets the failures in a row.
const COUNT_AFTER_SETTLE: &str = "UPDATE schedules SET updated_at = $2, \
     failures = CASE WHEN $3::text IS NULL THEN 0 ELSE failures + 1 END WHERE id = $1";

/// After [`COUNT_AFTER_SETTLE`] counted a failure (reason `$2`): pauses schedule `$1` at
/// `max_failures`, with the reason [`keel_platform::schedule::failures_reason`] writes;
/// returns a row when it did.
const PAUSE_AFTER_SETTLE: &str = "UPDATE schedules SET state = 'paused', \
     paused_reason = failures || ' fires in a row failed; the last: ' || $2 \
     WHERE id = $1 AND $2::text IS NOT NULL AND state = 'active' \
     AND failures >= max_failures RETURNING 1";

impl PgStore {
    /// Runs a read with text parameters `binds`.
    async fn schedule_rows(
        &self,
        sql: String,
        binds: Vec<String>,
        doing: &str,
    ) -> Result<Vec<PgRow>, StoreError> {
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for value in binds {
            query = query.bind(value);
        }
        query
            .fetch_all(&self.pool)
            .await
            .or_backend(|| doing.to_string())
    }
}

#[async_trait]
impl ScheduleStore for PgStore {
    async fn create_schedule(&self, s: &Schedule) -> Result<(), StoreError> {
        let doing = || format!("cannot create schedule `{}`", s.id);
        let created = sqlx::query(CREATE)
            .bind(&s.id)
            .bind(&s.session_id)
            .bind(s.owner.as_deref())
            .bind(s.created_by.as_str())
            .bind(s.kind.as_str())
            .bind(&s.spec)
            .bind(s.tz.as_deref())
            .bind(&s.text)
            .bind(s.catch_up.as_str())
            .bind(i64::from(s.catch_up_cap))
            .bind(s.state.as_str())
            .bind(s.paused_reason.as_deref())
            .bind(s.next_slot.map(timestamp))
            .bind(i64::from(s.failures))
            .bind(i64::from(s.max_failures))
            .bind(timestamp(s.created_at))
            .bind(timestamp(s.updated_at))
            .fetch_optional(&self.pool)
            .await
            .or_backend(doing)?;
        if created.is_some() {
            return Ok(());
        }
        let session = sqlx::query(SESSION_EXISTS)
            .bind(&s.session_id)
            .fetch_optional(&self.pool)
            .await
            .or_backend(doing)?;
        if session.is_none() {
            return Err(StoreError::NotFound(format!("session `{}`", s.session_id)));
        }
        Err(StoreError::Conflict(format!("schedule `{}` exists", s.id)))
    }

    async fn schedule(&self, id: &str) -> Result<Option<Schedule>, StoreError> {
        let rows = self
            .schedule_rows(one_sql(), vec![id.into()], "cannot read a schedule")
            .await?;
        rows.first().map(decode_schedule).transpose()
    }

    async fn list_schedules(&self, filter: &ScheduleFilter) -> Result<Vec<Schedule>, StoreError> {
        let (sql, binds) = list_sql(filter);
        let rows = self
            .schedule_rows(sql, binds, "cannot list schedules")
            .await?;
        rows.iter().map(decode_schedule).collect()
    }

    async fn due_schedules(&self, now: DateTime<Utc>) -> Result<Vec<Schedule>, StoreError> {
        let rows = self
            .schedule_rows(due_sql(), vec![timestamp(now)], "cannot read due schedules")
            .await?;
        rows.iter().map(decode_schedule).collect()
    }

    async fn advance_schedule(
        &self,
        id: &str,
        expected: Option<DateTime<Utc>>,
        next: Option<DateTime<Utc>>,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let row = sqlx::query(ADVANCE)
            .bind(id)
            .bind(expected.map(timestamp))
            .bind(next.map(timestamp))
            .bind(timestamp(at))
            .fetch_optional(&self.pool)
            .await
            .or_backend(|| format!("cannot advance schedule `{id}`"))?;
        Ok(row.is_some())
    }

    async fn set_schedule_state(
        &self,
        id: &str,
        state: ScheduleState,
        reason: Option<&str>,
        next_slot: Option<DateTime<Utc>>,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let row = sqlx::query(SET_STATE)
            .bind(id)
            .bind(state.as_str())
            .bind(reason)
            .bind(next_slot.map(timestamp))
            .bind(timestamp(at))
            .fetch_optional(&self.pool)
            .await
            .or_backend(|| format!("cannot set the state of schedule `{id}`"))?;
        Ok(row.is_some())
    }

    async fn delete_schedule(&self, id: &str) -> Result<bool, StoreError> {
        let doing = || format!("cannot delete schedule `{id}`");
        let mut tx = self.pool.begin().await.or_backend(doing)?;
        sqlx::query(DELETE_SLOTS)
            .bind(id)
            .execute(&mut *tx)
            .await
            .or_backend(doing)?;
        let row = sqlx::query(DELETE)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .or_backend(doing)?;
        tx.commit().await.or_backend(doing)?;
        Ok(row.is_some())
    }

    async fn record_slot(&self, record: &SlotRecord) -> Result<bool, StoreError> {
        let row = sqlx::query(RECORD_SLOT)
            .bind(&record.schedule_id)
            .bind(timestamp(record.slot))
            .bind(record.outcome.as_str())
            .bind(record.run_id.as_deref())
            .bind(record.reason.as_deref())
            .bind(timestamp(record.at))
            .fetch_optional(&self.pool)
            .await
            .or_backend(|| format!("cannot record a slot of schedule `{}`", record.schedule_id))?;
        Ok(row.is_some())
    }

    async fn slots(&self, schedule_id: &str, limit: usize) -> Result<Vec<SlotEntry>, StoreError> {
        let sql = format!("{SLOTS} LIMIT {}", sql_limit(limit));
        let rows = self
            .schedule_rows(sql, vec![schedule_id.into()], "cannot read slots")
            .await?;
        rows.iter().map(decode_slot).collect()
    }

    async fn unsettled_fires(&self) -> Result<Vec<EndedFire>, StoreError> {
        let rows = self
            .schedule_rows(UNSETTLED.into(), Vec::new(), "cannot read ended fires")
            .await?;
        rows.iter().map(decode_ended).collect()
    }

    async fn settle_fire(
        &self,
        key: &SlotKey,
        failure: Option<&str>,
        at: DateTime<Utc>,
    ) -> Result<Option<Settled>, StoreError> {
        let doing = || format!("cannot settle a fire of schedule `{}`", key.schedule_id);
        let mut tx = self.pool.begin().await.or_backend(doing)?;
        // Two workers settling at once: the second waits for the first's row, then finds it
        // settled and changes nothing.
        let settled = sqlx::query(SETTLE)
            .bind(&key.schedule_id)
            .bind(timestamp(key.slot))
            .bind(timestamp(at))
            .bind(failure)
            .fetch_optional(&mut *tx)
            .await
            .or_backend(doing)?;
        if settled.is_none() {
            return Ok(None);
        }
        sqlx::query(COUNT_AFTER_SETTLE)
            .bind(&key.schedule_id)
            .bind(timestamp(at))
            .bind(failure)
            .execute(&mut *tx)
            .await
            .or_backend(doing)?;
        let paused_now = sqlx::query(PAUSE_AFTER_SETTLE)
            .bind(&key.schedule_id)
            .bind(failure)
            .fetch_optional(&mut *tx)
            .await
            .or_backend(doing)?
            .is_some();
        let schedule = sqlx::query(sqlx::AssertSqlSafe(one_sql()))
            .bind(&key.schedule_id)
            .fetch_optional(&mut *tx)
            .await
            .or_backend(doing)?
            .as_ref()
            .map(decode_schedule)
            .transpose()?;
        tx.commit().await.or_backend(doing)?;
        Ok(schedule.map(|schedule| Settled {
            schedule,
            paused_now,
        }))
    }
}
