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
///
/// A decision names the call it decides by `call_id` (see [`check_decision`]): one made about
/// a call the run no longer waits on must never land on the call it waits on now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingApproval {
    /// The call's id: what a decision names.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The arguments, as the model gave them. Written out as the JSON they hold (an object,
    /// in reports and the API), or as a string when they are not JSON; read back from either.
    #[serde(with = "arguments_json")]
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

/// Checks that a decision naming `call_id` is about `pending`, the call run `run_id` waits on;
/// the error says which call waits, for the person to decide that one.
pub fn check_decision(
    run_id: &str,
    pending: &PendingApproval,
    call_id: &str,
) -> Result<(), String> {
    if pending.call_id == call_id {
        return Ok(());
    }
    Err(format!(
        "run `{run_id}` waits for approval of call `{}` (`{}`), not of call `{call_id}`: that \
         decision is stale or about another call, and nothing was decided; read the run's \
         report (`approval`) and decide the call it names",
        pending.call_id, pending.tool
    ))
}

/// The call a run waits to have approved, as checkpoint `state` (the run's JSON) keeps it.
pub fn pending_in_checkpoint(state: &str) -> Option<PendingApproval> {
    let state: serde_json::Value = serde_json::from_str(state).ok()?;
    serde_json::from_value(state.get("approval")?.clone()).ok()
}

/// The call run `run_id` waits to have approved, as its latest checkpoint keeps it.
pub async fn stored_pending(
    store: &dyn crate::Store,
    run_id: &str,
) -> Result<Option<PendingApproval>, crate::StoreError> {
    Ok(store
        .latest_checkpoint(run_id)
        .await?
        .and_then(|checkpoint| pending_in_checkpoint(&checkpoint.state)))
}

/// The serde form of [`PendingApproval::arguments`]: the JSON value the text holds (the text
/// itself, as a JSON string, when it is not JSON); read back from a value or from the text.
mod arguments_json {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::Value;

    pub fn serialize<S: Serializer>(raw: &str, serializer: S) -> Result<S::Ok, S::Error> {
        crate::tool::ToolCallReport::arguments_of(raw).serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
        Ok(match Value::deserialize(deserializer)? {
            // A checkpoint of an older keel kept the text; so does a value that is not JSON.
            Value::String(text) => text,
            value => value.to_string(),
        })
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

    fn pending(arguments: &str) -> PendingApproval {
        PendingApproval {
            call_id: "call_1".into(),
            tool: "shell".into(),
            arguments: arguments.into(),
            reason: "why".into(),
            pattern: "*".into(),
        }
    }

    #[test]
    fn arguments_are_written_as_the_object_they_hold_and_read_back_from_either_form() {
        let call = pending(r#"{"command": "rm -rf ~"}"#);
        let value = serde_json::to_value(&call).unwrap();
        assert_eq!(
            value["arguments"],
            serde_json::json!({"command": "rm -rf ~"})
        );
        let back: PendingApproval = serde_json::from_value(value).unwrap();
        let again: serde_json::Value = serde_json::from_str(&back.arguments).unwrap();
        assert_eq!(again, serde_json::json!({"command": "rm -rf ~"}));
        // Text that is not JSON stays text; an older checkpoint's string is read as it was.
        let broken = pending("{\"command\": ");
        let value = serde_json::to_value(&broken).unwrap();
        assert_eq!(value["arguments"], "{\"command\": ");
        assert_eq!(
            serde_json::from_value::<PendingApproval>(value).unwrap(),
            broken
        );
        let old = serde_json::json!({"call_id": "c", "tool": "t", "arguments": "{\"a\":1}",
                                      "reason": "r", "pattern": "*"});
        let read: PendingApproval = serde_json::from_value(old).unwrap();
        assert_eq!(read.arguments, "{\"a\":1}");
    }

    #[test]
    fn a_decision_is_checked_against_the_call_it_names() {
        let call = pending("{}");
        assert_eq!(check_decision("r", &call, "call_1"), Ok(()));
        let stale = check_decision("r", &call, "call_0").unwrap_err();
        assert!(stale.contains("call `call_1`"), "{stale}");
        assert!(stale.contains("not of call `call_0`"), "{stale}");
        assert!(check_decision("r", &call, "").is_err());
    }

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
