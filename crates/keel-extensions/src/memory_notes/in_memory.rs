//! Notes held in memory, for embedders that keep nothing on disk and for tests.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;

use super::{MemoryBackend, MemoryError, MemoryTarget, NoteEdit};

/// Notes in a map, one edit at a time.
#[derive(Debug, Default)]
pub struct InMemoryNotes {
    notes: Mutex<HashMap<(Option<String>, &'static str), String>>,
}

impl InMemoryNotes {
    /// No notes yet.
    pub fn new() -> Self {
        Self::default()
    }
}

fn poisoned() -> MemoryError {
    MemoryError::Storage("the notes' lock is poisoned".into())
}

#[async_trait]
impl MemoryBackend for InMemoryNotes {
    async fn read(&self, user: Option<&str>, target: MemoryTarget) -> Result<String, MemoryError> {
        let notes = self.notes.lock().map_err(|_| poisoned())?;
        let key = (user.map(str::to_string), target.file_name());
        Ok(notes.get(&key).cloned().unwrap_or_default())
    }

    async fn update(
        &self,
        user: Option<&str>,
        target: MemoryTarget,
        edit: NoteEdit,
    ) -> Result<String, MemoryError> {
        let mut notes = self.notes.lock().map_err(|_| poisoned())?;
        let key = (user.map(str::to_string), target.file_name());
        let text =
            edit(notes.get(&key).map_or("", String::as_str)).map_err(MemoryError::Refused)?;
        notes.insert(key, text.clone());
        Ok(text)
    }
}
