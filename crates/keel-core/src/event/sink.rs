//! Where events go: the [`EventSink`] trait, and [`EventLog`], a sink that keeps them.

use std::sync::Mutex;

use super::Event;

/// Receives events. Implementations must be cheap and must not block the loop.
pub trait EventSink: Send + Sync {
    /// Called for every event, in order.
    fn emit(&self, event: &Event);
}

/// A sink that keeps every event in memory, for tests and for embedders who want the list.
#[derive(Default)]
pub struct EventLog {
    events: Mutex<Vec<Event>>,
}

impl EventLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of every event so far.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// The names of every event so far, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.events
            .lock()
            .map(|e| e.iter().map(|e| e.kind.name()).collect())
            .unwrap_or_default()
    }
}

impl EventSink for EventLog {
    fn emit(&self, event: &Event) {
        if let Ok(mut events) = self.events.lock() {
            events.push(event.clone());
        }
    }
}
