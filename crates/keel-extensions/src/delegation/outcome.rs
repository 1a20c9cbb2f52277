//! How a child ended, and the tool result the parent reads: each child's answer, or its
//! failure and handoff, in call order.

use keel_core::state::{AgentState, ErrorReason};

/// How one child ended.
#[derive(Clone, Debug, PartialEq)]
pub struct ChildOutcome {
    /// Its goal.
    pub goal: String,
    /// Its run id.
    pub run_id: String,
    /// Its state: terminal, or where it stopped without an end (waiting on a person).
    pub state: AgentState,
    /// Why it ended in `error`.
    pub reason: Option<ErrorReason>,
    /// Its final answer, or the loop's note when it stopped without one.
    pub final_text: Option<String>,
    /// What went wrong.
    pub error: Option<String>,
    /// Model calls it made.
    pub iterations: u32,
    /// Its run journal's handoff, when it kept one.
    pub handoff: Option<String>,
}

impl ChildOutcome {
    /// A child that could not be run at all.
    pub fn not_run(goal: &str, run_id: &str, error: String) -> Self {
        ChildOutcome {
            goal: goal.to_string(),
            run_id: run_id.to_string(),
            state: AgentState::Error,
            reason: None,
            final_text: None,
            error: Some(error),
            iterations: 0,
            handoff: None,
        }
    }

    /// Whether it completed with an answer.
    pub fn ok(&self) -> bool {
        self.state == AgentState::Completed
    }

    /// Its part of the parent's tool result.
    fn describe(&self) -> String {
        let state = match self.reason {
            Some(reason) => format!("{} ({reason})", self.state),
            None => self.state.to_string(),
        };
        let mut text = format!(
            "[sub-agent run {}: {state} after {} iteration{}]",
            self.run_id,
            self.iterations,
            if self.iterations == 1 { "" } else { "s" }
        );
        if self.ok() {
            text.push('\n');
            text.push_str(self.final_text.as_deref().unwrap_or(""));
            return text;
        }
        if self.state == AgentState::WaitingOnHuman {
            text.push_str(
                "\nIt stopped to wait for a person (a question, or approval of a tool call); \
                 nobody answers a sub-agent.",
            );
        }
        if self.state == AgentState::MaxSteps {
            text.push_str("\nIt hit its iteration limit before finishing.");
        }
        if self.state == AgentState::BudgetExceeded {
            text.push_str(
                "\nIt stopped because the budget it shares with you and the other sub-agents \
                 ran out; its task is not finished, and your own budget is as good as spent.",
            );
        }
        if let Some(error) = self
            .error
            .as_deref()
            .filter(|e| Some(*e) != self.final_text.as_deref())
        {
            text.push_str(&format!("\nFailure: {error}"));
        }
        if let Some(last) = &self.final_text {
            text.push_str(&format!("\nIts last words: {last}"));
        }
        match &self.handoff {
            Some(handoff) => text.push_str(&format!("\nHandoff (its run journal):\n{handoff}")),
            None => text.push_str(
                "\nHandoff: it left no run journal; do the rest yourself or delegate it again.",
            ),
        }
        text
    }
}

/// The parent's tool result for its children, in call order, and whether all completed.
pub fn batch_result(outcomes: &[ChildOutcome]) -> (bool, String) {
    let ok = outcomes.iter().all(ChildOutcome::ok);
    if let [only] = outcomes {
        return (ok, only.describe());
    }
    let parts: Vec<String> = outcomes
        .iter()
        .enumerate()
        .map(|(i, outcome)| {
            format!(
                "## Task {} of {}: {}\n{}",
                i + 1,
                outcomes.len(),
                outcome.goal,
                outcome.describe()
            )
        })
        .collect();
    (ok, parts.join("\n\n"))
}
