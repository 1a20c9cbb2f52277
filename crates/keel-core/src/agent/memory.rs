//! The agent's side of durable memory (see [`crate::memory_notes`]): the `memory` tool on a
//! backend, and the snapshot a session's system prompt shows — taken at the session's first run
//! and kept with its journal, so every run and every resume of the session sends the same
//! prompt.

use crate::journal::Journal;
use crate::memory_notes::{self, MEMORY, MemorySnapshot};
use crate::tool::ToolSpec;

use super::Agent;

impl Agent {
    /// The system prompt of a run that shows `snapshot`: the agent's prompt (or `base`, when
    /// the run's options changed it) with the memory section after it.
    pub(super) fn prompt_with_memory(
        base: Option<String>,
        snapshot: Option<&MemorySnapshot>,
    ) -> Option<String> {
        match snapshot {
            Some(snapshot) => memory_notes::with_memory_section(base, snapshot),
            None => base,
        }
    }

    /// The snapshot a run offered `tools` shows: the session's, when the run offers `memory`
    /// (what a resume checks the run's prompt against).
    pub(super) fn shown_snapshot<'a>(
        journal: &'a Journal,
        tools: &[ToolSpec],
    ) -> Option<&'a MemorySnapshot> {
        journal
            .memory_snapshot
            .as_ref()
            .filter(|_| tools.iter().any(|tool| tool.name == MEMORY))
    }

    /// The session's memory snapshot for a run offered `tools`: the one kept in `journal`, or
    /// one taken now (`true`: new, to be kept). `None` when the run has no `memory` tool, or
    /// when the notes cannot be read (the run goes on without them and the next run tries
    /// again).
    pub(super) async fn memory_snapshot(
        &self,
        journal: &Journal,
        tools: &[ToolSpec],
        user: Option<&str>,
    ) -> Option<(MemorySnapshot, bool)> {
        let backend = self.memory.as_ref()?;
        if !tools.iter().any(|tool| tool.name == MEMORY) {
            return None;
        }
        if let Some(kept) = Self::shown_snapshot(journal, tools) {
            return Some((kept.clone(), false));
        }
        let snapshot = MemorySnapshot::take(backend.as_ref(), user).await.ok()?;
        Some((snapshot, true))
    }
}
