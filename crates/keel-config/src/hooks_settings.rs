//! `[[hooks]]` of keel.toml: commands that see each tool call before it runs and its result
//! after (the protocol is [`keel_extensions::tool_hooks`]; the process, [`keel_tools::CommandHook`]).
//!
//! ```toml
//! [[hooks]]
//! event = "pre_tool"            # or "post_tool"
//! matcher = "write_*"           # a tool name; `*` matches any run of characters (default "*")
//! command = "./hooks/no_secrets.sh"   # run through `sh -c` in the workspace
//! timeout_secs = 10             # killed after this (default 10)
//! ```
//!
//! Hooks run in the order they are written.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use keel_core::HookEvent;
use keel_extensions::tool_hooks::{ToolHook, ToolHooks, ToolMatcher};
use keel_tools::{CommandHook, DEFAULT_HOOK_TIMEOUT, Sandbox};
use serde::Deserialize;

/// The longest time limit a hook may have, in seconds (an hour).
const MAX_TIMEOUT_SECS: f64 = 3600.0;

/// One `[[hooks]]` table as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookConfig {
    /// `pre_tool` or `post_tool`.
    pub event: HookEvent,
    /// The tools it sees: a name, or a pattern with `*` (default `*`: every tool).
    pub matcher: Option<String>,
    /// The command, run through `sh -c` in the workspace.
    pub command: String,
    /// Seconds it may run before it is killed (default 10).
    pub timeout_secs: Option<f64>,
}

/// One hook, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct HookSettings {
    /// When it runs.
    pub event: HookEvent,
    /// The tool-name pattern.
    pub matcher: String,
    /// The command line.
    pub command: String,
    /// Its time limit.
    pub timeout: Duration,
}

/// Checks every `[[hooks]]` table; the error names the hook (`[[hooks]] #2`) and the key.
pub fn resolve(hooks: &[HookConfig]) -> Result<Vec<HookSettings>, String> {
    hooks
        .iter()
        .enumerate()
        .map(|(index, hook)| hook.settings(index + 1))
        .collect()
}

impl HookConfig {
    fn settings(&self, number: usize) -> Result<HookSettings, String> {
        if self.command.trim().is_empty() {
            return Err(format!("[[hooks]] #{number}: command is empty"));
        }
        let matcher = self.matcher.clone().unwrap_or_else(|| "*".to_string());
        if matcher.trim().is_empty() {
            return Err(format!(
                "[[hooks]] #{number}: matcher is empty: name a tool, a pattern like \"write_*\", \
                 or \"*\" for every tool"
            ));
        }
        let timeout = match self.timeout_secs {
            None => DEFAULT_HOOK_TIMEOUT,
            Some(secs) if secs.is_finite() && secs > 0.0 && secs <= MAX_TIMEOUT_SECS => {
                Duration::from_secs_f64(secs)
            }
            Some(secs) => {
                return Err(format!(
                    "[[hooks]] #{number}: timeout_secs = {secs}: use a number of seconds above 0 \
                     and at most {MAX_TIMEOUT_SECS}"
                ));
            }
        };
        Ok(HookSettings {
            event: self.event,
            matcher,
            command: self.command.clone(),
            timeout,
        })
    }
}

/// The hooks as the agent runs them: each command in `workspace`, confined by `sandbox`, in
/// configuration order.
pub fn tool_hooks(hooks: &[HookSettings], workspace: &Path, sandbox: &Sandbox) -> ToolHooks {
    ToolHooks::new(
        hooks
            .iter()
            .map(|hook| ToolHook {
                event: hook.event,
                matcher: ToolMatcher::new(hook.matcher.clone()),
                label: hook.command.clone(),
                command: Arc::new(
                    CommandHook::new(hook.command.clone(), workspace, hook.timeout)
                        .sandbox(sandbox.clone()),
                ),
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct File {
        #[serde(default)]
        hooks: Vec<HookConfig>,
    }

    fn parse(text: &str) -> Result<Vec<HookSettings>, String> {
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        resolve(&file.hooks)
    }

    #[test]
    fn hooks_are_read_in_order_with_their_defaults() {
        let hooks = parse(
            r#"
[[hooks]]
event = "pre_tool"
matcher = "write_*"
command = "./check.sh"
timeout_secs = 2.5

[[hooks]]
event = "post_tool"
command = "echo {}"
"#,
        )
        .unwrap();
        assert_eq!(
            hooks,
            [
                HookSettings {
                    event: HookEvent::PreTool,
                    matcher: "write_*".into(),
                    command: "./check.sh".into(),
                    timeout: Duration::from_millis(2500),
                },
                HookSettings {
                    event: HookEvent::PostTool,
                    matcher: "*".into(),
                    command: "echo {}".into(),
                    timeout: DEFAULT_HOOK_TIMEOUT,
                },
            ]
        );
        assert_eq!(parse("").unwrap(), []);
    }

    #[test]
    fn mistakes_name_the_hook_and_the_key() {
        let hook = |body: &str| parse(&format!("[[hooks]]\n{body}")).unwrap_err();
        assert!(hook("event = \"before\"\ncommand = \"x\"").contains("pre_tool"));
        assert!(hook("event = \"pre_tool\"").contains("command"));
        assert!(hook("event = \"pre_tool\"\ncommand = \"x\"\nmatch = \"*\"").contains("match"));
        assert!(hook("event = \"pre_tool\"\ncommand = \"  \"").contains("#1: command is empty"));
        assert!(hook("event = \"pre_tool\"\ncommand = \"x\"\nmatcher = \"\"").contains("matcher"));
        for bad in ["0", "-1", "nan", "inf", "86400"] {
            let error = hook(&format!(
                "event = \"pre_tool\"\ncommand = \"x\"\ntimeout_secs = {bad}"
            ));
            assert!(error.contains("#1: timeout_secs"), "{bad}: {error}");
        }
    }

    #[test]
    fn the_tool_hooks_follow_the_settings() {
        let hooks =
            parse("[[hooks]]\nevent = \"pre_tool\"\nmatcher = \"write_*\"\ncommand = \"true\"\n")
                .unwrap();
        let hooks = tool_hooks(&hooks, Path::new("."), &Sandbox::off());
        assert!(hooks.any(HookEvent::PreTool, "write_file"));
        assert!(!hooks.any(HookEvent::PreTool, "read_file"));
        assert!(!hooks.any(HookEvent::PostTool, "write_file"));
    }
}
