//! What kind of session an id names, read from its format (seed 000), and so whether it is
//! trusted by its kind alone: an email trigger's or an event's session is not, whatever
//! arrives in it (see [`crate::reach`] for what an untrusted session's tools may reach).

/// What kind of session an id names, read from its format (seed 000).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionKind {
    /// A chat (a Telegram chat id, `slack:…`, `discord:…`, any other id): trusted.
    Chat,
    /// `email_trigger` or `email_trigger:…`: untrusted.
    EmailTrigger,
    /// `event_{uuid}`: untrusted.
    Event,
    /// `sub-{depth}-{uuid}`: inherits its parent's trust.
    SubAgent {
        /// How deep under its root conversation.
        depth: u32,
    },
}

impl SessionKind {
    /// The kind of session `id` names.
    pub fn of(id: &str) -> SessionKind {
        if id == "email_trigger" || id.starts_with("email_trigger:") {
            return SessionKind::EmailTrigger;
        }
        if id
            .strip_prefix("event_")
            .is_some_and(|rest| !rest.is_empty())
        {
            return SessionKind::Event;
        }
        if let Some(rest) = id.strip_prefix("sub-")
            && let Some((depth, uuid)) = rest.split_once('-')
            && !uuid.is_empty()
            && let Ok(depth) = depth.parse::<u32>()
        {
            return SessionKind::SubAgent { depth };
        }
        SessionKind::Chat
    }

    /// How deep a session of this kind is under its root conversation: a sub-agent's depth,
    /// 0 for any other. A run in a session deeper than 0 is a child run: another run started
    /// it, and no person answers it (see [`crate::child_run`]).
    pub fn depth(self) -> u32 {
        match self {
            SessionKind::SubAgent { depth } => depth,
            _ => 0,
        }
    }

    /// Whether a session of this kind is untrusted by its kind alone (a sub-agent's trust is
    /// its parent's, stored with its conversation).
    pub fn untrusted(self) -> bool {
        matches!(self, SessionKind::EmailTrigger | SessionKind::Event)
    }
}

/// The id of a child run's session at `depth` under its root conversation: `sub-{depth}-{id}`.
pub fn child_session_id(depth: u32, id: &str) -> String {
    format!("sub-{depth}-{id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_trust_read_from_ids() {
        for (id, kind) in [
            ("email_trigger", SessionKind::EmailTrigger),
            ("event_0193", SessionKind::Event),
            ("event_", SessionKind::Chat),
            ("sub-3-abc", SessionKind::SubAgent { depth: 3 }),
            ("sub-x-abc", SessionKind::Chat),
            ("12345", SessionKind::Chat),
            ("slack:C1:17.5", SessionKind::Chat),
        ] {
            assert_eq!(SessionKind::of(id), kind, "{id}");
        }
        assert!(SessionKind::EmailTrigger.untrusted() && SessionKind::Event.untrusted());
        assert!(!SessionKind::Chat.untrusted());
    }
}
