//! Accepting messages: each becomes a queued run in its conversation's lane, stored before
//! the caller hears of it, with its platform event's key when it has one.

use std::sync::Arc;

use chrono::Utc;
use keel_core::{LanePolicy, RunOptions, SessionInfo};
use keel_platform::{EnqueueOutcome, QueuedRun};

use super::{Engine, EngineError, Submitted};

impl Engine {
    /// Accepts `text` for `conversation`: a queued run, stored before this returns, started
    /// when the runs before it in the lane have ended — or as the conversation's lane policy
    /// says (see [`super::policies`]): `reject` refuses it while the lane is busy
    /// ([`EngineError::Busy`]), `interrupt` and `rollback` stop the running run, `collect`
    /// folds it with the others waiting.
    pub async fn submit(
        self: &Arc<Self>,
        conversation: &SessionInfo,
        text: String,
        user_id: Option<String>,
    ) -> Result<Submitted, EngineError> {
        self.submit_with(conversation, text, user_id, RunOptions::default())
            .await
    }

    /// [`Engine::submit`], with what the incoming-message pipeline chose for the run.
    pub async fn submit_with(
        self: &Arc<Self>,
        conversation: &SessionInfo,
        text: String,
        user_id: Option<String>,
        options: RunOptions,
    ) -> Result<Submitted, EngineError> {
        self.submit_inbound(conversation, text, user_id, options, None)
            .await
    }

    /// [`Engine::submit_with`] for a platform event: `inbound` is recorded with the queued run,
    /// in its transaction, and an event recorded before is refused as
    /// [`EngineError::Duplicate`] (nothing is queued).
    pub async fn submit_inbound(
        self: &Arc<Self>,
        conversation: &SessionInfo,
        text: String,
        user_id: Option<String>,
        options: RunOptions,
        inbound: Option<keel_platform::InboundKey>,
    ) -> Result<Submitted, EngineError> {
        if !self.accepting() {
            return Err(EngineError::ShuttingDown);
        }
        let submitted = self
            .enqueue(conversation, text, user_id, options, inbound, None)
            .await;
        // A refused message, or a run that ended before the lane's gate was let go, leaves an
        // idle lane behind: forgotten here, so lanes never outlive their runs.
        self.forget_idle_lane(&conversation.id);
        submitted
    }

    /// [`Engine::submit_with`] for a schedule's slot: `slot` is recorded `fired` with the
    /// queued run, in its transaction, and a slot recorded before (fired, missed or refused)
    /// is refused as [`EngineError::Duplicate`] (nothing is queued): a slot runs once. The run
    /// tells `schedule.fired` when it starts. Whatever the conversation's lane policy, a fire
    /// queues (see `enqueue`).
    pub async fn submit_scheduled(
        self: &Arc<Self>,
        conversation: &SessionInfo,
        text: String,
        user_id: Option<String>,
        options: RunOptions,
        slot: keel_platform::SlotKey,
    ) -> Result<Submitted, EngineError> {
        self.submit_catching_up(conversation, text, user_id, options, slot, Vec::new())
            .await
    }

    /// [`Engine::submit_scheduled`] for a fire that stands for missed slots too (`covers`, a
    /// `once` catch-up), which its `schedule.fired` names.
    pub async fn submit_catching_up(
        self: &Arc<Self>,
        conversation: &SessionInfo,
        text: String,
        user_id: Option<String>,
        options: RunOptions,
        slot: keel_platform::SlotKey,
        covers: Vec<chrono::DateTime<Utc>>,
    ) -> Result<Submitted, EngineError> {
        if !self.accepting() {
            return Err(EngineError::ShuttingDown);
        }
        let fired = keel_core::EventKind::ScheduleFired {
            schedule_id: slot.schedule_id.clone(),
            slot: slot.slot,
            covers,
        };
        let submitted = self
            .enqueue(
                conversation,
                text,
                user_id,
                options,
                None,
                Some((slot, fired)),
            )
            .await;
        self.forget_idle_lane(&conversation.id);
        submitted
    }

    /// Queues the run in its lane and the store, and starts it if the lane is free.
    async fn enqueue(
        self: &Arc<Self>,
        conversation: &SessionInfo,
        text: String,
        user_id: Option<String>,
        options: RunOptions,
        inbound: Option<keel_platform::InboundKey>,
        slot: Option<(keel_platform::SlotKey, keel_core::EventKind)>,
    ) -> Result<Submitted, EngineError> {
        let (slot, fired) = slot.unzip();
        let session = conversation.id.clone();
        let gate = self
            .lock_lanes()
            .entry(session.clone())
            .or_default()
            .accepting
            .clone();
        let _in_order = gate.lock().await;
        // A schedule's fire is no double text: it waits its turn whatever the policy (it is
        // never refused, folded into another run, nor stops the run the user started).
        let scheduled = slot.is_some();
        let policy = if scheduled {
            LanePolicy::Queue
        } else {
            conversation.lane_policy
        };
        if policy == LanePolicy::Reject {
            self.refuse_if_busy(&session)?;
        }
        let run = QueuedRun {
            run_id: uuid::Uuid::now_v7().to_string(),
            session_id: session.clone(),
            user_id,
            message: text,
            enqueued_at: Utc::now(),
            provider: self.options.provider.clone(),
            model: options
                .model
                .clone()
                .unwrap_or_else(|| self.options.model.clone()),
            options,
            inbound,
            slot,
        };
        match self
            .store
            .enqueue_run(&run, self.options.queue_limit)
            .await?
        {
            EnqueueOutcome::Queued { .. } => {}
            EnqueueOutcome::Full { queued } => {
                self.metrics.lane_rejected("queue_full");
                return Err(EngineError::LaneFull {
                    conversation: session,
                    queued,
                    retry_after: 1,
                });
            }
            EnqueueOutcome::Duplicate { run_id } => {
                return Err(EngineError::Duplicate { run_id });
            }
        }
        self.watch_report(&run.run_id);
        let run_id = run.run_id.clone();
        if let Some(fired) = fired {
            // Told when the run starts (before it is put in the lane, so it cannot start first).
            self.pending_event(&run_id, fired);
        }
        let (position, stop, quiet) = {
            let mut lanes = self.lock_lanes();
            let lane = lanes.entry(session.clone()).or_default();
            if !scheduled {
                lane.policy = policy;
            }
            lane.queued.push_back(run);
            let stop = matches!(policy, LanePolicy::Interrupt | LanePolicy::Rollback)
                .then(|| lane.running.clone())
                .flatten();
            let quiet = policy == LanePolicy::Collect
                && lane.hold_for_quiet(tokio::time::Instant::now(), self.options.collect_quiet);
            (lane.ahead_of_last(), stop, quiet)
        };
        drop(_in_order);
        tracing::debug!(run_id, conversation = %session, policy = policy.as_str(),
            ahead = position, "a message was queued");
        let queued = keel_core::EventKind::LaneQueued {
            policy: policy.as_str().to_string(),
            ahead: position,
        };
        self.tell(&run_id, &session, queued);
        if let Some(running) = stop {
            self.stop_for(&running, &session, &run_id, policy).await?;
        }
        if quiet {
            self.pump_after_quiet(&session);
        }
        self.pump(&session);
        Ok(Submitted { run_id, position })
    }

    /// Runs ahead of a queued run in its lane, when it is queued here.
    pub fn position(&self, run_id: &str) -> Option<usize> {
        self.lock_lanes()
            .values()
            .find_map(|lane| lane.position(run_id))
    }
}
