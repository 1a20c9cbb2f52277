//! The command policy: what keel thinks of a shell command before it runs.
//!
//! [`ShellPolicy::classify`] parses the command line (with brush-parser, a bash parser) rather
//! than matching the raw text, and judges every simple command the line would run: the parts of
//! `;`, `&&`, `||`, `&` lists and pipelines, subshells `( … )` and groups `{ … }`, loops and
//! conditionals, function bodies, command substitutions `$( … )` and `` ` … ` ``, process
//! substitutions `<( … )`, heredocs that expand, and the scripts given to `sh -c`/`bash -c`
//! (any shell), `su -c`, `env -S` and `eval`, recursively. Words are unquoted first, so `r''m`,
//! `"rm"` and `\rm` are all `rm`, and a command name is read without its directory (`/bin/rm`
//! is `rm`). Wrappers are seen through: `env VAR=x cmd`, `command`, `exec`, `builtin`, `nice`,
//! `nohup`, `timeout`, `stdbuf`, `time`, `setsid`, `ionice`, `busybox`, `xargs`, `sudo`/`doas`
//! and `find -exec` each yield both the wrapper and the command it runs.
//!
//! The verdict of the line is the most dangerous verdict of its parts
//! (`Refuse` > `NeedsApproval` > `Allow`). Each simple command is judged in this order, the first
//! that applies deciding:
//!
//! 1. a configured `deny` pattern matches it: `Refuse`;
//! 2. a configured `approve` pattern matches it: `NeedsApproval`;
//! 3. a configured `allow` pattern matches it: `Allow`;
//! 4. the built-in list ([`builtin`]): `Refuse`, `NeedsApproval` or `Allow`.
//!
//! The patterns ([`CommandPattern`]) see one simple command at a time — so `allow = ["git *"]`
//! lets `git push --force` through but never the `rm -rf /` after a `;`. Two things stay outside
//! their reach. A command's redirections are judged on their own: `allow = ["echo *"]` does not
//! let `echo x > /etc/passwd` through. And what cannot be known before running is never allowed,
//! whatever the patterns say: a line that does not parse, a command name taken from a variable
//! or a substitution (`$X -rf /`), a script built at run time (`sh -c "$S"`, `eval "$(…)"`), a
//! shell reading a script from a pipe (`… | sh`; worse after `curl`/`wget`) all need approval,
//! and a function that calls itself (`:(){ :|:& };:`), directly or through others, is refused.
//!
//! The policy also follows where each command would run (module `places`). After a `cd` (or
//! `pushd`, `env -C`, `git -C`…) out of the workspace, or to a place only known when it runs
//! (`cd $X`, `cd -`), and inside a `.keel` directory, only commands known to only read
//! (module `readers`) run without approval: `cd ~ && echo x >> .bashrc` needs it. Anywhere, a
//! command that is not known to only read needs approval when a path of it names a `.keel`
//! directory (the workspace's holds skills, which reach later prompts) or, when the policy knows
//! the workspace root ([`ShellPolicy::in_workspace`]), leads out of the workspace through a
//! symlink on disk. Like redirections these are judged whatever the patterns say: a pattern
//! sees the words of a command, not where it runs. Links (module `links`) to places outside the
//! workspace need approval: a symbolic link (`ln -s /elsewhere l`) lets later commands reach
//! there, a hard link (`ln ~/.local/share/keel/keel.db x`) brings an outside file in. Aliases
//! are judged by their value where they are defined, and a name the line defines as a function
//! or alias is never taken for the command it shadows.
//!
//! The policy guards against mistakes and the obvious, not against a determined adversary: a
//! script written to a file and then run, an interpreter's own code (`python -c`), or a program
//! that deletes on its own are beyond what reading a command line can see.

mod builtin;
mod command_line;
mod links;
mod paths;
mod pattern;
mod places;
mod readers;
mod verdict;
mod wrappers;

use std::collections::HashSet;
use std::path::Path;

pub use pattern::{CommandPattern, PatternError};
pub use verdict::Verdict;

use command_line::{Invocation, shorten};
use places::Places;

/// How deeply brackets may nest before a line is not parsed at all (a guard for the parser's
/// recursion); such a line needs approval.
const MAX_NESTING: usize = 100;

/// keel's command policy: the built-in list of dangerous commands plus configured patterns.
#[derive(Clone, Debug, Default)]
pub struct ShellPolicy {
    allow: Vec<CommandPattern>,
    deny: Vec<CommandPattern>,
    approve: Vec<CommandPattern>,
    places: Places,
}

/// Which configured list a pattern belongs to, for errors.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("shell `{list}` pattern {index}: {source}")]
pub struct PolicyError {
    /// `allow`, `deny` or `approve`.
    pub list: &'static str,
    /// The position of the pattern in its list, from 1.
    pub index: usize,
    /// What is wrong with it.
    pub source: PatternError,
}

impl ShellPolicy {
    /// The built-in list with the configured `allow`, `deny` and `approve` patterns (see
    /// [`CommandPattern`] for their language and the module documentation for precedence).
    pub fn new<S: AsRef<str>>(allow: &[S], deny: &[S], approve: &[S]) -> Result<Self, PolicyError> {
        Ok(ShellPolicy {
            allow: compile("allow", allow)?,
            deny: compile("deny", deny)?,
            approve: compile("approve", approve)?,
            places: Places::default(),
        })
    }

    /// The same policy for commands run in the workspace at `root`: absolute paths inside it
    /// count as inside (`cd /work/repo/src`), and the symlinks already on disk along a path
    /// inside are followed, so a path that leaves through one is seen to. Without a root,
    /// every absolute path counts as outside and symlinks on disk are not looked at.
    pub fn in_workspace(mut self, root: &Path) -> Self {
        self.places = Places::new(root);
        self
    }

    /// What the policy thinks of `command`, a line for `sh -c`.
    pub fn classify(&self, command: &str) -> Verdict {
        if nesting(command) > MAX_NESTING {
            return Verdict::approval(format!(
                "`{}` nests brackets more than {MAX_NESTING} deep, too deep to check",
                shorten(command)
            ));
        }
        // brush-parser is not known to panic, but a parser bug must not allow a command.
        let read = || command_line::read(command, &self.places);
        let Ok(reading) = std::panic::catch_unwind(read) else {
            return Verdict::approval(format!(
                "`{}` could not be parsed, so it cannot be checked",
                shorten(command)
            ));
        };
        let findings = reading.findings.into_iter();
        let defined = &reading.defined;
        let judged = reading
            .invocations
            .iter()
            .map(|inv| self.judge(inv, defined));
        findings.chain(judged).fold(Verdict::Allow, Verdict::worst)
    }

    /// One simple command: configured patterns first, then the built-in list; its
    /// redirections by the built-in list and, unless it only reads, where it runs and what its
    /// paths reach, always. `defined`: the names the line defines as functions or aliases.
    fn judge(&self, invocation: &Invocation, defined: &HashSet<String>) -> Verdict {
        let mut writes = builtin::judge_writes(invocation);
        if !readers::only_reads(invocation, defined) {
            writes = writes.worst(self.places.judge(invocation));
        }
        if invocation.words.is_empty() {
            return writes;
        }
        let words = invocation.pattern_words();
        let shown = invocation.shown();
        let matching = |patterns: &[CommandPattern]| {
            patterns
                .iter()
                .find(|p| p.matches(&words))
                .map(|p| p.to_string())
        };
        let verdict = if let Some(pattern) = matching(&self.deny) {
            Verdict::refuse(format!("`{shown}` matches the denied pattern `{pattern}`"))
        } else if let Some(pattern) = matching(&self.approve) {
            Verdict::approval(format!(
                "`{shown}` matches the pattern `{pattern}`, which needs approval"
            ))
        } else if matching(&self.allow).is_some() {
            Verdict::Allow
        } else {
            builtin::judge(invocation).worst(links::judge(invocation, &self.places))
        };
        verdict.worst(writes)
    }
}

fn compile<S: AsRef<str>>(
    list: &'static str,
    patterns: &[S],
) -> Result<Vec<CommandPattern>, PolicyError> {
    patterns
        .iter()
        .enumerate()
        .map(|(i, p)| {
            CommandPattern::new(p.as_ref()).map_err(|source| PolicyError {
                list,
                index: i + 1,
                source,
            })
        })
        .collect()
}

/// The deepest bracket nesting in `text`, quotes ignored (an overestimate is safe).
fn nesting(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for c in text.chars() {
        match c {
            '(' | '{' | '[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ')' | '}' | ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}
