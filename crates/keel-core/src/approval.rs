//! Approval of tool calls (seed 004): what a tool says when a call needs a person's yes, the
//! call a run waits on, and the three answers a person can give.
//!
//! A call needs approval when its tool says so for its arguments ([`crate::Tool::approval`]),
//! or when the session is untrusted and the tool has side effects. The run then pauses as
//! `waiting_on_human` before the call is recorded as started; `approve_session` keeps the call's
//! [`session_key`] in the store so matching calls of the same session run without asking.

use serde::{Deserialize, Serialize};

/// Why a call needs approval, and the pattern an `approve_session` answer allows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalNeed {
    /// Why, for the person deciding.
    pub reason: String,
    /// What an `approve_session` allows for the rest of the session, together with the tool's
    /// name: for `shell`, the command line with its whitespace collapsed; `*` for every call
    /// of the tool.
    pub pattern: String,
}

/// The pattern of an approval for every call of a tool.
pub const ANY_CALL: &str = "*";

/// The key under which an `approve_session` answer is kept: the tool name and the pattern.
pub fn session_key(tool: &str, pattern: &str) -> String {
    format!("{tool} {pattern}")
}

/// A tool call a run waits on a person to approve.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingApproval {
    /// The call's id.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The arguments, as the model gave them.
    pub arguments: String,
    /// Why it needs approval.
    pub reason: String,
    /// What an `approve_session` answer allows (see [`ApprovalNeed::pattern`]).
    pub pattern: String,
}

impl PendingApproval {
    /// The key an `approve_session` answer keeps for this call.
    pub fn session_key(&self) -> String {
        session_key(&self.tool, &self.pattern)
    }
}

/// A person's answer to a pending approval.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// Run this call.
    ApproveOnce,
    /// Run this call, and calls matching its pattern for the rest of the session.
    ApproveSession,
    /// Do not run it; the model is told.
    Deny,
}

impl ApprovalDecision {
    /// The decision's wire name: `approve_once`, `approve_session` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalDecision::ApproveOnce => "approve_once",
            ApprovalDecision::ApproveSession => "approve_session",
            ApprovalDecision::Deny => "deny",
        }
    }

    /// Reads a decision: its wire name, or the short `once`, `session`, `deny`.
    pub fn parse(text: &str) -> Option<ApprovalDecision> {
        match text.trim().to_ascii_lowercase().as_str() {
            "approve_once" | "once" => Some(ApprovalDecision::ApproveOnce),
            "approve_session" | "session" => Some(ApprovalDecision::ApproveSession),
            "deny" => Some(ApprovalDecision::Deny),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_read_their_wire_and_short_names_and_nothing_else() {
        for decision in [
            ApprovalDecision::ApproveOnce,
            ApprovalDecision::ApproveSession,
            ApprovalDecision::Deny,
        ] {
            assert_eq!(ApprovalDecision::parse(decision.as_str()), Some(decision));
        }
        assert_eq!(
            ApprovalDecision::parse(" Session "),
            Some(ApprovalDecision::ApproveSession)
        );
        for garbage in ["", "yes", "approve", "once;rm", "DENY!"] {
            assert_eq!(ApprovalDecision::parse(garbage), None, "{garbage}");
        }
    }
}
