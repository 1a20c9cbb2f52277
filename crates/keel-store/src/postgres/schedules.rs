//! keel-platform's `ScheduleStore` on PostgreSQL.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::*;
use keel_platform::*;

use super::PgStore;

#[async_trait]
impl ScheduleStore for PgStore {
    async fn create_schedule(&self, _schedule: &Schedule) -> Result<(), StoreError> {
        Err(super::not_yet("ScheduleStore::create_schedule"))
    }

    async fn schedule(&self, _id: &str) -> Result<Option<Schedule>, StoreError> {
        Err(super::not_yet("ScheduleStore::schedule"))
    }

    async fn list_schedules(&self, _filter: &ScheduleFilter) -> Result<Vec<Schedule>, StoreError> {
        Err(super::not_yet("ScheduleStore::list_schedules"))
    }

    async fn due_schedules(&self, _now: DateTime<Utc>) -> Result<Vec<Schedule>, StoreError> {
        Err(super::not_yet("ScheduleStore::due_schedules"))
    }

    async fn advance_schedule(
        &self,
        _id: &str,
        _expected: Option<DateTime<Utc>>,
        _next: Option<DateTime<Utc>>,
        _at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        Err(super::not_yet("ScheduleStore::advance_schedule"))
    }

    async fn set_schedule_state(
        &self,
        _id: &str,
        _state: ScheduleState,
        _reason: Option<&str>,
        _next_slot: Option<DateTime<Utc>>,
        _at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        Err(super::not_yet("ScheduleStore::set_schedule_state"))
    }

    async fn delete_schedule(&self, _id: &str) -> Result<bool, StoreError> {
        Err(super::not_yet("ScheduleStore::delete_schedule"))
    }

    async fn record_slot(&self, _record: &SlotRecord) -> Result<bool, StoreError> {
        Err(super::not_yet("ScheduleStore::record_slot"))
    }

    async fn slots(&self, _schedule_id: &str, _limit: usize) -> Result<Vec<SlotEntry>, StoreError> {
        Err(super::not_yet("ScheduleStore::slots"))
    }

    async fn unsettled_fires(&self) -> Result<Vec<EndedFire>, StoreError> {
        Err(super::not_yet("ScheduleStore::unsettled_fires"))
    }

    async fn settle_fire(
        &self,
        _key: &SlotKey,
        _failure: Option<&str>,
        _at: DateTime<Utc>,
    ) -> Result<Option<Settled>, StoreError> {
        Err(super::not_yet("ScheduleStore::settle_fire"))
    }
}
