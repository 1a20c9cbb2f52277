//! The [`Emitter`]: stamps a run's events and hands them to its sinks.

use std::sync::Mutex;

use super::{Event, EventKind, EventSink};
use crate::provider::StreamDelta;

/// Stamps events of one run and hands them to every sink. Also a
/// [`DeltaSink`](crate::provider::DeltaSink), so stream deltas become `agent.stream.delta` events. When keeping, it also holds the durable events
/// until the driver stores them with the next boundary.
#[derive(Clone)]
pub struct Emitter {
    sinks: std::sync::Arc<[std::sync::Arc<dyn EventSink>]>,
    clock: std::sync::Arc<dyn crate::clock::Clock>,
    run_id: String,
    session_id: String,
    kept: Option<std::sync::Arc<Mutex<Vec<Event>>>>,
}

impl Emitter {
    /// An emitter for one run.
    pub fn new(
        sinks: std::sync::Arc<[std::sync::Arc<dyn EventSink>]>,
        clock: std::sync::Arc<dyn crate::clock::Clock>,
        run_id: impl Into<String>,
        session_id: impl Into<String>,
    ) -> Self {
        Emitter {
            sinks,
            clock,
            run_id: run_id.into(),
            session_id: session_id.into(),
            kept: None,
        }
    }

    /// The same emitter, keeping durable events (see [`EventKind::is_durable`]) for
    /// [`Emitter::take_kept`].
    pub fn keeping(mut self) -> Self {
        self.kept = Some(std::sync::Arc::new(Mutex::new(Vec::new())));
        self
    }

    /// Stamps `kind` and sends it to every sink (and keeps it, when keeping).
    pub fn emit(&self, kind: EventKind) {
        let keep = self.kept.is_some() && kind.is_durable();
        if self.sinks.is_empty() && !keep {
            return;
        }
        let event = self.stamp(kind);
        self.send(&event);
        if keep
            && let Some(kept) = &self.kept
            && let Ok(mut kept) = kept.lock()
        {
            kept.push(event);
        }
    }

    /// Whether any sink listens (live-only events need not be built otherwise).
    pub fn has_sinks(&self) -> bool {
        !self.sinks.is_empty()
    }

    /// `kind` as an event of this run, stamped now.
    pub fn stamp(&self, kind: EventKind) -> Event {
        Event {
            ts: self.clock.now(),
            run_id: self.run_id.clone(),
            session_id: self.session_id.clone(),
            kind,
        }
    }

    /// Sends an already stamped event to every sink, without keeping it.
    pub fn send(&self, event: &Event) {
        for sink in self.sinks.iter() {
            sink.emit(event);
        }
    }

    /// The events kept since the last call.
    pub fn take_kept(&self) -> Vec<Event> {
        self.kept
            .as_ref()
            .and_then(|kept| kept.lock().ok().map(|mut kept| std::mem::take(&mut *kept)))
            .unwrap_or_default()
    }
}

impl crate::provider::DeltaSink for Emitter {
    fn delta(&self, delta: &StreamDelta) {
        // Deltas are never kept: without a sink there is nothing to build.
        if !self.has_sinks() {
            return;
        }
        self.emit(EventKind::StreamDelta {
            delta: delta.clone(),
        });
    }
}
