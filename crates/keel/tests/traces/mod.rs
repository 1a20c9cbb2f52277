//! What the trace tests share (`e2e_traces.rs`): a local OTLP/HTTP receiver that decodes what
//! it is sent as a collector would, and the spans it received, flattened.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

/// An OTLP/HTTP receiver on a free port, on its own runtime; stops when dropped.
pub struct Receiver {
    /// Its base address, e.g. `http://127.0.0.1:41234`.
    pub url: String,
    requests: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        // Without waiting: an async test drops it on its own runtime.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Receiver {
    /// Starts one.
    pub fn start() -> Receiver {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let requests: Arc<Mutex<Vec<ExportTraceServiceRequest>>> = Arc::default();
        let kept = requests.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            post(move |body: Bytes| {
                let kept = kept.clone();
                async move {
                    let request = ExportTraceServiceRequest::decode(body).unwrap();
                    kept.lock().unwrap().push(request);
                    "{}"
                }
            }),
        );
        // Bound here, served on the receiver's runtime (a test may call this on its own).
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app).await
        });
        Receiver {
            url,
            requests,
            runtime: Some(runtime),
        }
    }

    /// How many export requests arrived.
    pub fn requests(&self) -> usize {
        self.requests.lock().unwrap().len()
    }

    /// Every span received, with the `service.name` of its resource.
    pub fn spans(&self) -> Vec<(String, Span)> {
        let mut spans = Vec::new();
        for request in self.requests.lock().unwrap().iter() {
            for resource in &request.resource_spans {
                let service = resource
                    .resource
                    .as_ref()
                    .and_then(|r| string(&r.attributes, "service.name"))
                    .unwrap_or_default();
                for scope in &resource.scope_spans {
                    for span in &scope.spans {
                        spans.push((service.clone(), span.clone()));
                    }
                }
            }
        }
        spans
    }
}

/// A string attribute.
pub fn string(attributes: &[KeyValue], key: &str) -> Option<String> {
    match value(attributes, key)? {
        any_value::Value::StringValue(text) => Some(text),
        _ => None,
    }
}

/// An integer attribute.
pub fn int(attributes: &[KeyValue], key: &str) -> Option<i64> {
    match value(attributes, key)? {
        any_value::Value::IntValue(n) => Some(n),
        _ => None,
    }
}

/// A string-array attribute.
pub fn strings(attributes: &[KeyValue], key: &str) -> Option<Vec<String>> {
    match value(attributes, key)? {
        any_value::Value::ArrayValue(array) => Some(
            array
                .values
                .iter()
                .filter_map(|v: &AnyValue| match &v.value {
                    Some(any_value::Value::StringValue(text)) => Some(text.clone()),
                    _ => None,
                })
                .collect(),
        ),
        _ => None,
    }
}

fn value(attributes: &[KeyValue], key: &str) -> Option<any_value::Value> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.clone())
}

/// The spans by name.
pub fn by_name(spans: &[(String, Span)]) -> HashMap<String, Vec<Span>> {
    let mut named: HashMap<String, Vec<Span>> = HashMap::new();
    for (_, span) in spans {
        named
            .entry(span.name.clone())
            .or_default()
            .push(span.clone());
    }
    named
}

/// Lowercase hex of an id.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every attribute of every span and span event, as `key=value` text (to look for content).
pub fn all_attributes(spans: &[(String, Span)]) -> String {
    let mut text = String::new();
    for (_, span) in spans {
        let events = span.events.iter().flat_map(|e| e.attributes.iter());
        for kv in span.attributes.iter().chain(events) {
            text.push_str(&format!("{}={:?}\n", kv.key, kv.value));
        }
        if let Some(status) = &span.status {
            text.push_str(&status.message);
        }
    }
    text
}
