//! Reasoning reaches `on_reasoning` (and, streamed, `on_stream_delta`) through each of the three
//! wire APIs: keel's adapters against keel-mock's server over real HTTP, streamed and whole. The
//! reasoning is kept on the stored assistant message, and chat completions never sends it back.

use std::sync::{Arc, Mutex};

use keel_core::{Agent, AgentState, Provider, Role, RunRequest, Store, StreamDelta};
use keel_extensions::AgentCallbacks;
use keel_mock::{MockServer, Script, Step};
use keel_providers::{Anthropic, AnthropicConfig, OpenAiChat, OpenAiConfig, OpenAiResponses};
use keel_store::MemoryStore;

#[derive(Clone, Copy, Debug)]
enum Wire {
    Chat,
    Responses,
    Messages,
}

fn adapter(wire: Wire, base_url: String) -> Arc<dyn Provider> {
    match wire {
        Wire::Chat => Arc::new(OpenAiChat::new(OpenAiConfig::new(base_url)).unwrap()),
        Wire::Responses => Arc::new(OpenAiResponses::new(OpenAiConfig::new(base_url)).unwrap()),
        Wire::Messages => Arc::new(Anthropic::new(AnthropicConfig::new(base_url)).unwrap()),
    }
}

/// Runs two turns (the second continues the conversation) with reasoning on each answer;
/// returns what `on_reasoning` and the reasoning deltas saw, and the server's requests.
async fn reasoning_through(
    wire: Wire,
    stream: bool,
) -> (Vec<String>, String, Vec<serde_json::Value>) {
    let script = Script::new(vec![
        Step::text("Paris.").with_reasoning("The capital of France is Paris."),
        Step::text("Lyon.").with_reasoning("Second city: Lyon."),
    ]);
    let server = MockServer::start_local(script).await.unwrap();
    let whole = Arc::new(Mutex::new(Vec::new()));
    let pieces = Arc::new(Mutex::new(String::new()));
    let (w, p) = (whole.clone(), pieces.clone());
    let store = Arc::new(MemoryStore::new());
    let agent = Agent::builder()
        .provider(adapter(wire, server.base_url()))
        .model("model-x")
        .store(store.clone())
        .stream(stream)
        .on_reasoning(move |r| {
            w.lock()
                .unwrap()
                .push(format!("{} {}", r.iteration, r.text))
        })
        .on_stream_delta(move |delta| {
            if let StreamDelta::Reasoning { text } = delta {
                p.lock().unwrap().push_str(text);
            }
        })
        .build()
        .unwrap();
    let first = agent.run(RunRequest::new("capital?")).await.unwrap();
    assert_eq!(first.state, AgentState::Completed, "{wire:?}: {first:?}");
    let second = agent
        .run(RunRequest::new("and the next?").session(first.session_id.clone()))
        .await
        .unwrap();
    assert_eq!(second.final_text.as_deref(), Some("Lyon."), "{wire:?}");
    let stored = store.messages(&first.session_id).await.unwrap();
    let kept = stored
        .iter()
        .find(|m| m.message.role == Role::Assistant)
        .and_then(|m| m.message.reasoning.clone())
        .expect("reasoning kept on the assistant message");
    assert_eq!(kept.text, "The capital of France is Paris.", "{wire:?}");
    let requests = server.requests();
    server.shutdown().await;
    let whole = whole.lock().unwrap().clone();
    let pieces = pieces.lock().unwrap().clone();
    (whole, pieces, requests)
}

async fn check(wire: Wire, stream: bool) {
    let (whole, pieces, requests) = reasoning_through(wire, stream).await;
    assert_eq!(
        whole,
        ["1 The capital of France is Paris.", "1 Second city: Lyon."],
        "{wire:?} stream={stream}"
    );
    let expected = if stream {
        "The capital of France is Paris.Second city: Lyon."
    } else {
        ""
    };
    assert_eq!(pieces, expected, "{wire:?} stream={stream}");
    if let Wire::Chat = wire {
        // Chat-completions servers reject (or choke on) reasoning sent back: never sent.
        let second = requests.last().unwrap().to_string();
        assert!(!second.contains("capital of France"), "{second}");
    }
}

#[tokio::test]
async fn chat_completions_reasoning_reaches_the_callbacks() {
    check(Wire::Chat, true).await;
    check(Wire::Chat, false).await;
}

#[tokio::test]
async fn responses_reasoning_reaches_the_callbacks() {
    check(Wire::Responses, true).await;
    check(Wire::Responses, false).await;
}

#[tokio::test]
async fn anthropic_thinking_reaches_the_callbacks() {
    check(Wire::Messages, true).await;
    check(Wire::Messages, false).await;
}
