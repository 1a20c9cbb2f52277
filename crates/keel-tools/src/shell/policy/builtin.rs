//! keel's built-in list of dangerous commands, judged on one [`Invocation`] at a time.
//!
//! Refused outright: recursive deletes (`rm -r`, `find -delete`, `find -exec rm`) of `/`, a
//! top-level directory, the whole working directory or a parent directory
//! (and `rm --no-preserve-root`); `sudo`, `su`, `doas`, `pkexec`, `run0`; formatting and
//! partitioning disks (`mkfs*`, `mke2fs`, `mkswap`, `wipefs`, `fdisk`, `sfdisk`, `parted`,
//! `gdisk`, `sgdisk`) and `dd of=` a disk or memory device; `chmod`, `chown` and `chgrp` on `/`,
//! a top-level directory or the home directory; fork bombs (in [`super::command_line`]); writes
//! (redirections, `tee`, `cp`, `mv`, `install`, `ln`, `truncate`, `dd of=`) to system files
//! (`/etc`, `/boot`, `/sys`, `/proc`, `/usr`, `/bin`, `/sbin`, `/lib*`, `/root`) or disk devices;
//! `shutdown`, `reboot`, `halt`, `poweroff`, `init`/`telinit 0` or `6`, `systemctl poweroff` and
//! the like; `kill` of process 1 or of every process (`-1`), `killall5`.
//!
//! Needing approval: recursive deletes of the home directory itself (`rm -rf ~`) and of other paths outside the workspace or of paths only
//! known at run time (`rm -rf "$DIR"`, `xargs rm -r`); `chmod -R` granting write to everyone
//! (`777`, `o+w`); recursive `chown`/`chgrp` outside the workspace; `git push --force`, `-f`,
//! `--force-with-lease`, `--force-if-includes`, `--mirror`, `--delete`, `+ref` and `:ref`;
//! `git reset --hard`; `git clean -f` (unless a dry run); writes to other devices or to hidden
//! files in the home directory; `kill` of any process this command did not start (a pid or a
//! process group), `pkill`, `killall`. Everything else is allowed.

use super::Verdict;
use super::command_line::{Arg, Invocation};
use super::paths::{Scope, risky_write, scope};
use super::wrappers::first_operand;

/// The built-in verdict on an invocation's command and arguments (its redirections are judged
/// by [`judge_writes`]).
pub(crate) fn judge(invocation: &Invocation) -> Verdict {
    let args = invocation.args();
    let shown = invocation.shown();
    let name = invocation.name();
    let verdict = match name {
        "sudo" | "su" | "doas" | "pkexec" | "run0" | "sudoedit" => Verdict::refuse(
            "runs a command as another user; keel never escalates privileges".to_string(),
        ),
        "rm" => rm(args, invocation.args_from_input),
        "find" => find(args),
        "dd" => dd(args),
        "chmod" => change_owner_or_mode(args, true),
        "chown" | "chgrp" => change_owner_or_mode(args, false),
        "git" => git(args),
        "kill" => kill(args),
        "pkill" | "killall" => {
            Verdict::approval("kills processes by name, which may not be this command's")
        }
        "killall5" => Verdict::refuse("kills every process on the machine"),
        "shutdown" | "reboot" | "halt" | "poweroff" => {
            Verdict::refuse("shuts down or restarts the machine")
        }
        "init" | "telinit" if args.iter().any(|a| a.text == "0" || a.text == "6") => {
            Verdict::refuse("shuts down or restarts the machine")
        }
        "systemctl"
            if args.iter().any(|a| {
                matches!(
                    a.text.as_str(),
                    "poweroff" | "reboot" | "halt" | "kexec" | "emergency" | "rescue"
                )
            }) =>
        {
            Verdict::refuse("shuts down or restarts the machine")
        }
        "tee" | "truncate" => destinations(args.iter().filter(|a| !a.text.starts_with('-'))),
        "cp" | "mv" | "install" | "ln" => copy_destination(args),
        _ if is_disk_tool(name) => Verdict::refuse("formats or repartitions a disk"),
        _ => Verdict::Allow,
    };
    with_command(verdict, &shown)
}

/// The verdict on the files an invocation's redirections write to.
pub(crate) fn judge_writes(invocation: &Invocation) -> Verdict {
    with_command(destinations(invocation.writes.iter()), &invocation.shown())
}

/// Prefixes a reason with the command it is about.
fn with_command(verdict: Verdict, shown: &str) -> Verdict {
    match verdict {
        Verdict::Allow => Verdict::Allow,
        Verdict::NeedsApproval { reason } => Verdict::approval(format!("`{shown}` {reason}")),
        Verdict::Refuse { reason } => Verdict::refuse(format!("`{shown}` {reason}")),
    }
}

fn is_disk_tool(name: &str) -> bool {
    name.starts_with("mkfs")
        || matches!(
            name,
            "mke2fs"
                | "mkswap"
                | "wipefs"
                | "fdisk"
                | "sfdisk"
                | "cfdisk"
                | "parted"
                | "gdisk"
                | "sgdisk"
        )
}

/// Whether a short-option cluster (`-rf`) or a long option sets one of `short` / `long`.
pub(crate) fn has_flag(args: &[Arg], short: &[char], long: &[&str]) -> bool {
    args.iter().take_while(|a| a.text != "--").any(|a| {
        let text = a.text.as_str();
        if let Some(name) = text.strip_prefix("--") {
            long.iter()
                .any(|l| name == *l || name.starts_with(&format!("{l}=")))
        } else {
            text.strip_prefix('-')
                .is_some_and(|cluster| cluster.chars().any(|c| short.contains(&c)))
        }
    })
}

/// The operands of a command: the words that are not options (all words after `--`).
pub(crate) fn operands(args: &[Arg]) -> Vec<&Arg> {
    let mut after_dashes = false;
    let mut found = Vec::new();
    for arg in args {
        if after_dashes {
            found.push(arg);
        } else if arg.text == "--" {
            after_dashes = true;
        } else if !arg.text.starts_with('-') || arg.text == "-" {
            found.push(arg);
        }
    }
    found
}

fn rm(args: &[Arg], args_from_input: bool) -> Verdict {
    if has_flag(args, &[], &["no-preserve-root"]) {
        return Verdict::refuse("turns off rm's protection of `/`");
    }
    let recursive = has_flag(args, &['r', 'R'], &["recursive"]);
    let targets = operands(args);
    if !recursive {
        return destinations(targets.into_iter());
    }
    let mut verdict = Verdict::Allow;
    if args_from_input {
        verdict = Verdict::approval("deletes recursively the paths it reads from its input");
    }
    for target in targets {
        verdict = verdict.worst(deletion(scope(target), &target.text, false));
    }
    verdict
}

/// The verdict on deleting everything under a path of `scope`; `filtered` when only matching
/// entries go (`find … -name x -delete`).
fn deletion(scope: Scope, path: &str, filtered: bool) -> Verdict {
    match scope {
        Scope::Inside => Verdict::Allow,
        Scope::Workspace if filtered => Verdict::Allow,
        // The home directory is the user's to lose: a person may approve it (seed 004).
        _ if scope.is_broad() && scope != Scope::Home && !filtered => Verdict::refuse(format!(
            "deletes recursively `{path}`, {}",
            scope.describe()
        )),
        _ => Verdict::approval(format!(
            "deletes recursively under `{path}`, {}",
            scope.describe()
        )),
    }
}

/// `find PATH… EXPRESSION` with `-delete` or `-exec rm`.
fn find(args: &[Arg]) -> Verdict {
    const DELETERS: [&str; 4] = ["rm", "shred", "unlink", "rmdir"];
    let deletes = args.iter().enumerate().any(|(i, a)| {
        a.text == "-delete"
            || (matches!(a.text.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir")
                && args.get(i + 1).is_some_and(|next| {
                    DELETERS.contains(&next.text.rsplit('/').next().unwrap_or(""))
                }))
    });
    if !deletes {
        return Verdict::Allow;
    }
    const NOT_FILTERS: [&str; 12] = [
        "-delete",
        "-depth",
        "-print",
        "-print0",
        "-maxdepth",
        "-mindepth",
        "-mount",
        "-xdev",
        "-exec",
        "-execdir",
        "-ok",
        "-okdir",
    ];
    // Global options (-H, -L, -P, -O3, -D x) come before the paths.
    let start = args
        .iter()
        .position(|a| !matches!(a.text.as_str(), "-H" | "-L" | "-P") && !a.text.starts_with("-O"))
        .unwrap_or(args.len());
    let paths: Vec<&Arg> = args[start..]
        .iter()
        .take_while(|a| !a.text.starts_with('-') && !matches!(a.text.as_str(), "(" | "!" | ")"))
        .collect();
    let mut filtered = false;
    let mut in_exec = false;
    for arg in &args[start + paths.len()..] {
        let text = arg.text.as_str();
        if in_exec {
            // The words of an `-exec` command up to its `;` or `+` are not tests.
            in_exec = text != ";" && text != "+";
        } else if matches!(text, "-exec" | "-execdir" | "-ok" | "-okdir") {
            in_exec = true;
        } else if text.starts_with('-') && !NOT_FILTERS.contains(&text) {
            filtered = true;
        }
    }
    let dot = Arg {
        text: ".".into(),
        ..Arg::default()
    };
    let paths = if paths.is_empty() { vec![&dot] } else { paths };
    paths.into_iter().fold(Verdict::Allow, |verdict, path| {
        verdict.worst(deletion(scope(path), &path.text, filtered))
    })
}

/// `dd of=DEVICE`.
fn dd(args: &[Arg]) -> Verdict {
    let outputs = args.iter().filter_map(|a| {
        a.text.strip_prefix("of=").map(|path| Arg {
            text: path.to_string(),
            ..a.clone()
        })
    });
    let outputs: Vec<Arg> = outputs.collect();
    destinations(outputs.iter())
}

/// `chmod`, `chown`, `chgrp`.
fn change_owner_or_mode(args: &[Arg], chmod: bool) -> Verdict {
    let recursive = has_flag(args, &['R'], &["recursive"]);
    let operands = operands(args);
    // The first operand is the mode or the owner.
    let (setting, paths) = match operands.split_first() {
        Some((setting, paths)) => (setting.text.as_str(), paths),
        None => return Verdict::Allow,
    };
    let mut verdict = Verdict::Allow;
    for path in paths {
        let scope = scope(path);
        let what = if chmod { "permissions" } else { "owner" };
        let found = match scope {
            Scope::Root | Scope::System | Scope::Home => Verdict::refuse(format!(
                "changes the {what} of `{}`, {}",
                path.text,
                scope.describe()
            )),
            Scope::Outside | Scope::Parent | Scope::Unknown if recursive && !chmod => {
                Verdict::approval(format!(
                    "changes the owner recursively under `{}`, {}",
                    path.text,
                    scope.describe()
                ))
            }
            _ if recursive && chmod && grants_world_write(setting) => Verdict::approval(format!(
                "makes everything under `{}` writable by everyone",
                path.text
            )),
            _ => Verdict::Allow,
        };
        verdict = verdict.worst(found);
    }
    verdict
}

/// A chmod mode that lets everyone write: octal with the other-write bit, or `o+w`/`a+w`/`+w`.
fn grants_world_write(mode: &str) -> bool {
    if !mode.is_empty() && mode.chars().all(|c| c.is_digit(8)) {
        return u32::from_str_radix(mode, 8).is_ok_and(|m| m & 0o002 != 0);
    }
    mode.split(',').any(|clause| {
        let (who, rest) = clause.split_at(clause.find(['+', '=']).unwrap_or(clause.len()));
        (who.is_empty() || who.contains(['o', 'a'])) && rest.contains('w')
    })
}

/// `git [global options] SUBCOMMAND …`.
fn git(args: &[Arg]) -> Verdict {
    let start = first_operand(
        args,
        &[
            "-C",
            "-c",
            "--git-dir",
            "--work-tree",
            "--namespace",
            "--config-env",
        ],
    );
    let Some((subcommand, rest)) = args.get(start..).and_then(|a| a.split_first()) else {
        return Verdict::Allow;
    };
    match subcommand.text.as_str() {
        "push" => {
            let force = has_flag(
                rest,
                &['f', 'd'],
                &[
                    "force",
                    "force-with-lease",
                    "force-if-includes",
                    "mirror",
                    "delete",
                ],
            );
            let forced_ref = operands(rest)
                .iter()
                .skip(1)
                .any(|r| r.text.starts_with('+') || r.text.starts_with(':'));
            if force || forced_ref {
                Verdict::approval("rewrites or deletes history on the remote")
            } else {
                Verdict::Allow
            }
        }
        "reset" if has_flag(rest, &[], &["hard"]) => {
            Verdict::approval("throws away uncommitted changes")
        }
        "clean" if has_flag(rest, &['f'], &["force"]) && !has_flag(rest, &['n'], &["dry-run"]) => {
            Verdict::approval("deletes untracked files")
        }
        _ => Verdict::Allow,
    }
}

/// `kill [-s SIGNAL | -SIGNAL] PID…`.
fn kill(args: &[Arg]) -> Verdict {
    if args
        .iter()
        .any(|a| matches!(a.text.as_str(), "-l" | "-L" | "--list"))
    {
        return Verdict::Allow;
    }
    let mut i = 0;
    // A first word starting with `-` is the signal (`-9`, `-KILL`), or `-s`/`-n` with a value.
    if let Some(first) = args.first() {
        if matches!(first.text.as_str(), "-s" | "-n" | "--signal") {
            i = 2;
        } else if first.text.starts_with('-') && first.text != "--" {
            i = 1;
        }
    }
    if args.get(i).is_some_and(|a| a.text == "--") {
        i += 1;
    }
    let mut verdict = Verdict::Allow;
    for target in args.get(i..).unwrap_or(&[]) {
        let text = target.text.as_str();
        let found = match text {
            "1" => Verdict::refuse("kills process 1, the machine's init"),
            "-1" => Verdict::refuse("kills every process it may"),
            // Its own process group, its last background job, its jobs.
            "0" | "$!" => Verdict::Allow,
            _ if text.starts_with('%') => Verdict::Allow,
            _ => Verdict::approval(format!(
                "kills `{text}`, a process this command did not start"
            )),
        };
        verdict = verdict.worst(found);
    }
    verdict
}

/// `cp`, `mv`, `install`, `ln`: the last operand, or `-t DIR`.
fn copy_destination(args: &[Arg]) -> Verdict {
    let target_option = args.iter().enumerate().find_map(|(i, a)| {
        if a.text == "-t" || a.text == "--target-directory" {
            args.get(i + 1).cloned()
        } else {
            a.text.strip_prefix("--target-directory=").map(|t| Arg {
                text: t.to_string(),
                ..a.clone()
            })
        }
    });
    match target_option {
        Some(target) => destinations(std::iter::once(&target)),
        None => destinations(operands(args).last().copied().into_iter()),
    }
}

/// The verdict on writing to each of `paths`.
fn destinations<'a>(paths: impl Iterator<Item = &'a Arg>) -> Verdict {
    paths.fold(Verdict::Allow, |verdict, path| {
        let found = match risky_write(path) {
            Some((true, what)) => Verdict::refuse(format!("writes to `{}`, {what}", path.text)),
            Some((false, what)) => Verdict::approval(format!("writes to `{}`, {what}", path.text)),
            None => Verdict::Allow,
        };
        verdict.worst(found)
    })
}
