//! The `memory` tool's notes as files (see [`keel_extensions::memory_notes`]): `<dir>/<user>/MEMORY.md` and `USER.md` (`dir` is `$KEEL_HOME/memory`), a
//! person can read and edit them. A user id becomes a directory name by escaping every byte
//! but ASCII letters, digits and `-` (`../../etc` is `%2E%2E%2F%2E%2E%2Fetc`), so no id leaves
//! `dir` or reaches another user's; runs with no user use `_local`, which no id escapes to.
//! An edit holds an exclusive lock on the user's `.lock` file while it reads, edits and
//! replaces the note (write to a temporary file, then rename), so two runs writing at once —
//! in one process or two — never lose an entry.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use async_trait::async_trait;

use keel_extensions::memory_notes::{MemoryBackend, MemoryError, MemoryTarget, NoteEdit};

/// The directory of the runs with no user.
const LOCAL: &str = "_local";

/// The longest escaped user id kept as it is; longer ones are named by a hash.
const MAX_DIR_NAME: usize = 120;

/// Notes in files under one directory.
#[derive(Clone, Debug)]
pub struct FileMemory {
    dir: PathBuf,
}

impl FileMemory {
    /// Notes under `dir` (created on the first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FileMemory { dir: dir.into() }
    }

    /// The directory of `user`'s notes.
    pub fn user_dir(&self, user: Option<&str>) -> PathBuf {
        self.dir
            .join(user.map_or_else(|| LOCAL.to_string(), dir_name))
    }
}

/// `user` as a directory name: ASCII letters, digits and `-` kept, every other byte `%XX`.
fn dir_name(user: &str) -> String {
    let mut name = String::with_capacity(user.len());
    for byte in user.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'-' {
            name.push(byte as char);
        } else {
            name.push_str(&format!("%{byte:02X}"));
        }
    }
    if name.is_empty() {
        return "%".into();
    }
    if name.len() > MAX_DIR_NAME {
        return format!("%{}", keel_core::run::prompt_hash(Some(user)));
    }
    name
}

fn storage(what: &str, path: &Path, e: std::io::Error) -> MemoryError {
    MemoryError::Storage(format!("cannot {what} {}: {e}", path.display()))
}

fn read_note(path: &Path) -> Result<String, MemoryError> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(storage("read", path, e)),
    }
}

/// Reads, edits and replaces one note under the user's lock.
fn update_note(dir: &Path, target: MemoryTarget, edit: NoteEdit) -> Result<String, MemoryError> {
    fs::create_dir_all(dir).map_err(|e| storage("create", dir, e))?;
    let lock_path = dir.join(".lock");
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| storage("open", &lock_path, e))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| storage("lock", &lock_path, e.into()))?;
    let path = dir.join(target.file_name());
    let current = read_note(&path)?;
    let text = edit(&current).map_err(MemoryError::Refused)?;
    let temporary = dir.join(format!("{}.tmp", target.file_name()));
    let written = File::create(&temporary).and_then(|mut file| {
        file.write_all(text.as_bytes())?;
        if !text.is_empty() {
            file.write_all(b"\n")?;
        }
        file.sync_all()
    });
    written.map_err(|e| storage("write", &temporary, e))?;
    fs::rename(&temporary, &path).map_err(|e| storage("replace", &path, e))?;
    // The lock goes with `lock`.
    Ok(text)
}

#[async_trait]
impl MemoryBackend for FileMemory {
    async fn read(&self, user: Option<&str>, target: MemoryTarget) -> Result<String, MemoryError> {
        let path = self.user_dir(user).join(target.file_name());
        let text = tokio::task::spawn_blocking(move || read_note(&path))
            .await
            .map_err(|e| MemoryError::Storage(e.to_string()))??;
        Ok(text.trim().to_string())
    }

    async fn update(
        &self,
        user: Option<&str>,
        target: MemoryTarget,
        edit: NoteEdit,
    ) -> Result<String, MemoryError> {
        let dir = self.user_dir(user);
        tokio::task::spawn_blocking(move || update_note(&dir, target, edit))
            .await
            .map_err(|e| MemoryError::Storage(e.to_string()))?
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use keel_core::{Tool, ToolContext};
    use keel_extensions::memory_notes::{MemoryLimits, MemoryTool, entries};
    use serde_json::json;

    use super::*;

    fn ctx(user: Option<&str>) -> ToolContext {
        ToolContext {
            session_id: "s".into(),
            run_id: "r".into(),
            call_id: "c".into(),
            user_id: user.map(str::to_string),
            untrusted_source: false,
            place: None,
            cancel: Default::default(),
        }
    }

    fn tool(dir: &Path) -> MemoryTool {
        MemoryTool::new(Arc::new(FileMemory::new(dir)), MemoryLimits::default())
    }

    #[tokio::test]
    async fn notes_are_files_per_user() {
        let dir = tempfile::tempdir().unwrap();
        tool(dir.path())
            .call(
                json!({"action": "add", "target": "memory", "text": "the build uses make"}),
                &ctx(Some("ann")),
            )
            .await
            .unwrap();
        let path = dir.path().join("ann/MEMORY.md");
        assert_eq!(fs::read_to_string(&path).unwrap(), "the build uses make\n");
        let error = tool(dir.path())
            .call(
                json!({"action": "remove", "target": "memory", "old_text": "cmake"}),
                &ctx(Some("ann")),
            )
            .await
            .unwrap_err();
        assert!(
            error.message.contains("no entry contains `cmake`"),
            "{}",
            error.message
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), "the build uses make\n");
        let backend = FileMemory::new(dir.path());
        assert_eq!(
            backend
                .read(Some("bob"), MemoryTarget::Memory)
                .await
                .unwrap(),
            ""
        );
        assert_eq!(backend.read(None, MemoryTarget::Memory).await.unwrap(), "");
        tool(dir.path())
            .call(
                json!({"action": "add", "target": "user", "text": "likes short answers"}),
                &ctx(None),
            )
            .await
            .unwrap();
        assert!(dir.path().join("_local/USER.md").exists());
    }

    #[tokio::test]
    async fn a_hostile_user_id_stays_inside_the_directory() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("memory");
        let backend = FileMemory::new(&dir);
        let long = "é".repeat(200);
        for user in [
            "../../etc",
            "..",
            ".",
            "/abs",
            "a/../../b",
            "",
            "_local",
            "x\0y",
            "C:\\x",
            &long,
        ] {
            let user_dir = backend.user_dir(Some(user));
            assert_eq!(
                user_dir.parent(),
                Some(dir.as_path()),
                "{user:?} → {user_dir:?}"
            );
            let name = user_dir.file_name().unwrap().to_str().unwrap();
            assert!(
                name != "." && name != ".." && name != "_local" && name.len() <= 121,
                "{name}"
            );
            tool(&dir)
                .call(
                    json!({"action": "add", "target": "user", "text": "hi"}),
                    &ctx(Some(user)),
                )
                .await
                .unwrap();
        }
        assert_eq!(
            backend.user_dir(Some("../../etc")).file_name().unwrap(),
            "%2E%2E%2F%2E%2E%2Fetc"
        );
        let outside: Vec<_> = fs::read_dir(root.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            outside,
            ["memory"],
            "nothing was written outside the directory"
        );
        assert!(
            !dir.join("_local").exists(),
            "no user id reaches the no-user notes"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_writers_lose_no_entry() {
        let dir = tempfile::tempdir().unwrap();
        let mut tasks = Vec::new();
        for i in 0..16 {
            // Each writer has its own backend and tool, as two runs (or processes) would.
            let memory = tool(dir.path());
            tasks.push(tokio::spawn(async move {
                memory
                    .call(
                        json!({"action": "add", "target": "memory", "text": format!("entry {i}")}),
                        &ctx(Some("ann")),
                    )
                    .await
                    .unwrap();
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let text = FileMemory::new(dir.path())
            .read(Some("ann"), MemoryTarget::Memory)
            .await
            .unwrap();
        let mut got = entries(&text);
        got.sort();
        let mut want: Vec<String> = (0..16).map(|i| format!("entry {i}")).collect();
        want.sort();
        assert_eq!(got, want);
    }
}
