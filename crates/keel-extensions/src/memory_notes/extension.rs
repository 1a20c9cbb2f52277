//! The memory notes as an extension: each session's system prompt shows the notes as they were
//! when the session started (a [`MemorySnapshot`] kept in the session's journal, so every run
//! and resume of the session sends the same prompt), and before a compaction the model gets a
//! turn to save what it must remember with `memory` and `todo` (seed 004's memory flush).

use std::sync::Arc;

use async_trait::async_trait;
use keel_core::extension::{Extension, PreCompactionTurn, RunStart};
use keel_core::journal::Journal;
use keel_core::tool::ToolSpec;

use super::{MEMORY, MemoryBackend, MemorySnapshot, with_memory_section};
use crate::todo::TODO;

/// The key the snapshot is kept under in the session's journal.
pub const JOURNAL_KEY: &str = "memory_snapshot";

/// What the model is asked on its flush turn.
pub const FLUSH_PROMPT: &str = "Older messages of this conversation are about to be summarized \
to save space, and their details will be lost. First save anything worth keeping beyond this \
conversation with the `memory` tool (durable facts about the environment or the task, the \
user's preferences), and bring your `todo` list up to date if you keep one. Only `memory` and \
`todo` can be called on this turn. If there is nothing to save, answer with one short sentence.";

/// The tools of the flush turn.
const FLUSH_TOOLS: &[&str] = &[MEMORY, TODO];

/// The memory notes' snapshot and flush, for runs that offer the `memory` tool.
pub struct MemoryNotes {
    /// Where the notes are read from.
    pub backend: Arc<dyn MemoryBackend>,
}

impl MemorySnapshot {
    /// The snapshot kept in `journal`, when there is one.
    pub fn of(journal: &Journal) -> Option<MemorySnapshot> {
        journal.extension(JOURNAL_KEY)
    }
}

fn offers_memory(tools: &[ToolSpec]) -> bool {
    tools.iter().any(|tool| tool.name == MEMORY)
}

#[async_trait]
impl Extension for MemoryNotes {
    fn name(&self) -> &'static str {
        "memory_notes"
    }

    /// An untrusted session is shown nothing of the user's private memory. Otherwise the
    /// session's snapshot (taken now at its first run) follows the prompt's sections; when
    /// the notes cannot be read the run goes on without them and the next run tries again.
    async fn prepare(&self, start: &mut RunStart<'_>) {
        if start.settings.untrusted || !offers_memory(start.tools) {
            return;
        }
        let snapshot = match MemorySnapshot::of(start.journal) {
            Some(kept) => kept,
            None => {
                let Ok(taken) = MemorySnapshot::take(self.backend.as_ref(), start.user_id).await
                else {
                    return;
                };
                start.journal.set_extension(JOURNAL_KEY, Some(&taken));
                start.journal_changed = true;
                taken
            }
        };
        let prompt = start.settings.system_prompt.take();
        start.settings.system_prompt = with_memory_section(prompt, &snapshot);
    }

    fn restate_prompt(
        &self,
        prompt: Option<String>,
        journal: &Journal,
        offered: &[ToolSpec],
    ) -> Option<String> {
        match MemorySnapshot::of(journal).filter(|_| offers_memory(offered)) {
            Some(snapshot) => with_memory_section(prompt, &snapshot),
            None => prompt,
        }
    }

    fn before_compaction(&self, offered: &[ToolSpec]) -> Option<PreCompactionTurn> {
        offers_memory(offered).then_some(PreCompactionTurn {
            prompt: FLUSH_PROMPT,
            tools: FLUSH_TOOLS,
            saves_with: MEMORY,
        })
    }
}
