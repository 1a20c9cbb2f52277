//! What a store shared by many `keel serve` workers tells them (DESIGN.md section 13): a run
//! was queued, a lane was let go, a run was asked to stop, a run stored events. A worker wakes
//! on them instead of waiting for its next poll; polling stays the fallback, so a signal lost
//! (a dropped connection, a lagging receiver) only delays. A store used by one process has
//! nothing to tell: the process knows what it did.
//!
//! On PostgreSQL each is a `NOTIFY` on [`CHANNEL`] whose payload is [`StoreSignal::payload`],
//! sent in the transaction that made it true (so it is heard only once that is committed).

/// The `LISTEN`/`NOTIFY` channel the signals travel on.
pub const CHANNEL: &str = "keel_signals";

/// One thing that happened in the shared store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreSignal {
    /// A run was queued in this session's lane.
    Queued(String),
    /// This session's lane was let go (its run ended, or gave the lane back).
    Freed(String),
    /// This run was asked to stop.
    Cancel(String),
    /// This run stored new events.
    Events(String),
}

impl StoreSignal {
    /// The signal as a notification's payload: `queued:<session>`, `freed:<session>`,
    /// `cancel:<run>` or `events:<run>`.
    pub fn payload(&self) -> String {
        let (kind, id) = match self {
            StoreSignal::Queued(id) => ("queued", id),
            StoreSignal::Freed(id) => ("freed", id),
            StoreSignal::Cancel(id) => ("cancel", id),
            StoreSignal::Events(id) => ("events", id),
        };
        format!("{kind}:{id}")
    }

    /// The signal a payload names; `None` for anything else (another program's notification).
    pub fn parse(payload: &str) -> Option<StoreSignal> {
        let (kind, id) = payload.split_once(':')?;
        if id.is_empty() {
            return None;
        }
        let id = id.to_string();
        Some(match kind {
            "queued" => StoreSignal::Queued(id),
            "freed" => StoreSignal::Freed(id),
            "cancel" => StoreSignal::Cancel(id),
            "events" => StoreSignal::Events(id),
            _ => return None,
        })
    }
}

/// A store's signals to the workers sharing it.
pub trait StoreSignals: Send + Sync {
    /// A receiver of every signal from now on; `None` for a store no other process shares.
    fn signals(&self) -> Option<tokio::sync::broadcast::Receiver<StoreSignal>> {
        None
    }

    /// Whether other processes run this store's runs too (PostgreSQL): queued runs are then
    /// taken with [`crate::ConversationStore`]'s claim, not only by the process that queued them.
    fn shared(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_survives_its_payload_and_strangers_are_ignored() {
        for signal in [
            StoreSignal::Queued("api:7f:thread".into()),
            StoreSignal::Freed("s1".into()),
            StoreSignal::Cancel("019a-run".into()),
            StoreSignal::Events("r:with:colons".into()),
        ] {
            assert_eq!(StoreSignal::parse(&signal.payload()), Some(signal));
        }
        assert_eq!(StoreSignal::parse("queued:"), None);
        assert_eq!(StoreSignal::parse("hello"), None);
        assert_eq!(StoreSignal::parse("other:thing"), None);
    }
}
