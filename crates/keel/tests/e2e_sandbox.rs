//! End to end, keel's sandbox (needs bubblewrap's `bwrap` on PATH): a `shell` command dies with
//! a `keel run` or `keel serve` killed with SIGKILL — `setsid` or not — so a resume's "retry"
//! runs it once; commands
//! see neither keel's process nor its keys in `/proc`; keel's own `/proc/PID/environ` is closed
//! to its user's other processes; and without `bwrap`, `shell` is refused and keel says so at
//! start, unless `[tools.shell] sandbox = "off"`.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::daemon::{Daemon, daemon_config, make_key};
use common::{Mock, bound, keel, only_run_id, run, stderr, stdout, temp, write_config};
use serde_json::{Value, json};

/// keel.toml for these tests: a policy that allows every command (so that what holds is the
/// sandbox, not the policy), and runs whose dead worker is taken over at once.
const ALLOW_ALL: &str = "[tools.shell]\nallow = [\"*\"]\n\n[runs]\nstale_after_secs = 0.001\n";

/// A number no other process's command line holds, for a test's `sleep`.
fn marker() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("30.{}{n:03}", std::process::id())
}

/// The `sleep MARKER` processes.
fn sleeping(marker: &str) -> Vec<u32> {
    running(&format!("sleep\0{marker}\0"))
}

/// The pids of the processes whose command line holds `marker`.
fn running(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
                .filter(|pid| {
                    std::fs::read(format!("/proc/{pid}/cmdline"))
                        .is_ok_and(|line| String::from_utf8_lossy(&line).contains(marker))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until `check` holds, at most `deadline`; whether it did.
fn eventually(deadline: Duration, mut check: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + deadline;
    while Instant::now() < until {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    check()
}

fn keel_run(home: &Path, mock: &Mock, workspace: &Path, prompt: &str) -> Command {
    let mut command = keel(home);
    command
        .args([
            "run",
            "--json",
            "--provider",
            "mock",
            "--base-url",
            &mock.url,
        ])
        .arg("--workspace")
        .arg(workspace)
        .arg(prompt);
    command
}

#[test]
fn a_killed_keel_takes_its_shell_command_with_it_so_retry_runs_it_once() {
    let m = marker();
    // The first time it starts a process that leaves its session, and sleeps; run again (the
    // retry), it appends at once.
    let command = format!(
        "if [ -e started ]; then echo once >> f; else touch started; \
         setsid -f sh -c 'sleep {m}; echo escaped >> g'; sleep {m}; echo once >> f; fi"
    );
    let script = json!({"steps": [
        {"tool_calls": [{"name": "shell", "arguments": {"command": command}}]},
        {"text": "Appended once.", "forever": true}
    ]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    write_config(&home, "", ALLOW_ALL);

    let mut child = keel_run(&home, &mock, &workspace, "append once")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    bound::started(child.id());
    let both_sleep = eventually(Duration::from_secs(60), || sleeping(&m).len() >= 2);
    child.kill().unwrap();
    child.wait().unwrap();
    bound::ended(child.id());
    assert!(both_sleep, "the command never ran");

    assert!(
        eventually(Duration::from_secs(10), || running(&m).is_empty()),
        "processes of the command outlived keel: {:?}",
        running(&m)
    );
    assert!(!workspace.join("f").exists(), "the command went on");
    assert!(!workspace.join("g").exists(), "the setsid process went on");

    // The call was cut off: resume asks, and a retry runs it — once.
    let run_id = only_run_id(&home);
    let halted = run(keel(&home).args(["resume", "--force", &run_id]));
    assert_eq!(halted.status.code(), Some(3), "{}", stderr(&halted));
    assert!(stderr(&halted).contains("retry"), "{}", stderr(&halted));
    let retried = run(keel(&home).args(["resume", "--force", &run_id, "--unsafe-call", "retry"]));
    assert_eq!(retried.status.code(), Some(0), "{}", stderr(&retried));
    assert_eq!(
        std::fs::read_to_string(workspace.join("f")).unwrap(),
        "once\n"
    );
    assert!(!workspace.join("g").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_daemon_takes_its_shell_commands_with_it() {
    let m = marker();
    let command =
        format!("setsid -f sh -c 'sleep {m}; echo escaped >> g'; sleep {m}; echo once >> f");
    let script = json!({"steps": [
        {"tool_calls": [{"name": "shell", "arguments": {"command": command}}]},
        {"text": "Appended once.", "forever": true}
    ]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    daemon_config(&home, &mock, &workspace, "[tools.shell]\nallow = [\"*\"]\n");
    let output = run(keel(&home).args(["users", "set", "ann", "--permission", "admin"]));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let key = make_key(&home, &["--user", "ann"]);
    let mut daemon = Daemon::start(&home);
    let ann = daemon.client(&key);
    let conversation = ann.conversation(None).await;
    ann.send(&conversation, "append once").await;
    let both_sleep = eventually(Duration::from_secs(60), || sleeping(&m).len() >= 2);
    daemon.kill();
    assert!(both_sleep, "the command never ran");
    assert!(
        eventually(Duration::from_secs(10), || running(&m).is_empty()),
        "processes of the command outlived keel serve: {:?}",
        running(&m)
    );
    assert!(!workspace.join("f").exists(), "the command went on");
    assert!(!workspace.join("g").exists(), "the setsid process went on");
}

#[test]
fn commands_see_neither_keels_process_nor_its_keys() {
    // Each count is of what a command could read in `/proc`: keel's environment (its keys)
    // and keel's command line (the prompt). The brackets keep the pattern from matching itself.
    let command = "cat /proc/*/environ | tr '\\0' '\\n' | grep -c -e '^OPENAI_API_KEY=' -e '^WORK_[D]B_URL='; \
                   for p in /proc/[0-9]*; do cat $p/cmdline; echo; done | grep -c 'prompt-[m]arker'";
    let script = json!({"steps": [
        {"tool_calls": [{"name": "shell", "arguments": {"command": command}}]},
        {"text": "Looked.", "forever": true}
    ]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    write_config(
        &home,
        "",
        "[tools.shell]\nallow = [\"*\"]\nsecret_env = [\"WORK_DB_URL\"]\n",
    );
    let output = run(
        keel_run(&home, &mock, &workspace, "prompt-marker: look around")
            .env("OPENAI_API_KEY", "sk-e2e-sandbox-key-123456")
            .env("WORK_DB_URL", "postgres://keel:hunter2@db/prod"),
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let result = report["tool_calls"][0]["output"].as_str().unwrap();
    assert!(
        result.starts_with("exit code: 1\n--- stdout ---\n0\n0\n"),
        "{result}"
    );
}

#[test]
fn keels_environment_is_closed_to_its_users_other_processes() {
    // keel runs as `nobody` and another `nobody` process tries to read its environment: that
    // needs root to set up, and util-linux's setpriv.
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let setpriv = Command::new("setpriv").arg("--help").output().is_ok();
    if !root || !setpriv {
        eprintln!("skipped: needs root and setpriv to run keel as another user");
        return;
    }
    let nobody = ["--reuid=65534", "--regid=65534", "--clear-groups"];
    let (_d, dir) = temp();
    std::fs::write(dir.join("script.json"), r#"{"steps": []}"#).unwrap();
    for path in [dir.as_path(), &dir.join("script.json")] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut mock = Command::new("setpriv")
        .args(nobody)
        .arg(common::keel_bin())
        .args(["mock-provider", "--bind", "127.0.0.1:0", "--script"])
        .arg(dir.join("script.json"))
        .env("WORK_SECRET", "sk-only-keel-has-this")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    bound::started(mock.id());
    // It is listening once it printed its address: its environment is set up.
    let mut out = mock.stdout.take().unwrap();
    let line = bound::first_line_within(
        move || {
            use std::io::BufRead;
            let mut line = String::new();
            std::io::BufReader::new(&mut out)
                .read_line(&mut line)
                .ok()?;
            Some(line)
        },
        Duration::from_secs(60),
    );
    let read = Command::new("setpriv")
        .args(nobody)
        .args(["cat", &format!("/proc/{}/environ", mock.id())])
        .output()
        .unwrap();
    let _ = mock.kill();
    let _ = mock.wait();
    bound::ended(mock.id());
    assert!(line.is_some(), "keel mock-provider did not start");
    assert!(!read.status.success(), "keel's environment was readable");
    assert!(
        !String::from_utf8_lossy(&read.stdout).contains("sk-only-keel-has-this"),
        "keel's environment was read"
    );
}

#[test]
fn without_bubblewrap_shell_is_refused_and_keel_says_so_unless_the_sandbox_is_off() {
    let script = json!({"steps": [
        {"tool_calls": [{"name": "shell", "arguments": {"command": "echo ran > ran.txt"}}]},
        {"text": "Tried.", "forever": true}
    ]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    // A PATH with a shell and no `bwrap`.
    let (_b, bin) = temp();
    std::os::unix::fs::symlink("/bin/sh", bin.join("sh")).unwrap();

    let output = run(keel_run(&home, &mock, &workspace, "run it").env("PATH", &bin));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let said = stderr(&output);
    assert!(said.contains("keel: no sandbox"), "{said}");
    assert!(said.contains("sandbox = \"off\""), "{said}");
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let call = &report["tool_calls"][0];
    assert_eq!(call["ok"], false, "{call}");
    let result = call["output"].as_str().unwrap();
    assert!(result.contains("no sandbox is available"), "{result}");
    assert!(!workspace.join("ran.txt").exists());

    write_config(&home, "", "[tools.shell]\nsandbox = \"off\"\n");
    let mock = Mock::start(&script.to_string());
    let output = run(keel_run(&home, &mock, &workspace, "run it").env("PATH", &bin));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        !stderr(&output).contains("no sandbox"),
        "{}",
        stderr(&output)
    );
    assert_eq!(
        std::fs::read_to_string(workspace.join("ran.txt")).unwrap(),
        "ran\n"
    );
}
