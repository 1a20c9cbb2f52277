//! `keel sessions`: list stored conversations, or print one's transcript.

use std::fmt::Write as _;
use std::process::ExitCode;

use keel_core::{Role, StoredMessage};

use crate::cli::{SessionsAction, SessionsArgs};
use crate::config::{ConfigError, keel_home};
use crate::output::one_line;
use crate::setup;
use crate::terminal_text::terminal_safe;

/// Runs `keel sessions`.
pub async fn sessions(args: SessionsArgs) -> anyhow::Result<ExitCode> {
    let home = keel_home()?;
    let store = setup::open_store(&home).await?;
    match args.action {
        None => {
            let sessions = store.list_sessions(args.limit).await?;
            if sessions.is_empty() {
                println!("no sessions yet: start one with `keel run PROMPT` or `keel chat`");
            }
            for s in sessions {
                println!(
                    "{}  {}  {:>4} msgs  {}",
                    s.id,
                    s.updated_at.format("%Y-%m-%d %H:%M"),
                    s.message_count,
                    terminal_safe(s.title.as_deref().unwrap_or(""))
                );
            }
        }
        Some(SessionsAction::Show { id }) => {
            let Some(info) = store.session(&id).await? else {
                return Err(ConfigError(format!(
                    "no session `{id}`: `keel sessions` lists the stored ones"
                ))
                .into());
            };
            let messages = store.messages(&id).await?;
            println!(
                "session {} — {} messages, started {}",
                info.id,
                messages.len(),
                info.created_at.format("%Y-%m-%d %H:%M:%S UTC")
            );
            print!("{}", terminal_safe(&transcript(&messages)));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A readable transcript: one block per message, tool calls and results shown with their ids.
pub fn transcript(messages: &[StoredMessage]) -> String {
    let mut out = String::new();
    for stored in messages {
        let m = &stored.message;
        let label = match (m.role, m.meta.internal) {
            (_, Some(reason)) => format!(
                "{} (internal: {}{})",
                m.role.as_str(),
                serde_json::to_value(reason)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                m.meta
                    .summary_of
                    .map(|range| format!(", stands in for messages {}–{}", range.first, range.last))
                    .unwrap_or_default()
            ),
            (Role::Tool, None) => {
                format!("tool result [{}]", m.tool_call_id.as_deref().unwrap_or("?"))
            }
            (role, None) => match (&m.meta.model, m.meta.output_tokens) {
                (Some(model), Some(tokens)) => {
                    format!("{} ({model}, {tokens} output tokens)", role.as_str())
                }
                (Some(model), None) => format!("{} ({model})", role.as_str()),
                _ => role.as_str().to_string(),
            },
        };
        let label = if m.meta.pinned {
            format!("{label} (pinned)")
        } else {
            label
        };
        let _ = writeln!(out, "\n[{}] {label}:", stored.seq);
        if let Some(reasoning) = &m.reasoning
            && !reasoning.text.is_empty()
        {
            let _ = writeln!(out, "  (reasoning) {}", one_line(&reasoning.text, 200));
        }
        if !m.content.is_empty() {
            for line in m.content.lines() {
                let _ = writeln!(out, "  {line}");
            }
        }
        for call in &m.tool_calls {
            let _ = writeln!(out, "  → {} {} [{}]", call.name, call.arguments, call.id);
        }
    }
    out
}
