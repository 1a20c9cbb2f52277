//! FIFOs, sockets and devices: every file tool refuses them at once, saying what they are.

#![cfg(target_os = "linux")]

mod common;

use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixListener;
use std::sync::Arc;
use std::time::Duration;

use common::{Fixture, call};
use keel_core::{Tool, ToolError, ToolErrorKind};
use keel_tools::{ReadFile, Workspace};
use rustix::fs::{CWD, FileType, Mode, mknodat};
use serde_json::json;

/// A guard against a tool that blocks: a call that hangs fails the test instead of hanging it.
/// Generous, so that a loaded machine never trips it; a refusal takes microseconds.
const HANG_GUARD: Duration = Duration::from_secs(60);

async fn refused(tool: &dyn Tool, args: serde_json::Value) -> ToolError {
    tokio::time::timeout(HANG_GUARD, call(tool, args))
        .await
        .expect("the tool blocked")
        .unwrap_err()
}

fn special_files(fx: &Fixture) -> UnixListener {
    mknodat(
        CWD,
        fx.at("pipe"),
        FileType::Fifo,
        Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    UnixListener::bind(fx.at("socket")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_file_refuses_a_fifo_and_a_socket_without_blocking() {
    let fx = Fixture::new();
    let _socket = special_files(&fx);
    for (path, what) in [("pipe", "a FIFO"), ("socket", "a socket")] {
        let err = refused(&fx.read, json!({"path": path})).await;
        assert_eq!(err.kind, ToolErrorKind::Failed);
        assert_eq!(
            err.message,
            format!(
                "{path} is {what}{}, not a regular file; read_file only reads regular files",
                if path == "pipe" { " (named pipe)" } else { "" }
            )
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_and_append_refuse_a_fifo_and_leave_it_be() {
    let fx = Fixture::new();
    let _socket = special_files(&fx);
    for path in ["pipe", "socket"] {
        let err = refused(&fx.write, json!({"path": path, "content": "x"})).await;
        assert!(
            err.message.contains("not a regular file"),
            "{}",
            err.message
        );
        let err = refused(&fx.append, json!({"path": path, "content": "x"})).await;
        assert!(
            err.message.contains("not a regular file"),
            "{}",
            err.message
        );
    }
    assert!(
        fs::symlink_metadata(fx.at("pipe"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
    let err = refused(&fx.list, json!({"path": "pipe"})).await;
    assert_eq!(err.message, "pipe is a FIFO (named pipe), not a directory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_is_not_a_huge_file() {
    // A workspace rooted at /dev: the device nodes are inside it.
    let read = ReadFile::new(Arc::new(Workspace::new("/dev").unwrap()));
    for (path, what) in [
        ("zero", "a character device"),
        ("null", "a character device"),
    ] {
        let err = refused(&read, json!({"path": path})).await;
        assert_eq!(
            err.message,
            format!("{path} is {what}, not a regular file; read_file only reads regular files")
        );
    }
}

#[tokio::test]
async fn a_symlink_to_a_special_file_says_what_it_leads_to() {
    let fx = Fixture::new();
    let _socket = special_files(&fx);
    std::os::unix::fs::symlink("pipe", fx.at("to-pipe")).unwrap();
    let out = call(&fx.list, json!({})).await.unwrap();
    assert!(
        out.contains("to-pipe -> pipe  (symlink to a FIFO (named pipe))"),
        "{out}"
    );
    let err = refused(&fx.read, json!({"path": "to-pipe"})).await;
    assert!(
        err.message.starts_with("to-pipe is a FIFO"),
        "{}",
        err.message
    );
}
