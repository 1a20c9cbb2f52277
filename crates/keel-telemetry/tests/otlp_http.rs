//! The OTLP/HTTP exporter against a local receiver that decodes what it is sent as a collector
//! would: protobuf `ExportTraceServiceRequest` on `POST /v1/traces`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use chrono::Utc;
use keel_core::{Event, EventKind, EventSink, Usage};
use keel_telemetry::{TraceOptions, Traces};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use prost::Message;

type Received = Arc<Mutex<Vec<(String, ExportTraceServiceRequest)>>>;

/// A receiver on a free port answering `status`; returns its base address.
async fn receiver(status: StatusCode) -> (String, Received) {
    let received: Received = Arc::default();
    let kept = received.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |headers: HeaderMap, body: Bytes| {
            let kept = kept.clone();
            async move {
                let content_type = headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                let request = ExportTraceServiceRequest::decode(body).unwrap();
                kept.lock().unwrap().push((content_type, request));
                status
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}"), received)
}

fn run_events() -> Vec<Event> {
    let event = |kind| Event {
        ts: Utc::now(),
        run_id: "0192f1c4-7a7e-7cc0-9c1b-2a64f2d1e0aa".into(),
        session_id: "s1".into(),
        kind,
    };
    vec![
        event(EventKind::RunStarted {
            provider: "mock".into(),
            model: "m1".into(),
            context: Default::default(),
        }),
        event(EventKind::RunCompleted {
            iterations: 0,
            usage: Usage::default(),
        }),
    ]
}

fn options(endpoint: String) -> TraceOptions {
    TraceOptions {
        endpoint: Some(endpoint),
        record_content: false,
        service_name: "keel-test".into(),
        provider: None,
    }
}

#[tokio::test]
async fn spans_arrive_as_otlp_protobuf_with_the_service_name() {
    let (base, received) = receiver(StatusCode::OK).await;
    let traces = Traces::start(&options(format!("{base}/")))
        .unwrap()
        .unwrap();
    for event in run_events() {
        traces.sink().emit(&event);
    }
    let report = traces.shutdown(Duration::from_secs(30)).await;
    assert_eq!(report.url, format!("{base}/v1/traces"));
    assert_eq!((report.exported, report.failed, report.dropped), (1, 0, 0));
    assert!(!report.timed_out);

    let received = received.lock().unwrap();
    assert_eq!(received.len(), 1);
    let (content_type, request) = &received[0];
    assert_eq!(content_type, "application/x-protobuf");
    let resource = request.resource_spans[0].resource.as_ref().unwrap();
    let service = resource
        .attributes
        .iter()
        .find(|kv| kv.key == "service.name")
        .and_then(|kv| kv.value.as_ref()?.value.clone());
    assert_eq!(
        service,
        Some(any_value::Value::StringValue("keel-test".into()))
    );
    let scope = &request.resource_spans[0].scope_spans[0];
    assert_eq!(scope.scope.as_ref().unwrap().name, "keel");
    let span = &scope.spans[0];
    assert_eq!(span.name, "invoke_agent keel-test");
    assert_eq!(
        span.trace_id,
        hex("0192f1c47a7e7cc09c1b2a64f2d1e0aa"),
        "the trace id is the run id"
    );
    assert!(span.parent_span_id.is_empty());
}

#[tokio::test]
async fn a_collector_that_refuses_is_counted_not_fatal() {
    let (base, received) = receiver(StatusCode::SERVICE_UNAVAILABLE).await;
    let traces = Traces::start(&options(base)).unwrap().unwrap();
    for event in run_events() {
        traces.sink().emit(&event);
    }
    let report = traces.shutdown(Duration::from_secs(30)).await;
    assert_eq!((report.exported, report.failed), (0, 1), "{report:?}");
    assert!(
        report
            .last_error
            .as_deref()
            .unwrap_or_default()
            .contains("503"),
        "{report:?}"
    );
    assert_eq!(received.lock().unwrap().len(), 1);
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}
