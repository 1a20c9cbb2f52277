//! The double-texting policies as rules of the lane (issue 34): what a message for a busy
//! conversation does. `queue` waits (the lane's FIFO); `interrupt` asks the running run to
//! stop at its next safe point (a tool call in flight finishes and its result is recorded);
//! `reject` refuses the message ([`EngineError::Busy`], nothing stored); `rollback` is
//! `interrupt` that also hides the stopped run's messages from the history
//! ([`keel_platform::ConversationStore::roll_back_run`]); `collect` folds the queued runs into
//! the oldest when the lane's next run starts, after a quiet window when the lane was idle
//! ([`keel_platform::ConversationStore::absorb_queued`]); `steer` is queued like `queue` here,
//! and taken by the running run at its next boundary.

use std::sync::Arc;

use chrono::Utc;
use keel_core::{Event, EventKind, LanePolicy};
use keel_platform::{Notice, QueuedRun};

use super::{Engine, EngineError};

/// How a collected run's text begins when the oldest messages were left out.
pub fn left_out_line(left_out: usize) -> String {
    match left_out {
        1 => "(1 earlier message was left out)".to_string(),
        n => format!("({n} earlier messages were left out)"),
    }
}

/// The text of a run that carries `runs` (oldest first): each message on its own line,
/// marked with its arrival time (`[12:03:05] text`, UTC), the newest `cap` only, the number
/// left out said at the top. Returns the text and how many were left out.
pub fn collected_text(runs: &[QueuedRun], cap: usize) -> (String, usize) {
    let left_out = runs.len().saturating_sub(cap.max(1));
    let mut lines = Vec::with_capacity(runs.len() + 1);
    if left_out > 0 {
        lines.push(left_out_line(left_out));
    }
    for run in &runs[left_out..] {
        lines.push(format!(
            "[{}] {}",
            run.enqueued_at.format("%H:%M:%S"),
            run.message
        ));
    }
    (lines.join("\n"), left_out)
}

impl Engine {
    /// Under `reject`: refuses a message for a lane that runs or holds a run (told live and
    /// in the log). Called with the lane's accepting gate held.
    pub(super) fn refuse_if_busy(&self, session: &str) -> Result<(), EngineError> {
        let busy = self
            .lock_lanes()
            .get(session)
            .filter(|lane| lane.is_busy())
            .map(|lane| (lane.running.clone(), lane.queued.len()));
        let Some((running, queued)) = busy else {
            return Ok(());
        };
        tracing::info!(conversation = session, running = ?running, queued,
            "a message for a busy conversation was rejected (lane policy reject)");
        self.tell(
            "",
            session,
            EventKind::LaneRejected {
                running: running.clone(),
                queued,
            },
        );
        self.metrics.lane_rejected("busy");
        Err(EngineError::Busy {
            conversation: session.to_string(),
            running,
        })
    }

    /// Under `interrupt` and `rollback`: asks the running run to stop at its next safe point
    /// for run `by`; under `rollback`, first marks it rolled back, so nothing it stored or
    /// still stores reaches a later run's context.
    pub(super) async fn stop_for(
        &self,
        running: &str,
        session: &str,
        by: &str,
        policy: LanePolicy,
    ) -> Result<(), EngineError> {
        let Some(control) = self.boundaries.get(running) else {
            return Ok(());
        };
        let now = Utc::now();
        if policy == LanePolicy::Rollback {
            self.store.roll_back_run(running, by, now).await?;
            tracing::info!(run_id = running, by, "rolled back (lane policy rollback)");
            let kind = EventKind::LaneRolledBack { by: by.to_string() };
            self.tell(running, session, kind);
        } else {
            let kind = EventKind::LaneInterrupted { by: by.to_string() };
            self.tell(running, session, kind);
        }
        control.cancel.cancel();
        self.store.request_cancel(running, now).await?;
        Ok(())
    }

    /// Under `collect`: starts the lane's next run when its quiet window has passed (the
    /// window is checked again then: a later message may have restarted it).
    pub(super) fn pump_after_quiet(self: &Arc<Self>, session: &str) {
        let engine = Arc::downgrade(self);
        let session = session.to_string();
        let quiet = self.options.collect_quiet;
        let stopping = self.stopping.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(quiet) => {}
                _ = stopping.cancelled() => return,
            }
            if let Some(engine) = engine.upgrade() {
                engine.pump(&session);
            }
        });
    }

    /// Under `collect`: folds the runs taken from the lane with `into` into it, in the store
    /// (their texts become its message, stored on it) and returns it with that message. Runs
    /// cancelled meanwhile are left out; runs the store would not fold (`into` was cancelled)
    /// go back to the lane's front.
    pub(super) async fn collect(&self, mut into: QueuedRun, folded: Vec<QueuedRun>) -> QueuedRun {
        let ids: Vec<String> = folded.iter().map(|run| run.run_id.clone()).collect();
        let mut all = vec![into.clone()];
        all.extend(folded.iter().cloned());
        let cap = self.options.collect_cap;
        let (text, _) = collected_text(&all, cap);
        let now = Utc::now();
        let taken = match self
            .store
            .absorb_queued(&into.run_id, &ids, Some(&text), "collected", now)
            .await
        {
            Ok(taken) => {
                self.metrics
                    .runs_ended_queued("collected", taken.len() as u64);
                taken
            }
            Err(error) => {
                tracing::error!(%error, run_id = %into.run_id, "cannot collect queued runs");
                Vec::new()
            }
        };
        let mut carried = vec![into.clone()];
        carried.extend(
            folded
                .iter()
                .filter(|run| taken.contains(&run.run_id))
                .cloned(),
        );
        let (text, left_out) = collected_text(&carried, cap);
        if taken.len() < ids.len() {
            if !taken.is_empty()
                && let Err(error) = self
                    .store
                    .absorb_queued(&into.run_id, &[], Some(&text), "collected", now)
                    .await
            {
                tracing::error!(%error, run_id = %into.run_id, "cannot store a collected text");
            }
            self.requeue_untaken(&into.session_id, &folded, &taken)
                .await;
        }
        for run_id in &taken {
            self.publish_stored(run_id).await;
        }
        if taken.is_empty() {
            return into;
        }
        into.message = text;
        tracing::info!(run_id = %into.run_id, absorbed = ?taken, left_out,
            "queued messages collected into one run (lane policy collect)");
        if left_out > 0 {
            self.notify_left_out(&into.session_id, left_out).await;
        }
        self.pending_collected(&into.run_id, taken, left_out);
        into
    }

    /// Puts the runs `collect` took from the lane but the store did not fold, and that are
    /// still queued, back at the lane's front, in order.
    async fn requeue_untaken(&self, session: &str, folded: &[QueuedRun], taken: &[String]) {
        let mut back = Vec::new();
        for run in folded.iter().filter(|run| !taken.contains(&run.run_id)) {
            let queued = self
                .store
                .run(&run.run_id)
                .await
                .ok()
                .flatten()
                .is_some_and(|record| record.state == keel_core::AgentState::Queued);
            if queued {
                back.push(run.clone());
            }
        }
        let mut lanes = self.lock_lanes();
        let lane = lanes.entry(session.to_string()).or_default();
        for run in back.into_iter().rev() {
            lane.queued.push_front(run);
        }
    }

    /// Tells the conversation's chat, when it has one, that the oldest messages of a
    /// collected run were left out.
    async fn notify_left_out(&self, session: &str, left_out: usize) {
        let route = match self.store.delivery(session).await {
            Ok(Some(route)) => route,
            Ok(None) => return,
            Err(error) => {
                tracing::error!(%error, session, "cannot read a conversation's route");
                return;
            }
        };
        let body = format!(
            "You sent many messages while I was busy: I read the latest {} of them; {}.",
            self.options.collect_cap,
            left_out_line(left_out).trim_matches(|c| c == '(' || c == ')')
        );
        let notice = Notice {
            channel: route.channel,
            target: route.target,
            session_id: session.to_string(),
            body,
            at: Utc::now(),
        };
        if let Err(error) = self.store.add_notice(&notice).await {
            tracing::error!(%error, session, "cannot tell that messages were left out");
        }
    }

    /// Keeps the `agent.lane.collected` event of a run until its stream opens (it is told
    /// when the run starts here).
    fn pending_collected(&self, run_id: &str, absorbed: Vec<String>, left_out: usize) {
        self.lock_lane_events().insert(
            run_id.to_string(),
            EventKind::LaneCollected { absorbed, left_out },
        );
    }

    /// Keeps an event of a run until its stream opens (a schedule's `schedule.fired`).
    pub(super) fn pending_event(&self, run_id: &str, kind: EventKind) {
        self.lock_lane_events().insert(run_id.to_string(), kind);
    }

    /// Tells a run's pending lane event, now that its stream is open.
    pub(super) fn tell_pending(&self, run_id: &str, session: &str) {
        let pending = self.lock_lane_events().remove(run_id);
        if let Some(kind) = pending {
            self.tell(run_id, session, kind);
        }
    }

    /// Tells a lane decision to the live streams (run `run_id`'s, or with no run the
    /// conversation's).
    pub(super) fn tell(&self, run_id: &str, session: &str, kind: EventKind) {
        self.live.emit(&Event {
            ts: Utc::now(),
            run_id: run_id.to_string(),
            session_id: session.to_string(),
            kind,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn run(id: &str, second: u32, text: &str) -> QueuedRun {
        QueuedRun {
            run_id: id.into(),
            session_id: "c".into(),
            user_id: None,
            message: text.into(),
            enqueued_at: Utc.with_ymd_and_hms(2026, 1, 2, 12, 3, second).unwrap(),
            provider: "mock".into(),
            model: "m".into(),
            options: Default::default(),
            inbound: None,
            slot: None,
        }
    }

    #[test]
    fn a_collected_text_marks_each_message_with_its_time_in_order() {
        let runs = [run("a", 5, "first"), run("b", 7, "second")];
        let (text, left_out) = collected_text(&runs, 20);
        assert_eq!(text, "[12:03:05] first\n[12:03:07] second");
        assert_eq!(left_out, 0);
    }

    #[test]
    fn over_the_cap_the_oldest_are_left_out_and_the_text_says_so() {
        let runs: Vec<QueuedRun> = (0..5)
            .map(|i| run(&format!("r{i}"), i, &format!("m{i}")))
            .collect();
        let (text, left_out) = collected_text(&runs, 2);
        assert_eq!(left_out, 3);
        assert_eq!(
            text,
            "(3 earlier messages were left out)\n[12:03:03] m3\n[12:03:04] m4"
        );
    }
}
