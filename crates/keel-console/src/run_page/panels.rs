//! Seed 001's panels on the run page, each a form that posts (with the session's CSRF token)
//! to one of the run's actions ([`super::actions`]): **Stop** for a run that runs; the
//! **failure panel** with the journal's handoff and **Resume** (retry or skip an unsafe call);
//! **Approve once / for the session / Deny** for a pending tool call; **Answer** for a
//! question, its `clarify` choices as buttons.

use keel_core::{ErrorReason, Journal, PendingApproval};
use maud::{Markup, html};

use super::data::{RunPageData, Waiting};
use super::transcript::pretty_json;

/// The hidden field every form carries: the session's CSRF token.
fn csrf_field(csrf: &str) -> Markup {
    html! { input type="hidden" name=(crate::csrf::FIELD) value=(csrf); }
}

/// The panels `data`'s run gets, in the order a person needs them.
pub fn panels(data: &RunPageData, csrf: &str) -> Markup {
    let id = &data.run.id;
    html! {
        @if data.stoppable() { (stop(id, csrf)) }
        @match &data.waiting {
            Waiting::Approval(pending) => (approval(id, pending, csrf)),
            Waiting::Question { question, choices } => (answer(id, question, choices, csrf)),
            _ => {}
        }
        @if data.failed() { (failure(data, csrf)) }
    }
}

fn stop(id: &str, csrf: &str) -> Markup {
    html! {
        section #stop-panel .panel aria-labelledby="stop-title" {
            h2 #stop-title { "Running" }
            p { "Stopping lets the run finish the step it is in (a tool call is never cut off \
                 halfway), then it ends as cancelled." }
            form method="post" action={ "/runs/" (id) "/stop" } {
                (csrf_field(csrf))
                button type="submit" .danger { "Stop" }
            }
        }
    }
}

fn approval(id: &str, pending: &PendingApproval, csrf: &str) -> Markup {
    html! {
        section #approval-panel .panel aria-labelledby="approval-title" {
            h2 #approval-title { "Approval needed" }
            p { "The run wants to call " code #approval-tool { (pending.tool) } "." }
            h3 { "Why it needs approval" }
            p #approval-reason { (pending.reason) }
            h3 { "Arguments" }
            pre #approval-arguments .text { (pretty_json(&pending.arguments)) }
            @if !pending.pattern.is_empty() {
                p { "Approving for the session also lets later calls matching "
                    code { (pending.pattern) } " run without asking." }
            }
            form method="post" action={ "/runs/" (id) "/approval" } {
                (csrf_field(csrf))
                input type="hidden" name="call_id" value=(pending.call_id);
                div .buttons {
                    button type="submit" name="decision" value="approve_once" { "Approve once" }
                    button type="submit" name="decision" value="approve_session" {
                        "Approve for the session"
                    }
                    button type="submit" name="decision" value="deny" .danger { "Deny" }
                }
            }
        }
    }
}

fn answer(id: &str, question: &str, choices: &[String], csrf: &str) -> Markup {
    html! {
        section #answer-panel .panel aria-labelledby="answer-title" {
            h2 #answer-title { "A question for you" }
            p #question .text { (question) }
            form method="post" action={ "/runs/" (id) "/answer" } {
                (csrf_field(csrf))
                @if choices.is_empty() {
                    label for="answer-text" { "Your answer" }
                    textarea #answer-text name="answer" rows="3" required {}
                    div .buttons { button type="submit" { "Answer" } }
                } @else {
                    p { "Choose one:" }
                    div .buttons .choices {
                        @for choice in choices {
                            button type="submit" name="answer" value=(choice) { (choice) }
                        }
                    }
                }
            }
        }
    }
}

fn failure(data: &RunPageData, csrf: &str) -> Markup {
    let run = &data.run;
    let halted = match data.waiting {
        Waiting::Halted(reason) => Some(reason),
        _ => None,
    };
    let title = if halted.is_some() {
        "Halted: a decision is needed"
    } else {
        "This run did not finish"
    };
    html! {
        section #failure-panel .panel .failure aria-labelledby="failure-title" {
            h2 #failure-title { (title) }
            p {
                "It is " strong { (run.state.as_str()) }
                @if let Some(reason) = run.reason { " (" (reason.as_str()) ")" } "."
            }
            @match halted {
                Some(ErrorReason::ResumeUnsafe) => p {
                    "The daemon stopped while a side-effecting tool call was under way: it may "
                    "or may not have happened. Retry it (it may happen twice) or skip it (the "
                    "model is told it was skipped)."
                },
                Some(ErrorReason::PromptDrift) => p {
                    "The system prompt changed since the run started."
                },
                _ => {}
            }
            (handoff(data.journal.as_ref()))
            @if data.resumable() { (resume_form(&run.id, halted, csrf)) }
        }
    }
}

/// The journal's handoff: the objective, what was reached, what remains.
fn handoff(journal: Option<&Journal>) -> Markup {
    html! {
        h3 { "Handoff" }
        @match journal {
            None => p #handoff .empty { "The run wrote no journal notes." },
            Some(journal) => dl #handoff .facts {
                dt { "Objective" }
                dd { (or_not_set(&journal.objective)) }
                dt { "What was reached" }
                dd { (or_not_set(&journal.current_state))
                    @if !journal.verified_findings.is_empty() {
                        ul { @for finding in &journal.verified_findings { li { (finding) } } }
                    }
                }
                dt { "What remains" }
                dd { (or_not_set(&journal.handoff_next_action))
                    @if !journal.blockers.is_empty() {
                        p { "Blockers:" }
                        ul { @for blocker in &journal.blockers { li { (blocker) } } }
                    }
                    @if !journal.open_questions.is_empty() {
                        p { "Open questions:" }
                        ul { @for question in &journal.open_questions { li { (question) } } }
                    }
                }
            },
        }
    }
}

fn or_not_set(text: &str) -> &str {
    if text.trim().is_empty() {
        "(not set)"
    } else {
        text
    }
}

fn resume_form(id: &str, halted: Option<ErrorReason>, csrf: &str) -> Markup {
    html! {
        form method="post" action={ "/runs/" (id) "/resume" } {
            (csrf_field(csrf))
            @match halted {
                Some(ErrorReason::ResumeUnsafe) => div .buttons {
                    button type="submit" name="unsafe_call" value="retry" { "Resume: retry the call" }
                    button type="submit" name="unsafe_call" value="skip" { "Resume: skip the call" }
                },
                Some(ErrorReason::PromptDrift) => {
                    p {
                        input #accept-prompt-change type="checkbox" name="accept_prompt_change"
                            value="true" required;
                        " "
                        label for="accept-prompt-change" {
                            "Go on under the current system prompt"
                        }
                    }
                    div .buttons { button type="submit" { "Resume" } }
                },
                _ => div .buttons { button type="submit" { "Resume" } },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_core::{AgentState, RunRecord, Usage};

    fn data(state: AgentState, reason: Option<ErrorReason>, waiting: Waiting) -> RunPageData {
        let now = chrono::Utc::now();
        RunPageData {
            run: RunRecord {
                id: "r1".into(),
                session_id: "s1".into(),
                state,
                reason,
                provider: "mock".into(),
                model: "m".into(),
                model_used: None,
                iterations: 1,
                usage: Usage::default(),
                final_text: None,
                error: None,
                started_at: now,
                updated_at: now,
                finished_at: None,
                cost: 0.0,
                heartbeat_at: None,
                cancel_requested_at: None,
                resume_available: false,
                launch: None,
                worker: None,
            },
            position: None,
            transcript: Vec::new(),
            events: Vec::new(),
            journal: None,
            waiting,
            children: Vec::new(),
            files: Vec::new(),
            moving: false,
        }
    }

    #[test]
    fn a_running_run_offers_stop_only() {
        let html = panels(&data(AgentState::Running, None, Waiting::Nothing), "tok").into_string();
        assert!(html.contains(r#"action="/runs/r1/stop""#), "{html}");
        assert!(html.contains(r#"name="csrf" value="tok""#), "{html}");
        assert!(!html.contains("failure-panel"), "{html}");
    }

    #[test]
    fn a_pending_call_offers_the_three_decisions_for_that_call() {
        let pending = PendingApproval {
            call_id: "c7".into(),
            tool: "shell".into(),
            arguments: r#"{"command":"rm -rf <b>x</b>"}"#.into(),
            reason: "deletes the home directory".into(),
            pattern: "rm -rf ~".into(),
        };
        let html = panels(
            &data(AgentState::WaitingOnHuman, None, Waiting::Approval(pending)),
            "tok",
        )
        .into_string();
        for part in [
            r#"name="call_id" value="c7""#,
            r#"value="approve_once""#,
            r#"value="approve_session""#,
            r#"value="deny""#,
            "deletes the home directory",
            "rm -rf &lt;b&gt;x&lt;/b&gt;",
        ] {
            assert!(html.contains(part), "{part}: {html}");
        }
        assert!(!html.contains("stop-panel"), "{html}");
    }

    #[test]
    fn a_clarify_question_offers_its_choices_as_buttons() {
        let waiting = Waiting::Question {
            question: "Which format?".into(),
            choices: vec!["CSV".into(), "JSON".into()],
        };
        let html = panels(&data(AgentState::WaitingOnHuman, None, waiting), "t").into_string();
        assert!(html.contains(r#"name="answer" value="CSV""#), "{html}");
        assert!(html.contains(r#"name="answer" value="JSON""#), "{html}");
        assert!(!html.contains("textarea"), "{html}");
    }

    #[test]
    fn a_halted_run_gets_the_failure_panel_with_the_handoff_and_both_resumes() {
        let mut data = data(
            AgentState::WaitingOnHuman,
            Some(ErrorReason::ResumeUnsafe),
            Waiting::Halted(ErrorReason::ResumeUnsafe),
        );
        data.journal = Some(Journal {
            objective: "ship it".into(),
            current_state: "built".into(),
            handoff_next_action: "test it".into(),
            ..Journal::default()
        });
        let html = panels(&data, "t").into_string();
        for part in [
            "failure-panel",
            "ship it",
            "built",
            "test it",
            r#"name="unsafe_call" value="retry""#,
            r#"name="unsafe_call" value="skip""#,
        ] {
            assert!(html.contains(part), "{part}: {html}");
        }
    }

    #[test]
    fn a_failed_run_not_resumable_shows_the_handoff_without_resume() {
        let html = panels(
            &data(
                AgentState::Error,
                Some(ErrorReason::ProviderFatal),
                Waiting::Nothing,
            ),
            "t",
        )
        .into_string();
        assert!(html.contains("failure-panel"), "{html}");
        assert!(html.contains("wrote no journal notes"), "{html}");
        assert!(!html.contains("/resume"), "{html}");
    }
}
