//! A run pausing for a person's approval of a tool call, and going on with the decision.
//!
//! The driver asks [`Run::await_approval`] before a batch runs when one of its calls needs
//! approval: nothing of the batch has started, the run waits as `waiting_on_human` at a
//! `human_pause` checkpoint, and the batch stays owed. [`Run::on_approval`] lets the call run
//! (`approve_once`, `approve_session`) or answers it with a refusal the model reads (`deny`).

use super::{Run, Step, ToolResult};
use crate::approval::{ApprovalDecision, PendingApproval};
use crate::checkpoint::Boundary;
use crate::event::EventKind;
use crate::state::AgentState;

impl Run {
    /// Pauses the run before its pending batch until a person decides about `pending`.
    pub fn await_approval(&mut self, pending: PendingApproval) -> Step {
        self.state = AgentState::WaitingOnHuman;
        self.boundary = Boundary::HumanPause;
        self.events.push(EventKind::ApprovalRequested {
            call_id: pending.call_id.clone(),
            tool: pending.tool.clone(),
            reason: pending.reason.clone(),
        });
        self.approval = Some(pending.clone());
        self.remember(Step::AwaitApproval(pending))
    }

    /// The call waiting for approval, when the run waits for one.
    pub fn pending_approval(&self) -> Option<&PendingApproval> {
        self.approval.as_ref()
    }

    /// True when a person approved call `call_id` of this run.
    pub fn is_approved(&self, call_id: &str) -> bool {
        self.approved.iter().any(|id| id == call_id)
    }

    /// Feeds back the decision about the pending call and returns the next step: the batch,
    /// with the call approved or answered with a refusal.
    pub fn on_approval(&mut self, decision: ApprovalDecision) -> Step {
        let Some(pending) = self.approval.take() else {
            return self.resume();
        };
        self.events.push(EventKind::ApprovalDecided {
            call_id: pending.call_id.clone(),
            decision,
        });
        match decision {
            ApprovalDecision::ApproveOnce | ApprovalDecision::ApproveSession => {
                self.approved.push(pending.call_id);
            }
            ApprovalDecision::Deny => {
                let content = if crate::SessionKind::of(&self.session_id).depth() > 0 {
                    // Nobody decides a child run's calls later: the run that started it can.
                    format!(
                        "Error: this `{}` call was denied and not run: it needs a person's \
                         approval ({}), and a sub-agent does not get it. Do not try it again in \
                         another form; finish without it, and say in your answer what needs \
                         approval, so that the agent that gave you this task can ask for it.",
                        pending.tool, pending.reason
                    )
                } else {
                    format!(
                        "Error: this `{}` call was denied and not run: it needs a person's \
                         approval ({}), and no one gave it. Do not try it again in another form; \
                         say what you would do instead, or ask.",
                        pending.tool, pending.reason
                    )
                };
                self.answered_by_loop.push(ToolResult {
                    call_id: pending.call_id,
                    ok: false,
                    content,
                });
            }
        }
        self.state = AgentState::WaitingForTool;
        self.reason = None;
        self.error = None;
        self.boundary = Boundary::ToolResult;
        let step = self.pending_tools();
        self.remember(step)
    }
}
