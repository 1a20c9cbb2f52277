//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Mutex;

use keel_core::{
    ChatRequest, ChatResponse, DeltaSink, Message, Provider, ProviderError, StopReason,
    StreamDelta, ToolChoice,
};

pub mod recordings;
pub mod server;

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

/// A recorded answer or error of `fixtures/providers/` (a copy of
/// `../shared/fixtures/providers/`), by file name.
pub fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixtures_dir().join(name)).unwrap()
}

/// The folder of the recordings.
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/providers")
}

/// A request of one user message (`hi`) to `model`, without tools, streamed or not.
pub fn simple_request(model: &str, stream: bool) -> ChatRequest {
    ChatRequest {
        model: model.into(),
        messages: vec![Message::user("hi").into()],
        tools: Vec::new().into(),
        tool_choice: ToolChoice::Auto,
        max_tokens: None,
        temperature: None,
        stream,
    }
}

/// `request` through `provider`, its deltas recorded.
pub async fn call(
    provider: &dyn Provider,
    request: &ChatRequest,
) -> (Result<ChatResponse, ProviderError>, Recorder) {
    let sink = Recorder::default();
    let result = provider.chat(request, &sink).await;
    (result, sink)
}
