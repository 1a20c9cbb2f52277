use std::sync::Mutex;
use std::time::Duration;

use keel_core::{
    ChatRequest, DeltaSink, Message, NoDeltas, Provider, ProviderErrorKind, StopReason,
    StreamDelta, ToolChoice,
};
use serde_json::json;

use super::ScriptedProvider;
use crate::script::{FinishReason, Script, Step, StreamError};

#[derive(Default)]
struct Collect(Mutex<Vec<StreamDelta>>);

impl DeltaSink for Collect {
    fn delta(&self, delta: &StreamDelta) {
        self.0.lock().unwrap().push(delta.clone());
    }
}

impl Collect {
    fn deltas(&self) -> Vec<StreamDelta> {
        self.0.lock().unwrap().clone()
    }

    fn finished(&self) -> Vec<Option<StopReason>> {
        self.deltas()
            .into_iter()
            .filter_map(|d| match d {
                StreamDelta::Finished { stop_reason } => Some(stop_reason),
                _ => None,
            })
            .collect()
    }

    fn text(&self) -> String {
        self.deltas()
            .into_iter()
            .filter_map(|d| match d {
                StreamDelta::Text { text } => Some(text),
                _ => None,
            })
            .collect()
    }
}

fn request(stream: bool) -> ChatRequest {
    ChatRequest {
        model: "gpt-test".into(),
        messages: vec![Message::user("hello there").into()],
        tools: Vec::new().into(),
        tool_choice: ToolChoice::Auto,
        max_tokens: None,
        temperature: None,
        stream,
    }
}

#[tokio::test]
async fn answers_text_whole() {
    let provider = ScriptedProvider::from_steps(vec![Step::text("Hello world")]);
    let response = provider.chat(&request(false), &NoDeltas).await.unwrap();
    assert_eq!(response.message.content, "Hello world");
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert_eq!(response.model, "gpt-test");
    assert!(response.usage.input_tokens >= 1);
    assert_eq!(response.usage.output_tokens, 2);
    assert_eq!(provider.name(), "mock");
}

#[tokio::test]
async fn streams_text_in_pieces_with_one_finished() {
    let provider = ScriptedProvider::from_steps(vec![Step::text("one two three")]);
    let sink = Collect::default();
    let response = provider.chat(&request(true), &sink).await.unwrap();
    assert_eq!(sink.text(), "one two three");
    let texts = sink
        .deltas()
        .iter()
        .filter(|d| matches!(d, StreamDelta::Text { .. }))
        .count();
    assert_eq!(texts, 3);
    assert_eq!(sink.finished(), [Some(StopReason::EndTurn)]);
    assert!(matches!(
        sink.deltas().last(),
        Some(StreamDelta::Finished { .. })
    ));
    assert_eq!(response.message.content, "one two three");
}

#[tokio::test]
async fn tool_calls_stream_as_started_and_fragments() {
    let provider = ScriptedProvider::from_steps(vec![
        Step::tool_call("read_file", json!({"path": "src/main.rs"}))
            .with_tool_call("bad", json!("{not json")),
    ]);
    let sink = Collect::default();
    let response = provider.chat(&request(true), &sink).await.unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    let calls = &response.message.tool_calls;
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].id, "call_0_0");
    assert_eq!(calls[0].arguments, r#"{"path":"src/main.rs"}"#);
    assert_eq!(calls[1].arguments, "{not json");

    let deltas = sink.deltas();
    let started: Vec<_> = deltas
        .iter()
        .filter_map(|d| match d {
            StreamDelta::ToolCallStarted { index, id, name } => Some((*index, id, name)),
            _ => None,
        })
        .collect();
    assert_eq!(started.len(), 2);
    assert_eq!(
        started[0],
        (0, &"call_0_0".to_string(), &"read_file".to_string())
    );
    let first_args: Vec<_> = deltas
        .iter()
        .filter_map(|d| match d {
            StreamDelta::ToolCallArguments { index: 0, fragment } => Some(fragment.as_str()),
            _ => None,
        })
        .collect();
    assert!(first_args.len() > 1, "arguments come in several fragments");
    assert_eq!(first_args.concat(), r#"{"path":"src/main.rs"}"#);
    assert_eq!(sink.finished(), [Some(StopReason::ToolUse)]);
}

#[tokio::test]
async fn reasoning_model_finish_and_usage_follow_the_step() {
    let provider = ScriptedProvider::from_steps(vec![
        Step::text("cut")
            .with_reasoning("let me think")
            .with_model("gpt-other")
            .with_usage(7, 9)
            .with_finish_reason(FinishReason::Length),
    ]);
    let sink = Collect::default();
    let response = provider.chat(&request(true), &sink).await.unwrap();
    assert_eq!(response.message.reasoning.unwrap().text, "let me think");
    assert_eq!(response.model, "gpt-other");
    assert_eq!(
        (response.usage.input_tokens, response.usage.output_tokens),
        (7, 9)
    );
    assert_eq!(response.stop_reason, StopReason::MaxTokens);
    assert!(matches!(
        sink.deltas().first(),
        Some(StreamDelta::Reasoning { text }) if text == "let"
    ));
    assert_eq!(sink.finished(), [Some(StopReason::MaxTokens)]);
}

#[tokio::test]
async fn error_steps_map_status_to_kind() {
    let cases = [
        (401, ProviderErrorKind::Auth),
        (403, ProviderErrorKind::Auth),
        (402, ProviderErrorKind::Billing),
        (404, ProviderErrorKind::ModelNotFound),
        (400, ProviderErrorKind::InvalidRequest),
        (500, ProviderErrorKind::Server),
        (503, ProviderErrorKind::Server),
        (529, ProviderErrorKind::Overloaded),
    ];
    let provider =
        ScriptedProvider::from_steps(cases.iter().map(|(s, _)| Step::error(*s)).collect());
    for (status, kind) in cases {
        let error = provider.chat(&request(false), &NoDeltas).await.unwrap_err();
        assert_eq!((error.kind, error.status), (kind, Some(status)));
        assert!(!error.message.is_empty());
    }
}

#[tokio::test]
async fn rate_limit_carries_retry_after_and_kind_overrides() {
    let provider = ScriptedProvider::from_steps(vec![
        Step::error(429).with_header("retry-after", "3"),
        Step::error(400)
            .with_error_kind(ProviderErrorKind::ContextOverflow)
            .with_error_body(json!({"error": {"message": "prompt is too long"}})),
        Step::error(502).with_error_body(json!("<html>bad gateway</html>")),
    ]);
    let limited = provider.chat(&request(false), &NoDeltas).await.unwrap_err();
    assert_eq!(limited.kind, ProviderErrorKind::RateLimit);
    assert_eq!(limited.retry_after, Some(Duration::from_secs(3)));
    let overflow = provider.chat(&request(false), &NoDeltas).await.unwrap_err();
    assert_eq!(overflow.kind, ProviderErrorKind::ContextOverflow);
    assert_eq!(overflow.message, "prompt is too long");
    let gateway = provider.chat(&request(false), &NoDeltas).await.unwrap_err();
    assert_eq!(gateway.message, "<html>bad gateway</html>");
}

#[tokio::test]
async fn failed_streams_still_finish_exactly_once() {
    let provider = ScriptedProvider::from_steps(vec![Step::error(500)]);
    let sink = Collect::default();
    provider.chat(&request(true), &sink).await.unwrap_err();
    assert_eq!(sink.deltas(), [StreamDelta::Finished { stop_reason: None }]);

    let sink = Collect::default();
    let exhausted = provider.chat(&request(true), &sink).await.unwrap_err();
    assert_eq!(exhausted.kind, ProviderErrorKind::Server);
    assert_eq!(
        exhausted.message,
        "keel-mock: script exhausted after 1 responses"
    );
    assert_eq!(sink.finished(), [None]);
}

#[tokio::test]
async fn cut_stream_finishes_without_reason_then_fails() {
    let provider = ScriptedProvider::from_steps(vec![
        Step::text("a b c d").cut_after(2),
        Step::text("a b c d").eof_after(1),
        Step::text("a b").cut_after(1),
    ]);
    let sink = Collect::default();
    let error = provider.chat(&request(true), &sink).await.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Network);
    assert_eq!(sink.text(), "a b");
    assert_eq!(sink.finished(), [None]);
    assert!(matches!(
        sink.deltas().last(),
        Some(StreamDelta::Finished { stop_reason: None })
    ));

    let sink = Collect::default();
    let error = provider.chat(&request(true), &sink).await.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Network);
    assert_eq!(sink.text(), "a");
    assert!(
        sink.deltas()
            .iter()
            .any(|d| matches!(d, StreamDelta::Warning { .. }))
    );
    assert_eq!(sink.finished(), [None]);

    let whole = provider.chat(&request(false), &NoDeltas).await.unwrap_err();
    assert_eq!(whole.kind, ProviderErrorKind::Network);
}

#[tokio::test]
async fn stream_errors_deliver_some_deltas_then_fail_once_finished() {
    let provider = ScriptedProvider::from_steps(vec![
        Step::text("a b c d").fail_stream_after(2, ProviderErrorKind::Overloaded),
        Step::text("a b").with_stream_error(
            StreamError::new(10, ProviderErrorKind::RateLimit).with_message("slow down"),
        ),
        Step::text("a b").fail_stream_after(1, ProviderErrorKind::Overloaded),
    ]);
    let sink = Collect::default();
    let error = provider.chat(&request(true), &sink).await.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Overloaded);
    assert_eq!(error.status, None, "the stream had begun");
    assert_eq!(sink.text(), "a b");
    assert_eq!(sink.finished(), [None]);
    assert!(matches!(
        sink.deltas().last(),
        Some(StreamDelta::Finished { stop_reason: None })
    ));

    let sink = Collect::default();
    let error = provider.chat(&request(true), &sink).await.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::RateLimit);
    assert_eq!(error.message, "slow down");
    assert_eq!(sink.text(), "a b", "capped at the whole answer");
    assert_eq!(sink.finished(), [None]);

    let whole = provider.chat(&request(false), &NoDeltas).await.unwrap_err();
    assert_eq!(whole.kind, ProviderErrorKind::Overloaded);
    assert_eq!(whole.status, Some(529));
}

#[tokio::test]
async fn times_forever_and_exhaustion() {
    let provider = ScriptedProvider::new(Script::new(vec![
        Step::text("twice").repeat(2),
        Step::text("then"),
    ]));
    let mut texts = Vec::new();
    for _ in 0..3 {
        let response = provider.chat(&request(false), &NoDeltas).await.unwrap();
        texts.push(response.message.content);
    }
    assert_eq!(texts, ["twice", "twice", "then"]);
    let error = provider.chat(&request(false), &NoDeltas).await.unwrap_err();
    assert_eq!(error.status, Some(500));
    assert!(error.message.contains("exhausted after 3 responses"));

    let forever = ScriptedProvider::from_steps(vec![Step::text("again").repeat_forever()]);
    for _ in 0..10 {
        let response = forever.chat(&request(false), &NoDeltas).await.unwrap();
        assert_eq!(response.message.content, "again");
    }
}

#[tokio::test]
async fn repeated_tool_steps_get_fresh_ids() {
    let provider = ScriptedProvider::from_steps(vec![Step::tool_call("f", json!({})).repeat(2)]);
    let first = provider.chat(&request(false), &NoDeltas).await.unwrap();
    let second = provider.chat(&request(false), &NoDeltas).await.unwrap();
    assert_eq!(first.message.tool_calls[0].id, "call_0_0");
    assert_eq!(second.message.tool_calls[0].id, "call_1_0");
}

#[tokio::test(start_paused = true)]
async fn delays_use_tokio_time() {
    let provider = ScriptedProvider::from_steps(vec![
        Step::text("a b c")
            .with_delay_ms(5_000)
            .with_chunk_delay_ms(1_000),
    ]);
    let start = tokio::time::Instant::now();
    provider
        .chat(&request(true), &Collect::default())
        .await
        .unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(7_000));
}

#[tokio::test]
async fn records_requests_in_order() {
    let provider =
        ScriptedProvider::from_steps(vec![Step::text("a"), Step::text("b")]).with_name("second");
    let mut first = request(false);
    first.model = "one".into();
    provider.chat(&first, &NoDeltas).await.unwrap();
    provider.chat(&request(true), &NoDeltas).await.unwrap();
    let recorded = provider.requests();
    assert_eq!(recorded.len(), 2);
    assert_eq!(recorded[0].model, "one");
    assert!(recorded[1].stream);
    assert_eq!(provider.name(), "second");
}

fn for_model(model: &str, stream: bool) -> ChatRequest {
    ChatRequest {
        model: model.into(),
        ..request(stream)
    }
}

#[tokio::test]
async fn routes_requests_by_model_between_the_agent_and_its_summaries() {
    let provider = ScriptedProvider::new(
        Script::new(vec![
            Step::tool_call("f", json!({})),
            Step::text("agent done"),
        ])
        .with_model(
            "summary-model",
            vec![Step::text("summary one"), Step::text("summary two")],
        ),
    );
    // Agent, summary, agent, summary: each list is consumed in its own order.
    let first = provider.chat(&request(false), &NoDeltas).await.unwrap();
    assert_eq!(first.message.tool_calls[0].id, "call_0_0");
    let sink = Collect::default();
    let summary = provider
        .chat(&for_model("summary-model", true), &sink)
        .await
        .unwrap();
    assert_eq!(summary.message.content, "summary one");
    assert_eq!(summary.model, "summary-model");
    assert_eq!(sink.text(), "summary one");
    let second = provider.chat(&request(false), &NoDeltas).await.unwrap();
    assert_eq!(second.message.content, "agent done");
    let summary = provider
        .chat(&for_model("summary-model", false), &NoDeltas)
        .await
        .unwrap();
    assert_eq!(summary.message.content, "summary two");

    let models: Vec<_> = provider.requests().into_iter().map(|r| r.model).collect();
    assert_eq!(
        models,
        ["gpt-test", "summary-model", "gpt-test", "summary-model"]
    );
}

#[tokio::test]
async fn each_model_list_runs_out_on_its_own() {
    let provider = ScriptedProvider::new(
        Script::new(vec![Step::text("agent").repeat_forever()]).with_model(
            "summary-model",
            vec![
                Step::error(529),
                Step::text("a b c").fail_stream_after(1, ProviderErrorKind::Server),
            ],
        ),
    );
    let overloaded = provider
        .chat(&for_model("summary-model", false), &NoDeltas)
        .await
        .unwrap_err();
    assert_eq!(overloaded.kind, ProviderErrorKind::Overloaded);
    let sink = Collect::default();
    let broken = provider
        .chat(&for_model("summary-model", true), &sink)
        .await
        .unwrap_err();
    assert_eq!(broken.kind, ProviderErrorKind::Server);
    assert_eq!(sink.text(), "a");

    let sink = Collect::default();
    let exhausted = provider
        .chat(&for_model("summary-model", true), &sink)
        .await
        .unwrap_err();
    assert_eq!(exhausted.status, Some(500));
    assert_eq!(
        exhausted.message,
        "keel-mock: script for model `summary-model` exhausted after 2 responses"
    );
    assert_eq!(sink.finished(), [None]);
    // The agent's list is untouched and still answers, for any other model too.
    for model in ["gpt-test", "Summary-Model"] {
        let response = provider
            .chat(&for_model(model, false), &NoDeltas)
            .await
            .unwrap();
        assert_eq!(response.message.content, "agent");
    }
}

#[tokio::test]
async fn a_script_of_models_only_exhausts_other_models_at_once() {
    let provider =
        ScriptedProvider::new(Script::default().with_model("summary-model", vec![Step::text("s")]));
    let error = provider.chat(&request(false), &NoDeltas).await.unwrap_err();
    assert_eq!(
        error.message,
        "keel-mock: script exhausted after 0 responses"
    );
    let summary = provider
        .chat(&for_model("summary-model", false), &NoDeltas)
        .await
        .unwrap();
    assert_eq!(summary.message.content, "s");
}
