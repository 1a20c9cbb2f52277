//! The memory store's schedules and their slots' records; a fire's record is written by the
//! enqueue that queues its run (`daemon.rs`), as SQLite does.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::store::StoreError;
use keel_platform::schedule::{
    EndedFire, Schedule, ScheduleFilter, ScheduleState, ScheduleStore, Settled, SlotEntry, SlotKey,
    SlotOutcome, SlotRecord, failures_reason,
};

use super::{Data, MemoryStore};

/// A slot's record and, for a fire, whether its run's end was counted.
struct SlotRow {
    record: SlotRecord,
    settled: bool,
}

/// What the memory store keeps for schedules.
#[derive(Default)]
pub(super) struct Schedules {
    by_id: BTreeMap<String, Schedule>,
    /// Slot records by (schedule, slot).
    slots: BTreeMap<(String, DateTime<Utc>), SlotRow>,
}

impl Schedules {
    /// The run a recorded slot became (`""` for a record without one), when it was recorded.
    pub(super) fn slot_run(&self, key: &SlotKey) -> Option<String> {
        self.slots
            .get(&(key.schedule_id.clone(), key.slot))
            .map(|row| row.record.run_id.clone().unwrap_or_default())
    }

    /// Records a slot unless it was recorded; true when it was not.
    pub(super) fn record(&mut self, record: &SlotRecord) -> bool {
        let key = (record.schedule_id.clone(), record.slot);
        if self.slots.contains_key(&key) {
            return false;
        }
        let settled = record.outcome != SlotOutcome::Fired;
        self.slots.insert(
            key,
            SlotRow {
                record: record.clone(),
                settled,
            },
        );
        true
    }
}

impl Data {
    fn settle(&mut self, key: &SlotKey, failure: Option<&str>, at: DateTime<Utc>) -> Option<bool> {
        let row = self
            .schedules
            .slots
            .get_mut(&(key.schedule_id.clone(), key.slot))
            .filter(|row| row.record.outcome == SlotOutcome::Fired && !row.settled)?;
        row.settled = true;
        if let Some(reason) = failure {
            row.record.outcome = SlotOutcome::Failed;
            row.record.reason = Some(reason.to_string());
        }
        let schedule = self.schedules.by_id.get_mut(&key.schedule_id)?;
        schedule.updated_at = at;
        let Some(reason) = failure else {
            schedule.failures = 0;
            return Some(false);
        };
        schedule.failures += 1;
        let pause =
            schedule.state == ScheduleState::Active && schedule.failures >= schedule.max_failures;
        if pause {
            schedule.state = ScheduleState::Paused;
            schedule.paused_reason = Some(failures_reason(schedule.failures, reason));
        }
        Some(pause)
    }
}

#[async_trait]
impl ScheduleStore for MemoryStore {
    async fn create_schedule(&self, schedule: &Schedule) -> Result<(), StoreError> {
        let mut data = self.lock()?;
        if !data.sessions.contains_key(&schedule.session_id) {
            return Err(StoreError::NotFound(format!(
                "session `{}`",
                schedule.session_id
            )));
        }
        if data.schedules.by_id.contains_key(&schedule.id) {
            return Err(StoreError::Conflict(format!(
                "schedule `{}` exists",
                schedule.id
            )));
        }
        data.schedules
            .by_id
            .insert(schedule.id.clone(), schedule.clone());
        Ok(())
    }

    async fn schedule(&self, id: &str) -> Result<Option<Schedule>, StoreError> {
        Ok(self.lock()?.schedules.by_id.get(id).cloned())
    }

    async fn list_schedules(&self, filter: &ScheduleFilter) -> Result<Vec<Schedule>, StoreError> {
        let data = self.lock()?;
        let mut found: Vec<Schedule> = data
            .schedules
            .by_id
            .values()
            .filter(|s| {
                filter
                    .session_id
                    .as_ref()
                    .is_none_or(|id| s.session_id == *id)
            })
            .filter(|s| {
                filter.owner.is_none()
                    || data
                        .sessions
                        .get(&s.session_id)
                        .map(|(info, _)| &info.owner)
                        == Some(&filter.owner)
            })
            .cloned()
            .collect();
        found.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
        found.truncate(filter.limit);
        Ok(found)
    }

    async fn due_schedules(&self, now: DateTime<Utc>) -> Result<Vec<Schedule>, StoreError> {
        let data = self.lock()?;
        let mut due: Vec<Schedule> = data
            .schedules
            .by_id
            .values()
            .filter(|s| s.state == ScheduleState::Active && s.next_slot.is_some_and(|t| t <= now))
            .cloned()
            .collect();
        due.sort_by(|a, b| (a.next_slot, &a.id).cmp(&(b.next_slot, &b.id)));
        Ok(due)
    }

    async fn advance_schedule(
        &self,
        id: &str,
        expected: Option<DateTime<Utc>>,
        next: Option<DateTime<Utc>>,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut data = self.lock()?;
        let Some(schedule) = data
            .schedules
            .by_id
            .get_mut(id)
            .filter(|s| s.state == ScheduleState::Active && s.next_slot == expected)
        else {
            return Ok(false);
        };
        schedule.next_slot = next;
        schedule.updated_at = at;
        if next.is_none() {
            schedule.state = ScheduleState::Done;
        }
        Ok(true)
    }

    async fn set_schedule_state(
        &self,
        id: &str,
        state: ScheduleState,
        reason: Option<&str>,
        next_slot: Option<DateTime<Utc>>,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut data = self.lock()?;
        let Some(schedule) = data.schedules.by_id.get_mut(id) else {
            return Ok(false);
        };
        schedule.state = state;
        schedule.paused_reason = reason
            .filter(|_| state == ScheduleState::Paused)
            .map(str::to_string);
        if state == ScheduleState::Active {
            schedule.failures = 0;
        }
        if next_slot.is_some() {
            schedule.next_slot = next_slot;
        }
        schedule.updated_at = at;
        Ok(true)
    }

    async fn delete_schedule(&self, id: &str) -> Result<bool, StoreError> {
        let mut data = self.lock()?;
        data.schedules
            .slots
            .retain(|(schedule, _), _| schedule != id);
        Ok(data.schedules.by_id.remove(id).is_some())
    }

    async fn record_slot(&self, record: &SlotRecord) -> Result<bool, StoreError> {
        Ok(self.lock()?.schedules.record(record))
    }

    async fn slots(&self, schedule_id: &str, limit: usize) -> Result<Vec<SlotEntry>, StoreError> {
        let data = self.lock()?;
        Ok(data
            .schedules
            .slots
            .iter()
            .rev()
            .filter(|((schedule, _), _)| schedule == schedule_id)
            .take(limit)
            .map(|(_, row)| SlotEntry {
                record: row.record.clone(),
                run_state: row
                    .record
                    .run_id
                    .as_ref()
                    .and_then(|id| data.runs.get(id))
                    .map(|run| run.state),
            })
            .collect())
    }

    async fn unsettled_fires(&self) -> Result<Vec<EndedFire>, StoreError> {
        let data = self.lock()?;
        let mut ended: Vec<EndedFire> = data
            .schedules
            .slots
            .values()
            .filter(|row| row.record.outcome == SlotOutcome::Fired && !row.settled)
            .filter_map(|row| {
                let run_id = row.record.run_id.as_ref()?;
                let run = data
                    .runs
                    .get(run_id)
                    .filter(|run| run.state.is_terminal())?;
                Some(EndedFire {
                    key: SlotKey {
                        schedule_id: row.record.schedule_id.clone(),
                        slot: row.record.slot,
                    },
                    run_id: run_id.clone(),
                    run_state: run.state,
                    reason: run
                        .error
                        .clone()
                        .or_else(|| run.reason.map(|r| r.as_str().to_string())),
                })
            })
            .collect();
        ended.sort_by(|a, b| {
            (a.key.slot, &a.key.schedule_id).cmp(&(b.key.slot, &b.key.schedule_id))
        });
        Ok(ended)
    }

    async fn settle_fire(
        &self,
        key: &SlotKey,
        failure: Option<&str>,
        at: DateTime<Utc>,
    ) -> Result<Option<Settled>, StoreError> {
        let mut data = self.lock()?;
        let Some(paused_now) = data.settle(key, failure, at) else {
            return Ok(None);
        };
        Ok(data
            .schedules
            .by_id
            .get(&key.schedule_id)
            .map(|schedule| Settled {
                schedule: schedule.clone(),
                paused_now,
            }))
    }
}
