//! Button presses: an approval's decision or a question's choice, pressed on a platform. A
//! button's data is `{outbox item id}:{code}` (short enough for Telegram's 64 bytes); what the
//! item was about (its run, the tool call, the choices) is kept in the channel's state when the
//! reply is rendered. A press is checked against who pressed it ([`crate::access::may_decide`])
//! and handed to the engine, which refuses a stale one (a call decided already).

use keel_core::{ApprovalDecision, StoreError};
use keel_platform::{DaemonStore, InboundKey};
use keel_server::engine::{Engine, EngineError};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

use crate::access::may_decide;

/// What a reply's buttons are about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ButtonContext {
    /// The run that waits.
    pub run_id: String,
    /// The tool call it waits to have approved; `None` for a question.
    pub call_id: Option<String>,
    /// The question's choices, by button.
    pub choices: Vec<String>,
}

/// A button's data: the outbox item and the button's code (`y`, `s`, `n`, `c0`, `c1`, …).
pub fn button_data(item_id: i64, code: &str) -> String {
    format!("{item_id}:{code}")
}

/// Where a channel's button contexts are kept: a state of their own, beside the channel's.
fn buttons_of(channel: &str) -> String {
    format!("{channel}/buttons")
}

/// Keeps what the buttons of outbox item `item_id` are about.
pub async fn remember_buttons(
    store: &dyn DaemonStore,
    channel: &str,
    item_id: i64,
    context: &ButtonContext,
) -> Result<(), StoreError> {
    let json = serde_json::to_string(context)
        .map_err(|e| StoreError::Backend(format!("cannot encode a button's context: {e}")))?;
    store
        .set_channel_state(
            &buttons_of(channel),
            &item_id.to_string(),
            &json,
            chrono::Utc::now(),
        )
        .await
}

/// What became of a press; its text is for the person who pressed (a toast, an ephemeral reply).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pressed {
    /// The decision or answer was given to the run.
    Done(String),
    /// Refused: not theirs to decide, stale, malformed.
    Refused(String),
    /// The same press was handled before (a redelivery): nothing done.
    Duplicate,
}

impl Pressed {
    /// The text for the person who pressed.
    pub fn text(&self) -> &str {
        match self {
            Pressed::Done(text) | Pressed::Refused(text) => text,
            Pressed::Duplicate => "Already done.",
        }
    }
}

/// Hands button presses to the engine.
pub struct Decider {
    store: Arc<dyn DaemonStore>,
    engine: Arc<Engine>,
}

impl Decider {
    /// A decider over the daemon's store and engine.
    pub fn new(store: Arc<dyn DaemonStore>, engine: Arc<Engine>) -> Self {
        Decider { store, engine }
    }

    /// Handles a press of the button with `data` on `channel` by `platform_user_id` of
    /// `platform`. `key`, the press's own platform id, makes a redelivered press nothing.
    pub async fn press(
        &self,
        channel: &str,
        platform: &str,
        platform_user_id: &str,
        data: &str,
        key: Option<&InboundKey>,
    ) -> Result<Pressed, StoreError> {
        let Some((item_id, code)) = data
            .split_once(':')
            .and_then(|(id, code)| Some((id.parse::<i64>().ok()?, code)))
        else {
            return Ok(Pressed::Refused("This button is not one of keel's.".into()));
        };
        let Some(json) = self
            .store
            .channel_state(&buttons_of(channel), &item_id.to_string())
            .await?
        else {
            return Ok(Pressed::Refused("This button is no longer valid.".into()));
        };
        let Ok(context) = serde_json::from_str::<ButtonContext>(&json) else {
            return Ok(Pressed::Refused("This button is no longer valid.".into()));
        };
        let Some(run) = self.store.run(&context.run_id).await? else {
            return Ok(Pressed::Refused("That run is gone.".into()));
        };
        let owner = self
            .store
            .session(&run.session_id)
            .await?
            .and_then(|session| session.owner);
        let presser = self.store.user_by_link(platform, platform_user_id).await?;
        if !may_decide(presser.as_ref(), owner.as_deref()) {
            tracing::warn!(
                channel,
                platform_user_id,
                run_id = %context.run_id,
                "a button press by someone who may not decide was refused"
            );
            return Ok(Pressed::Refused(
                "Only the conversation's owner or an admin may decide this.".into(),
            ));
        }
        if let Some(key) = key
            && !self
                .store
                .record_inbound(key, &context.run_id, chrono::Utc::now())
                .await?
        {
            return Ok(Pressed::Duplicate);
        }
        let outcome = match (code, &context.call_id) {
            ("y" | "s" | "n", Some(call_id)) => {
                let decision = match code {
                    "y" => ApprovalDecision::ApproveOnce,
                    "s" => ApprovalDecision::ApproveSession,
                    _ => ApprovalDecision::Deny,
                };
                self.engine
                    .approve(&context.run_id, call_id, decision)
                    .await
                    .map(|()| match decision {
                        ApprovalDecision::Deny => "Denied.".to_string(),
                        _ => "Approved.".to_string(),
                    })
            }
            (choice, None) if choice.starts_with('c') => {
                let Some(answer) = choice[1..]
                    .parse::<usize>()
                    .ok()
                    .and_then(|n| context.choices.get(n))
                else {
                    return Ok(Pressed::Refused("This button is not one of keel's.".into()));
                };
                self.engine
                    .answer(&context.run_id, answer.clone())
                    .await
                    .map(|()| format!("Answered: {answer}"))
            }
            _ => return Ok(Pressed::Refused("This button is not one of keel's.".into())),
        };
        Ok(match outcome {
            Ok(text) => Pressed::Done(text),
            Err(EngineError::Store(error)) => return Err(error),
            Err(error) => Pressed::Refused(format!("Nothing done: {error}")),
        })
    }
}
