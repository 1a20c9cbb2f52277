//! The mock against the real recordings in `fixtures/providers`: for every recorded answer,
//! the mock answers a step scripted from the recording's `expect` and must produce the same
//! shape — the same JSON key paths (values aside) for whole bodies and for each SSE event type,
//! and the same sequence of event types (consecutive repeats collapsed). Recorded errors must
//! come back with the same status, envelope, type and code (and, where the mock writes the
//! API's own wording, the same message).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use common::{collapsed, post_to, server};
use keel_core::ProviderErrorKind;
use keel_mock::{FinishReason, Step};
use serde_json::{Value, json};

/// The model the recorded not-found errors asked for.
const MISSING_MODEL: &str = "this-model-does-not-exist-12345";

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/providers")
}

fn read(name: &str) -> String {
    std::fs::read_to_string(fixtures().join(name)).unwrap()
}

/// Every recorded case: its name and sidecar.
fn cases() -> Vec<(String, Value)> {
    let mut cases: Vec<(String, Value)> = std::fs::read_dir(fixtures())
        .unwrap()
        .filter_map(|entry| {
            let name = entry.unwrap().file_name().into_string().unwrap();
            let case = name.strip_suffix(".meta.json")?.to_string();
            let meta = serde_json::from_str(&read(&name)).unwrap();
            Some((case, meta))
        })
        .collect();
    cases.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(cases.len() >= 28, "the recordings are there");
    cases
}

/// Every key path of a JSON value (`.a.b`, arrays as `[]`), values aside.
fn paths(value: &Value) -> BTreeSet<String> {
    fn walk(value: &Value, prefix: &str, out: &mut BTreeSet<String>) {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    let path = format!("{prefix}.{key}");
                    out.insert(path.clone());
                    walk(child, &path, out);
                }
            }
            Value::Array(items) => {
                for item in items {
                    walk(item, &format!("{prefix}[]"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    walk(value, "", &mut out);
    out
}

/// Key paths the real API sends only sometimes: OpenAI's opening chat chunk carries
/// `refusal: null` in `oai_chat_stream_text` and `oai_chat_stream_tool_call` but not in
/// `oai_chat_stream_parallel_tool_calls`.
const SOMETIMES_SENT: [&str; 1] = [".choices[].delta.refusal"];

/// The key paths in one set but not the other, leaving out those sent only sometimes.
fn differences<'a>(mock: &'a BTreeSet<String>, real: &'a BTreeSet<String>) -> Vec<&'a String> {
    mock.symmetric_difference(real)
        .filter(|path| !SOMETIMES_SENT.contains(&path.as_str()))
        .collect()
}

/// The events of an SSE body: name (`event:` line, or `data` without one) and data.
fn sse(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|event| !event.trim().is_empty())
        .filter_map(|event| {
            let mut name = "data".to_string();
            let mut data = None;
            for line in event.lines() {
                if let Some(rest) = line.strip_prefix("event:") {
                    name = rest.trim().to_string();
                } else if let Some(rest) = line.strip_prefix("data:") {
                    data = Some(rest.trim().to_string());
                }
            }
            let data = data?;
            if data == "[DONE]" {
                return Some(("[DONE]".to_string(), Value::Null));
            }
            Some((name, serde_json::from_str(&data).unwrap()))
        })
        .collect()
}

/// The key paths of every event type, merged over the events of that type.
fn shapes(events: &[(String, Value)]) -> BTreeMap<String, BTreeSet<String>> {
    let mut shapes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, data) in events {
        shapes.entry(name.clone()).or_default().extend(paths(data));
    }
    shapes
}

/// The step that reproduces a recorded answer.
fn step_for(expect: &Value) -> Step {
    let mut step = Step {
        text: expect["text"].as_str().map(str::to_string),
        ..Step::default()
    };
    for call in expect["tool_calls"].as_array().unwrap() {
        let arguments = call.get("input").unwrap_or(&call["arguments"]).clone();
        step = step.with_tool_call(call["name"].as_str().unwrap(), arguments);
    }
    let thinking = expect["content_block_types"]
        .as_array()
        .is_some_and(|types| types.contains(&json!("thinking")));
    if thinking {
        step = step.with_reasoning("I need to find the primes first.");
    }
    let cut = expect["stop_reason"] == "max_tokens"
        || expect["finish_reason"] == "length"
        || expect["status"] == "incomplete";
    if cut {
        step = step.with_finish_reason(FinishReason::Length);
    }
    step
}

/// The route and a request for a recorded API; Responses requests carry the recorded tools so
/// the echoed ones have the same shape.
fn request_for(api: &str, stream: bool, tools: Option<Value>) -> (&'static str, Value) {
    match api {
        "anthropic-messages" => (
            "messages",
            json!({
                "model": "claude-sonnet-4-20250514", "max_tokens": 4096, "stream": stream,
                "messages": [{"role": "user", "content": "hi"}],
            }),
        ),
        "openai-responses" => {
            let mut request = json!({"model": "gpt-4o", "input": "hi", "stream": stream});
            if let Some(tools) = tools.filter(|t| t.as_array().is_some_and(|t| !t.is_empty())) {
                request["tools"] = tools;
            }
            ("responses", request)
        }
        "openai-chat" => {
            let mut request =
                json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]});
            if stream {
                request["stream"] = json!(true);
                request["stream_options"] = json!({"include_usage": true});
            }
            ("chat/completions", request)
        }
        other => panic!("unknown api {other}"),
    }
}

#[tokio::test]
async fn every_recorded_answer_has_the_mocks_shape() {
    let mut checked = Vec::new();
    for (case, meta) in cases() {
        if meta["status"] != 200 {
            continue;
        }
        let api = meta["api"].as_str().unwrap();
        let stream = meta["stream"] == true;
        let file = meta["file"].as_str().unwrap();
        let recorded = read(file);
        let server = server(vec![step_for(&meta["expect"])]).await;
        if stream {
            let recorded_events = sse(&recorded);
            let tools = recorded_events
                .first()
                .and_then(|(_, data)| data.pointer("/response/tools").cloned());
            let (route, request) = request_for(api, true, tools);
            let response = post_to(&server, route, &request).await;
            assert_eq!(response.status(), 200, "{case}");
            let mock_events = sse(&response.text().await.unwrap());
            assert_eq!(
                collapsed(mock_events.iter().map(|(n, _)| n.as_str())),
                collapsed(recorded_events.iter().map(|(n, _)| n.as_str())),
                "{case}: event sequence"
            );
            let (mock, real) = (shapes(&mock_events), shapes(&recorded_events));
            for (name, real_paths) in &real {
                assert_eq!(
                    differences(&mock[name], real_paths),
                    Vec::<&String>::new(),
                    "{case}: key paths of `{name}` events (mock vs recording)"
                );
            }
        } else {
            let recorded: Value = serde_json::from_str(&recorded).unwrap();
            let (route, request) = request_for(api, false, recorded.get("tools").cloned());
            let response = post_to(&server, route, &request).await;
            assert_eq!(response.status(), 200, "{case}");
            let mock: Value = response.json().await.unwrap();
            assert_eq!(
                differences(&paths(&mock), &paths(&recorded)),
                Vec::<&String>::new(),
                "{case}: key paths (mock vs recording)"
            );
        }
        checked.push(case);
    }
    assert_eq!(checked.len(), 19, "{checked:?}");
}

#[tokio::test]
async fn every_recorded_error_has_the_mocks_envelope() {
    let mut checked = Vec::new();
    for (case, meta) in cases() {
        let status = meta["status"].as_u64().unwrap() as u16;
        if status == 200 {
            continue;
        }
        let expect = &meta["expect"];
        let mut step = Step::error(status);
        step = match expect["error_code"].as_str() {
            Some("context_length_exceeded") => {
                step.with_error_kind(ProviderErrorKind::ContextOverflow)
            }
            Some("model_not_found") => step.with_error_kind(ProviderErrorKind::ModelNotFound),
            _ => step,
        };
        let server = server(vec![step]).await;
        let api = meta["api"].as_str().unwrap();
        let (route, mut request) = request_for(api, false, None);
        request["model"] = json!(MISSING_MODEL);
        let response = post_to(&server, route, &request).await;
        assert_eq!(response.status(), status, "{case}");
        let mock: Value = response.json().await.unwrap();
        let recorded: Value = serde_json::from_str(&read(meta["file"].as_str().unwrap())).unwrap();

        // Anthropic's 2024 recordings predate the body's `request_id`; the mock always sends it.
        let mut mock_paths = paths(&mock);
        if recorded.get("request_id").is_none() {
            mock_paths.remove(".request_id");
        }
        assert_eq!(mock_paths, paths(&recorded), "{case}: key paths");
        let error = &mock["error"];
        assert_eq!(error["type"], expect["error_type"], "{case}");
        assert_eq!(
            mock.get("type"),
            expect.get("envelope_type").filter(|t| !t.is_null()),
            "{case}"
        );
        if api != "anthropic-messages" {
            assert_eq!(error["code"], expect["error_code"], "{case}");
            assert_eq!(error["param"], expect["param"], "{case}");
        }
        // Where the real message has nothing account-specific in it, the mock's is the same.
        let same_wording = api == "anthropic-messages"
            || case == "err_resp_400_model_not_found"
            || case == "err_oai_404_model_not_found";
        if same_wording {
            assert_eq!(error["message"], expect["message"], "{case}");
        }
        checked.push(case);
    }
    assert_eq!(checked.len(), 9, "{checked:?}");
}
