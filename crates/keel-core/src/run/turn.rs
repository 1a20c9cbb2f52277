//! The run's turn context: what a run's message is sent with besides the conversation — the
//! skills and known facts chosen for it, the run journal and the task list as they stood.
//!
//! None of it goes in the system prompt, which stays the same for every call of a session's
//! runs and their resumes, so the provider's prompt cache (Anthropic's breakpoints, OpenAI's
//! prefix cache) keeps serving the system prompt, the tools and the conversation so far. The
//! context is fixed when the run starts and kept in its checkpoints, and goes before the run's
//! own message as sent (never as stored): every call of the run sends the same prefix. Only a
//! compaction, which rewrites what comes before anyway, renders the journal and task list again.

use serde::{Deserialize, Serialize};

use super::Run;
use crate::message::{InternalReason, Message};

/// Opens the turn context before the run's message.
pub const TURN_CONTEXT_OPEN: &str = "<turn-context>";

/// Closes it.
pub const TURN_CONTEXT_CLOSE: &str = "</turn-context>";

/// What the run's message is sent with.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct TurnContext {
    /// The sections chosen for the run's message (matched skills, known facts), under their
    /// headings: fixed when the run starts.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    sections: String,
    /// The journal, and the task list once older messages left the context, as they stood when
    /// the run started or at its latest compaction.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    notes: String,
    /// Where the run's own message is in the transcript.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) input: Option<usize>,
    /// What the context adds to a request, in tokens.
    #[serde(default, skip_serializing_if = "crate::checkpoint::is_default")]
    pub(super) tokens: u32,
}

impl TurnContext {
    /// The context as sent, between its markers; `None` when there is nothing to send.
    fn text(&self) -> Option<String> {
        let parts: Vec<&str> = [self.notes.as_str(), self.sections.as_str()]
            .into_iter()
            .filter(|part| !part.is_empty())
            .collect();
        (!parts.is_empty()).then(|| {
            format!(
                "{TURN_CONTEXT_OPEN}\n{}\n{TURN_CONTEXT_CLOSE}",
                parts.join("\n\n")
            )
        })
    }
}

impl Run {
    /// The run with the turn-context sections chosen for its message (matched skills), before
    /// it starts: sent with the run's message, never in the system prompt.
    pub fn with_turn_sections(mut self, sections: String) -> Self {
        self.add_turn_section(&sections);
        self
    }

    /// Adds a section to the turn context, after those already there.
    pub(super) fn add_turn_section(&mut self, section: &str) {
        let section = section.trim_end();
        if section.is_empty() {
            return;
        }
        if !self.turn.sections.is_empty() {
            self.turn.sections.push_str("\n\n");
        }
        self.turn.sections.push_str(section);
        self.count_turn();
    }

    /// Renders the journal (when the model wrote in it) and, once older messages left the
    /// context, the task list, as they stand now: when the run starts and after a compaction.
    pub(super) fn refresh_notes(&mut self) {
        let mut notes = Vec::new();
        if self.journal.has_notes() {
            notes.push(format!(
                "Your run journal so far:\n\n{}",
                self.journal.render()
            ));
        }
        let compacted = self.summary_index.is_some() || self.context_start > 0;
        notes.extend(self.settings.extensions.notes(&self.journal, compacted));
        let notes = notes.join("\n\n");
        if notes != self.turn.notes {
            self.turn.notes = notes;
            self.count_turn();
        }
    }

    fn count_turn(&mut self) {
        self.turn.tokens = self
            .turn
            .text()
            .map_or(0, |text| self.encoding.count_repeated(&text));
    }

    /// The run's message at `index` as sent, with the turn context before it; `None` when
    /// `index` is not the run's message or there is no context.
    pub(super) fn with_turn_context(&self, index: usize, message: &Message) -> Option<Message> {
        if self.turn.input != Some(index) {
            return None;
        }
        let context = self.turn.text()?;
        let mut sent = message.clone();
        sent.meta.tokens = None;
        sent.content = if message.content.is_empty() {
            context
        } else {
            format!("{context}\n\n{}", message.content)
        };
        Some(sent)
    }

    /// The turn context as a message of its own, for a request that no longer carries the
    /// run's message verbatim (a compaction summarized it); `None` when there is no context.
    pub(super) fn turn_context_message(&self) -> Option<Message> {
        self.turn
            .text()
            .map(|text| Message::internal_user(text, InternalReason::Warning))
    }
}
