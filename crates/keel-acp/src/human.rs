//! keel's [`HumanChannel`] for an editor: an approval is a `session/request_permission` with
//! the options allow once, allow always (for the session) and reject; a `clarify` question with
//! choices is a permission request whose options are the choices. A free-form question
//! (`ask_human`, or a `clarify` the editor dismisses) has no answer here: the run waits for it,
//! the prompt ends saying what it asks, and the session's next prompt is the answer.

use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    PermissionOption, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
};
use agent_client_protocol::{Client, RequestCancellationHandle};
use keel_core::{ApprovalDecision, HumanChannel, PendingApproval};
use tokio_util::sync::CancellationToken;

use crate::updates::{tool_call, tool_kind};

/// The option ids of an approval's permission request.
pub mod option {
    /// Run this call.
    pub const ALLOW_ONCE: &str = "allow_once";
    /// Run it, and calls like it for the rest of the session.
    pub const ALLOW_ALWAYS: &str = "allow_always";
    /// Do not run it; the model is told.
    pub const REJECT_ONCE: &str = "reject_once";
}

/// The decision an approval's selected option stands for; anything else (a cancelled request,
/// an unknown option) is a denial.
pub fn decision_of(outcome: &RequestPermissionOutcome) -> ApprovalDecision {
    match outcome {
        RequestPermissionOutcome::Selected(selected) => match &*selected.option_id.0 {
            option::ALLOW_ONCE => ApprovalDecision::ApproveOnce,
            option::ALLOW_ALWAYS => ApprovalDecision::ApproveSession,
            _ => ApprovalDecision::Deny,
        },
        _ => ApprovalDecision::Deny,
    }
}

/// The options of an approval.
pub fn approval_options() -> Vec<PermissionOption> {
    vec![
        PermissionOption::new(
            option::ALLOW_ONCE,
            "Allow once",
            PermissionOptionKind::AllowOnce,
        ),
        PermissionOption::new(
            option::ALLOW_ALWAYS,
            "Allow for this session",
            PermissionOptionKind::AllowAlways,
        ),
        PermissionOption::new(
            option::REJECT_ONCE,
            "Reject",
            PermissionOptionKind::RejectOnce,
        ),
    ]
}

/// The options of a question with `choices`: `choice-1`, `choice-2`, … named by the choice.
pub fn choice_options(choices: &[String]) -> Vec<PermissionOption> {
    choices
        .iter()
        .enumerate()
        .map(|(i, choice)| {
            PermissionOption::new(
                format!("choice-{}", i + 1),
                choice.clone(),
                PermissionOptionKind::AllowOnce,
            )
        })
        .collect()
}

/// The choice a selected `choice-N` option names.
pub fn choice_of(outcome: &RequestPermissionOutcome, choices: &[String]) -> Option<String> {
    let RequestPermissionOutcome::Selected(selected) = outcome else {
        return None;
    };
    let n: usize = selected.option_id.0.strip_prefix("choice-")?.parse().ok()?;
    choices.get(n.checked_sub(1)?).cloned()
}

/// The human at the editor of one session.
pub struct AcpHuman {
    session_id: String,
    client: ConnectionTo<Client>,
    /// The cancel token of the prompt in flight: a cancel answers a pending request as denied.
    cancel: Mutex<CancellationToken>,
}

impl AcpHuman {
    /// The human of `session_id`, asked over `client`.
    pub fn new(session_id: impl Into<String>, client: ConnectionTo<Client>) -> Arc<Self> {
        Arc::new(AcpHuman {
            session_id: session_id.into(),
            client,
            cancel: Mutex::new(CancellationToken::new()),
        })
    }

    /// The prompt in flight is cancelled with `cancel`.
    pub fn begin_turn(&self, cancel: CancellationToken) {
        *self.cancel.lock().unwrap_or_else(|e| e.into_inner()) = cancel;
    }

    /// Asks the editor; `None` when the prompt was cancelled, the request failed or the
    /// connection ended. A request abandoned (the run moved on) is cancelled at the editor.
    async fn request(
        &self,
        tool_call: ToolCallUpdate,
        options: Vec<PermissionOption>,
    ) -> Option<RequestPermissionOutcome> {
        let cancel = self
            .cancel
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if cancel.is_cancelled() {
            return None;
        }
        let request = RequestPermissionRequest::new(self.session_id.clone(), tool_call, options);
        let sent = self.client.send_request(request);
        let guard = CancelOnDrop(Some(sent.cancellation_handle()));
        let outcome = tokio::select! {
            response = sent.block_task() => response.ok().map(|r| r.outcome),
            _ = cancel.cancelled() => None,
        };
        if outcome.is_some() {
            guard.disarm();
        }
        outcome
    }
}

/// Cancels a permission request at the editor when its asker goes away without an answer.
struct CancelOnDrop(Option<RequestCancellationHandle>);

impl CancelOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take() {
            let _ = handle.cancel();
        }
    }
}

#[async_trait::async_trait]
impl HumanChannel for AcpHuman {
    async fn ask(&self, _question: &str) -> Option<String> {
        // No free text in a permission request: the next prompt answers.
        None
    }

    async fn ask_choice(&self, question: &str, choices: &[String]) -> Option<String> {
        let id = format!("question-{}", uuid::Uuid::now_v7());
        let fields = ToolCallUpdateFields::new()
            .title(question.to_string())
            .kind(tool_kind("clarify"))
            .status(ToolCallStatus::Pending);
        let outcome = self
            .request(ToolCallUpdate::new(id, fields), choice_options(choices))
            .await?;
        choice_of(&outcome, choices)
    }

    async fn approve(&self, call: &PendingApproval) -> Option<ApprovalDecision> {
        let announced = tool_call(
            &call.call_id,
            &call.tool,
            &call.arguments,
            ToolCallStatus::Pending,
        );
        let fields = ToolCallUpdateFields::new()
            .title(format!("{} ({})", announced.title, call.reason))
            .kind(announced.kind)
            .status(ToolCallStatus::Pending)
            .raw_input(announced.raw_input);
        let update = ToolCallUpdate::new(call.call_id.clone(), fields);
        // A cancelled prompt (or a request that failed) denies: the run does not run the call.
        Some(match self.request(update, approval_options()).await {
            Some(outcome) => decision_of(&outcome),
            None => ApprovalDecision::Deny,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::SelectedPermissionOutcome;

    fn selected(id: &str) -> RequestPermissionOutcome {
        RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id.to_string()))
    }

    #[test]
    fn options_map_to_decisions_and_anything_else_denies() {
        assert_eq!(
            decision_of(&selected(option::ALLOW_ONCE)),
            ApprovalDecision::ApproveOnce
        );
        assert_eq!(
            decision_of(&selected(option::ALLOW_ALWAYS)),
            ApprovalDecision::ApproveSession
        );
        assert_eq!(
            decision_of(&selected(option::REJECT_ONCE)),
            ApprovalDecision::Deny
        );
        assert_eq!(decision_of(&selected("bogus")), ApprovalDecision::Deny);
        assert_eq!(
            decision_of(&RequestPermissionOutcome::Cancelled),
            ApprovalDecision::Deny
        );
        let kinds: Vec<_> = approval_options().into_iter().map(|o| o.kind).collect();
        assert_eq!(
            kinds,
            [
                PermissionOptionKind::AllowOnce,
                PermissionOptionKind::AllowAlways,
                PermissionOptionKind::RejectOnce
            ]
        );
    }

    #[test]
    fn a_choice_option_names_its_choice_and_nothing_else() {
        let choices = vec!["red".to_string(), "blue".to_string()];
        assert_eq!(choice_of(&selected("choice-2"), &choices).unwrap(), "blue");
        for bogus in ["choice-0", "choice-3", "choice-x", "allow_once"] {
            assert_eq!(choice_of(&selected(bogus), &choices), None, "{bogus}");
        }
        assert_eq!(
            choice_of(&RequestPermissionOutcome::Cancelled, &choices),
            None
        );
        assert_eq!(choice_options(&choices)[1].name, "blue");
    }
}
