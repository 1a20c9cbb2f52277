//! The real recordings of `fixtures/providers/`: each case is a `<name>.meta.json` (the API,
//! status, headers and what the adapter must make of it) next to the recorded body.

use std::time::Duration;

use keel_core::ProviderErrorKind;
use keel_providers::classify_http_error;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use super::fixtures_dir;

/// One recorded case.
pub struct Case {
    /// Its `.meta.json`.
    pub meta: Value,
    /// The recorded body.
    pub body: Vec<u8>,
}

/// The case `name`.
pub fn load(name: &str) -> Case {
    let dir = fixtures_dir();
    let meta_path = dir.join(format!("{name}.meta.json"));
    let meta: Value = serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap();
    let body = std::fs::read(dir.join(meta["file"].as_str().unwrap())).unwrap();
    Case { meta, body }
}

/// The names of the cases recorded from `api` (`openai-chat`, `anthropic-messages`, …),
/// sorted.
pub fn recorded(api: &str) -> Vec<String> {
    let mut recorded: Vec<String> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .filter_map(|entry| {
            let file_name = entry.unwrap().file_name().into_string().unwrap();
            let case = file_name.strip_suffix(".meta.json")?.to_string();
            (load(&case).meta["api"] == api).then_some(case)
        })
        .collect();
    recorded.sort();
    recorded
}

/// The recorded response headers of a case.
pub fn headers_of(meta: &Value) -> HeaderMap {
    meta["headers"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, value)| {
            (
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value.as_str().unwrap()).unwrap(),
            )
        })
        .collect()
}

/// Classifies the recorded error `name` and checks it is `kind`, with the status, message and
/// retry delay the case expects.
pub fn check_error(name: &str, kind: ProviderErrorKind) {
    let case = load(name);
    let expect = &case.meta["expect"];
    let status = case.meta["status"].as_u64().unwrap() as u16;
    let error = classify_http_error(status, &headers_of(&case.meta), &case.body);
    assert_eq!(error.kind, kind, "{name}");
    assert_eq!(error.status, Some(status), "{name}");
    assert_eq!(expect["http_status"], status, "{name}");
    assert_eq!(error.message, expect["message"].as_str().unwrap(), "{name}");
    let retry_after = match (
        expect["retry_after_ms"].as_u64(),
        expect["retry_after_seconds"].as_u64(),
    ) {
        (Some(ms), _) => Some(Duration::from_millis(ms)),
        (None, Some(seconds)) => Some(Duration::from_secs(seconds)),
        (None, None) => None,
    };
    assert_eq!(error.retry_after, retry_after, "{name}");
}
