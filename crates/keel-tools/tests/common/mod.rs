//! Shared fixtures for the file tool tests: a temp directory holding a workspace root and an
//! `outside` directory beside it.

// Each test file uses a different part of the fixture.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use keel_core::{Tool, ToolContext, ToolError};
use keel_tools::{AppendFile, ListDir, ReadFile, Workspace, WriteFile};
use tokio_util::sync::CancellationToken;

/// A workspace in a temp directory, with the four file tools.
pub struct Fixture {
    /// Keeps the temp directory alive.
    _dir: tempfile::TempDir,
    /// The canonical workspace root.
    pub root: PathBuf,
    /// A directory beside the root, outside the workspace.
    pub outside: PathBuf,
    pub read: ReadFile,
    pub write: WriteFile,
    pub append: AppendFile,
    pub list: ListDir,
}

impl Fixture {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        std::fs::create_dir(base.join("root")).unwrap();
        std::fs::create_dir(base.join("outside")).unwrap();
        let workspace = Arc::new(Workspace::new(base.join("root")).unwrap());
        Fixture {
            _dir: dir,
            root: workspace.root().to_path_buf(),
            outside: base.join("outside"),
            read: ReadFile::new(workspace.clone()),
            write: WriteFile::new(workspace.clone()),
            append: AppendFile::new(workspace.clone()),
            list: ListDir::new(workspace),
        }
    }

    /// A path under the root.
    pub fn at(&self, relative: &str) -> PathBuf {
        self.root.join(relative)
    }
}

pub fn ctx() -> ToolContext {
    ToolContext {
        session_id: "s".into(),
        run_id: "r".into(),
        call_id: "c".into(),
        user_id: None,
        untrusted_source: false,
        place: None,
        cancel: CancellationToken::new(),
    }
}

/// Calls `tool` and returns its text.
pub async fn call(tool: &dyn Tool, args: serde_json::Value) -> Result<String, ToolError> {
    tool.call(args, &ctx()).await.map(|out| out.content)
}

/// A path as a `&str` for tool arguments.
pub fn text(path: &Path) -> &str {
    path.to_str().unwrap()
}
pub mod hooks;
