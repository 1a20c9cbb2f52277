//! The run journal (seed 001): durable working memory the model keeps per conversation, edited
//! through three loop-handled tools and shown to it on every continuation — a short digest in
//! the system prompt and the full journal before the live messages. It is what survives an
//! iteration-limit halt into the next turn, and what a handoff shows when a run ends badly.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::memory_notes::MemorySnapshot;
use crate::todo::TodoList;
use crate::tool::ToolSpec;

/// Reads the journal.
pub const GET_RUN_JOURNAL: &str = "get_run_journal";
/// Sets the journal's single-value fields.
pub const UPDATE_RUN_JOURNAL: &str = "update_run_journal";
/// Adds an entry to one of the journal's lists.
pub const APPEND_RUN_JOURNAL_ENTRY: &str = "append_run_journal_entry";

/// The longest the digest in the system prompt may be, in characters.
pub const DIGEST_MAX_CHARS: usize = 500;

/// The journal's list sections.
pub const LIST_SECTIONS: [&str; 5] = [
    "verified_findings",
    "decisions",
    "artifacts",
    "open_questions",
    "blockers",
];

/// The run journal of one conversation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Journal {
    /// The task, in the model's own words.
    pub objective: String,
    /// Where the work is now.
    pub current_state: String,
    /// Facts the model has confirmed.
    pub verified_findings: Vec<String>,
    /// Choices made, with their reasons.
    pub decisions: Vec<String>,
    /// Deliverables produced (paths, ids).
    pub artifacts: Vec<String>,
    /// What is still unresolved.
    pub open_questions: Vec<String>,
    /// What stops progress.
    pub blockers: Vec<String>,
    /// What should happen next if the work stops here.
    pub handoff_next_action: String,
    /// The task list of the `todo` tool, kept with the journal (see [`crate::todo`]).
    #[serde(skip_serializing_if = "TodoList::is_empty")]
    pub todos: TodoList,
    /// The durable memory as it was when the session started: what its system prompt shows
    /// (see [`crate::memory_notes`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_snapshot: Option<MemorySnapshot>,
}

/// True when the loop itself answers calls to `name`.
pub fn is_journal_tool(name: &str) -> bool {
    matches!(
        name,
        GET_RUN_JOURNAL | UPDATE_RUN_JOURNAL | APPEND_RUN_JOURNAL_ENTRY
    )
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

impl Journal {
    /// True when nothing was written yet: no notes, no task list, no memory snapshot.
    pub fn is_empty(&self) -> bool {
        *self == Journal::default()
    }

    /// True when the model wrote something in the journal proper (its notes, not its task
    /// list or the memory snapshot).
    pub fn has_notes(&self) -> bool {
        let lists = [
            &self.verified_findings,
            &self.decisions,
            &self.artifacts,
            &self.open_questions,
            &self.blockers,
        ];
        !(self.objective.is_empty()
            && self.current_state.is_empty()
            && self.handoff_next_action.is_empty()
            && lists.iter().all(|list| list.is_empty()))
    }

    /// Answers one journal tool call; returns the text for the model and whether the journal
    /// changed. Arguments were already checked against the spec's schema.
    pub fn apply(&mut self, name: &str, args: &Value) -> (String, bool) {
        match name {
            GET_RUN_JOURNAL => (self.render(), false),
            UPDATE_RUN_JOURNAL => {
                let mut changed = Vec::new();
                for (field, value) in [
                    ("objective", &mut self.objective),
                    ("current_state", &mut self.current_state),
                    ("handoff_next_action", &mut self.handoff_next_action),
                ] {
                    if let Some(text) = args[field].as_str() {
                        *value = text.trim().to_string();
                        changed.push(field);
                    }
                }
                if changed.is_empty() {
                    return ("Error: give at least one of objective, current_state, handoff_next_action.".into(), false);
                }
                (format!("Journal updated: {}.", changed.join(", ")), true)
            }
            APPEND_RUN_JOURNAL_ENTRY => {
                let entry = args["entry"].as_str().unwrap_or("").trim().to_string();
                let section = args["section"].as_str().unwrap_or("");
                let list = match section {
                    "verified_findings" => &mut self.verified_findings,
                    "decisions" => &mut self.decisions,
                    "artifacts" => &mut self.artifacts,
                    "open_questions" => &mut self.open_questions,
                    "blockers" => &mut self.blockers,
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

    /// The whole journal as Markdown.
    pub fn render(&self) -> String {
        if !self.has_notes() {
            return "The run journal is empty.".into();
        }
        let mut out = String::from("# Run journal\n");
        let field = |out: &mut String, title: &str, text: &str| {
            if !text.is_empty() {
                out.push_str(&format!("\n## {title}\n{text}\n"));
            }
        };
        let list = |out: &mut String, title: &str, items: &[String]| {
            if !items.is_empty() {
                out.push_str(&format!("\n## {title}\n"));
                for item in items {
                    out.push_str(&format!("- {item}\n"));
                }
            }
        };
        field(&mut out, "Objective", &self.objective);
        field(&mut out, "Current state", &self.current_state);
        list(&mut out, "Verified findings", &self.verified_findings);
        list(&mut out, "Decisions", &self.decisions);
        list(&mut out, "Artifacts", &self.artifacts);
        list(&mut out, "Open questions", &self.open_questions);
        list(&mut out, "Blockers", &self.blockers);
        field(&mut out, "Next action", &self.handoff_next_action);
        out
    }

    /// The short digest for the system prompt: objective, current state, first blocker, next
    /// action and the latest findings, at most [`DIGEST_MAX_CHARS`].
    pub fn digest(&self) -> String {
        if !self.has_notes() {
            return String::new();
        }
        let mut parts = Vec::new();
        if !self.objective.is_empty() {
            parts.push(format!("Objective: {}", self.objective));
        }
        if !self.current_state.is_empty() {
            parts.push(format!("State: {}", self.current_state));
        }
        if let Some(blocker) = self.blockers.first() {
            parts.push(format!("Blocker: {blocker}"));
        }
        if !self.handoff_next_action.is_empty() {
            parts.push(format!("Next: {}", self.handoff_next_action));
        }
        let recent: Vec<&str> = self
            .verified_findings
            .iter()
            .rev()
            .take(3)
            .map(String::as_str)
            .collect();
        if !recent.is_empty() {
            parts.push(format!("Recent findings: {}", recent.join("; ")));
        }
        let digest = parts.join(" | ");
        match digest.char_indices().nth(DIGEST_MAX_CHARS) {
            Some((cut, _)) => format!("{}…", &digest[..cut]),
            None => digest,
        }
    }

    /// The handoff shown when a run ended badly: objective, state, next action.
    pub fn handoff(&self) -> Option<String> {
        if self.objective.is_empty()
            && self.current_state.is_empty()
            && self.handoff_next_action.is_empty()
        {
            return None;
        }
        Some(format!(
            "objective: {}\nstate: {}\nnext action: {}",
            or_none(&self.objective),
            or_none(&self.current_state),
            or_none(&self.handoff_next_action)
        ))
    }
}

fn or_none(text: &str) -> &str {
    if text.is_empty() { "(not set)" } else { text }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tools_edit_render_and_digest_the_journal() {
        let mut journal = Journal::default();
        assert!(journal.is_empty() && journal.digest().is_empty() && journal.handoff().is_none());
        let (answer, changed) = journal.apply(
            UPDATE_RUN_JOURNAL,
            &json!({"objective": "Fix the login bug", "handoff_next_action": "write the test"}),
        );
        assert!(
            changed && answer.contains("objective, handoff_next_action"),
            "{answer}"
        );
        let (_, changed) = journal.apply(
            APPEND_RUN_JOURNAL_ENTRY,
            &json!({"section": "verified_findings", "entry": "the cookie expires early"}),
        );
        assert!(changed);
        let (answer, changed) = journal.apply(
            APPEND_RUN_JOURNAL_ENTRY,
            &json!({"section": "nope", "entry": "x"}),
        );
        assert!(!changed && answer.starts_with("Error"));
        let (rendered, changed) = journal.apply(GET_RUN_JOURNAL, &json!({}));
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
        let mut registry = crate::registry::ToolRegistry::new();
        for spec in journal_tool_specs() {
            struct Spec(ToolSpec);
            #[async_trait::async_trait]
            impl crate::tool::Tool for Spec {
                fn spec(&self) -> &ToolSpec {
                    &self.0
                }
                async fn call(
                    &self,
                    _: Value,
                    _: &crate::tool::ToolContext,
                ) -> Result<crate::tool::ToolOutput, crate::tool::ToolError> {
                    unreachable!()
                }
            }
            registry.register(std::sync::Arc::new(Spec(spec))).unwrap();
        }
        assert_eq!(registry.len(), 3);
    }
}
