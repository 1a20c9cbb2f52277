//! The courier: delivers a channel's outbox. Every `poll` it reads the pending rows, oldest
//! first; each target's rows go out one at a time, in order, targets side by side. A reply is
//! rendered from the store ([`crate::render`]), sent by the platform's [`Outlet`], and marked
//! delivered with the platform's receipt. A failed send is tried again: after the platform's
//! `retry_after` for a 429, with exponential backoff (up to `max_backoff`) for a 5xx or a network
//! error, however long the outage; a target's later replies wait behind it, so order holds. A
//! permanent refusal gives the reply up (kept, with its error, for `keel channels status`).
//!
//! The one window: a reply the platform accepted whose receipt was not stored yet (the process
//! killed between the two) is sent again by the next courier: a duplicate, never a loss.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use keel_platform::{DaemonStore, OutboxItem};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::outlet::{DeliveryError, Outlet};
use crate::render::render;

/// How the courier paces itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CourierPolicy {
    /// How often the outbox is read.
    pub poll: Duration,
    /// The first wait after a transient failure; doubled each time.
    pub first_backoff: Duration,
    /// The longest wait between attempts.
    pub max_backoff: Duration,
    /// Targets delivered to at once.
    pub parallel: usize,
}

impl Default for CourierPolicy {
    fn default() -> Self {
        CourierPolicy {
            poll: Duration::from_millis(200),
            first_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            parallel: 16,
        }
    }
}

/// Delivers one channel's outbox until stopped.
pub struct Courier {
    store: Arc<dyn DaemonStore>,
    outlet: Arc<dyn Outlet>,
    policy: CourierPolicy,
    /// Targets being delivered to now, and those waiting out a failure (until when).
    targets: Mutex<Targets>,
    permits: Arc<Semaphore>,
}

#[derive(Default)]
struct Targets {
    busy: HashSet<String>,
    resting: HashMap<String, Instant>,
}

impl Courier {
    /// A courier of `outlet`'s channel.
    pub fn new(
        store: Arc<dyn DaemonStore>,
        outlet: Arc<dyn Outlet>,
        policy: CourierPolicy,
    ) -> Arc<Self> {
        Arc::new(Courier {
            permits: Arc::new(Semaphore::new(policy.parallel.max(1))),
            store,
            outlet,
            policy,
            targets: Mutex::new(Targets::default()),
        })
    }

    /// Delivers until `stop`, its sends tracked by `tasks`.
    pub async fn run(self: Arc<Self>, stop: CancellationToken, tasks: TaskTracker) {
        let mut ticks = tokio::time::interval(self.policy.poll);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = stop.cancelled() => return,
            }
            if let Err(error) = self.clone().round(&tasks).await {
                tracing::error!(channel = self.outlet.channel(), %error, "cannot read the outbox");
            }
        }
    }

    /// One reading of the outbox: every target with due rows gets a sender.
    pub async fn round(self: Arc<Self>, tasks: &TaskTracker) -> Result<(), keel_core::StoreError> {
        let pending = self
            .store
            .pending_outbox(self.outlet.channel(), 1_000)
            .await?;
        let mut by_target: Vec<(String, Vec<OutboxItem>)> = Vec::new();
        for item in pending {
            match by_target.iter_mut().find(|(t, _)| *t == item.target) {
                Some((_, items)) => items.push(item),
                None => by_target.push((item.target.clone(), vec![item])),
            }
        }
        let now = Instant::now();
        for (target, items) in by_target {
            {
                let mut targets = self.lock();
                if targets.busy.contains(&target)
                    || targets
                        .resting
                        .get(&target)
                        .is_some_and(|until| *until > now)
                {
                    continue;
                }
                targets.resting.remove(&target);
                targets.busy.insert(target.clone());
            }
            let courier = self.clone();
            tasks.spawn(async move {
                let _permit = courier.permits.clone().acquire_owned().await;
                courier.deliver_in_order(&target, items).await;
                courier.lock().busy.remove(&target);
            });
        }
        Ok(())
    }

    /// Sends `items` to `target` in order, stopping at the first that must wait.
    async fn deliver_in_order(&self, target: &str, items: Vec<OutboxItem>) {
        for item in items {
            if let Err(wait) = self.deliver(&item).await {
                self.lock()
                    .resting
                    .insert(target.to_string(), Instant::now() + wait);
                return;
            }
        }
    }

    /// Delivers one item; `Err(wait)` when it must be tried again after `wait`.
    async fn deliver(&self, item: &OutboxItem) -> Result<(), Duration> {
        let channel = self.outlet.channel();
        let reply = match render(self.store.as_ref(), item).await {
            Ok(Some(reply)) => reply,
            Ok(None) => {
                // Its run moved on: there is nothing to tell any more.
                let _ = self
                    .store
                    .outbox_delivered(item.id, "skipped: stale", Utc::now())
                    .await;
                return Ok(());
            }
            Err(error) => {
                tracing::error!(channel, item = item.id, %error, "cannot render a reply");
                return Err(self.backoff(item.attempts));
            }
        };
        match self.outlet.deliver(&item.target, &reply).await {
            Ok(receipt) => {
                if let Err(error) = self
                    .store
                    .outbox_delivered(item.id, &receipt, Utc::now())
                    .await
                {
                    // Sent, but not marked: the one window in which it can be sent twice.
                    tracing::error!(channel, item = item.id, %error,
                        "a reply was sent but its receipt could not be stored");
                    return Err(self.backoff(item.attempts));
                }
                Ok(())
            }
            Err(DeliveryError::Permanent(why)) => {
                tracing::error!(channel, item = item.id, error = %why, "a reply was refused for good; given up");
                let _ = self.store.outbox_failed(item.id, &why, Utc::now()).await;
                Ok(())
            }
            Err(error) => {
                let wait = match &error {
                    DeliveryError::RetryAfter(wait, _) => *wait,
                    _ => self.backoff(item.attempts),
                };
                tracing::warn!(channel, item = item.id, %error, ?wait, "a reply will be sent again");
                let next = Utc::now() + chrono::Duration::from_std(wait).unwrap_or_default();
                let _ = self
                    .store
                    .outbox_retry(item.id, &error.to_string(), next)
                    .await;
                Err(wait)
            }
        }
    }

    /// The wait after `attempts` failed attempts: doubling from the first, capped.
    fn backoff(&self, attempts: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempts.min(16));
        (self.policy.first_backoff * factor).min(self.policy.max_backoff)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Targets> {
        self.targets.lock().unwrap_or_else(|e| e.into_inner())
    }
}
