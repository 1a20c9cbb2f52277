//! The [`TraceSink`]: the loop's [`EventSink`] that turns events into spans and queues the
//! ended ones for export. Per event: a match that skips what no span needs before anything
//! else, a short lock, and a non-blocking queue push per ended span.

use std::sync::Mutex;
use std::time::SystemTime;

use keel_core::{Event, EventKind, EventSink};

use crate::pipeline::Queue;
use crate::tracks::Tracks;

/// Builds spans from a process's events (every run of its agent, children included).
pub struct TraceSink {
    tracks: Mutex<Tracks>,
    queue: Queue,
    record_content: bool,
}

impl TraceSink {
    pub(crate) fn new(tracks: Tracks, queue: Queue) -> Self {
        TraceSink {
            record_content: tracks.record_content,
            tracks: Mutex::new(tracks),
            queue,
        }
    }

    /// Ends every open span now, marked unfinished, and queues them (the process stops).
    pub(crate) fn end_all(&self) {
        let mut ended = Vec::new();
        if let Ok(mut tracks) = self.tracks.lock() {
            tracks.end_all(SystemTime::now(), &mut ended);
        }
        for span in ended {
            self.queue.push(span);
        }
    }

    /// Whether no span needs `kind`.
    fn ignores(&self, kind: &EventKind) -> bool {
        match kind {
            EventKind::StreamDelta { delta } => {
                !(self.record_content && matches!(delta, keel_core::StreamDelta::Text { .. }))
            }
            EventKind::ModelReasoning(_) | EventKind::ToolCallParsed(_) => !self.record_content,
            EventKind::Checkpoint { .. }
            | EventKind::ToolsOffered { .. }
            | EventKind::StepCompleted(_)
            | EventKind::MemoryRetrieved { .. }
            | EventKind::MemoryLearned { .. }
            | EventKind::ConfigFallback { .. }
            | EventKind::Reconcile { .. }
            | EventKind::RouteDecided { .. }
            | EventKind::SkillsMatched { .. }
            | EventKind::LaneQueued { .. }
            | EventKind::LaneRejected { .. }
            | EventKind::LaneCollected { .. }
            | EventKind::LaneRolledBack { .. }
            | EventKind::LaneInterrupted { .. }
            | EventKind::ScheduleFired { .. } => true,
            _ => false,
        }
    }
}

impl EventSink for TraceSink {
    fn emit(&self, event: &Event) {
        if self.ignores(&event.kind) {
            return;
        }
        let mut ended = Vec::new();
        if let Ok(mut tracks) = self.tracks.lock() {
            tracks.on_event(event, &mut ended);
        }
        for span in ended {
            self.queue.push(span);
        }
    }
}
