//! A hook command as a real process: its answer comes back, and whatever the command does —
//! sleep past its limit, exit 1, print megabytes, ignore or close its stdin, leave a child
//! running — keel gets a bounded failure (or the answer) and no process stays behind. Hooks
//! run in keel's sandbox when there is one (see `a_hook_writes_only_in_its_workspace`);
//! processes are found by a marker in their command line, since in the sandbox they have pids
//! of their own.

mod common;

use std::time::Duration;

use common::hooks::{Scripts, marker, none_running};
use keel_extensions::tool_hooks::HookCommand;
use keel_tools::{CommandHook, MAX_HOOK_STDOUT};

const SHORT: Duration = Duration::from_millis(300);
const LONG: Duration = Duration::from_secs(20);

fn hook(scripts: &Scripts, command: String, timeout: Duration) -> CommandHook {
    CommandHook::new(command, scripts.dir(), timeout)
}

#[tokio::test]
async fn the_hook_reads_the_call_on_stdin_in_the_workspace_and_answers_on_stdout() {
    let scripts = Scripts::new();
    let command = scripts.script(
        "echo.sh",
        r#"cat > "$DIR/input.json"; pwd > "$DIR/cwd"; echo '{"decision":"allow"}'"#,
    );
    let answer = hook(&scripts, command, LONG)
        .run(r#"{"event":"pre_tool"}"#)
        .await
        .unwrap();
    assert_eq!(answer.trim(), r#"{"decision":"allow"}"#);
    let input = std::fs::read_to_string(scripts.at("input.json")).unwrap();
    assert_eq!(input, r#"{"event":"pre_tool"}"#);
    let cwd = std::fs::read_to_string(scripts.at("cwd")).unwrap();
    assert_eq!(
        std::path::Path::new(cwd.trim()).canonicalize().unwrap(),
        scripts.dir().canonicalize().unwrap()
    );
}

#[tokio::test]
async fn a_hook_past_its_time_limit_is_killed_with_everything_it_started() {
    let scripts = Scripts::new();
    let child = marker();
    let command = scripts.script(
        "sleepy.sh",
        &format!("sleep {child} &\nsetsid sleep {child} &\nsleep 30"),
    );
    let error = hook(&scripts, command, SHORT).run("{}").await.unwrap_err();
    assert!(error.0.contains("did not finish within 300ms"), "{error}");
    let hook_itself = scripts.dir().display().to_string();
    assert!(none_running(&hook_itself).await, "the hook still runs");
    assert!(none_running(&child).await, "its children still run");
}

#[tokio::test]
async fn a_hook_keel_stops_waiting_for_leaves_nothing_behind() {
    let scripts = Scripts::new();
    let command = scripts.script("sleepy.sh", "sleep 30");
    let hook = hook(&scripts, command, LONG);
    // The caller gives up first (a run's hard time limit drops the call).
    let cut = tokio::time::timeout(SHORT, hook.run("{}")).await;
    assert!(cut.is_err());
    assert!(
        none_running(&scripts.dir().display().to_string()).await,
        "the hook outlived its caller"
    );
}

#[tokio::test]
async fn a_hook_that_exits_1_fails_and_quotes_its_stderr() {
    let scripts = Scripts::new();
    let command = scripts.script(
        "fails.sh",
        r#"echo '{"decision":"allow"}'; echo 'policy file missing' >&2; exit 1"#,
    );
    let error = hook(&scripts, command, LONG).run("{}").await.unwrap_err();
    assert!(error.0.contains("exited with status 1"), "{error}");
    assert!(error.0.contains("policy file missing"), "{error}");
}

#[tokio::test]
async fn a_hook_printing_megabytes_is_cut_off_and_killed_at_once() {
    let scripts = Scripts::new();
    // `yes` never stops on its own; only the cap ends it before the (long) time limit.
    let command = scripts.script("loud.sh", "yes");
    let error = hook(&scripts, command, LONG).run("{}").await.unwrap_err();
    assert!(
        error
            .0
            .contains(&format!("more than {MAX_HOOK_STDOUT} bytes")),
        "{error}"
    );
    assert!(none_running(&scripts.dir().display().to_string()).await);
    // Megabytes on stderr are read and dropped, never kept whole.
    let command = scripts.script(
        "noisy.sh",
        r#"head -c 3000000 /dev/zero | tr '\0' e >&2; exit 3"#,
    );
    let error = hook(&scripts, command, LONG).run("{}").await.unwrap_err();
    assert!(
        error.0.contains("exited with status 3") && error.0.len() < 1000,
        "{}",
        error.0.len()
    );
}

#[tokio::test]
async fn exactly_the_cap_is_still_an_answer() {
    let scripts = Scripts::new();
    let command = scripts.script(
        "full.sh",
        &format!("head -c {MAX_HOOK_STDOUT} /dev/zero | tr '\\0' ' '"),
    );
    let answer = hook(&scripts, command, LONG).run("{}").await.unwrap();
    assert_eq!(answer.len(), MAX_HOOK_STDOUT);
}

#[tokio::test]
async fn a_hook_that_never_reads_a_large_input_still_answers() {
    let scripts = Scripts::new();
    let command = scripts.script("deaf.sh", r#"echo '{"decision":"deny","reason":"deaf"}'"#);
    // Far more than a pipe holds: writing must not block the answer.
    let input = format!(r#"{{"arguments":{{"content":"{}"}}}}"#, "x".repeat(4 << 20));
    let answer = hook(&scripts, command, LONG).run(&input).await.unwrap();
    assert!(answer.contains("deaf"));
}

#[tokio::test]
async fn a_hook_that_closes_stdin_early_still_answers() {
    let scripts = Scripts::new();
    let command = scripts.script(
        "closes.sh",
        r#"head -c 10 > /dev/null; exec 0<&-; echo '{"decision":"allow"}'"#,
    );
    let input = "y".repeat(1 << 20);
    let answer = hook(&scripts, command, LONG).run(&input).await.unwrap();
    assert!(answer.contains("allow"));
}

#[tokio::test]
async fn a_child_left_running_does_not_hold_the_answer_back() {
    let scripts = Scripts::new();
    // The background `sleep` inherits stdout; waiting for its end would take 30 s.
    let child = marker();
    let command = scripts.script(
        "leaves.sh",
        &format!("sleep {child} &\necho '{{\"decision\":\"allow\"}}'"),
    );
    let answer = hook(&scripts, command, LONG).run("{}").await.unwrap();
    assert!(answer.contains("allow"));
    assert!(none_running(&child).await, "its child still runs");
}

#[tokio::test]
async fn a_command_that_cannot_run_fails_cleanly() {
    let scripts = Scripts::new();
    let error = hook(
        &scripts,
        scripts.at("missing.sh").display().to_string(),
        LONG,
    )
    .run("{}")
    .await
    .unwrap_err();
    assert!(error.0.contains("exited with status 127"), "{error}");
    // A workspace that is gone: `sh` cannot even start there.
    let hook = CommandHook::new("true", scripts.at("no-such-dir"), LONG);
    let error = hook.run("{}").await.unwrap_err();
    assert!(error.0.contains("could not be started"), "{error}");
}

#[tokio::test]
async fn output_that_is_not_utf8_is_a_failure() {
    let scripts = Scripts::new();
    let command = scripts.script("binary.sh", r#"printf '\377\376{}'"#);
    let error = hook(&scripts, command, LONG).run("{}").await.unwrap_err();
    assert!(error.0.contains("not UTF-8"), "{error}");
}

#[tokio::test]
async fn a_hook_writes_only_in_its_workspace() {
    let scripts = Scripts::new();
    let outside = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let command = scripts.script(
        "writes.sh",
        &format!(
            "echo in > \"$DIR/inside\"; echo out > '{}/outside' || true; echo '{{}}'",
            outside.path().display()
        ),
    );
    hook(&scripts, command, LONG).run("{}").await.unwrap();
    assert!(scripts.at("inside").exists());
    assert!(
        !outside.path().join("outside").exists(),
        "a hook wrote outside its workspace"
    );
}
