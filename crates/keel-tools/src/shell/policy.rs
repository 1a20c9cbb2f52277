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
//! and a function that calls itself (`:(){ :|:& };:`) is refused.
//!
//! The policy guards against mistakes and the obvious, not against a determined adversary: a
//! script written to a file and then run, an interpreter's own code (`python -c`), or a program
//! that deletes on its own are beyond what reading a command line can see.

mod builtin;
mod command_line;
mod paths;
mod pattern;
mod verdict;
mod wrappers;

pub use pattern::{CommandPattern, PatternError};
pub use verdict::Verdict;

use command_line::{Invocation, shorten};

/// How deeply brackets may nest before a line is not parsed at all (a guard for the parser's
/// recursion); such a line needs approval.
const MAX_NESTING: usize = 100;

/// keel's command policy: the built-in list of dangerous commands plus configured patterns.
#[derive(Clone, Debug, Default)]
pub struct ShellPolicy {
    allow: Vec<CommandPattern>,
    deny: Vec<CommandPattern>,
    approve: Vec<CommandPattern>,
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
        })
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
        let Ok(reading) = std::panic::catch_unwind(|| command_line::read(command)) else {
            return Verdict::approval(format!(
                "`{}` could not be parsed, so it cannot be checked",
                shorten(command)
            ));
        };
        let findings = reading.findings.into_iter();
        let judged = reading.invocations.iter().map(|inv| self.judge(inv));
        findings.chain(judged).fold(Verdict::Allow, Verdict::worst)
    }

    /// One simple command: configured patterns first, then the built-in list; its
    /// redirections always by the built-in list.
    fn judge(&self, invocation: &Invocation) -> Verdict {
        let writes = builtin::judge_writes(invocation);
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
            builtin::judge(invocation)
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
