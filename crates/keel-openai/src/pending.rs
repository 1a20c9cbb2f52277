//! A run waiting on a person, told as an assistant message, and the client's next message
//! read as the answer: `approve`, `approve for session` or `deny` for a tool call waiting to
//! be approved; the answer itself for a question.

use keel_core::{ApprovalDecision, RunReport};

/// What a run waiting on a person tells the client, and how to answer.
pub fn pending_text(report: &RunReport) -> String {
    if let Some(approval) = &report.approval {
        let arguments = if approval.arguments.trim().is_empty() {
            "no arguments".to_string()
        } else {
            approval.arguments.clone()
        };
        let reason = if approval.reason.trim().is_empty() {
            String::new()
        } else {
            format!(" ({})", approval.reason.trim())
        };
        return format!(
            "keel wants to run `{}` with {arguments}{reason}: reply `approve`, \
             `approve for session` or `deny`.",
            approval.tool
        );
    }
    let question = report
        .question
        .clone()
        .unwrap_or_else(|| "keel waits for your answer.".to_string());
    if report.choices.is_empty() {
        return format!("{question}\n\nReply with your answer.");
    }
    let choices: Vec<String> = report
        .choices
        .iter()
        .enumerate()
        .map(|(i, choice)| format!("{}. {choice}", i + 1))
        .collect();
    format!(
        "{question}\n\n{}\n\nReply with the number or the text of your choice.",
        choices.join("\n")
    )
}

/// The decision a reply to an approval request names; `None` when it names none.
pub fn decision(reply: &str) -> Option<ApprovalDecision> {
    let words: String = reply
        .trim()
        .trim_end_matches(['.', '!'])
        .to_lowercase()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    match words.as_str() {
        "approve" | "approve once" | "allow" | "allow once" | "yes" | "y" | "ok" => {
            Some(ApprovalDecision::ApproveOnce)
        }
        "approve for session"
        | "approve for the session"
        | "approve session"
        | "allow for session"
        | "allow for the session"
        | "always"
        | "approve always" => Some(ApprovalDecision::ApproveSession),
        "deny" | "no" | "n" | "reject" => Some(ApprovalDecision::Deny),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_core::approval::PendingApproval;

    fn waiting() -> RunReport {
        serde_json::from_value(serde_json::json!({
            "run_id": "r", "session_id": "s", "state": "waiting_on_human", "final_text": null,
            "iterations": 1, "model": "m", "tool_calls": [],
            "usage": {"input_tokens": 1, "output_tokens": 1}}))
        .unwrap()
    }

    #[test]
    fn an_approval_says_what_and_how_to_answer() {
        let mut report = waiting();
        report.approval = Some(PendingApproval {
            call_id: "c1".into(),
            tool: "shell".into(),
            arguments: r#"{"command":"rm -rf build"}"#.into(),
            reason: "destructive".into(),
            pattern: "rm".into(),
        });
        let text = pending_text(&report);
        assert!(
            text.contains("`shell`") && text.contains("rm -rf build"),
            "{text}"
        );
        assert!(
            text.contains("`approve`") && text.contains("`deny`"),
            "{text}"
        );
    }

    #[test]
    fn a_question_lists_its_choices() {
        let mut report = waiting();
        report.question = Some("Which colour?".into());
        report.choices = vec!["red".into(), "blue".into()];
        let text = pending_text(&report);
        assert!(
            text.starts_with("Which colour?") && text.contains("2. blue"),
            "{text}"
        );
    }

    #[test]
    fn replies_are_read_as_decisions() {
        assert_eq!(decision(" Approve. "), Some(ApprovalDecision::ApproveOnce));
        assert_eq!(
            decision("approve for  session"),
            Some(ApprovalDecision::ApproveSession)
        );
        assert_eq!(decision("DENY"), Some(ApprovalDecision::Deny));
        assert_eq!(decision("what is this?"), None);
    }
}
