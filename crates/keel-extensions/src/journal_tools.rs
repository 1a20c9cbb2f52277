//! The run journal's three tools (seed 001): `get_run_journal`, `update_run_journal` and
//! `append_run_journal_entry`, answered by the loop on the session's [`Journal`] (a kernel
//! concept: it is stored, checkpointed and shown as the handoff whether or not these tools are
//! offered).

use keel_core::extension::{Extension, LoopAnswer, LoopTurn};
use keel_core::journal::{Journal, LIST_SECTIONS};
use keel_core::message::ToolCall;
use keel_core::run_settings::RunSettings;
use keel_core::tool::ToolSpec;
use serde_json::{Value, json};

/// Reads the journal.
pub const GET_RUN_JOURNAL: &str = "get_run_journal";
/// Sets the journal's single-value fields.
pub const UPDATE_RUN_JOURNAL: &str = "update_run_journal";
/// Adds an entry to one of the journal's lists.
pub const APPEND_RUN_JOURNAL_ENTRY: &str = "append_run_journal_entry";

/// The journal's tools, answered by the loop.
#[derive(Clone, Copy, Debug, Default)]
pub struct JournalTools;

impl Extension for JournalTools {
    fn name(&self) -> &'static str {
        "journal"
    }

    fn loop_tools(&self, _: &RunSettings) -> Vec<ToolSpec> {
        journal_tool_specs()
    }

    fn answer(&self, call: &ToolCall, args: &Value, turn: &mut LoopTurn<'_>) -> LoopAnswer {
        let (answer, changed) = apply(turn.journal, &call.name, args);
        turn.journal_changed |= changed;
        if answer.starts_with("Error") {
            LoopAnswer::Err(answer)
        } else {
            LoopAnswer::Ok(answer)
        }
    }
}

/// The specs of the three journal tools.
pub fn journal_tool_specs() -> Vec<ToolSpec> {
    let sections: Vec<&str> = LIST_SECTIONS.to_vec();
    vec![
        ToolSpec::new(
            GET_RUN_JOURNAL,
            "Read the run journal: your durable working notes for this conversation.",
            json!({"type": "object", "properties": {}, "additionalProperties": false}),
        )
        .idempotent(),
        ToolSpec::new(
            UPDATE_RUN_JOURNAL,
            "Set the journal's objective, current state and next action. Keep them short and \
             current; they survive restarts and the iteration limit.",
            json!({
                "type": "object",
                "properties": {
                    "objective": {"type": "string"},
                    "current_state": {"type": "string"},
                    "handoff_next_action": {"type": "string", "description": "What should happen next if the work stops here."}
                },
                "additionalProperties": false
            }),
        ),
        ToolSpec::new(
            APPEND_RUN_JOURNAL_ENTRY,
            "Add an entry to a list section of the run journal.",
            json!({
                "type": "object",
                "properties": {
                    "section": {"type": "string", "enum": sections},
                    "entry": {"type": "string"}
                },
                "required": ["section", "entry"],
                "additionalProperties": false
            }),
        ),
    ]
}

/// Answers one journal tool call; returns the text for the model and whether the journal
/// changed. Arguments were already checked against the spec's schema.
pub fn apply(journal: &mut Journal, name: &str, args: &Value) -> (String, bool) {
    match name {
        GET_RUN_JOURNAL => (journal.render(), false),
        UPDATE_RUN_JOURNAL => {
            let mut changed = Vec::new();
            for (field, value) in [
                ("objective", &mut journal.objective),
                ("current_state", &mut journal.current_state),
                ("handoff_next_action", &mut journal.handoff_next_action),
            ] {
                if let Some(text) = args[field].as_str() {
                    *value = text.trim().to_string();
                    changed.push(field);
                }
            }
            if changed.is_empty() {
                return (
                    "Error: give at least one of objective, current_state, handoff_next_action."
                        .into(),
                    false,
                );
            }
            (format!("Journal updated: {}.", changed.join(", ")), true)
        }
        APPEND_RUN_JOURNAL_ENTRY => {
            let entry = args["entry"].as_str().unwrap_or("").trim().to_string();
            let section = args["section"].as_str().unwrap_or("");
            let list = match section {
                "verified_findings" => &mut journal.verified_findings,
                "decisions" => &mut journal.decisions,
                "artifacts" => &mut journal.artifacts,
                "open_questions" => &mut journal.open_questions,
                "blockers" => &mut journal.blockers,
                other => return (format!("Error: unknown journal section `{other}`."), false),
            };
            if entry.is_empty() {
                return ("Error: the entry is empty.".into(), false);
            }
            list.push(entry);
            (
                format!("Added to {section} ({} entries).", list.len()),
                true,
            )
        }
        other => (format!("Error: `{other}` is not a journal tool."), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_core::journal::DIGEST_MAX_CHARS;

    #[test]
    fn the_tools_edit_render_and_digest_the_journal() {
        let mut journal = Journal::default();
        assert!(journal.is_empty() && journal.digest().is_empty() && journal.handoff().is_none());
        let (answer, changed) = apply(
            &mut journal,
            UPDATE_RUN_JOURNAL,
            &json!({"objective": "Fix the login bug", "handoff_next_action": "write the test"}),
        );
        assert!(
            changed && answer.contains("objective, handoff_next_action"),
            "{answer}"
        );
        let (_, changed) = apply(
            &mut journal,
            APPEND_RUN_JOURNAL_ENTRY,
            &json!({"section": "verified_findings", "entry": "the cookie expires early"}),
        );
        assert!(changed);
        let (answer, changed) = apply(
            &mut journal,
            APPEND_RUN_JOURNAL_ENTRY,
            &json!({"section": "nope", "entry": "x"}),
        );
        assert!(!changed && answer.starts_with("Error"));
        let (rendered, changed) = apply(&mut journal, GET_RUN_JOURNAL, &json!({}));
        assert!(!changed);
        assert!(
            rendered.contains("## Objective\nFix the login bug")
                && rendered.contains("- the cookie expires early")
        );
        let digest = journal.digest();
        assert!(
            digest.contains("Objective: Fix the login bug")
                && digest.contains("Next: write the test")
                && digest.contains("cookie")
        );
        assert!(journal.handoff().unwrap().contains("state: (not set)"));
        let long = Journal {
            objective: "x".repeat(2000),
            ..Journal::default()
        };
        assert!(long.digest().chars().count() <= DIGEST_MAX_CHARS + 1);
    }

    #[test]
    fn the_specs_are_valid_schemas() {
        let mut registry = keel_core::registry::ToolRegistry::new();
        for spec in journal_tool_specs() {
            struct Spec(ToolSpec);
            #[async_trait::async_trait]
            impl keel_core::tool::Tool for Spec {
                fn spec(&self) -> &ToolSpec {
                    &self.0
                }
                async fn call(
                    &self,
                    _: Value,
                    _: &keel_core::tool::ToolContext,
                ) -> Result<keel_core::tool::ToolOutput, keel_core::tool::ToolError>
                {
                    unreachable!()
                }
            }
            registry.register(std::sync::Arc::new(Spec(spec))).unwrap();
        }
        assert_eq!(registry.len(), 3);
    }
}
