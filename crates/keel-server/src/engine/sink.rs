//! The engine's event sink: every run's events go to [`Boundaries`] (where each run is, for
//! shutdown) and to the daemon's [`Metrics`].

use std::sync::Arc;

use keel_core::{Event, EventSink};

use super::Boundaries;
use crate::metrics::Metrics;

/// [`Boundaries`] and [`Metrics`], as one sink.
pub(super) struct EngineSink {
    pub(super) boundaries: Arc<Boundaries>,
    pub(super) metrics: Arc<Metrics>,
}

impl EventSink for EngineSink {
    fn emit(&self, event: &Event) {
        self.boundaries.emit(event);
        self.metrics.emit(event);
    }
}
