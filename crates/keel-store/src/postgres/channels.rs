//! keel-platform's `ChannelStore` on PostgreSQL.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::*;
use keel_platform::*;

use super::PgStore;

#[async_trait]
impl ChannelStore for PgStore {
    async fn inbound_run(&self, _key: &InboundKey) -> Result<Option<String>, StoreError> {
        Err(super::not_yet("ChannelStore::inbound_run"))
    }

    async fn record_inbound(
        &self,
        _key: &InboundKey,
        _run_id: &str,
        _at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        Err(super::not_yet("ChannelStore::record_inbound"))
    }

    async fn set_delivery(
        &self,
        _session_id: &str,
        _route: &DeliveryRoute,
    ) -> Result<(), StoreError> {
        Err(super::not_yet("ChannelStore::set_delivery"))
    }

    async fn delivery(&self, _session_id: &str) -> Result<Option<DeliveryRoute>, StoreError> {
        Err(super::not_yet("ChannelStore::delivery"))
    }

    async fn add_notice(&self, _notice: &Notice) -> Result<(), StoreError> {
        Err(super::not_yet("ChannelStore::add_notice"))
    }

    async fn pending_outbox(
        &self,
        _channel: &str,
        _limit: usize,
    ) -> Result<Vec<OutboxItem>, StoreError> {
        Err(super::not_yet("ChannelStore::pending_outbox"))
    }

    async fn outbox_item(&self, _id: i64) -> Result<Option<OutboxItem>, StoreError> {
        Err(super::not_yet("ChannelStore::outbox_item"))
    }

    async fn outbox_delivered(
        &self,
        _id: i64,
        _receipt: &str,
        _at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        Err(super::not_yet("ChannelStore::outbox_delivered"))
    }

    async fn outbox_retry(
        &self,
        _id: i64,
        _error: &str,
        _next_attempt_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        Err(super::not_yet("ChannelStore::outbox_retry"))
    }

    async fn outbox_failed(
        &self,
        _id: i64,
        _error: &str,
        _at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        Err(super::not_yet("ChannelStore::outbox_failed"))
    }

    async fn outbox_stats(&self, _channel: &str) -> Result<OutboxStats, StoreError> {
        Err(super::not_yet("ChannelStore::outbox_stats"))
    }

    async fn channel_state(
        &self,
        _channel: &str,
        _key: &str,
    ) -> Result<Option<String>, StoreError> {
        Err(super::not_yet("ChannelStore::channel_state"))
    }

    async fn channel_states(&self, _channel: &str) -> Result<Vec<(String, String)>, StoreError> {
        Err(super::not_yet("ChannelStore::channel_states"))
    }

    async fn set_channel_state(
        &self,
        _channel: &str,
        _key: &str,
        _value: &str,
        _at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        Err(super::not_yet("ChannelStore::set_channel_state"))
    }

    async fn save_pairing(&self, _pairing: &Pairing) -> Result<(), StoreError> {
        Err(super::not_yet("ChannelStore::save_pairing"))
    }

    async fn pairing_of(
        &self,
        _platform: &str,
        _platform_user_id: &str,
    ) -> Result<Option<Pairing>, StoreError> {
        Err(super::not_yet("ChannelStore::pairing_of"))
    }

    async fn take_pairing(&self, _code: &str) -> Result<Option<Pairing>, StoreError> {
        Err(super::not_yet("ChannelStore::take_pairing"))
    }
}
