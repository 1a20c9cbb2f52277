//! The sandbox: the commands keel starts for tools — `shell`'s command lines, hooks, stdio MCP
//! servers — confined by the kernel, so that what a command may do does not rest on keel's
//! reading of it alone.
//!
//! Confinement is bubblewrap's (`bwrap`, found on `PATH`; Debian's package `bubblewrap`). A
//! confined command:
//!
//! - sees the whole filesystem read-only, and may write only in the directories it is given
//!   (the workspace) and in a private, empty `/tmp` of its own;
//! - does not see keel's own files (its home with the database and memory notes, its
//!   configuration): an empty directory or file stands in their place;
//! - cannot write keel's files that live in the workspace (its `.keel` directory, where skills
//!   are: a skill written there would reach later prompts);
//! - runs in PID namespace of its own with a fresh `/proc`: keel's process, its environment
//!   (`/proc/PID/environ`, where keel's keys are) and every other process are out of sight;
//! - dies with everything it started when its first process exits, when keel stops waiting for
//!   it, and when keel dies, however it dies (`--die-with-parent`: the namespace's first process
//!   is killed with keel, and the kernel kills the rest of the namespace with it), even
//!   processes that left its session or process group (`setsid`);
//! - has no network but loopback of its own when the network is off;
//! - keeps no capabilities, also when keel runs as root.
//!
//! Where no sandbox is available ([`Sandbox::unavailable`]), a confined command cannot be
//! started ([`SandboxError::Unavailable`]): the `shell` tool refuses to run, unless the
//! configuration turned the sandbox off ([`Sandbox::off`]). A command run unconfined still dies
//! with keel (the kernel's parent-death signal), but what it started need not.

mod bwrap;
mod lifeline;
mod unconfined;

pub use lifeline::Lifeline;

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// The name of bubblewrap's program, looked up on `PATH`.
pub const BWRAP: &str = "bwrap";

/// Why a command cannot be started confined.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// No sandbox is available, and it was not turned off.
    #[error(
        "no sandbox is available to confine it (keel uses bubblewrap's `bwrap`, which is not \
         installed or not on PATH): install bubblewrap, or set `[tools.shell] sandbox = \"off\"` \
         in keel.toml to run commands unconfined"
    )]
    Unavailable,
    /// The program to run was not found.
    #[error("`{0}` was not found")]
    NotFound(String),
    /// The lifeline could not be made.
    #[error("cannot set up the sandbox: {0}")]
    Io(#[from] std::io::Error),
}

/// How commands are confined: by bubblewrap, not at all (turned off), or not possible (none is
/// available); and what a confined command may reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sandbox {
    kind: Kind,
    writable: Vec<PathBuf>,
    read_only: Vec<PathBuf>,
    hidden: Vec<PathBuf>,
    network: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    Bwrap(PathBuf),
    Off,
    Unavailable,
}

/// A command's standard input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// Closed (`/dev/null`); in the sandbox, a guard then kills everything the command started
    /// as soon as keel's [`Lifeline`] is dropped or keel dies, even while bubblewrap sets up.
    Closed,
    /// Set by the caller (a pipe to write the command's input to).
    Piped,
}

/// What a [`Sandbox`] does with a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SandboxState {
    /// Confines it with bubblewrap, at this path.
    Bwrap(PathBuf),
    /// Runs it unconfined: the configuration said so.
    Off,
    /// Cannot run it: no sandbox is available.
    Unavailable,
}

impl Default for Sandbox {
    /// [`Sandbox::detect`].
    fn default() -> Self {
        Sandbox::detect()
    }
}

impl Sandbox {
    fn of(kind: Kind) -> Self {
        Sandbox {
            kind,
            writable: Vec::new(),
            read_only: Vec::new(),
            hidden: Vec::new(),
            network: true,
        }
    }

    /// Bubblewrap when `bwrap` is on `PATH`, else [`Sandbox::unavailable`]. Network on; no
    /// directory writable yet.
    pub fn detect() -> Self {
        match find_program(OsStr::new(BWRAP), std::env::var_os("PATH").as_deref(), None) {
            Some(path) => Sandbox::bwrap(path),
            None => Sandbox::unavailable(),
        }
    }

    /// Bubblewrap, run as `program`.
    pub fn bwrap(program: impl Into<PathBuf>) -> Self {
        Sandbox::of(Kind::Bwrap(program.into()))
    }

    /// No sandbox: commands run unconfined (the configuration turned it off).
    pub fn off() -> Self {
        Sandbox::of(Kind::Off)
    }

    /// No sandbox available: confined commands cannot run.
    pub fn unavailable() -> Self {
        Sandbox::of(Kind::Unavailable)
    }

    /// This sandbox, or none at all where none is available: for the commands keel's owner
    /// configured (hooks, MCP servers), which run unconfined rather than not at all.
    pub fn or_off(mut self) -> Self {
        if self.kind == Kind::Unavailable {
            self.kind = Kind::Off;
        }
        self
    }

    /// What it does with a command.
    pub fn state(&self) -> SandboxState {
        match &self.kind {
            Kind::Bwrap(path) => SandboxState::Bwrap(path.clone()),
            Kind::Off => SandboxState::Off,
            Kind::Unavailable => SandboxState::Unavailable,
        }
    }

    /// Lets commands write in `dir` (and below).
    pub fn writable(mut self, dir: impl Into<PathBuf>) -> Self {
        self.writable.push(dir.into());
        self
    }

    /// Keeps `path` read-only, even inside a writable directory. When it does not exist, an
    /// empty read-only directory takes its place (so a command cannot create it).
    pub fn read_only(mut self, path: impl Into<PathBuf>) -> Self {
        self.read_only.push(path.into());
        self
    }

    /// Hides `path` (a directory or a file) from commands: an empty one stands in its place,
    /// and nothing can be written there.
    pub fn hide(mut self, path: impl Into<PathBuf>) -> Self {
        self.hidden.push(path.into());
        self
    }

    /// Network on (the default) or off.
    pub fn network(mut self, on: bool) -> Self {
        self.network = on;
        self
    }

    /// Whether commands have the network.
    pub fn has_network(&self) -> bool {
        self.network
    }

    /// A command running `program` with `args` in `dir`, confined — or unconfined when the
    /// sandbox is off — and its [`Lifeline`], to keep while it runs. Its environment is `env`,
    /// whole; its standard input is closed when `input` says so (the sandbox then sets it: do
    /// not), and left to the caller otherwise. The caller sets its standard output and error,
    /// its process group and `kill_on_drop`.
    ///
    /// `program` is looked up on the `PATH` of `env` first: a program that is not there is an
    /// error here, not a failure inside the sandbox.
    pub fn command(
        &self,
        program: &OsStr,
        args: &[&OsStr],
        dir: &Path,
        env: Vec<(OsString, OsString)>,
        input: Input,
    ) -> Result<(tokio::process::Command, Lifeline), SandboxError> {
        let path = env
            .iter()
            .find(|(name, _)| name == "PATH")
            .map(|(_, value)| value.clone());
        let (mut command, lifeline) = match &self.kind {
            Kind::Unavailable => return Err(SandboxError::Unavailable),
            Kind::Off => {
                let mut command = tokio::process::Command::new(program);
                command.args(args);
                if input == Input::Closed {
                    command.stdin(std::process::Stdio::null());
                }
                unconfined::die_with_keel(&mut command);
                (command, Lifeline::default())
            }
            Kind::Bwrap(bwrap) => {
                if find_program(program, path.as_deref(), Some(dir)).is_none() {
                    return Err(SandboxError::NotFound(
                        program.to_string_lossy().into_owned(),
                    ));
                }
                let mut command = tokio::process::Command::new(bwrap);
                command.args(bwrap::arguments(self, Some(dir)));
                let lifeline = match input {
                    Input::Closed => {
                        let (read, lifeline) = lifeline::pipe()?;
                        command
                            .args(lifeline::guarded(program, args))
                            .stdin(std::process::Stdio::from(read));
                        lifeline
                    }
                    Input::Piped => {
                        command.arg(program).args(args);
                        Lifeline::default()
                    }
                };
                // bubblewrap asks for its own parent-death signal only once it runs: a keel
                // killed before then would leave it orphaned.
                unconfined::die_with_keel(&mut command);
                (command, lifeline)
            }
        };
        command.current_dir(dir).env_clear().envs(env);
        Ok((command, lifeline))
    }

    /// The program and arguments a command runs under to be confined (`bwrap … --`), for
    /// callers that build their own command (stdio MCP servers); empty when the sandbox is
    /// off. The command keeps its working directory.
    pub fn launcher(&self) -> Result<Vec<OsString>, SandboxError> {
        match &self.kind {
            Kind::Unavailable => Err(SandboxError::Unavailable),
            Kind::Off => Ok(Vec::new()),
            Kind::Bwrap(bwrap) => {
                let mut argv = vec![bwrap.clone().into_os_string()];
                argv.extend(bwrap::arguments(self, None));
                Ok(argv)
            }
        }
    }
}

/// Where `program` is: itself when it holds a `/` (relative to `dir`), else the first
/// executable file of that name in `path`.
fn find_program(program: &OsStr, path: Option<&OsStr>, dir: Option<&Path>) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    let executable = |candidate: &Path| {
        std::fs::metadata(candidate)
            .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
    };
    if program.as_bytes().contains(&b'/') {
        let candidate = match dir {
            Some(dir) => dir.join(program),
            None => PathBuf::from(program),
        };
        return executable(&candidate).then_some(candidate);
    }
    std::env::split_paths(path?)
        .filter(|entry| !entry.as_os_str().is_empty())
        .map(|entry| entry.join(program))
        .find(|candidate| executable(candidate))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_found_on_the_path_or_by_their_path() {
        let path = std::env::var_os("PATH");
        assert!(find_program(OsStr::new("sh"), path.as_deref(), None).is_some());
        assert!(find_program(OsStr::new("no-such-program-keel"), path.as_deref(), None).is_none());
        assert!(find_program(OsStr::new("/bin/sh"), None, None).is_some());
        assert!(find_program(OsStr::new("/nonexistent/sh"), path.as_deref(), None).is_none());
        assert!(find_program(OsStr::new("sh"), None, None).is_none());
    }

    #[test]
    fn no_sandbox_refuses_and_off_runs_as_is() {
        let env = vec![("PATH".into(), "/usr/bin:/bin".into())];
        let dir = Path::new("/");
        assert!(matches!(
            Sandbox::unavailable().command(OsStr::new("sh"), &[], dir, env.clone(), Input::Closed),
            Err(SandboxError::Unavailable)
        ));
        assert!(matches!(
            Sandbox::unavailable().launcher(),
            Err(SandboxError::Unavailable)
        ));
        assert_eq!(Sandbox::unavailable().or_off().state(), SandboxState::Off);
        let (command, _lifeline) = Sandbox::off()
            .command(
                OsStr::new("sh"),
                &[OsStr::new("-c")],
                dir,
                env,
                Input::Piped,
            )
            .unwrap();
        assert_eq!(command.as_std().get_program(), "sh");
        assert!(Sandbox::off().launcher().unwrap().is_empty());
    }

    #[test]
    fn bwrap_runs_the_program_after_its_own_arguments() {
        let env = vec![("PATH".into(), std::env::var_os("PATH").unwrap())];
        let sandbox = Sandbox::bwrap("/usr/bin/bwrap").writable("/tmp");
        let (command, _lifeline) = sandbox
            .command(
                OsStr::new("sh"),
                &[OsStr::new("-c"), OsStr::new("true")],
                Path::new("/"),
                env,
                Input::Closed,
            )
            .unwrap();
        let command = command.as_std();
        assert_eq!(command.get_program(), "/usr/bin/bwrap");
        let args: Vec<&OsStr> = command.get_args().collect();
        let end = args.iter().position(|a| *a == "--").unwrap();
        // The lifeline's guard, then the program.
        assert_eq!(args[end + 1], "/bin/sh");
        assert_eq!(args[end + 4..], ["keel-sandbox", "sh", "-c", "true"]);
        assert!(matches!(
            sandbox.command(
                OsStr::new("no-such-program-keel"),
                &[],
                Path::new("/"),
                vec![],
                Input::Piped,
            ),
            Err(SandboxError::NotFound(_))
        ));
        let launcher = sandbox.launcher().unwrap();
        assert_eq!(launcher[0], "/usr/bin/bwrap");
        assert_eq!(launcher.last().unwrap(), "--");
    }
}
