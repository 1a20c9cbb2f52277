//! Every error class, for every API, over real HTTP: keel-mock injects the failure the way
//! that API reports it (status, headers, body, mid-stream error event, cut stream), and the
//! adapter must classify it. This is the table the recovery policy relies on.

use std::time::Duration;

use keel_core::ProviderErrorKind::{self, *};
use keel_core::{ChatRequest, Message, NoDeltas, Provider, StreamDelta, ToolChoice};
use keel_mock::{MockServer, Script, Step};
use keel_providers::{Api, Endpoint, connect};

/// How one failure is injected, per API: (status, kind override) for HTTP errors.
fn http_error(api: Api, class: ProviderErrorKind) -> Step {
    let (status, kind) = match (class, api) {
        (Auth, _) => (401, None),
        (Billing, Api::AnthropicMessages) => (400, Some(Billing)),
        (Billing, _) => (429, Some(Billing)),
        (RateLimit, _) => (429, None),
        (Overloaded, Api::AnthropicMessages) => (529, None),
        (Overloaded, _) => (503, Some(Overloaded)),
        (Server, _) => (500, None),
        (Timeout, _) => (504, None),
        (ModelNotFound, Api::OpenAiResponses) => (400, Some(ModelNotFound)),
        (ModelNotFound, _) => (404, None),
        (ContextOverflow, _) => (400, Some(ContextOverflow)),
        (InvalidRequest, _) => (400, None),
        (Unknown, _) => (418, None),
        (other, _) => unreachable!("{other} is not an HTTP error"),
    };
    let step = Step::error(status);
    match kind {
        Some(kind) => step.with_error_kind(kind),
        None => step,
    }
}

fn request(stream: bool) -> ChatRequest {
    ChatRequest {
        model: "gpt-test".into(),
        messages: vec![Message::user("hello").into()],
        tools: Vec::new().into(),
        tool_choice: ToolChoice::Auto,
        max_tokens: Some(64),
        temperature: None,
        stream,
    }
}

/// Sends one request to a mock answering with `step`, through the adapter for `api`.
async fn failure(api: Api, step: Step, stream: bool) -> keel_core::ProviderError {
    let server = MockServer::start("127.0.0.1:0".parse().unwrap(), Script::new(vec![step]))
        .await
        .unwrap();
    let provider = adapter(api, &server.base_url());
    let result = provider.chat(&request(stream), &NoDeltas).await;
    server.shutdown().await;
    result.expect_err("the call must fail")
}

fn adapter(api: Api, base_url: &str) -> std::sync::Arc<dyn Provider> {
    connect(&Endpoint {
        name: api.to_string(),
        api,
        base_url: base_url.to_string(),
        api_key: Some("test-key".into()),
        prompt_caching: true,
        call_timeout: std::time::Duration::from_secs(600),
    })
    .unwrap()
}

#[tokio::test]
async fn every_http_error_class_is_classified_on_every_api() {
    let classes = [
        Auth,
        Billing,
        RateLimit,
        Overloaded,
        Server,
        Timeout,
        ModelNotFound,
        ContextOverflow,
        InvalidRequest,
        Unknown,
    ];
    let mut wrong = Vec::new();
    for api in Api::ALL {
        for class in classes {
            for stream in [false, true] {
                let error = failure(api, http_error(api, class), stream).await;
                if error.kind != class {
                    wrong.push(format!(
                        "{api} stream={stream}: expected {class}, got {error}"
                    ));
                }
                if error.message.trim().is_empty() || error.message.contains('\n') {
                    wrong.push(format!(
                        "{api} {class}: message is not one line: {:?}",
                        error.message
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "misclassified:\n{}", wrong.join("\n"));
}

#[tokio::test]
async fn rate_limits_carry_the_wait_the_provider_asked_for() {
    for api in Api::ALL {
        let step = Step::error(429).with_header("retry-after", "3");
        let error = failure(api, step, false).await;
        assert_eq!(error.kind, RateLimit, "{api}");
        assert_eq!(error.retry_after, Some(Duration::from_secs(3)), "{api}");
        let step = Step::error(429).with_header("retry-after-ms", "1500");
        let error = failure(api, step, true).await;
        assert_eq!(
            error.retry_after,
            Some(Duration::from_millis(1500)),
            "{api}"
        );
    }
}

#[tokio::test]
async fn mid_stream_error_events_are_classified_and_end_the_stream_once() {
    for api in Api::ALL {
        for class in [Overloaded, RateLimit, Server] {
            let server = MockServer::start(
                "127.0.0.1:0".parse().unwrap(),
                Script::new(vec![
                    Step::text("one two three four").fail_stream_after(3, class),
                ]),
            )
            .await
            .unwrap();
            let deltas = Deltas::default();
            let result = adapter(api, &server.base_url())
                .chat(&request(true), &deltas)
                .await;
            let error = result.expect_err("a mid-stream error fails the call");
            assert_eq!(error.kind, class, "{api}: {error}");
            assert_eq!(deltas.finished(), 1, "{api}: exactly one Finished");
            server.shutdown().await;
        }
    }
}

#[tokio::test]
async fn broken_streams_are_network_errors_and_truncated_bodies_are_malformed() {
    for api in Api::ALL {
        let deltas = Deltas::default();
        let server = MockServer::start(
            "127.0.0.1:0".parse().unwrap(),
            Script::new(vec![Step::text("one two three four five").cut_after(3)]),
        )
        .await
        .unwrap();
        let error = adapter(api, &server.base_url())
            .chat(&request(true), &deltas)
            .await
            .expect_err("a broken stream is an error, never a truncated answer");
        assert_eq!(error.kind, Network, "{api}: {error}");
        assert_eq!(deltas.finished(), 1, "{api}");
        server.shutdown().await;

        let error = failure(api, Step::text("a whole answer").eof_after(1), false).await;
        assert_eq!(error.kind, MalformedResponse, "{api}: {error}");
    }
}

#[tokio::test]
async fn an_unreachable_server_is_a_network_error_naming_it() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let base = format!("http://127.0.0.1:{port}/v1");
    for api in Api::ALL {
        let error = adapter(api, &base)
            .chat(&request(false), &NoDeltas)
            .await
            .unwrap_err();
        assert_eq!(error.kind, Network, "{api}");
        assert!(
            error.message.contains(&format!("127.0.0.1:{port}")),
            "{api}: {error}"
        );
    }
}

/// Counts the Finished deltas of a stream.
#[derive(Default)]
struct Deltas(std::sync::Mutex<usize>);

impl Deltas {
    fn finished(&self) -> usize {
        *self.0.lock().unwrap()
    }
}

impl keel_core::DeltaSink for Deltas {
    fn delta(&self, delta: &StreamDelta) {
        if matches!(delta, StreamDelta::Finished { .. }) {
            *self.0.lock().unwrap() += 1;
        }
    }
}

#[tokio::test]
async fn a_call_past_its_deadline_is_a_timeout_also_when_the_stream_keeps_dripping() {
    // Each chunk arrives well within any idle timeout; only the total deadline can end it.
    let drip: Step = serde_json::from_value(serde_json::json!({
        "text": "one two three four five six seven eight nine ten eleven twelve",
        "chunk_delay_ms": 150
    }))
    .unwrap();
    let slow_whole: Step =
        serde_json::from_value(serde_json::json!({"text": "late", "delay_ms": 3000})).unwrap();
    for api in Api::ALL {
        for (step, stream) in [(drip.clone(), true), (slow_whole.clone(), false)] {
            let server = MockServer::start("127.0.0.1:0".parse().unwrap(), Script::new(vec![step]))
                .await
                .unwrap();
            let provider = connect(&Endpoint {
                name: api.to_string(),
                api,
                base_url: server.base_url(),
                api_key: Some("test-key".into()),
                prompt_caching: true,
                call_timeout: Duration::from_millis(400),
            })
            .unwrap();
            let deltas = Deltas::default();
            let error = provider
                .chat(&request(stream), &deltas)
                .await
                .expect_err("past its deadline");
            assert_eq!(error.kind, Timeout, "{api} stream={stream}: {error}");
            if stream {
                assert!(error.message.contains("deadline"), "{api}: {error}");
                assert_eq!(deltas.finished(), 1, "{api}");
            }
            server.shutdown().await;
        }
    }
}
