//! Event ids of the SSE streams: `S` for a run's durable event (its seq in the store), `S.N` for
//! the N-th stream delta after durable event S (deltas are never stored). They order the events
//! of one run.

use std::fmt;

/// The id of one event of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventId {
    /// Durable events of the run up to and including this one.
    pub seq: u64,
    /// 0 for a durable event; N for the N-th delta after it.
    pub delta: u64,
}

impl EventId {
    /// Parses `S` or `S.N`; `None` for anything else.
    pub fn parse(text: &str) -> Option<EventId> {
        let number = |part: &str| {
            (!part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
                .then(|| part.parse().ok())
                .flatten()
        };
        match text.split_once('.') {
            None => Some(EventId {
                seq: number(text)?,
                delta: 0,
            }),
            Some((seq, delta)) => Some(EventId {
                seq: number(seq)?,
                delta: number(delta).filter(|d| *d > 0)?,
            }),
        }
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.delta == 0 {
            write!(f, "{}", self.seq)
        } else {
            write!(f, "{}.{}", self.seq, self.delta)
        }
    }
}

/// The id of an event in a conversation's stream: `RUN_ID:S[.N]`.
pub fn parse_conversation_id(text: &str) -> Option<(String, EventId)> {
    let (run, id) = text.rsplit_once(':')?;
    (!run.is_empty()).then(|| Some((run.to_string(), EventId::parse(id)?)))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_read_back_as_written_and_nothing_else_reads() {
        for text in ["0", "7", "7.1", "12.30"] {
            assert_eq!(EventId::parse(text).unwrap().to_string(), text);
        }
        for bad in [
            "",
            "x",
            "-1",
            "1.",
            ".1",
            "1.0",
            "1.2.3",
            "1 ",
            "+1",
            "99999999999999999999",
        ] {
            assert_eq!(EventId::parse(bad), None, "{bad:?}");
        }
        assert!(EventId::parse("3").unwrap() < EventId::parse("3.1").unwrap());
        assert!(EventId::parse("3.9").unwrap() < EventId::parse("4").unwrap());
        assert_eq!(
            parse_conversation_id("0193-ab:slack:4.2"),
            Some(("0193-ab:slack".into(), EventId { seq: 4, delta: 2 }))
        );
        assert_eq!(parse_conversation_id(":4"), None);
        assert_eq!(parse_conversation_id("r:x"), None);
    }
}
