//! Commands that run other commands: `env`, `command`, `exec`, `nice`, `nohup`, `timeout`,
//! `stdbuf`, `time`, `setsid`, `ionice`, `builtin`, `busybox`, `strace`, `taskset`, `flock`,
//! `unbuffer`, `xargs`, `sudo`/`doas`, `find -exec`; the scripts of `sh -c`, `su -c`, `env -S`,
//! `flock -c`, `eval`, `watch` and `trap`; and a script file only known at run time
//! (`bash <(curl …)`, `source <(…)`).

use super::command_line::Arg;

/// Programs that download: piping them into a shell runs a script nobody has seen.
pub(crate) const DOWNLOADERS: [&str; 5] = ["curl", "wget", "fetch", "aria2c", "http"];

/// Shells: `-c` runs a script; with no script and no file they read one from their input.
pub(crate) const SHELLS: [&str; 11] = [
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh", "fish", "csh",
];

/// What a command runs in turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Inner {
    /// A command: its words, and whether more arguments come from its input (`xargs`).
    Command(Vec<Arg>, bool),
    /// A script given as an argument.
    Script(Arg),
    /// A script read from standard input (a shell given neither `-c` nor a file).
    ReadsStdin,
}

/// What the command `words` (name first) runs in turn, if anything.
pub(crate) fn inner_commands(words: &[Arg]) -> Vec<Inner> {
    let Some((name, args)) = words.split_first() else {
        return Vec::new();
    };
    let name = name.text.rsplit('/').next().unwrap_or(&name.text);
    let command = |start: usize| command_from(args, start, false);
    match name {
        "env" => env(args),
        "command" => {
            // `command -v x` and `command -V x` only look the name up.
            if args.iter().any(|a| a.text == "-v" || a.text == "-V") {
                Vec::new()
            } else {
                command(first_operand(args, &[]))
            }
        }
        "builtin" | "nohup" | "busybox" | "toybox" => command(first_operand(args, &[])),
        "exec" => command(first_operand(args, &["-a"])),
        "nice" => command(first_operand(args, &["-n", "--adjustment"])),
        "setsid" => command(first_operand(args, &[])),
        "stdbuf" => command(first_operand(args, &["-i", "-o", "-e"])),
        "time" => command(first_operand(args, &["-f", "-o", "--format", "--output"])),
        "ionice" => command(first_operand(args, &["-c", "-n", "-p", "-P", "-u"])),
        "timeout" => {
            // Options, then the duration, then the command.
            let duration = first_operand(args, &["-s", "-k", "--signal", "--kill-after"]);
            command(duration + 1)
        }
        "sudo" => command(first_operand(
            args,
            &[
                "-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "--user", "--group",
            ],
        )),
        "doas" => command(first_operand(args, &["-u", "-C"])),
        "su" => su(args),
        "xargs" => {
            let start = first_operand(
                args,
                &[
                    "-I", "-n", "-P", "-L", "-d", "-E", "-s", "-a", "-e", "-l", "-i",
                ],
            );
            command_from(args, start, true)
        }
        "eval" => joined_script(args),
        "find" => find_exec(args),
        "strace" | "ltrace" => command(first_operand(args, &["-e", "-o", "-p", "-s", "-u"])),
        "unbuffer" | "chronic" => command(first_operand(args, &[])),
        "taskset" => command(first_operand(args, &[]) + 1),
        // `flock FILE COMMAND…` or `flock FILE -c SCRIPT`.
        "flock" => match args
            .iter()
            .position(|a| a.text == "-c" || a.text == "--command")
        {
            Some(i) => args
                .get(i + 1)
                .cloned()
                .map(Inner::Script)
                .into_iter()
                .collect(),
            None => command(first_operand(args, &["-w", "--timeout", "-E"]) + 1),
        },
        // `watch` and `trap` run their words as a script.
        "watch" => {
            let start = first_operand(args, &["-n", "--interval", "-d", "-q"]);
            joined_script(args.get(start..).unwrap_or(&[]))
        }
        "trap" if !args.iter().any(|a| matches!(a.text.as_str(), "-l" | "-p")) => args
            .get(first_operand(args, &[]))
            .map(|script| vec![Inner::Script(script.clone())])
            .unwrap_or_default(),
        // `source FILE` runs a file; a file only known when it runs (`<(curl …)`) is unknown.
        "source" | "." => match args.first() {
            Some(file) if file.dynamic => vec![Inner::Script(file.clone())],
            _ => Vec::new(),
        },
        _ if SHELLS.contains(&name) => shell(args).into_iter().collect(),
        _ => Vec::new(),
    }
}

/// The words of `args` joined into one script, as `eval` and `watch` run them.
fn joined_script(args: &[Arg]) -> Vec<Inner> {
    if args.is_empty() {
        return Vec::new();
    }
    let script = Arg {
        text: args
            .iter()
            .map(|a| a.text.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        dynamic: args.iter().any(|a| a.dynamic),
        glob: false,
    };
    vec![Inner::Script(script)]
}

/// The command starting at `args[start]`, if there is one.
fn command_from(args: &[Arg], start: usize, from_input: bool) -> Vec<Inner> {
    match args.get(start..) {
        Some(rest) if !rest.is_empty() => vec![Inner::Command(rest.to_vec(), from_input)],
        _ => Vec::new(),
    }
}

/// The index of the first operand: options (words starting with `-`) are skipped, with the
/// next word for those in `takes_value`; `--` ends the options.
pub(crate) fn first_operand(args: &[Arg], takes_value: &[&str]) -> usize {
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        let text = arg.text.as_str();
        if text == "--" {
            return i + 1;
        }
        if !text.starts_with('-') || text == "-" {
            return i;
        }
        i += if takes_value.contains(&text) { 2 } else { 1 };
    }
    i
}

/// `env [-i] [-u NAME] [-C DIR] [NAME=VALUE]… [COMMAND]`, and `env -S 'script'`.
fn env(args: &[Arg]) -> Vec<Inner> {
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        let text = arg.text.as_str();
        match text {
            "-S" | "--split-string" => {
                return args
                    .get(i + 1)
                    .map(|script| vec![Inner::Script(script.clone())])
                    .unwrap_or_default();
            }
            "-u" | "--unset" | "-C" | "--chdir" => i += 2,
            "--" => {
                i += 1;
                break;
            }
            _ if text.starts_with("-S") => {
                let script = Arg {
                    text: text[2..].to_string(),
                    ..arg.clone()
                };
                return vec![Inner::Script(script)];
            }
            _ if text.starts_with('-') => i += 1,
            _ => break,
        }
    }
    while args.get(i).is_some_and(|a| is_assignment(&a.text)) {
        i += 1;
    }
    command_from(args, i, false)
}

/// `NAME=VALUE`.
fn is_assignment(text: &str) -> bool {
    text.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric())
            && !name.starts_with(|c: char| c.is_ascii_digit())
    })
}

/// `su [options] [-c COMMAND] [user]`.
fn su(args: &[Arg]) -> Vec<Inner> {
    args.iter()
        .position(|a| a.text == "-c" || a.text == "--command")
        .and_then(|i| args.get(i + 1))
        .map(|script| vec![Inner::Script(script.clone())])
        .unwrap_or_default()
}

/// A shell's arguments: `-c SCRIPT`, a script file, or nothing (it reads its input).
fn shell(args: &[Arg]) -> Option<Inner> {
    let mut i = 0;
    let mut script_option = false;
    let mut reads_stdin = false;
    while let Some(arg) = args.get(i) {
        let text = arg.text.as_str();
        if text == "--" || text == "-" {
            i += 1;
            break;
        }
        if let Some(long) = text.strip_prefix("--") {
            i += if matches!(long, "rcfile" | "init-file") {
                2
            } else {
                1
            };
            continue;
        }
        if (text.starts_with('-') || text.starts_with('+')) && text.len() > 1 {
            let flags = &text[1..];
            script_option |= text.starts_with('-') && flags.contains('c');
            reads_stdin |= flags.contains('s');
            // `-o NAME` and `-O NAME` set an option named by the next word.
            i += if flags.contains(['o', 'O']) { 2 } else { 1 };
            continue;
        }
        break;
    }
    match (script_option, args.get(i)) {
        (true, Some(script)) => Some(Inner::Script(script.clone())),
        (true, None) => None,
        (false, _) if reads_stdin => Some(Inner::ReadsStdin),
        // A script file only known when it runs: `bash <(curl …)`, `sh "$F"`.
        (false, Some(file)) if file.dynamic => Some(Inner::Script(file.clone())),
        (false, Some(_)) => None,
        (false, None) => Some(Inner::ReadsStdin),
    }
}

/// The commands of `find`'s `-exec`, `-execdir`, `-ok` and `-okdir`, each up to its `;` or `+`.
fn find_exec(args: &[Arg]) -> Vec<Inner> {
    let mut found = Vec::new();
    let mut i = 0;
    while i < args.len() {
        if matches!(
            args[i].text.as_str(),
            "-exec" | "-execdir" | "-ok" | "-okdir"
        ) {
            let start = i + 1;
            let end = args[start..]
                .iter()
                .position(|a| a.text == ";" || a.text == "+")
                .map_or(args.len(), |p| start + p);
            if end > start {
                found.push(Inner::Command(args[start..end].to_vec(), false));
            }
            i = end;
        }
        i += 1;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<Arg> {
        line.split_whitespace().map(Arg::literal).collect()
    }

    fn inner(line: &str) -> Vec<Inner> {
        inner_commands(&words(line))
    }

    fn command(line: &str) -> Inner {
        Inner::Command(words(line), false)
    }

    #[test]
    fn wrappers_yield_the_command_they_run() {
        assert_eq!(inner("env -i A=1 B=2 rm -rf x"), vec![command("rm -rf x")]);
        assert_eq!(inner("timeout -s KILL 5 rm x"), vec![command("rm x")]);
        assert_eq!(inner("nice -n 10 make"), vec![command("make")]);
        assert_eq!(inner("sudo -u bob ls"), vec![command("ls")]);
        assert_eq!(inner("/usr/bin/nohup sleep 1"), vec![command("sleep 1")]);
        assert_eq!(inner("command -v rm"), vec![]);
        assert_eq!(
            inner("xargs -0 -n 1 rm -rf"),
            vec![Inner::Command(words("rm -rf"), true)]
        );
        assert_eq!(inner("ls -la"), vec![]);
    }

    #[test]
    fn shells_yield_their_script() {
        assert_eq!(inner("sh -c x"), vec![Inner::Script(Arg::literal("x"))]);
        assert_eq!(inner("bash -ec x"), vec![Inner::Script(Arg::literal("x"))]);
        assert_eq!(
            inner("bash -o pipefail -c x"),
            vec![Inner::Script(Arg::literal("x"))]
        );
        assert_eq!(inner("bash script.sh"), vec![]);
        assert_eq!(inner("bash"), vec![Inner::ReadsStdin]);
        assert_eq!(inner("sh -s arg"), vec![Inner::ReadsStdin]);
        assert_eq!(
            inner("su -c x root"),
            vec![Inner::Script(Arg::literal("x"))]
        );
    }

    #[test]
    fn find_exec_yields_each_command() {
        assert_eq!(
            inner("find . -name x -exec rm {} ; -exec echo {} +"),
            vec![command("rm {}"), command("echo {}")]
        );
    }
}
