//! Helpers shared by the HTTP tests.
#![allow(dead_code)]

use keel_mock::{MockServer, Script, Step};
use serde_json::{Value, json};

/// Starts a server on a free local port with these steps.
pub async fn server(steps: Vec<Step>) -> MockServer {
    MockServer::start_local(Script::new(steps)).await.unwrap()
}

/// POSTs a chat-completions body.
pub async fn post(server: &MockServer, body: &Value) -> reqwest::Response {
    post_raw(server, body.to_string()).await
}

thread_local! {
    /// One client per test (each test runs on its own thread and runtime): building a client
    /// loads the TLS roots, which is slow. The workspace's reqwest needs a TLS crypto provider
    /// installed first, even for plain HTTP.
    static CLIENT: reqwest::Client = {
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::new()
    };
}

/// This test's HTTP client.
pub fn client() -> reqwest::Client {
    CLIENT.with(Clone::clone)
}

/// GETs a URL.
pub async fn get(url: String) -> reqwest::Result<reqwest::Response> {
    client().get(url).send().await
}

/// POSTs raw bytes to chat completions.
pub async fn post_raw(server: &MockServer, body: String) -> reqwest::Response {
    client()
        .post(format!("{}/chat/completions", server.base_url()))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
}

/// A minimal valid request.
pub fn request(stream: bool) -> Value {
    let mut body = json!({
        "model": "gpt-test",
        "messages": [{"role": "user", "content": "hello"}],
    });
    if stream {
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

/// The `data:` payloads of an SSE body, in order.
pub fn data_events(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter(|event| !event.is_empty())
        .map(|event| {
            event
                .strip_prefix("data: ")
                .unwrap_or_else(|| panic!("not a data event: {event:?}"))
                .to_string()
        })
        .collect()
}

/// The JSON chunks of an SSE body (everything but `[DONE]`).
pub fn chunks(body: &str) -> Vec<Value> {
    data_events(body)
        .iter()
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

/// The concatenated `delta.content` of chunks.
pub fn streamed_text(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter_map(|c| {
            c.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
        })
        .collect()
}
