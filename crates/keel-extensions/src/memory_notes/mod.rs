//! Durable memory (issue 16, seed 004): two small notes per user — `MEMORY.md`, what the agent
//! learned, and `USER.md`, about the user — that the model edits with the `memory` tool and
//! that every new session shows in its system prompt.
//!
//! A note is a list of entries separated by a line holding only `§`. `add` appends an entry,
//! `replace` swaps the one entry containing `old_text`, `remove` drops it; each note has a
//! character limit and an edit that would pass it is refused whole. The edit logic lives here,
//! once; a [`MemoryBackend`] only reads a note and rewrites it atomically: files under
//! `$KEEL_HOME/memory` (keel-tools' `FileMemory`), or [`InMemoryNotes`] for embedders and tests.
//!
//! The system prompt shows a [`MemorySnapshot`] taken when the session starts and kept with the
//! session, so the prompt (and a provider's prompt cache) stays the same for the whole session:
//! what a run writes shows from the next session on.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod extension;
mod in_memory;
mod tool;

pub use extension::{FLUSH_PROMPT, JOURNAL_KEY, MemoryNotes};
pub use in_memory::InMemoryNotes;
pub use tool::{MEMORY, MEMORY_MODULE, MemoryTool};

/// The line between two entries of a note.
pub const SEPARATOR: &str = "\n§\n";

/// The default limit of `MEMORY.md`, in characters.
pub const DEFAULT_MEMORY_CHARS: usize = 2_200;

/// The default limit of `USER.md`, in characters.
pub const DEFAULT_USER_CHARS: usize = 1_375;

/// Which note.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryTarget {
    /// `MEMORY.md`: what the agent learned.
    Memory,
    /// `USER.md`: about the user.
    User,
}

impl MemoryTarget {
    /// The note's file name.
    pub fn file_name(self) -> &'static str {
        match self {
            MemoryTarget::Memory => "MEMORY.md",
            MemoryTarget::User => "USER.md",
        }
    }

    /// The note's name in the tool's arguments.
    pub fn name(self) -> &'static str {
        match self {
            MemoryTarget::Memory => "memory",
            MemoryTarget::User => "user",
        }
    }
}

/// How long each note may be, in characters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryLimits {
    /// The limit of `MEMORY.md`.
    pub memory_chars: usize,
    /// The limit of `USER.md`.
    pub user_chars: usize,
}

impl Default for MemoryLimits {
    fn default() -> Self {
        MemoryLimits {
            memory_chars: DEFAULT_MEMORY_CHARS,
            user_chars: DEFAULT_USER_CHARS,
        }
    }
}

impl MemoryLimits {
    /// The limit of `target`.
    pub fn of(&self, target: MemoryTarget) -> usize {
        match target {
            MemoryTarget::Memory => self.memory_chars,
            MemoryTarget::User => self.user_chars,
        }
    }
}

/// One change to a note.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemoryEdit {
    /// Append an entry.
    Add(String),
    /// Replace the entry containing the first text with the second.
    Replace(String, String),
    /// Remove the entry containing the text.
    Remove(String),
}

/// Why a memory edit did not happen.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The edit is wrong (too long, ambiguous, ...); nothing was written.
    #[error("{0}")]
    Refused(String),
    /// The note could not be read or written.
    #[error("memory storage failed: {0}")]
    Storage(String),
}

/// An edit of a note's text: the new text, or why there is none.
pub type NoteEdit = Box<dyn FnOnce(&str) -> Result<String, String> + Send>;

/// Where notes live. Both methods name the user (`None`: the machine's owner, for runs with no
/// user); a backend keeps users apart and never lets a user id reach another user's notes.
#[async_trait]
pub trait MemoryBackend: Send + Sync {
    /// The note's text; empty when there is none.
    async fn read(&self, user: Option<&str>, target: MemoryTarget) -> Result<String, MemoryError>;

    /// Reads the note, applies `edit` and writes the result, as one step no other edit of the
    /// same note can interleave with; returns the new text. Nothing is written when `edit`
    /// fails.
    async fn update(
        &self,
        user: Option<&str>,
        target: MemoryTarget,
        edit: NoteEdit,
    ) -> Result<String, MemoryError>;
}

/// The notes as they were when a session started: what its system prompt shows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemorySnapshot {
    /// `MEMORY.md`.
    pub memory: String,
    /// `USER.md`.
    pub user: String,
}

impl MemorySnapshot {
    /// Reads both notes of `user` now.
    pub async fn take(
        backend: &dyn MemoryBackend,
        user: Option<&str>,
    ) -> Result<MemorySnapshot, MemoryError> {
        Ok(MemorySnapshot {
            memory: backend.read(user, MemoryTarget::Memory).await?,
            user: backend.read(user, MemoryTarget::User).await?,
        })
    }
}

/// The memory section of the system prompt for `snapshot`; empty when both notes are.
pub fn memory_section(snapshot: &MemorySnapshot) -> String {
    let mut out = String::new();
    for (title, text) in [
        ("MEMORY.md (what you learned)", &snapshot.memory),
        ("USER.md (about the user)", &snapshot.user),
    ] {
        let text = text.trim();
        if !text.is_empty() {
            out.push_str(&format!("\n\n## {title}\n{text}"));
        }
    }
    if out.is_empty() {
        return out;
    }
    format!(
        "# Your durable memory (as of the start of this session; edit it with the `memory` tool)\
         {out}"
    )
}

/// `prompt` with the memory section of `snapshot` after it.
pub fn with_memory_section(prompt: Option<String>, snapshot: &MemorySnapshot) -> Option<String> {
    let section = memory_section(snapshot);
    match (prompt, section.is_empty()) {
        (prompt, true) => prompt,
        (Some(prompt), false) => Some(format!("{prompt}\n\n{section}")),
        (None, false) => Some(section),
    }
}

/// The entries of a note's text.
pub fn entries(text: &str) -> Vec<&str> {
    text.split(SEPARATOR)
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .collect()
}

/// Reads a `memory` call's arguments: the note and the edit.
pub fn parse_call(args: &Value) -> Result<(MemoryTarget, MemoryEdit), String> {
    let target = match args["target"].as_str() {
        Some("memory") => MemoryTarget::Memory,
        Some("user") => MemoryTarget::User,
        Some(other) => return Err(format!("unknown target `{other}`: use memory or user")),
        None => return Err("give a `target`: memory or user".into()),
    };
    let text = |field: &str| -> Result<String, String> {
        let text = args[field]
            .as_str()
            .map(str::trim)
            .filter(|text| !text.is_empty())
            .ok_or_else(|| format!("give a non-empty `{field}`"))?;
        if text.contains('§') {
            return Err(format!(
                "`{field}` may not contain `§`: it separates entries"
            ));
        }
        Ok(text.to_string())
    };
    let edit = match args["action"].as_str() {
        Some("add") => MemoryEdit::Add(text("text")?),
        Some("replace") => MemoryEdit::Replace(text("old_text")?, text("text")?),
        Some("remove") => MemoryEdit::Remove(text("old_text")?),
        Some(other) => {
            return Err(format!(
                "unknown action `{other}`: use add, replace or remove"
            ));
        }
        None => return Err("give an `action`: add, replace or remove".into()),
    };
    Ok((target, edit))
}

/// Applies `edit` to a note's `current` text under a `limit` of characters: the new text, or
/// why the edit is refused (nothing changes then).
pub fn apply_edit(current: &str, edit: &MemoryEdit, limit: usize) -> Result<String, String> {
    let mut list: Vec<&str> = entries(current);
    let find = |list: &[&str], old: &str| -> Result<usize, String> {
        let hits: Vec<usize> = (0..list.len()).filter(|&i| list[i].contains(old)).collect();
        match hits.as_slice() {
            [one] => Ok(*one),
            [] => Err(format!("no entry contains `{old}`; nothing changed")),
            many => Err(format!(
                "{} entries contain `{old}`; give a longer `old_text` that matches exactly one",
                many.len()
            )),
        }
    };
    match edit {
        MemoryEdit::Add(text) => {
            if list.iter().any(|entry| entry == text) {
                return Err("that entry is already there; nothing changed".into());
            }
            list.push(text);
        }
        MemoryEdit::Replace(old, new) => {
            let at = find(&list, old)?;
            list[at] = new;
        }
        MemoryEdit::Remove(old) => {
            let at = find(&list, old)?;
            list.remove(at);
        }
    }
    let text = list.join(SEPARATOR);
    let (now, after) = (current.trim().chars().count(), text.chars().count());
    if after > limit {
        return Err(format!(
            "the note is full: its limit is {limit} characters, it holds {now}, and this edit \
             would make it {after}. Nothing was written. Replace or remove entries that matter \
             less, or shorten them"
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests;
