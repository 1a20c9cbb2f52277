//! The `shell` tool running real commands: the workspace directory, exit codes and outputs,
//! everything a command started killed on timeout and at exit (in the sandbox and without it),
//! a cancelled run letting the command finish, the environment without secrets, the output
//! cap, closed stdin, and the refusals of the command policy. Commands run in keel's sandbox
//! (bubblewrap must be installed); processes are found by a marker in their command line, since
//! in the sandbox they have pids of their own. What the sandbox confines: shell_sandbox.rs.

mod common;

use std::sync::Arc;
use std::time::Duration;

use keel_core::{Permission, Tool, ToolErrorKind};
use keel_tools::shell::{ParentEnv, SecretFilter};
use keel_tools::{Sandbox, SandboxState, Shell, ShellConfig, ShellPolicy, Workspace};
use serde_json::json;

use common::ctx;
use common::hooks::{marker, none_running};

/// A shell tool over a fresh workspace, configured by `configure`.
fn shell_with(configure: impl FnOnce(&mut ShellConfig)) -> (tempfile::TempDir, Shell) {
    let dir = tempfile::tempdir().unwrap();
    let workspace = Arc::new(Workspace::new(dir.path()).unwrap());
    let mut config = ShellConfig::default();
    assert!(
        matches!(config.sandbox.state(), SandboxState::Bwrap(_)),
        "the shell tests need bubblewrap's `bwrap` on PATH (apt-get install bubblewrap)"
    );
    configure(&mut config);
    (dir, Shell::new(workspace, config))
}

fn shell() -> (tempfile::TempDir, Shell) {
    shell_with(|_| {})
}

async fn run(tool: &Shell, args: serde_json::Value) -> Result<String, keel_core::ToolError> {
    within_bound(tool.call(args, &ctx()))
        .await
        .map(|out| out.content)
}

/// Awaits a call that must end well before the 30 s sleeps the tests start would: a test that
/// waits for them would prove nothing.
async fn within_bound<T>(call: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the call did not end in time")
}

/// The sandbox, and none.
fn sandboxes() -> [Sandbox; 2] {
    [Sandbox::detect(), Sandbox::off()]
}

#[test]
fn the_spec_is_a_side_effecting_admin_tool_of_the_shell_module() {
    let (_dir, tool) = shell();
    let spec = tool.spec();
    assert_eq!(spec.name, "shell");
    assert_eq!(spec.module.as_deref(), Some("shell"));
    assert!(!spec.idempotent && spec.side_effecting());
    assert_eq!(spec.required_permission, Permission::Admin);
    assert_eq!(spec.parameters["required"], json!(["command"]));
    assert_eq!(spec.parameters["additionalProperties"], false);
}

#[tokio::test]
async fn runs_in_the_workspace_and_reports_exit_code_and_both_outputs() {
    let (dir, tool) = shell();
    let out = run(
        &tool,
        json!({"command": "pwd; echo out; echo err >&2; exit 3"}),
    )
    .await
    .unwrap();
    let root = dir.path().canonicalize().unwrap();
    assert_eq!(
        out,
        format!(
            "exit code: 3\n--- stdout ---\n{}\nout\n--- stderr ---\nerr\n",
            root.display()
        )
    );
    let out = run(&tool, json!({"command": "true"})).await.unwrap();
    assert_eq!(
        out,
        "exit code: 0\n--- stdout ---\n(empty)\n--- stderr ---\n(empty)\n"
    );
}

#[tokio::test]
async fn a_timeout_kills_everything_the_command_started() {
    for sandbox in sandboxes() {
        let (_dir, tool) = shell_with(|config| config.sandbox = sandbox.clone());
        // A background grandchild, and a double fork whose middle process exits at once,
        // leaving an orphan in the group.
        let m = marker();
        let command = format!("sleep {m} & (sleep {m} &); sleep {m}");
        let error = run(&tool, json!({"command": command, "timeout_secs": 0.3}))
            .await
            .unwrap_err();
        assert_eq!(error.kind, ToolErrorKind::Failed);
        assert!(
            error.message.contains("timed out after 0.3 s"),
            "{}",
            error.message
        );
        assert!(
            error.message.contains("exit code: none (killed by keel)"),
            "{}",
            error.message
        );
        assert!(
            none_running(&m).await,
            "{sandbox:?}: a process outlived the timeout"
        );
    }
}

#[tokio::test]
async fn in_the_sandbox_a_process_that_left_the_group_is_killed_too() {
    let (_dir, tool) = shell();
    let m = marker();
    let command = format!("setsid sleep {m} & setsid -f sleep {m}; echo started");
    let out = run(&tool, json!({"command": command})).await.unwrap();
    assert!(out.contains("started"), "{out}");
    assert!(
        none_running(&m).await,
        "a setsid process outlived its command"
    );
}

#[tokio::test]
async fn a_cancelled_run_lets_the_command_finish() {
    for sandbox in sandboxes() {
        let (dir, tool) = shell_with(|config| config.sandbox = sandbox.clone());
        let context = ctx();
        let cancel = context.cancel.clone();
        // Cancel once the command runs, then let it go on.
        let ready = dir.path().join("ready");
        let go = dir.path().join("go");
        tokio::spawn(async move {
            while !ready.exists() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            cancel.cancel();
            std::fs::write(go, "").unwrap();
        });
        let command = "touch ready; while [ ! -e go ]; do sleep 0.01; done; echo finished";
        let out = within_bound(tool.call(json!({"command": command}), &context))
            .await
            .unwrap()
            .content;
        assert!(
            out.starts_with("exit code: 0\n--- stdout ---\nfinished\n"),
            "{sandbox:?}: {out}"
        );
    }
}

#[tokio::test]
async fn background_processes_do_not_outlive_a_command_that_exits() {
    for sandbox in sandboxes() {
        let (_dir, tool) = shell_with(|config| config.sandbox = sandbox.clone());
        let m = marker();
        let out = run(
            &tool,
            json!({"command": format!("sleep {m} & echo started")}),
        )
        .await
        .unwrap();
        assert!(out.contains("started"), "{out}");
        assert!(
            none_running(&m).await,
            "{sandbox:?}: the background sleep outlived its command"
        );
    }
}

#[tokio::test]
async fn a_dropped_call_kills_everything_it_started() {
    for sandbox in sandboxes() {
        let (dir, tool) = shell_with(|config| config.sandbox = sandbox.clone());
        let started = dir.path().join("started");
        let m = marker();
        let command = format!("sleep {m} & touch started; sleep {m}");
        let call = run(&tool, json!({"command": command}));
        // The call is abandoned (its future dropped) once the grandchild runs.
        let wait = async {
            while !started.exists() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::select! {
            () = wait => {},
            _ = call => panic!("the command ended by itself"),
        };
        assert!(
            none_running(&m).await,
            "{sandbox:?}: a process outlived the dropped call"
        );
    }
}

#[tokio::test]
async fn the_command_does_not_see_secrets() {
    let parent = vec![
        ("PATH".into(), std::env::var_os("PATH").unwrap()),
        ("FOO_API_KEY".into(), "sk-secret".into()),
        ("GITHUB_TOKEN".into(), "ghp-secret".into()),
        ("DB_PASSWORD".into(), "hunter2".into()),
        ("MY_PROVIDER_KEY".into(), "configured-secret".into()),
        ("KEEP_ME".into(), "visible".into()),
    ];
    let (_dir, tool) = shell_with(|config| {
        config.parent_env = ParentEnv::Fixed(parent);
        config.secrets = SecretFilter::new(["MY_PROVIDER_KEY"]);
    });
    let out = run(&tool, json!({"command": "env"})).await.unwrap();
    assert!(out.contains("KEEP_ME=visible"), "{out}");
    for secret in ["sk-secret", "ghp-secret", "hunter2", "configured-secret"] {
        assert!(!out.contains(secret), "{secret} leaked:\n{out}");
    }
}

#[tokio::test]
async fn output_over_the_cap_keeps_head_and_tail_with_a_marker() {
    let (_dir, tool) = shell_with(|config| config.max_output_chars = 100);
    let out = run(&tool, json!({"command": "seq 1 100000"}))
        .await
        .unwrap();
    assert!(
        out.starts_with("exit code: 0\n--- stdout ---\n1\n2\n3\n"),
        "{out}"
    );
    assert!(out.contains("99999\n100000\n--- stderr ---"), "{out}");
    let total = (1..=100_000)
        .map(|n: u32| n.to_string().len() + 1)
        .sum::<usize>();
    assert!(
        out.contains(&format!("[… {} characters cut …]", total - 100)),
        "{out}"
    );
    assert!(out.len() < 400, "{}", out.len());
}

#[tokio::test]
async fn stdin_is_closed() {
    let (_dir, tool) = shell();
    let out = run(
        &tool,
        json!({"command": "cat; echo done", "timeout_secs": 10}),
    )
    .await
    .unwrap();
    assert!(
        out.contains("exit code: 0\n--- stdout ---\ndone\n"),
        "{out}"
    );
}

#[tokio::test]
async fn a_command_that_does_not_exist_is_exit_code_127() {
    let (_dir, tool) = shell();
    let out = run(&tool, json!({"command": "no-such-command-keel-test"}))
        .await
        .unwrap();
    assert!(out.starts_with("exit code: 127\n"), "{out}");
    assert!(out.contains("not found"), "{out}");
}

#[tokio::test]
async fn a_shell_that_cannot_start_is_a_clear_tool_error() {
    let (_dir, tool) = shell_with(|config| config.program = "/nonexistent/keel-shell".into());
    let error = run(&tool, json!({"command": "ls"})).await.unwrap_err();
    assert_eq!(error.kind, ToolErrorKind::Failed);
    assert!(
        error.message.contains("could not be started"),
        "{}",
        error.message
    );
    assert!(
        error.message.contains("/nonexistent/keel-shell"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn non_utf8_output_is_replaced_not_refused() {
    let (_dir, tool) = shell();
    let out = run(&tool, json!({"command": r"printf 'a\377\376b\n'"}))
        .await
        .unwrap();
    assert!(out.contains("a\u{FFFD}\u{FFFD}b"), "{out:?}");
}

#[tokio::test]
async fn refused_commands_are_not_run_and_those_needing_approval_say_so() {
    let (dir, tool) = shell();
    let error = run(&tool, json!({"command": "touch ran; rm -rf /"}))
        .await
        .unwrap_err();
    assert_eq!(error.kind, ToolErrorKind::Denied);
    assert!(
        error
            .message
            .starts_with("refused by keel's command policy"),
        "{}",
        error.message
    );
    assert!(
        !dir.path().join("ran").exists(),
        "a refused line ran in part"
    );
    // The loop asks a person before such a call runs: the tool says why and what an
    // `approve_session` would allow.
    let need = tool
        .approval(&json!({"command": "touch ran;   rm -rf ~"}))
        .expect("rm -rf ~ needs approval");
    assert!(
        need.reason.contains("the home directory"),
        "{}",
        need.reason
    );
    assert_eq!(need.pattern, "touch ran; rm -rf ~");
    assert!(tool.approval(&json!({"command": "ls"})).is_none());
    assert!(
        tool.approval(&json!({"command": "rm -rf /"})).is_none(),
        "refused, not asked"
    );
}

#[tokio::test]
async fn configured_patterns_apply() {
    let policy = ShellPolicy::new(&[] as &[&str], &["echo *"], &[]).unwrap();
    let (_dir, tool) = shell_with(|config| config.policy = policy);
    let error = run(&tool, json!({"command": "echo hi"})).await.unwrap_err();
    assert!(
        error.message.contains("denied pattern `echo *`"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn bad_arguments_are_clear_errors() {
    let (_dir, tool) = shell();
    let long = "x".repeat(keel_tools::shell::MAX_COMMAND_BYTES + 1);
    for (args, expected) in [
        (json!({"command": "  "}), "empty"),
        (json!({"command": "echo a\u{0}b"}), "NUL"),
        (json!({"command": long}), "bytes long"),
        (json!({"command": "ls", "timeout_secs": 0}), "positive"),
        (json!({"command": "ls", "timeout_secs": -1.5}), "positive"),
        (json!({"command": "ls", "cwd": "/"}), "unknown field"),
    ] {
        let error = run(&tool, args).await.unwrap_err();
        assert_eq!(
            error.kind,
            ToolErrorKind::InvalidArguments,
            "{}",
            error.message
        );
        assert!(error.message.contains(expected), "{}", error.message);
    }
}

#[tokio::test]
async fn the_timeout_asked_for_is_capped_by_the_configured_maximum() {
    let (_dir, tool) = shell_with(|config| config.max_timeout = Duration::from_millis(200));
    let error = run(&tool, json!({"command": "sleep 30", "timeout_secs": 1000}))
        .await
        .unwrap_err();
    assert!(
        error.message.contains("timed out after 0.2 s"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn the_configured_program_runs_the_line() {
    let (_dir, tool) = shell_with(|config| config.program = "bash".into());
    let out = run(&tool, json!({"command": "echo ${BASH_VERSION:+bash}"}))
        .await
        .unwrap();
    assert!(out.contains("--- stdout ---\nbash\n"), "{out}");
}

#[tokio::test]
async fn the_tool_s_policy_knows_its_workspace() {
    let (dir, tool) = shell();
    let root = dir.path().canonicalize().unwrap();
    // A cd to an absolute path inside the workspace stays inside: a build there needs no one.
    let inside = format!("cd {} && make", root.display());
    assert!(tool.approval(&json!({ "command": inside })).is_none());
    // A symlink already on disk that leads out is followed.
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), root.join("out")).unwrap();
    let need = tool
        .approval(&json!({"command": "rm -rf out/*"}))
        .expect("a delete through a link out of the workspace needs approval");
    assert!(!need.reason.is_empty());
}
