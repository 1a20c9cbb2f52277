//! What an outbox row says, read from the store when it is sent: a notice's text, or the
//! reply to a run's change of state (its answer, its question, its approval request, why it
//! ended without an answer). A row whose run has since moved on (a question answered through
//! the API before the channel sent it, a run timed out and resumed) is stale: nothing is sent.

use keel_core::{AgentState, ErrorReason, RunReport, StoreError};
use keel_platform::{DaemonStore, OutboxItem};
use keel_server::engine::stored_report;

use crate::decide::{ButtonContext, button_data, remember_buttons};
use crate::outlet::{Button, Reply};

/// Longest tool arguments shown in an approval request, in characters.
const MAX_ARGUMENTS_SHOWN: usize = 1_500;

/// The reply an outbox row sends, or `None` when it is stale (or its run is gone).
pub async fn render(
    store: &dyn DaemonStore,
    item: &OutboxItem,
) -> Result<Option<Reply>, StoreError> {
    if let Some(body) = &item.body {
        return Ok(Some(Reply::Notice { text: body.clone() }));
    }
    let Some(run_id) = &item.run_id else {
        return Ok(None);
    };
    let Some(run) = store.run(run_id).await? else {
        return Ok(None);
    };
    // The row tells the state the run was in when it was written; a run that left it since
    // has another row for where it is now. (A run that waits again, on a new question, is
    // told what it waits on now: a question is never left untold.)
    if item.run_state.as_deref() != Some(run.state.as_str()) {
        return Ok(None);
    }
    if run.state == AgentState::TimedOut && run.resume_available {
        // The reconciler resumes it; its end is told then.
        return Ok(None);
    }
    let Some(report) = stored_report(store, run_id).await? else {
        return Ok(None);
    };
    Ok(Some(reply_of(store, item, &report).await?))
}

async fn reply_of(
    store: &dyn DaemonStore,
    item: &OutboxItem,
    report: &RunReport,
) -> Result<Reply, StoreError> {
    let text = |fallback: &str| {
        report
            .final_text
            .clone()
            .filter(|t| !t.trim().is_empty())
            .unwrap_or_else(|| fallback.to_string())
    };
    Ok(match report.state {
        AgentState::Completed => Reply::Answer {
            text: text("(the run ended without an answer)"),
        },
        AgentState::WaitingOnHuman => {
            if let Some(approval) = &report.approval {
                let context = ButtonContext {
                    run_id: report.run_id.clone(),
                    call_id: Some(approval.call_id.clone()),
                    choices: Vec::new(),
                };
                remember_buttons(store, &item.channel, item.id, &context).await?;
                Reply::Approval {
                    text: approval_text(&approval.tool, &approval.arguments, &approval.reason),
                    buttons: vec![
                        button("Approve", item.id, "y", false),
                        button("Approve for this conversation", item.id, "s", false),
                        button("Deny", item.id, "n", true),
                    ],
                }
            } else if let Some(question) = &report.question {
                let context = ButtonContext {
                    run_id: report.run_id.clone(),
                    call_id: None,
                    choices: report.choices.clone(),
                };
                remember_buttons(store, &item.channel, item.id, &context).await?;
                let buttons = report
                    .choices
                    .iter()
                    .enumerate()
                    .map(|(n, choice)| button(choice, item.id, &format!("c{n}"), false))
                    .collect();
                Reply::Question {
                    text: question.clone(),
                    buttons,
                }
            } else {
                Reply::Failure {
                    text: format!(
                        "The run paused and needs a decision: {}\nResume it with `keel runs resume {}`.",
                        report.error.clone().unwrap_or_default(),
                        report.run_id
                    ),
                }
            }
        }
        AgentState::MaxSteps => Reply::Answer {
            text: text("I stopped: the run reached its iteration limit."),
        },
        AgentState::Cancelled => Reply::Failure {
            text: "Stopped.".into(),
        },
        AgentState::BudgetExceeded => Reply::Failure {
            text: format!(
                "I stopped: {}",
                report
                    .error
                    .clone()
                    .unwrap_or_else(|| "the budget is spent".into())
            ),
        },
        AgentState::TimedOut => Reply::Failure {
            text: "I stopped: the run ran out of time.".into(),
        },
        _ => Reply::Failure {
            text: failure_text(report.reason, report.error.as_deref()),
        },
    })
}

fn button(label: &str, item_id: i64, code: &str, danger: bool) -> Button {
    Button {
        label: label.to_string(),
        data: button_data(item_id, code),
        danger,
    }
}

/// An approval request, for a person: the tool, its arguments (cut), and why it needs one.
fn approval_text(tool: &str, arguments: &str, reason: &str) -> String {
    let mut shown: String = arguments.chars().take(MAX_ARGUMENTS_SHOWN).collect();
    if shown.len() < arguments.len() {
        shown.push('…');
    }
    let why = if reason.is_empty() {
        String::new()
    } else {
        format!("\nWhy: {reason}")
    };
    format!("Approval needed: `{tool}` wants to run with\n```\n{shown}\n```{why}")
}

fn failure_text(reason: Option<ErrorReason>, error: Option<&str>) -> String {
    let why = error.unwrap_or("an error");
    match reason {
        Some(reason) => format!("Sorry, the run failed ({}): {why}", reason.as_str()),
        None => format!("Sorry, the run failed: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_approval_request_cuts_long_arguments() {
        let long = "x".repeat(5_000);
        let text = approval_text("shell", &long, "runs a command");
        assert!(text.contains("`shell`"));
        assert!(text.contains('…'));
        assert!(text.len() < 2_000);
        assert!(text.ends_with("Why: runs a command"));
    }
}
