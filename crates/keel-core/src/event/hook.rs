//! What the `agent.tool.hook` event says: when a hook ran and what it came to. The hooks
//! themselves are an extension's (`keel_extensions::tool_hooks`); the kernel only names what
//! its events carry.

use serde::{Deserialize, Serialize};

/// When a hook runs: before the tool (`pre_tool`) or after it (`post_tool`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookEvent {
    /// Before the tool runs: may allow, deny or rewrite the arguments.
    PreTool,
    /// After the tool ran: may annotate its result.
    PostTool,
}

impl HookEvent {
    /// The name in the configuration and on the hook's stdin.
    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::PreTool => "pre_tool",
            HookEvent::PostTool => "post_tool",
        }
    }
}

/// What one hook run came to, as its `agent.tool.hook` event says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookOutcome {
    /// No objection (a `post_tool` hook without an annotation says this too).
    Allow,
    /// Refused the call.
    Deny,
    /// Changed the arguments.
    Rewrite,
    /// Added a note to the result.
    Annotate,
    /// Failed (exit status, bad answer, time limit): a `pre_tool` hook's error denies the call;
    /// a `post_tool` hook's is ignored.
    Error,
}
