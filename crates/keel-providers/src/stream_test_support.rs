//! What the stream readers' unit tests share: a sink that records every delta, a whole body
//! read through an adapter's accumulator, and a count of the `Finished` deltas.

use std::sync::Mutex;

use keel_core::{ChatResponse, DeltaSink, ProviderError, StreamDelta};

use crate::sse::{self, SseAccumulator};

/// A sink that keeps every delta.
#[derive(Default)]
pub(crate) struct Recorder(Mutex<Vec<StreamDelta>>);

impl DeltaSink for Recorder {
    fn delta(&self, delta: &StreamDelta) {
        self.0.lock().unwrap().push(delta.clone());
    }
}

/// `body` (one whole event-stream body) read through a new `A`, as the adapter's public
/// `parse_stream` reads it: the answer or error, and every delta sent.
pub(crate) fn read_through<A: SseAccumulator + Default>(
    body: &str,
) -> (Result<ChatResponse, ProviderError>, Vec<StreamDelta>) {
    let sink = Recorder::default();
    let bytes = futures::stream::iter([Ok::<_, std::io::Error>(body.to_string())]);
    let result = futures::executor::block_on(sse::parse_stream(bytes, A::default(), &sink));
    (result, sink.0.into_inner().unwrap())
}

/// How many `Finished` deltas there are (a stream sends exactly one).
pub(crate) fn finished_count(deltas: &[StreamDelta]) -> usize {
    deltas
        .iter()
        .filter(|delta| matches!(delta, StreamDelta::Finished { .. }))
        .count()
}
