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

/// The Anthropic API version header value the tests send.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// POSTs to an API path under `/v1` (e.g. `messages`); `/messages` gets the Anthropic headers.
pub async fn post_to(server: &MockServer, path: &str, body: &Value) -> reqwest::Response {
    let mut request = client()
        .post(format!("{}/{path}", server.base_url()))
        .header("content-type", "application/json")
        .body(body.to_string());
    if path == "messages" {
        request = request
            .header("anthropic-version", ANTHROPIC_VERSION)
            .header("x-api-key", "sk-ant-test");
    }
    request.send().await.unwrap()
}

/// POSTs an Anthropic Messages body with the required headers.
pub async fn post_messages(server: &MockServer, body: &Value) -> reqwest::Response {
    post_to(server, "messages", body).await
}

/// POSTs an OpenAI Responses body.
pub async fn post_responses(server: &MockServer, body: &Value) -> reqwest::Response {
    post_to(server, "responses", body).await
}

/// A minimal valid Anthropic Messages request.
pub fn messages_request(stream: bool) -> Value {
    let mut body = json!({
        "model": "claude-test",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "hello"}],
    });
    if stream {
        body["stream"] = json!(true);
    }
    body
}

/// A minimal valid OpenAI Responses request.
pub fn responses_request(stream: bool) -> Value {
    let mut body = json!({"model": "gpt-test", "input": "hello"});
    if stream {
        body["stream"] = json!(true);
    }
    body
}

/// The named events of an SSE body (`event:` name and parsed `data:`), in order.
pub fn named_events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|event| !event.trim().is_empty())
        .map(|event| {
            let mut name = None;
            let mut data = None;
            for line in event.lines() {
                if let Some(rest) = line.strip_prefix("event: ") {
                    name = Some(rest.to_string());
                } else if let Some(rest) = line.strip_prefix("data: ") {
                    data = Some(serde_json::from_str(rest).unwrap());
                }
            }
            (
                name.unwrap_or_else(|| panic!("no event name: {event:?}")),
                data.unwrap_or_else(|| panic!("no data: {event:?}")),
            )
        })
        .collect()
}

/// The event names, in order.
pub fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(name, _)| name.as_str()).collect()
}

/// The names with consecutive repeats collapsed into one.
pub fn collapsed<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for name in names {
        if out.last() != Some(&name) {
            out.push(name);
        }
    }
    out
}
