//! Schedules on SQL (`migrations/0030_schedules.sql`): the schedules, and one row per slot in
//! `schedule_slots`. A fire's row is written by the enqueue that queues its run
//! ([`crate::conversations`]); every other write here is one transaction whose guard makes it
//! happen once however many daemons try (advancing a schedule is compare-and-set, a slot's
//! first record wins, a fire is counted once).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::{AgentState, Store, StoreError};
use keel_platform::schedule::{
    CatchUp, Creator, EndedFire, Schedule, ScheduleFilter, ScheduleKind, ScheduleState,
    ScheduleStore, Settled, SlotEntry, SlotKey, SlotOutcome, SlotRecord,
};
use sqlx::sqlite::SqliteRow;

use crate::batch::Batch;
use crate::codec::{
    Columns, Place, column, optional_time_column, sql_limit, time_column, timestamp,
};
use crate::{OrBackend, SqliteStore};

/// The columns [`decode_schedule`] reads, in the order of [`CREATE`]'s parameters.
pub(crate) const COLUMNS: &str = "id, session_id, owner, created_by, kind, spec, tz, text, \
     catch_up, catch_up_cap, state, paused_reason, next_slot, failures, max_failures, created_at, \
     updated_at";

/// Stores a schedule (`$1`…`$17` in [`COLUMNS`] order) when its conversation exists and its id
/// is new; returns a row when it did.
pub(crate) const CREATE: &str = "INSERT INTO schedules (id, session_id, owner, created_by, kind, \
     spec, tz, text, catch_up, catch_up_cap, state, paused_reason, next_slot, failures, \
     max_failures, created_at, updated_at) SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, \
     $11, $12, $13, $14, $15, $16, $17 WHERE EXISTS (SELECT 1 FROM sessions WHERE id = $2) \
     ON CONFLICT (id) DO NOTHING RETURNING 1";

/// Moves schedule `$1`'s next slot from `$2` to `$3` at `$4` (done when `$3` is NULL).
const ADVANCE: &str = "UPDATE schedules SET next_slot = $3, updated_at = $4, \
     state = CASE WHEN $3 IS NULL THEN 'done' ELSE state END \
     WHERE id = $1 AND state = 'active' AND next_slot IS $2 RETURNING 1";

/// Sets schedule `$1`'s state `$2` (reason `$3`, next slot `$4` if not NULL) at `$5`.
pub(crate) const SET_STATE: &str = "UPDATE schedules SET state = $2, \
     paused_reason = CASE WHEN $2 = 'paused' THEN $3 ELSE NULL END, \
     failures = CASE WHEN $2 = 'active' THEN 0 ELSE failures END, \
     next_slot = COALESCE($4, next_slot), updated_at = $5 WHERE id = $1 RETURNING 1";

/// Deletes schedule `$1`'s slots.
pub(crate) const DELETE_SLOTS: &str = "DELETE FROM schedule_slots WHERE schedule_id = $1";

/// Deletes schedule `$1`; a row when it was there.
pub(crate) const DELETE: &str = "DELETE FROM schedules WHERE id = $1 RETURNING 1";

/// Records a slot unless it has a row; a record that is not a fire is settled as it is made.
pub(crate) const RECORD_SLOT: &str = "INSERT INTO schedule_slots \
     (schedule_id, slot, outcome, run_id, reason, at, settled_at) \
     VALUES ($1, $2, $3, $4, $5, $6, CASE WHEN $3 = 'fired' THEN NULL ELSE $6 END) \
     ON CONFLICT DO NOTHING RETURNING 1";

/// Schedule `$1`'s slots, newest first, with their runs' states (a `LIMIT` follows).
pub(crate) const SLOTS: &str = "SELECT s.schedule_id, s.slot, s.outcome, s.run_id, s.reason, \
     s.at, r.state AS run_state FROM schedule_slots s LEFT JOIN runs r ON r.id = s.run_id \
     WHERE s.schedule_id = $1 ORDER BY s.slot DESC";

/// Fires whose run ended and which were not settled yet.
pub(crate) const UNSETTLED: &str = "SELECT s.schedule_id, s.slot, s.run_id, \
     r.state AS run_state, COALESCE(r.error, r.reason) AS reason FROM schedule_slots s \
     JOIN runs r ON r.id = s.run_id \
     WHERE s.outcome = 'fired' AND s.settled_at IS NULL AND r.state IN ('completed', \
     'cancelled', 'timed_out', 'max_steps', 'budget_exceeded', 'error') \
     ORDER BY s.slot, s.schedule_id";

/// Settles fire (`$1`, `$2`) at `$3`, failed for reason `$4` when it is not NULL; returns
/// `false` when it did (the row of [`PAUSE_AFTER_SETTLE`] overrides it).
pub(crate) const SETTLE: &str = "UPDATE schedule_slots SET settled_at = $3, \
     outcome = CASE WHEN $4 IS NULL THEN outcome ELSE 'failed' END, \
     reason = COALESCE($4, reason) \
     WHERE schedule_id = $1 AND slot = $2 AND outcome = 'fired' AND settled_at IS NULL \
     RETURNING 0";

/// After [`SETTLE`] changed its row: counts the failure, or forgets the failures in a row.
const COUNT_AFTER_SETTLE: &str = "UPDATE schedules SET updated_at = $3, \
     failures = CASE WHEN $4 IS NULL THEN 0 ELSE failures + 1 END \
     WHERE id = $1 AND changes() = 1";

/// After [`COUNT_AFTER_SETTLE`] counted a failure: pauses the schedule at `max_failures`, with
/// the reason [`keel_platform::schedule::failures_reason`] writes; returns a row when it did.
const PAUSE_AFTER_SETTLE: &str = "UPDATE schedules SET state = 'paused', \
     paused_reason = failures || ' fires in a row failed; the last: ' || $4 \
     WHERE id = $1 AND changes() = 1 AND $4 IS NOT NULL AND state = 'active' \
     AND failures >= max_failures RETURNING 1";

/// Reads schedule `$1`.
pub(crate) fn one_sql() -> String {
    format!("SELECT {COLUMNS} FROM schedules WHERE id = $1")
}

/// Reads the active schedules whose next slot is at `$1` or before, soonest first.
pub(crate) fn due_sql() -> String {
    format!(
        "SELECT {COLUMNS} FROM schedules WHERE state = 'active' AND next_slot IS NOT NULL \
         AND next_slot <= $1 ORDER BY next_slot, id"
    )
}

/// Reads the schedules `filter` picks, newest first: the SQL and its parameters, in order.
pub(crate) fn list_sql(filter: &ScheduleFilter) -> (String, Vec<String>) {
    let mut sql = format!("SELECT {COLUMNS} FROM schedules WHERE 1 = 1");
    let mut binds = Vec::new();
    if let Some(session) = &filter.session_id {
        binds.push(session.clone());
        sql.push_str(&format!(" AND session_id = ${}", binds.len()));
    }
    if let Some(owner) = &filter.owner {
        binds.push(owner.clone());
        sql.push_str(&format!(
            " AND session_id IN (SELECT id FROM sessions WHERE owner = ${})",
            binds.len()
        ));
    }
    sql.push_str(&format!(
        " ORDER BY created_at DESC, id DESC LIMIT {}",
        sql_limit(filter.limit)
    ));
    (sql, binds)
}

fn corrupt(what: &str, value: &str) -> StoreError {
    StoreError::Corrupt(format!("a row of `schedules`: unknown {what} `{value}`"))
}

fn named<T>(
    row: &impl Columns,
    name: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<T, StoreError> {
    let text: &str = column(row, name, Place::Table("schedules"))?;
    parse(text).ok_or_else(|| corrupt(name, text))
}

fn count(row: &impl Columns, name: &str) -> Result<u32, StoreError> {
    let value: i64 = column(row, name, Place::Table("schedules"))?;
    Ok(u32::try_from(value).unwrap_or(u32::MAX))
}

/// Decodes a row of [`COLUMNS`] of `schedules`.
pub(crate) fn decode_schedule(row: &impl Columns) -> Result<Schedule, StoreError> {
    let place = Place::Table("schedules");
    Ok(Schedule {
        id: column(row, "id", place)?,
        session_id: column(row, "session_id", place)?,
        owner: column(row, "owner", place)?,
        created_by: named(row, "created_by", Creator::parse)?,
        kind: named(row, "kind", ScheduleKind::parse)?,
        spec: column(row, "spec", place)?,
        tz: column(row, "tz", place)?,
        text: column(row, "text", place)?,
        catch_up: named(row, "catch_up", CatchUp::parse)?,
        catch_up_cap: count(row, "catch_up_cap")?,
        state: named(row, "state", ScheduleState::parse)?,
        paused_reason: column(row, "paused_reason", place)?,
        next_slot: optional_time_column(row, "next_slot", place)?,
        failures: count(row, "failures")?,
        max_failures: count(row, "max_failures")?,
        created_at: time_column(row, "created_at", place)?,
        updated_at: time_column(row, "updated_at", place)?,
    })
}

/// Decodes a row of [`SLOTS`].
pub(crate) fn decode_slot(row: &impl Columns) -> Result<SlotEntry, StoreError> {
    let place = Place::Table("schedule_slots");
    let run_state: Option<&str> = column(row, "run_state", place)?;
    Ok(SlotEntry {
        record: SlotRecord {
            schedule_id: column(row, "schedule_id", place)?,
            slot: time_column(row, "slot", place)?,
            outcome: named(row, "outcome", SlotOutcome::parse)?,
            run_id: column(row, "run_id", place)?,
            reason: column(row, "reason", place)?,
            at: time_column(row, "at", place)?,
        },
        run_state: run_state
            .map(|state| {
                state
                    .parse::<AgentState>()
                    .map_err(|e| corrupt("run state", &e.0))
            })
            .transpose()?,
    })
}

/// Decodes a row of [`UNSETTLED`].
pub(crate) fn decode_ended(row: &impl Columns) -> Result<EndedFire, StoreError> {
    let place = Place::Table("schedule_slots");
    let state: &str = column(row, "run_state", place)?;
    Ok(EndedFire {
        key: SlotKey {
            schedule_id: column(row, "schedule_id", place)?,
            slot: time_column(row, "slot", place)?,
        },
        run_id: column(row, "run_id", place)?,
        run_state: state
            .parse()
            .map_err(|e: keel_core::state::UnknownState| corrupt("run state", &e.0))?,
        reason: column(row, "reason", place)?,
    })
}

impl SqliteStore {
    /// Runs one write of this module's constants.
    async fn schedule_write(&self, batch: Batch, doing: &str) -> Result<Option<bool>, StoreError> {
        self.conns
            .transaction(vec![batch])
            .await
            .or_backend(|| doing.to_string())
    }

    /// Runs a read of this module's constants (and parameter numbers) with `binds`.
    async fn schedule_rows(
        &self,
        sql: String,
        binds: Vec<String>,
        doing: &str,
    ) -> Result<Vec<SqliteRow>, StoreError> {
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for value in binds {
            query = query.bind(value);
        }
        query
            .fetch_all(&mut *self.conns.reader().await?)
            .await
            .or_backend(|| doing.to_string())
    }
}

#[async_trait]
impl ScheduleStore for SqliteStore {
    async fn create_schedule(&self, s: &Schedule) -> Result<(), StoreError> {
        let batch = Batch::of(CREATE)
            .bind(s.id.as_str())
            .bind(s.session_id.as_str())
            .bind(s.owner.as_deref())
            .bind(s.created_by.as_str())
            .bind(s.kind.as_str())
            .bind(s.spec.as_str())
            .bind(s.tz.as_deref())
            .bind(s.text.as_str())
            .bind(s.catch_up.as_str())
            .bind(i64::from(s.catch_up_cap))
            .bind(s.state.as_str())
            .bind(s.paused_reason.as_deref())
            .bind(s.next_slot.map(timestamp))
            .bind(i64::from(s.failures))
            .bind(i64::from(s.max_failures))
            .bind(timestamp(s.created_at))
            .bind(timestamp(s.updated_at));
        let doing = format!("cannot create schedule `{}`", s.id);
        if self.schedule_write(batch, &doing).await?.is_some() {
            return Ok(());
        }
        if self.session(&s.session_id).await?.is_none() {
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
        let batch = Batch::of(ADVANCE)
            .bind(id)
            .bind(expected.map(timestamp))
            .bind(next.map(timestamp))
            .bind(timestamp(at));
        let doing = format!("cannot advance schedule `{id}`");
        Ok(self.schedule_write(batch, &doing).await?.is_some())
    }

    async fn set_schedule_state(
        &self,
        id: &str,
        state: ScheduleState,
        reason: Option<&str>,
        next_slot: Option<DateTime<Utc>>,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let batch = Batch::of(SET_STATE)
            .bind(id)
            .bind(state.as_str())
            .bind(reason)
            .bind(next_slot.map(timestamp))
            .bind(timestamp(at));
        let doing = format!("cannot set the state of schedule `{id}`");
        Ok(self.schedule_write(batch, &doing).await?.is_some())
    }

    async fn delete_schedule(&self, id: &str) -> Result<bool, StoreError> {
        let mut batch = Batch::of(DELETE_SLOTS).bind(id);
        batch.end_statement().sql(DELETE);
        let doing = format!("cannot delete schedule `{id}`");
        Ok(self.schedule_write(batch, &doing).await?.is_some())
    }

    async fn record_slot(&self, record: &SlotRecord) -> Result<bool, StoreError> {
        let batch = Batch::of(RECORD_SLOT)
            .bind(record.schedule_id.as_str())
            .bind(timestamp(record.slot))
            .bind(record.outcome.as_str())
            .bind(record.run_id.as_deref())
            .bind(record.reason.as_deref())
            .bind(timestamp(record.at));
        let doing = format!("cannot record a slot of schedule `{}`", record.schedule_id);
        Ok(self.schedule_write(batch, &doing).await?.is_some())
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
        let mut batch = Batch::of(SETTLE)
            .bind(key.schedule_id.as_str())
            .bind(timestamp(key.slot))
            .bind(timestamp(at))
            .bind(failure);
        batch
            .end_statement()
            .sql(COUNT_AFTER_SETTLE)
            .end_statement()
            .sql(PAUSE_AFTER_SETTLE);
        let doing = format!("cannot settle a fire of schedule `{}`", key.schedule_id);
        let Some(paused_now) = self.schedule_write(batch, &doing).await? else {
            return Ok(None);
        };
        Ok(self
            .schedule(&key.schedule_id)
            .await?
            .map(|schedule| Settled {
                schedule,
                paused_now,
            }))
    }
}
