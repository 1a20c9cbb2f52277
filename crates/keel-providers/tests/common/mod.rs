//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::sync::Mutex;

use keel_core::{DeltaSink, StopReason, StreamDelta};

/// A sink that keeps every delta.
#[derive(Default)]
pub struct Recorder(Mutex<Vec<StreamDelta>>);

impl DeltaSink for Recorder {
    fn delta(&self, delta: &StreamDelta) {
        self.0.lock().unwrap().push(delta.clone());
    }
}

impl Recorder {
    /// Every delta received so far.
    pub fn deltas(&self) -> Vec<StreamDelta> {
        self.0.lock().unwrap().clone()
    }

    /// The stop reasons of all `Finished` deltas (there must be exactly one).
    pub fn finished(&self) -> Vec<Option<StopReason>> {
        self.deltas()
            .into_iter()
            .filter_map(|delta| match delta {
                StreamDelta::Finished { stop_reason } => Some(stop_reason),
                _ => None,
            })
            .collect()
    }

    /// The text deltas, joined.
    pub fn text(&self) -> String {
        self.deltas()
            .into_iter()
            .filter_map(|delta| match delta {
                StreamDelta::Text { text } => Some(text),
                _ => None,
            })
            .collect()
    }

    /// The warnings received.
    pub fn warnings(&self) -> Vec<String> {
        self.deltas()
            .into_iter()
            .filter_map(|delta| match delta {
                StreamDelta::Warning { message } => Some(message),
                _ => None,
            })
            .collect()
    }
}
