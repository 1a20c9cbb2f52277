//! The memory store's channels: inbound events received, delivery routes, the outbox (a row
//! added by the commit that changes a routed run's state to an ending one or to
//! `waiting_on_human`), channel state and pairing codes.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::state::AgentState;
use keel_core::store::{RunRecord, StoreError};
use keel_platform::{
    ChannelStore, DeliveryRoute, InboundKey, Notice, OutboxItem, OutboxStats, Pairing,
};

use super::{Data, MemoryStore};

/// What the memory store keeps for channels.
#[derive(Default)]
pub(super) struct Channels {
    /// The run each inbound event became.
    pub(super) inbound: HashMap<InboundKey, String>,
    deliveries: HashMap<String, DeliveryRoute>,
    /// Every outbox item, by id (ids from 1, in order).
    outbox: Vec<OutboxItem>,
    state: BTreeMap<(String, String), String>,
    /// Pairings by code.
    pairings: BTreeMap<String, Pairing>,
}

impl Channels {
    fn push(&mut self, mut item: OutboxItem) {
        item.id = self.outbox.len() as i64 + 1;
        self.outbox.push(item);
    }

    fn item_mut(&mut self, id: i64) -> Option<&mut OutboxItem> {
        usize::try_from(id - 1)
            .ok()
            .and_then(|at| self.outbox.get_mut(at))
    }
}

fn new_item(channel: &str, target: &str, session_id: &str, at: DateTime<Utc>) -> OutboxItem {
    OutboxItem {
        id: 0,
        channel: channel.to_string(),
        target: target.to_string(),
        session_id: session_id.to_string(),
        run_id: None,
        run_state: None,
        body: None,
        created_at: at,
        attempts: 0,
        next_attempt_at: at,
        delivered_at: None,
        receipt: None,
        failed_at: None,
        last_error: None,
    }
}

impl Data {
    /// The outbox row of a commit that moves `run` into a new state (see
    /// [`keel_platform::ChannelStore`]).
    pub(super) fn add_outbox_row(&mut self, run: &RunRecord) {
        if !(run.state.is_terminal() || run.state == AgentState::WaitingOnHuman) {
            return;
        }
        let Some(route) = self.channels.deliveries.get(&run.session_id) else {
            return;
        };
        let mut item = new_item(
            &route.channel,
            &route.target,
            &run.session_id,
            run.updated_at,
        );
        item.run_id = Some(run.id.clone());
        item.run_state = Some(run.state.as_str().to_string());
        self.channels.push(item);
    }
}

#[async_trait]
impl ChannelStore for MemoryStore {
    async fn inbound_run(&self, key: &InboundKey) -> Result<Option<String>, StoreError> {
        Ok(self.lock()?.channels.inbound.get(key).cloned())
    }

    async fn record_inbound(
        &self,
        key: &InboundKey,
        run_id: &str,
        _at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut data = self.lock()?;
        if data.channels.inbound.contains_key(key) {
            return Ok(false);
        }
        data.channels
            .inbound
            .insert(key.clone(), run_id.to_string());
        Ok(true)
    }

    async fn set_delivery(
        &self,
        session_id: &str,
        route: &DeliveryRoute,
    ) -> Result<(), StoreError> {
        self.lock()?
            .channels
            .deliveries
            .insert(session_id.to_string(), route.clone());
        Ok(())
    }

    async fn delivery(&self, session_id: &str) -> Result<Option<DeliveryRoute>, StoreError> {
        Ok(self.lock()?.channels.deliveries.get(session_id).cloned())
    }

    async fn add_notice(&self, notice: &Notice) -> Result<(), StoreError> {
        let mut item = new_item(
            &notice.channel,
            &notice.target,
            &notice.session_id,
            notice.at,
        );
        item.body = Some(notice.body.clone());
        self.lock()?.channels.push(item);
        Ok(())
    }

    async fn pending_outbox(
        &self,
        channel: &str,
        limit: usize,
    ) -> Result<Vec<OutboxItem>, StoreError> {
        Ok(self
            .lock()?
            .channels
            .outbox
            .iter()
            .filter(|item| {
                item.channel == channel && item.delivered_at.is_none() && item.failed_at.is_none()
            })
            .take(limit)
            .cloned()
            .collect())
    }

    async fn outbox_item(&self, id: i64) -> Result<Option<OutboxItem>, StoreError> {
        Ok(self.lock()?.channels.item_mut(id).map(|item| item.clone()))
    }

    async fn outbox_delivered(
        &self,
        id: i64,
        receipt: &str,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut data = self.lock()?;
        let Some(item) = data.channels.item_mut(id) else {
            return Ok(false);
        };
        if item.delivered_at.is_some() || item.failed_at.is_some() {
            return Ok(false);
        }
        item.attempts += 1;
        item.delivered_at = Some(at);
        item.receipt = Some(receipt.to_string());
        Ok(true)
    }

    async fn outbox_retry(
        &self,
        id: i64,
        error: &str,
        next_attempt_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        if let Some(item) = self.lock()?.channels.item_mut(id)
            && item.delivered_at.is_none()
        {
            item.attempts += 1;
            item.last_error = Some(error.to_string());
            item.next_attempt_at = next_attempt_at;
        }
        Ok(())
    }

    async fn outbox_failed(
        &self,
        id: i64,
        error: &str,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        if let Some(item) = self.lock()?.channels.item_mut(id)
            && item.delivered_at.is_none()
        {
            item.attempts += 1;
            item.last_error = Some(error.to_string());
            item.failed_at = Some(at);
        }
        Ok(())
    }

    async fn outbox_stats(&self, channel: &str) -> Result<OutboxStats, StoreError> {
        let data = self.lock()?;
        let mut stats = OutboxStats::default();
        for item in data.channels.outbox.iter().filter(|i| i.channel == channel) {
            if item.delivered_at.is_some() {
                stats.delivered += 1;
            } else if item.failed_at.is_some() {
                stats.failed += 1;
            } else {
                stats.pending += 1;
                stats.oldest_pending_at = stats.oldest_pending_at.or(Some(item.created_at));
            }
            if item.delivered_at.is_none() && item.last_error.is_some() {
                stats.last_error = item.last_error.clone();
            }
        }
        Ok(stats)
    }

    async fn channel_state(&self, channel: &str, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .lock()?
            .channels
            .state
            .get(&(channel.to_string(), key.to_string()))
            .cloned())
    }

    async fn channel_states(&self, channel: &str) -> Result<Vec<(String, String)>, StoreError> {
        Ok(self
            .lock()?
            .channels
            .state
            .iter()
            .filter(|((c, _), _)| c == channel)
            .map(|((_, key), value)| (key.clone(), value.clone()))
            .collect())
    }

    async fn set_channel_state(
        &self,
        channel: &str,
        key: &str,
        value: &str,
        _at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.lock()?
            .channels
            .state
            .insert((channel.to_string(), key.to_string()), value.to_string());
        Ok(())
    }

    async fn save_pairing(&self, pairing: &Pairing) -> Result<(), StoreError> {
        let mut data = self.lock()?;
        data.channels.pairings.retain(|_, p| {
            !(p.platform == pairing.platform && p.platform_user_id == pairing.platform_user_id)
        });
        data.channels
            .pairings
            .insert(pairing.code.clone(), pairing.clone());
        Ok(())
    }

    async fn pairing_of(
        &self,
        platform: &str,
        platform_user_id: &str,
    ) -> Result<Option<Pairing>, StoreError> {
        Ok(self
            .lock()?
            .channels
            .pairings
            .values()
            .find(|p| p.platform == platform && p.platform_user_id == platform_user_id)
            .cloned())
    }

    async fn take_pairing(&self, code: &str) -> Result<Option<Pairing>, StoreError> {
        Ok(self.lock()?.channels.pairings.remove(code))
    }
}
