//! The run journal (seed 001): durable working memory the model keeps per conversation, shown
//! to it on every continuation before the live messages. It is what survives an iteration-limit
//! halt into the next turn, and what a handoff shows when a run ends badly. The tools that edit
//! it are an extension (`keel_extensions::journal_tools`).
//!
//! The journal is also where extensions keep their per-session state, each under keys it owns
//! ([`Journal::extension`]): it is stored with the session and checkpointed with every run.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
    /// What extensions keep with the session, by key (the task list's `todos`, the memory
    /// snapshot's `memory_snapshot`): written after the journal's own fields, as they always were.
    #[serde(flatten)]
    pub extensions: BTreeMap<String, Value>,
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

    /// What an extension keeps under `key`, when it is there and reads as a `T`.
    pub fn extension<T: DeserializeOwned>(&self, key: &str) -> Option<T> {
        self.extensions
            .get(key)
            .and_then(|value| serde_json::from_value(value.clone()).ok())
    }

    /// Keeps `value` under `key`, or removes the key when `value` is `None`.
    pub fn set_extension<T: Serialize>(&mut self, key: &str, value: Option<&T>) {
        match value.and_then(|value| serde_json::to_value(value).ok()) {
            Some(value) => {
                self.extensions.insert(key.to_string(), value);
            }
            None => {
                self.extensions.remove(key);
            }
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
