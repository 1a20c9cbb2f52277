//! A streamed answer shown while it is written (`stream = true`): one draft message, sent a
//! second after the run's answer text begins and edited at most once a second with the text so
//! far (plain text, its first 4,096 characters). When the courier delivers the answer, the
//! outlet takes the draft ([`Drafts::take`]) and edits it into the answer's first part.
//!
//! Ordering: a target's draft sits behind a lock that a show holds across its call to
//! Telegram, and a show first checks that the run still works. The outbox row of an answer is
//! written in the commit that ends the run, so once the outlet holds the lock and took the
//! draft, no show of that run can follow: a late edit never overwrites the final text.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel_core::AgentState;
use keel_core::event::{Event, EventKind};
use keel_core::provider::StreamDelta;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::CHANNEL;
use super::client::Client;
use super::outlet::{Sent, chat_id, thread_id};
use crate::outlet::Target;
use crate::runtime::Context;

/// The least time between two shows of a draft.
pub const EVERY: Duration = Duration::from_secs(1);

/// The longest a run's answer is streamed.
const AT_MOST: Duration = Duration::from_secs(600);

/// The most characters a Telegram message holds.
const MAX_CHARS: usize = 4096;

/// One target's draft: the run it shows and its message, once sent.
#[derive(Debug)]
struct Draft {
    run_id: String,
    message_id: Option<i64>,
}

type Slot = Arc<tokio::sync::Mutex<Option<Draft>>>;

/// The drafts being shown, by route target (the JSON of [`Target`]).
#[derive(Default)]
pub struct Drafts {
    slots: Mutex<HashMap<String, Slot>>,
}

impl Drafts {
    fn slot(&self, target: &str) -> Slot {
        self.slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(target.to_string())
            .or_default()
            .clone()
    }

    /// Takes the draft message shown at `target`, if any, waiting for a show in flight; no
    /// show of its run follows.
    pub async fn take(&self, target: &str) -> Option<i64> {
        let slot = self.slot(target);
        let mut draft = slot.lock().await;
        let taken = draft.take().and_then(|d| d.message_id);
        self.slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(target);
        taken
    }
}

/// When the next show may be: not before a second after the last one (or after the text
/// began), and only when the text changed since.
#[derive(Debug)]
pub struct Throttle {
    next: Option<Instant>,
    dirty: bool,
}

impl Throttle {
    /// A throttle with nothing to show yet.
    pub fn new() -> Self {
        Throttle {
            next: None,
            dirty: false,
        }
    }

    /// The text changed at `now`.
    pub fn changed(&mut self, now: Instant) {
        self.dirty = true;
        self.next.get_or_insert(now + EVERY);
    }

    /// When to show next, if there is something to show.
    pub fn due(&self) -> Option<Instant> {
        self.next.filter(|_| self.dirty)
    }

    /// It was shown at `now`.
    pub fn shown(&mut self, now: Instant) {
        self.dirty = false;
        self.next = Some(now + EVERY);
    }
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle::new()
    }
}

/// The answer text so far, from a run's frames: the text of its latest model step.
#[derive(Default)]
struct Answer {
    text: String,
    ended: bool,
}

impl Answer {
    /// Reads one frame; true when the text changed.
    fn read(&mut self, data: &str) -> bool {
        let Ok(event) = serde_json::from_str::<Event>(data) else {
            return false;
        };
        match event.kind {
            EventKind::StreamDelta {
                delta: StreamDelta::Text { text },
            } if !text.is_empty() => {
                self.text.push_str(&text);
                true
            }
            // A new step writes a new answer.
            EventKind::ModelRequest { .. } => {
                self.text.clear();
                false
            }
            EventKind::RunCompleted { .. }
            | EventKind::RunFailed { .. }
            | EventKind::RunCancelled { .. } => {
                self.ended = true;
                false
            }
            _ => false,
        }
    }
}

/// Shows `run_id`'s answer at `target` while it is written.
pub fn spawn(
    ctx: &Context,
    client: Arc<Client>,
    drafts: Arc<Drafts>,
    target: Target,
    run_id: String,
) {
    let (hub, store, stop) = (
        ctx.state.hub.clone(),
        ctx.state.store.clone(),
        ctx.stop.clone(),
    );
    ctx.tasks.spawn(async move {
        let Ok(Some(run)) = store.run(&run_id).await else {
            return;
        };
        let mut following = hub.follow_conversation(&run.session_id);
        let mut answer = Answer::default();
        let mut throttle = Throttle::new();
        let mut seen = None;
        for frame in hub.frames_of(&run_id) {
            seen = Some(frame.id);
            if answer.read(&frame.data) {
                throttle.changed(Instant::now());
            }
        }
        let until = Instant::now() + AT_MOST;
        let key = target.encode();
        while !answer.ended && Instant::now() < until {
            let due = throttle.due().unwrap_or(until);
            tokio::select! {
                _ = stop.cancelled() => return,
                frame = following.recv() => match frame {
                    Ok(frame) if frame.run_id == run_id && seen.is_none_or(|s| frame.id > s) => {
                        if answer.read(&frame.data) {
                            throttle.changed(Instant::now());
                        }
                    }
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(_) => return,
                },
                _ = tokio::time::sleep_until(due) => {
                    if !show(&client, &drafts, &key, &target, &run_id, &answer.text, &store).await {
                        return;
                    }
                    throttle.shown(Instant::now());
                }
            }
        }
    });
}

/// Sends or edits the draft; false when the run no longer works (stop streaming).
async fn show(
    client: &Client,
    drafts: &Drafts,
    key: &str,
    target: &Target,
    run_id: &str,
    text: &str,
    store: &Arc<dyn keel_platform::DaemonStore>,
) -> bool {
    let slot = drafts.slot(key);
    let mut draft = slot.lock().await;
    // Checked under the lock: once the outlet took the draft, the run has ended.
    let alive = matches!(store.run(run_id).await, Ok(Some(ref run))
        if !run.state.is_terminal() && run.state != AgentState::WaitingOnHuman);
    if !alive {
        return false;
    }
    if draft.as_ref().is_some_and(|d| d.run_id != run_id) {
        // Another run's draft waits for its answer here.
        return true;
    }
    let text: String = text.chars().take(MAX_CHARS).collect();
    if text.trim().is_empty() {
        return true;
    }
    match draft.as_ref().and_then(|d| d.message_id) {
        Some(message_id) => {
            let body = json!({"chat_id": chat_id(&target.chat), "message_id": message_id,
                "text": text, "link_preview_options": {"is_disabled": true}});
            if let Err(error) = client.call::<Value>("editMessageText", &body).await {
                tracing::debug!(channel = CHANNEL, %error, "cannot edit a streamed draft");
            }
        }
        None => {
            let mut body = json!({"chat_id": chat_id(&target.chat), "text": text,
                "link_preview_options": {"is_disabled": true}});
            if let Some(thread) = thread_id(target) {
                body["message_thread_id"] = json!(thread);
            }
            if let Some(message_id) = target
                .reply_to
                .as_deref()
                .and_then(|m| m.parse::<i64>().ok())
            {
                body["reply_parameters"] =
                    json!({"message_id": message_id, "allow_sending_without_reply": true});
            }
            match client.call::<Sent>("sendMessage", &body).await {
                Ok(sent) => {
                    *draft = Some(Draft {
                        run_id: run_id.to_string(),
                        message_id: Some(sent.message_id),
                    })
                }
                Err(error) => {
                    tracing::debug!(channel = CHANNEL, %error, "cannot send a streamed draft")
                }
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_throttle_waits_a_second_after_the_text_begins_and_between_shows() {
        let start = Instant::now();
        let mut throttle = Throttle::new();
        assert_eq!(throttle.due(), None, "nothing to show");
        throttle.changed(start);
        throttle.changed(start + Duration::from_millis(300));
        assert_eq!(throttle.due(), Some(start + EVERY));
        let shown = start + Duration::from_millis(1_050);
        throttle.shown(shown);
        assert_eq!(throttle.due(), None, "unchanged since shown");
        throttle.changed(shown + Duration::from_millis(10));
        assert_eq!(throttle.due(), Some(shown + EVERY));
    }

    #[test]
    fn the_answer_is_the_latest_steps_text() {
        let mut answer = Answer::default();
        let delta = |t: &str| {
            json!({"ts": "2026-01-01T00:00:00Z", "run_id": "r", "session_id": "s",
                "event": "agent.stream.delta", "kind": "text", "text": t})
            .to_string()
        };
        assert!(answer.read(&delta("Hel")));
        assert!(answer.read(&delta("lo")));
        assert_eq!(answer.text, "Hello");
        assert!(!answer.read("not json"));
        assert!(!answer.ended);
    }
}
