//! The command policy when it knows the workspace root: absolute paths inside it, and the
//! symlinks already on disk that lead out of it or into a `.keel` directory (issue 31).

#![cfg(unix)]

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use keel_tools::{ShellPolicy, Verdict};

/// A workspace `w` beside a directory `elsewhere`, with symlinks in `w`: `out` to
/// `elsewhere`, `dangling` to a missing path outside, `skills` to `.keel/skills`, `inner` to
/// `src`.
struct Places {
    _dir: tempfile::TempDir,
    root: PathBuf,
    elsewhere: PathBuf,
}

impl Places {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("w");
        let elsewhere = dir.path().join("elsewhere");
        fs::create_dir_all(root.join("src")).unwrap();
        fs::create_dir_all(root.join(".keel/skills")).unwrap();
        fs::create_dir_all(&elsewhere).unwrap();
        fs::write(elsewhere.join("f"), "precious").unwrap();
        symlink(&elsewhere, root.join("out")).unwrap();
        symlink(dir.path().join("missing/x"), root.join("dangling")).unwrap();
        symlink(".keel/skills", root.join("skills")).unwrap();
        symlink("src", root.join("inner")).unwrap();
        Places {
            _dir: dir,
            root,
            elsewhere,
        }
    }

    fn policy(&self) -> ShellPolicy {
        ShellPolicy::default().in_workspace(&self.root)
    }
}

fn needs_approval(verdict: &Verdict) -> bool {
    matches!(verdict, Verdict::NeedsApproval { .. })
}

fn show(path: &Path) -> String {
    path.display().to_string()
}

#[test]
fn symlinks_on_disk_that_lead_out_need_approval_for_commands_that_write() {
    let p = Places::new();
    let policy = p.policy();
    for line in [
        "rm -rf out/*",
        "rm -rf out/",
        "echo x > out/f",
        "echo x >> dangling",
        "cp notes.txt out/",
        "cd out && rm -rf d",
        "cd inner/../out && make",
        "touch out/new",
    ] {
        let verdict = policy.classify(line);
        assert!(needs_approval(&verdict), "{line}: {verdict:?}");
    }
    let reason = policy
        .classify("rm -rf out/*")
        .reason()
        .unwrap()
        .to_string();
    assert!(
        reason.contains(&show(&p.elsewhere)) && reason.contains("symlink `out`"),
        "{reason}"
    );
    for line in [
        "cat out/f",
        "ls -la out",
        "grep -r x out",
        "rm -rf inner/target",
        "echo x > inner/y",
        "rm -rf src/target",
    ] {
        assert!(policy.classify(line).is_allow(), "{line}");
    }
    // The policy never followed anything: the file outside is as it was.
    assert_eq!(
        fs::read_to_string(p.elsewhere.join("f")).unwrap(),
        "precious"
    );
}

#[test]
fn a_symlink_into_keel_is_keel() {
    let p = Places::new();
    let policy = p.policy();
    let verdict = policy.classify("echo hi > skills/x/SKILL.md");
    assert!(needs_approval(&verdict), "{verdict:?}");
    assert!(verdict.reason().unwrap().contains(".keel"), "{verdict:?}");
    assert!(policy.classify("cat skills/x/SKILL.md").is_allow());
}

#[test]
fn absolute_paths_inside_the_known_root_are_inside() {
    let p = Places::new();
    let root = show(&p.root);
    let policy = p.policy();
    for line in [
        format!("cd {root} && cargo build"),
        format!("cd {root}/src && rm -rf target"),
        format!("cd {root}/src/.. && make"),
        "cd ../w && make".to_string(),
        format!("git -C {root} commit -m x"),
        format!("ln -s {root}/src/main.rs main.rs"),
    ] {
        let verdict = policy.classify(&line);
        assert!(verdict.is_allow(), "{line}: {verdict:?}");
    }
    for line in [
        format!("cd {root}/.. && rm -rf w2"),
        format!("cd {} && make", show(&p.elsewhere)),
        "cd ../elsewhere && make".to_string(),
        format!("ln -s {} l", show(&p.elsewhere)),
        format!("ln -s {root}/../elsewhere l"),
        format!("git -C {} reset --soft HEAD", show(&p.elsewhere)),
    ] {
        let verdict = policy.classify(&line);
        assert!(needs_approval(&verdict), "{line}: {verdict:?}");
    }
    // Without the root, an absolute path is outside.
    let unplaced = ShellPolicy::default().classify(&format!("cd {root}/src && make"));
    assert!(needs_approval(&unplaced), "{unplaced:?}");
}
