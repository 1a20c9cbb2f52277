//! keel's sandbox ([`keel_tools::Sandbox`]) for one agent: what the commands keel starts for
//! tools — `shell`, hooks, stdio MCP servers — may not see or write, and what keel says at
//! start when there is no sandbox.
//!
//! Every confined command sees keel's own files (its home, the configuration file, its last
//! good copy) as empty, and the workspace's `.keel` (its skills) read-only. `shell` follows
//! `[tools.shell] sandbox` and `network`; hooks and stdio MCP servers always run in the
//! sandbox where there is one, with the network (a server's `sandbox = false` opts it out), and
//! unconfined where there is none: they are the owner's commands, not the model's.

use std::path::{Path, PathBuf};

use keel_mcp::{McpServerConfig, McpTransport};
use keel_tools::{Sandbox, SandboxState};

use crate::resolve::Settings;

/// `base` with keel's `own_files` hidden and `workspace`'s `.keel` read-only.
pub fn confine(base: Sandbox, own_files: &[PathBuf], workspace: &Path) -> Sandbox {
    own_files
        .iter()
        .fold(base, |sandbox, path| sandbox.hide(path))
        .read_only(workspace.join(".keel"))
}

/// The sandbox of hooks and stdio MCP servers: the one on this machine, confined as
/// [`confine`] says, `workspace` writable, the network on; none where none is available.
pub fn for_owner_commands(own_files: &[PathBuf], workspace: &Path) -> Sandbox {
    confine(Sandbox::detect(), own_files, workspace)
        .writable(workspace)
        .or_off()
}

/// `servers` with the stdio ones, but those named in `unconfined`, run under `sandbox`.
pub fn confine_mcp(
    servers: Vec<McpServerConfig>,
    unconfined: &[String],
    sandbox: &Sandbox,
) -> Vec<McpServerConfig> {
    // `or_off` leaves no sandbox that cannot launch: the error is impossible.
    let argv = sandbox.clone().or_off().launcher().unwrap_or_default();
    servers
        .into_iter()
        .map(|mut server| {
            if let McpTransport::Stdio { launcher, .. } = &mut server.transport
                && !unconfined.contains(&server.name)
            {
                launcher.clone_from(&argv);
            }
            server
        })
        .collect()
}

/// What keel says at start when there is no sandbox where one is wanted: `shell` refuses to
/// run, and hooks and MCP servers run unconfined. `None` when there is nothing to say.
pub fn notice(settings: &Settings) -> Option<String> {
    if Sandbox::detect().state() != SandboxState::Unavailable {
        return None;
    }
    let shell = settings.shell.enabled
        && settings.shell.config.sandbox.state() == SandboxState::Unavailable;
    let others = !settings.hooks.is_empty()
        || settings
            .mcp_servers
            .iter()
            .any(|server| matches!(server.transport, McpTransport::Stdio { .. }));
    let mut text = String::from(
        "keel: no sandbox: bubblewrap's `bwrap` is not on PATH (Debian: apt-get install \
         bubblewrap)",
    );
    if shell {
        text.push_str(
            "; `shell` will refuse every command until it is installed or [tools.shell] \
             sandbox = \"off\" is set",
        );
    }
    if others {
        text.push_str("; hooks and MCP servers run unconfined");
    }
    (shell || others).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::ffi::OsString;
    use std::time::Duration;

    fn stdio(name: &str) -> McpServerConfig {
        McpServerConfig {
            name: name.into(),
            transport: McpTransport::Stdio {
                command: "server".into(),
                args: vec![],
                env: BTreeMap::new(),
                launcher: vec![],
            },
            call_timeout: Duration::from_secs(1),
        }
    }

    fn launcher(server: &McpServerConfig) -> &[OsString] {
        match &server.transport {
            McpTransport::Stdio { launcher, .. } => launcher,
            McpTransport::Http { .. } => &[],
        }
    }

    #[test]
    fn stdio_servers_run_under_the_sandbox_unless_opted_out() {
        let sandbox = Sandbox::bwrap("/usr/bin/bwrap").writable("/work");
        let servers = confine_mcp(vec![stdio("a"), stdio("b")], &["b".into()], &sandbox);
        assert_eq!(launcher(&servers[0])[0], "/usr/bin/bwrap");
        assert_eq!(launcher(&servers[0]).last().unwrap(), "--");
        assert!(launcher(&servers[1]).is_empty());
        // Without a sandbox, they run as they are.
        let servers = confine_mcp(vec![stdio("a")], &[], &Sandbox::unavailable());
        assert!(launcher(&servers[0]).is_empty());
    }

    #[test]
    fn keels_files_are_hidden_and_the_skills_read_only() {
        let own = [PathBuf::from("/home/u/.keel-home")];
        let sandbox = confine(Sandbox::bwrap("bwrap"), &own, Path::new("/ws"));
        assert_eq!(
            sandbox,
            Sandbox::bwrap("bwrap")
                .hide("/home/u/.keel-home")
                .read_only("/ws/.keel")
        );
    }
}
