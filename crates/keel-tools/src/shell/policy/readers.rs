//! Commands known to only read. Where a write could land somewhere keel must not write without
//! a person's yes — after a `cd` out of the workspace or to a place only known when it runs,
//! in a `.keel` directory, through a symlink that leads out — only these run without approval:
//! listing, reading and searching files, and the shell's own bookkeeping. Everything else
//! might write (a build, an installer, `sed -i`), so it needs approval there.

use std::collections::HashSet;

use super::command_line::Invocation;
use super::wrappers::{Inner, first_operand, inner_commands};

/// Commands that read files or print, whatever their arguments (the exceptions are below).
const READERS: &[&str] = &[
    ":",
    "true",
    "false",
    "test",
    "[",
    "echo",
    "printf",
    "pwd",
    "cd",
    "pushd",
    "popd",
    "dirs",
    "ls",
    "dir",
    "vdir",
    "cat",
    "tac",
    "nl",
    "head",
    "tail",
    "less",
    "more",
    "wc",
    "grep",
    "egrep",
    "fgrep",
    "rg",
    "ag",
    "ack",
    "stat",
    "du",
    "df",
    "which",
    "type",
    "whereis",
    "whoami",
    "id",
    "groups",
    "date",
    "uname",
    "basename",
    "dirname",
    "realpath",
    "readlink",
    "cmp",
    "diff",
    "comm",
    "cut",
    "tr",
    "rev",
    "paste",
    "column",
    "fold",
    "expand",
    "unexpand",
    "seq",
    "expr",
    "sleep",
    "env",
    "printenv",
    "nproc",
    "md5sum",
    "sha1sum",
    "sha224sum",
    "sha256sum",
    "sha384sum",
    "sha512sum",
    "b2sum",
    "cksum",
    "sum",
    "od",
    "hexdump",
    "strings",
    "jq",
    "export",
    "unset",
    "set",
    "shift",
    "read",
    "local",
    "declare",
    "typeset",
    "readonly",
    "exit",
    "return",
    "break",
    "continue",
    "wait",
    "alias",
    "unalias",
    "shopt",
    "tty",
    "locale",
    "getconf",
    "ps",
    "pgrep",
    "free",
    "uptime",
];

/// `git` subcommands that only read.
const GIT_READERS: &[&str] = &[
    "status",
    "log",
    "diff",
    "show",
    "rev-parse",
    "ls-files",
    "ls-tree",
    "blame",
    "describe",
    "grep",
    "shortlog",
    "cat-file",
    "rev-list",
    "show-ref",
    "whatchanged",
    "help",
    "version",
];

/// True when `invocation` only reads: a reader above (or a command that only runs another,
/// which is judged on its own), its redirections going nowhere but the terminal or
/// `/dev/null`. A name the line defines as a function or alias is never a reader.
pub(crate) fn only_reads(invocation: &Invocation, defined: &HashSet<String>) -> bool {
    if !invocation
        .writes
        .iter()
        .all(|w| !w.dynamic && harmless(&w.text))
    {
        return false;
    }
    let Some(first) = invocation.words.first() else {
        return true;
    };
    let name = invocation.name();
    if defined.contains(name) || defined.contains(&first.text) {
        return false;
    }
    let args = invocation.args();
    let any = |test: &dyn Fn(&str) -> bool| args.iter().any(|a| test(&a.text));
    match name {
        "find" => !any(&|a| matches!(a, "-delete" | "-fprint" | "-fprint0" | "-fprintf" | "-fls")),
        "sort" => !any(&|a| a.starts_with("-o") || a.starts_with("--output")),
        // `uniq IN OUT` writes OUT.
        "uniq" => args.iter().filter(|a| !a.text.starts_with('-')).count() <= 1,
        "tree" => !any(&|a| a == "-o"),
        "file" => !any(&|a| a.starts_with("-C") || a == "--compile"),
        "git" => git_reads(invocation),
        "command" if any(&|a| a == "-v" || a == "-V") => true,
        // `nohup` writes `nohup.out`, `flock` creates its lock file.
        "nohup" | "flock" => false,
        "time" | "strace" | "ltrace" if any(&|a| a.starts_with("-o") || a == "--output") => false,
        _ if READERS.contains(&name) => true,
        _ => runs_another(invocation),
    }
}

/// A redirection target that writes nothing to a file.
fn harmless(path: &str) -> bool {
    matches!(
        path,
        "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty"
    ) || path.starts_with("/dev/fd/")
}

/// `git [global options] SUBCOMMAND`, with a subcommand that only reads and no `--output`.
fn git_reads(invocation: &Invocation) -> bool {
    let args = invocation.args();
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
        return true;
    };
    GIT_READERS.contains(&subcommand.text.as_str())
        && !rest.iter().any(|a| a.text.starts_with("--output"))
}

/// A wrapper (`env X=1 cmd`, `timeout 5 cmd`, `sh -c '…'`, `eval '…'`): what it runs is judged
/// on its own. A shell reading a script from its input (`sh < file`) is not: that script is
/// not seen.
fn runs_another(invocation: &Invocation) -> bool {
    let inner = inner_commands(&invocation.words);
    !inner.is_empty() && inner.iter().all(|i| !matches!(i, Inner::ReadsStdin))
}
