//! What a tool reaches besides its arguments ([`Reach`], declared on its [`ToolSpec`]), and
//! what that means in an untrusted session (an email, an event): which calls run there without
//! a person's approval ([`untrusted_need`]).
//!
//! An injected message must neither read the user's private data beyond its conversation nor
//! send anything out unasked, so reads count as well as writes: only an idempotent tool that
//! declares it stays inside the conversation runs without asking. A tool that declares nothing
//! asks; so does every MCP tool, whatever its server says of it.

use serde::{Deserialize, Serialize};

use crate::approval::ApprovalNeed;
use crate::tool::ToolSpec;

/// What a tool reaches besides its arguments, declared by the tool: what decides whether an
/// untrusted session (an email, an event) may call it without a person's approval. Only a tool
/// that is idempotent and declared [`Reach::Conversation`] runs there without asking; a tool
/// that declares nothing ([`Reach::Undeclared`], the default of [`ToolSpec::new`]) asks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reach {
    /// Not declared: treated as reaching beyond the conversation.
    #[default]
    Undeclared,
    /// Only what the conversation holds or was given: its messages and attachments, the
    /// workspace's files, the agent's own skills and loop state.
    Conversation,
    /// The user's private data beyond the conversation: other conversations, memory notes,
    /// known facts.
    Private,
    /// Outside keel: the network, another program's server (every MCP tool, whatever it says
    /// of itself).
    Egress,
}

impl Reach {
    /// Its wire name: `undeclared`, `conversation`, `private` or `egress`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reach::Undeclared => "undeclared",
            Reach::Conversation => "conversation",
            Reach::Private => "private",
            Reach::Egress => "egress",
        }
    }

    pub(crate) fn is_undeclared(&self) -> bool {
        *self == Reach::Undeclared
    }
}

/// Why a call of the tool `spec` needs approval in an untrusted session (an email, an event),
/// or `None` when it may run there without asking: only an idempotent tool declared
/// [`Reach::Conversation`]. A side effect asks; so does reading the user's private data beyond
/// the conversation ([`Reach::Private`]: other conversations, memory, facts), reaching outside
/// keel ([`Reach::Egress`]: the network, every MCP tool whatever its annotations say), and a
/// tool that does not declare what it reaches. An approval for the session covers every call
/// of the tool ([`crate::approval::ANY_CALL`]).
pub fn untrusted_need(spec: &ToolSpec) -> Option<ApprovalNeed> {
    if spec.untrusted_without_approval() {
        return None;
    }
    let what = if spec.side_effecting() {
        "the tool changes things"
    } else {
        match spec.reach {
            Reach::Conversation => return None,
            Reach::Private => {
                "the tool reads the user's private data beyond this conversation (other \
                 conversations, memory, facts)"
            }
            Reach::Egress => {
                "the tool reaches outside keel (the network or another program's server), \
                 where what it is given can be sent on"
            }
            Reach::Undeclared => "the tool does not declare that it stays inside this conversation",
        }
    };
    Some(ApprovalNeed {
        reason: format!(
            "this conversation comes from an untrusted source (an email or an event), and {what}"
        ),
        pattern: crate::approval::ANY_CALL.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_untrusted_session_runs_only_idempotent_conversation_tools_without_asking() {
        let spec = |idempotent: bool, reach: Reach| {
            let mut spec = ToolSpec::new("t", "", serde_json::json!({"type": "object"}));
            spec.idempotent = idempotent;
            spec.reach(reach)
        };
        assert_eq!(untrusted_need(&spec(true, Reach::Conversation)), None);
        for (idempotent, reach, why) in [
            (false, Reach::Conversation, "changes things"),
            (false, Reach::Undeclared, "changes things"),
            (true, Reach::Private, "private data"),
            (true, Reach::Egress, "outside keel"),
            (true, Reach::Undeclared, "does not declare"),
        ] {
            let need = untrusted_need(&spec(idempotent, reach)).expect("asks");
            assert!(
                need.reason.contains("untrusted source") && need.reason.contains(why),
                "{reach:?}: {}",
                need.reason
            );
            assert_eq!(need.pattern, crate::approval::ANY_CALL);
        }
    }
}
