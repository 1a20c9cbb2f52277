//! The `Tool` trait and what a tool declares about itself.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

pub use crate::reach::Reach;

/// The permission a caller needs to use a tool, lowest first.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    /// Anyone, including unknown users.
    Guest,
    /// A known user.
    #[default]
    User,
    /// An administrator.
    Admin,
    /// The owner of the deployment.
    Owner,
}

/// What a tool declares about itself: how the model sees it and how the loop treats it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Unique name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of its arguments (an object schema).
    pub parameters: serde_json::Value,
    /// Safe to call again with the same arguments (reads, lookups). Only idempotent tools are
    /// retried or re-run on resume.
    #[serde(default)]
    pub idempotent: bool,
    /// Needs the human (asks a question, shows a prompt): runs alone, never beside other tools.
    #[serde(default)]
    pub interactive: bool,
    /// The permission a caller needs.
    #[serde(default)]
    pub required_permission: Permission,
    /// The module it belongs to, for persona filtering: a persona's `allowed_modules` offers
    /// only tools of the modules it names, never a tool of none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// What it reaches besides its arguments (see [`Reach`]).
    #[serde(default, skip_serializing_if = "Reach::is_undeclared")]
    pub reach: Reach,
    /// Sends notifications to the conversation's platform (a scheduler, a reminder): its calls
    /// get the conversation's `platform`, `platform_channel_id` and `platform_thread_id`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub notifies: bool,
}

impl ToolSpec {
    /// A spec with the given name, description and parameter schema; not idempotent, not
    /// interactive, `user` permission, no module, reach undeclared.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: serde_json::Value,
    ) -> Self {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters,
            idempotent: false,
            interactive: false,
            required_permission: Permission::User,
            module: None,
            reach: Reach::Undeclared,
            notifies: false,
        }
    }

    /// Marks the tool idempotent.
    pub fn idempotent(mut self) -> Self {
        self.idempotent = true;
        self
    }

    /// Whether a call may change the world: every tool that is not idempotent. In an untrusted
    /// session such a call needs approval.
    pub fn side_effecting(&self) -> bool {
        !self.idempotent
    }

    /// Declares what the tool reaches (see [`Reach`]).
    pub fn reach(mut self, reach: Reach) -> Self {
        self.reach = reach;
        self
    }

    /// Puts the tool in `module`, for personas' `allowed_modules`.
    pub fn in_module(mut self, module: impl Into<String>) -> Self {
        self.module = Some(module.into());
        self
    }

    /// Whether an untrusted session may call it without a person's approval: only an
    /// idempotent tool declared [`Reach::Conversation`].
    pub fn untrusted_without_approval(&self) -> bool {
        self.idempotent && self.reach == Reach::Conversation
    }

    /// Marks the tool interactive.
    pub fn interactive(mut self) -> Self {
        self.interactive = true;
        self
    }
}

/// What a tool knows about the call it serves.
#[derive(Clone, Debug)]
pub struct ToolContext {
    /// The conversation.
    pub session_id: String,
    /// The run.
    pub run_id: String,
    /// The tool call id.
    pub call_id: String,
    /// The user, when known.
    pub user_id: Option<String>,
    /// True when the conversation was started by an untrusted source (a trigger, an email).
    pub untrusted_source: bool,
    /// The conversation's place on a platform, when it has one.
    pub place: Option<crate::place::PlatformPlace>,
    /// Fires when the run is cancelled; long tools should stop early.
    pub cancel: CancellationToken,
}

/// The argument keys keel adds to every call (seeds 000 and 003): tools see them in their
/// arguments, after the arguments were checked against the tool's schema.
pub const INJECTED_ARGUMENTS: [&str; 5] = [
    "_session_id",
    "_untrusted_source",
    "platform",
    "platform_channel_id",
    "platform_thread_id",
];

impl ToolContext {
    /// Adds what a tool learns from keel to its arguments: `_session_id` always,
    /// `_untrusted_source: true` in an untrusted session, and for a tool that `notifies`, the
    /// conversation's `platform`, `platform_channel_id` and `platform_thread_id`. Arguments
    /// that are not an object are left alone.
    pub fn inject(&self, args: &mut serde_json::Value, notifies: bool) {
        let Some(map) = args.as_object_mut() else {
            return;
        };
        map.insert("_session_id".into(), self.session_id.clone().into());
        if self.untrusted_source {
            map.insert("_untrusted_source".into(), true.into());
        }
        if notifies && let Some(place) = &self.place {
            map.insert("platform".into(), place.platform.clone().into());
            map.insert(
                "platform_channel_id".into(),
                place.channel_id.clone().into(),
            );
            map.insert(
                "platform_thread_id".into(),
                place
                    .thread_id
                    .clone()
                    .map_or(serde_json::Value::Null, Into::into),
            );
        }
    }
}

/// Takes keel's injected `_` keys back out of `args`, for tools whose argument types refuse
/// unknown fields. The platform keys stay: a notifying tool declares them.
pub fn strip_injected(args: &mut serde_json::Value) {
    if let Some(map) = args.as_object_mut() {
        map.remove("_session_id");
        map.remove("_untrusted_source");
    }
}

/// What a tool returns on success.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolOutput {
    /// Text for the model.
    pub content: String,
    /// Files the call produced: keel keeps them and returns them with the run's answer.
    pub files: Vec<crate::files::ProducedFile>,
}

impl ToolOutput {
    /// A text result.
    pub fn text(content: impl Into<String>) -> Self {
        ToolOutput {
            content: content.into(),
            files: Vec::new(),
        }
    }

    /// The result with a file the call produced at `path` in the workspace.
    pub fn with_file(mut self, path: impl Into<String>, content: Vec<u8>) -> Self {
        self.files.push(crate::files::ProducedFile {
            path: path.into(),
            content,
        });
        self
    }
}

/// How a tool failed; decides whether the loop may retry it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolErrorKind {
    /// Likely to pass if tried again: timeout, connection refused, 429, 5xx.
    Transient,
    /// The arguments were wrong.
    InvalidArguments,
    /// Not allowed (outside the workspace, missing permission).
    Denied,
    /// Any other failure.
    Failed,
}

/// A failed tool call. Its message goes to the model as the tool result.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    /// How it failed.
    pub kind: ToolErrorKind,
    /// What happened, for the model.
    pub message: String,
}

impl ToolError {
    /// A transient failure.
    pub fn transient(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::Transient, message)
    }

    /// Bad arguments.
    pub fn invalid_arguments(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::InvalidArguments, message)
    }

    /// Refused.
    pub fn denied(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::Denied, message)
    }

    /// Any other failure.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::Failed, message)
    }

    /// A failure of `kind`.
    pub fn new(kind: ToolErrorKind, message: impl Into<String>) -> Self {
        ToolError {
            kind,
            message: message.into(),
        }
    }
}

/// A tool the model can call.
#[async_trait]
pub trait Tool: Send + Sync {
    /// What the tool declares about itself.
    fn spec(&self) -> &ToolSpec;

    /// Runs the tool. `args` already passed the spec's JSON Schema.
    async fn call(
        &self,
        args: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError>;

    /// Whether a call with `args` needs a person's approval before it runs, and why; `None`
    /// (the default) when it does not. The loop asks before calling [`Tool::call`], so a tool
    /// that says so here runs the call when it comes.
    fn approval(&self, args: &serde_json::Value) -> Option<crate::approval::ApprovalNeed> {
        let _ = args;
        None
    }
}

/// The outcome of one tool call, as the driver hands it back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The call it answers.
    pub call_id: String,
    /// False when `content` is an error message.
    pub ok: bool,
    /// What the model will see (already cut to size).
    pub content: String,
}

/// One tool call of a run, as reported at the end.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCallReport {
    /// Call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments: parsed JSON when they were valid JSON, else the raw text.
    pub arguments: serde_json::Value,
    /// False when the tool failed or the call was refused.
    pub ok: bool,
    /// What the model saw.
    pub output: String,
}

impl ToolCallReport {
    /// A call's raw arguments as a report shows them: the JSON they hold, or the text itself
    /// when it is not JSON.
    pub fn arguments_of(raw: &str) -> serde_json::Value {
        serde_json::from_str(raw).unwrap_or_else(|_| serde_json::Value::String(raw.to_string()))
    }
}

/// Cuts `text` to `max_chars` characters with a visible marker; returns whether it was cut.
pub fn truncate_output(text: &str, max_chars: usize) -> (String, bool) {
    let Some((cut, _)) = text.char_indices().nth(max_chars) else {
        return (text.to_string(), false);
    };
    let total = text.chars().count();
    let mut out = String::with_capacity(cut + 96);
    out.push_str(&text[..cut]);
    out.push_str(&format!(
        "\n\n[output truncated: showing the first {max_chars} of {total} characters]"
    ));
    (out, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_output_is_kept_whole() {
        assert_eq!(truncate_output("abc", 3), ("abc".to_string(), false));
    }

    #[test]
    fn long_output_is_cut_on_a_character_boundary_with_a_marker() {
        let (out, cut) = truncate_output("ééééé", 2);
        assert!(cut);
        assert!(out.starts_with("éé\n\n[output truncated: showing the first 2 of 5 characters]"));
    }
}
