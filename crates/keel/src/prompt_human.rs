//! The person at the terminal: `keel chat`, and `keel run` when its input is a terminal, put
//! `ask_human` questions to them, `clarify` questions with a numbered menu of choices (or an
//! answer of their own), and ask them to approve tool calls (a menu: once, for the session,
//! deny). Prompts go to stderr, so `--json` output stays one object on stdout.

use std::io::{BufRead, Write};

use keel_core::{ApprovalDecision, HumanChannel, PendingApproval};

use crate::terminal_text::terminal_safe;

/// Asks at the terminal, while the run waits.
pub struct PromptHuman;

#[async_trait::async_trait]
impl HumanChannel for PromptHuman {
    async fn ask(&self, question: &str) -> Option<String> {
        let question = question.to_string();
        tokio::task::spawn_blocking(move || {
            eprintln!("\n? {}", terminal_safe(&question));
            eprint!("answer › ");
            read_line().map(|line| line.trim().to_string())
        })
        .await
        .ok()
        .flatten()
    }

    async fn ask_choice(&self, question: &str, choices: &[String]) -> Option<String> {
        let question = question.to_string();
        let choices = choices.to_vec();
        tokio::task::spawn_blocking(move || {
            eprintln!("\n? {}", terminal_safe(&question));
            for (i, choice) in choices.iter().enumerate() {
                eprintln!("  {}. {}", i + 1, terminal_safe(choice));
            }
            loop {
                eprint!("choose 1-{}, or type your own answer › ", choices.len());
                let line = read_line()?;
                match keel_core::human::resolve(&line, &choices) {
                    Ok(answer) => return Some(answer.text().to_string()),
                    Err(reason) => eprintln!("  {reason}"),
                }
            }
        })
        .await
        .ok()
        .flatten()
    }

    async fn approve(&self, call: &PendingApproval) -> Option<ApprovalDecision> {
        let call = call.clone();
        tokio::task::spawn_blocking(move || {
            eprintln!(
                "\n? `{}` needs your approval: {}\n  {}",
                terminal_safe(&call.tool),
                terminal_safe(&call.reason),
                terminal_safe(&call.arguments)
            );
            loop {
                eprint!(
                    "[o]nce, [s]ession (the same call for the rest of this session), [d]eny › "
                );
                let line = read_line()?;
                if let Some(decision) = menu_choice(&line) {
                    return Some(decision);
                }
                eprintln!("  type o, s or d");
            }
        })
        .await
        .ok()
        .flatten()
    }
}

/// One line of stdin; `None` at its end.
fn read_line() -> Option<String> {
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line),
    }
}

/// The menu's answer: `o`, `s`, `d`, or a decision's name.
fn menu_choice(line: &str) -> Option<ApprovalDecision> {
    match line.trim().to_ascii_lowercase().as_str() {
        "o" => Some(ApprovalDecision::ApproveOnce),
        "s" => Some(ApprovalDecision::ApproveSession),
        "d" | "n" | "no" => Some(ApprovalDecision::Deny),
        other => ApprovalDecision::parse(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_menu_takes_letters_and_names_and_nothing_else() {
        assert_eq!(menu_choice("o\n"), Some(ApprovalDecision::ApproveOnce));
        assert_eq!(menu_choice(" S "), Some(ApprovalDecision::ApproveSession));
        assert_eq!(menu_choice("deny"), Some(ApprovalDecision::Deny));
        assert_eq!(menu_choice("once"), Some(ApprovalDecision::ApproveOnce));
        for garbage in ["", "y", "yes", "ok", "sd"] {
            assert_eq!(menu_choice(garbage), None, "{garbage}");
        }
    }
}
