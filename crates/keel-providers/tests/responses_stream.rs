//! The Responses stream reader on hand-written event streams: reasoning, items that arrive
//! only whole, terminal output, refusals, unknown events, errors and early ends.

mod common;

use common::Recorder;
use keel_core::{ChatResponse, ProviderError, ProviderErrorKind, StopReason, StreamDelta};
use keel_providers::openai_responses::parse_stream;
use serde_json::{Value, json};

fn run(events: &[Value]) -> (Result<ChatResponse, ProviderError>, Vec<StreamDelta>) {
    let body: String = events
        .iter()
        .map(|event| {
            format!(
                "event: {}\ndata: {event}\n\n",
                event["type"].as_str().unwrap()
            )
        })
        .collect();
    let sink = Recorder::default();
    let bytes = futures::stream::iter([Ok::<_, std::io::Error>(body)]);
    let result = futures::executor::block_on(parse_stream(bytes, &sink));
    (result, sink.deltas())
}

fn reasoning_text(deltas: &[StreamDelta]) -> String {
    deltas
        .iter()
        .filter_map(|delta| match delta {
            StreamDelta::Reasoning { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn completed(output: Value) -> Value {
    json!({"type": "response.completed", "response": {
        "status": "completed", "model": "o4-mini", "output": output,
        "usage": {"input_tokens": 3, "output_tokens": 2},
    }})
}

fn summary_delta(output_index: usize, summary_index: usize, delta: &str) -> Value {
    json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs",
           "output_index": output_index, "summary_index": summary_index, "delta": delta})
}

#[test]
fn reasoning_summaries_stream_as_paragraphs_and_the_done_item_is_kept_for_replay() {
    let first = json!({"id": "rs_1", "type": "reasoning", "encrypted_content": "gA1",
        "summary": [{"type": "summary_text", "text": "Look."},
                    {"type": "summary_text", "text": "Then act."}]});
    let second = json!({"id": "rs_2", "type": "reasoning", "encrypted_content": "gA2",
        "summary": [{"type": "summary_text", "text": "Done."}]});
    let events = [
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"id": "rs_1", "type": "reasoning", "summary": []}}),
        summary_delta(0, 0, "Lo"),
        summary_delta(0, 0, "ok."),
        summary_delta(0, 1, "Then act."),
        json!({"type": "response.output_item.done", "output_index": 0, "item": first}),
        // The second item arrives whole: its text is sent when it is done.
        json!({"type": "response.output_item.done", "output_index": 1, "item": second}),
        completed(json!([first, second])),
    ];
    let (result, deltas) = run(&events);
    let response = result.unwrap();
    let reasoning = response.message.reasoning.unwrap();
    assert_eq!(reasoning.text, "Look.\n\nThen act.\n\nDone.");
    assert_eq!(reasoning_text(&deltas), reasoning.text);
    assert_eq!(reasoning.replay, Some(json!([first, second])));
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert_eq!(response.model, "o4-mini");
}

#[test]
fn items_sent_only_when_done_still_yield_deltas() {
    let call = json!({"type": "function_call", "id": "fc_1", "call_id": "call_1",
                      "name": "ls", "arguments": "{\"path\":\".\"}"});
    let message = json!({"type": "message", "role": "assistant",
                         "content": [{"type": "output_text", "text": "Listing."}]});
    let events = [
        json!({"type": "response.output_item.done", "output_index": 0, "item": message}),
        json!({"type": "response.output_item.done", "output_index": 1, "item": call}),
        completed(json!([message, call])),
    ];
    let (result, deltas) = run(&events);
    assert_eq!(result.unwrap().stop_reason, StopReason::ToolUse);
    assert_eq!(
        deltas,
        [
            StreamDelta::Text {
                text: "Listing.".into()
            },
            StreamDelta::ToolCallStarted {
                index: 0,
                id: "call_1".into(),
                name: "ls".into()
            },
            StreamDelta::ToolCallArguments {
                index: 0,
                fragment: r#"{"path":"."}"#.into()
            },
            StreamDelta::Finished {
                stop_reason: Some(StopReason::ToolUse)
            },
        ]
    );
}

#[test]
fn the_terminal_output_fills_in_items_the_stream_left_out() {
    let message = json!({"type": "message", "role": "assistant",
                         "content": [{"type": "output_text", "text": "Hello"}]});
    let events = [
        json!({"type": "response.output_text.delta", "output_index": 0, "delta": "Hel"}),
        completed(json!([message])),
    ];
    let (result, deltas) = run(&events);
    assert_eq!(result.unwrap().message.content, "Hello");
    assert_eq!(
        deltas[..2],
        [
            StreamDelta::Text { text: "Hel".into() },
            StreamDelta::Text { text: "lo".into() }
        ]
    );
}

#[test]
fn a_refusal_streams_as_text() {
    let events = [
        json!({"type": "response.refusal.delta", "output_index": 0, "delta": "No."}),
        completed(json!([])),
    ];
    let (result, deltas) = run(&events);
    assert_eq!(result.unwrap().message.content, "No.");
    assert_eq!(deltas[0], StreamDelta::Text { text: "No.".into() });
}

#[test]
fn unknown_events_are_ignored() {
    let events = [
        json!({"type": "response.web_search_call.searching", "output_index": 0}),
        json!({"type": "response.output_text.annotation.added", "annotation": {}}),
        json!({"type": "response.output_text.delta", "output_index": 0, "delta": "ok"}),
        completed(json!([])),
    ];
    let (result, _) = run(&events);
    assert_eq!(result.unwrap().message.content, "ok");
}

#[test]
fn error_events_are_classified_in_either_shape() {
    let flat = json!({"type": "error", "code": "rate_limit_exceeded",
                      "message": "Too fast.", "param": null});
    let (result, deltas) = run(&[flat]);
    let error = result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::RateLimit);
    assert_eq!(error.message, "the stream reported an error: Too fast.");
    assert_eq!(deltas, [StreamDelta::Finished { stop_reason: None }]);

    let nested = json!({"type": "error", "error": {"type": "server_error", "message": "Oops"}});
    assert_eq!(
        run(&[nested]).0.unwrap_err().kind,
        ProviderErrorKind::Server
    );

    let failed = json!({"type": "response.failed", "response": {"status": "failed",
        "error": {"code": "context_length_exceeded", "message": "Too long."}}});
    let error = run(&[failed]).0.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::ContextOverflow);
    assert_eq!(error.message, "the response failed: Too long.");
}

#[test]
fn an_empty_or_unreadable_stream_is_malformed() {
    let sink = Recorder::default();
    let bytes = futures::stream::iter([Ok::<_, std::io::Error>("")]);
    let result = futures::executor::block_on(parse_stream(bytes, &sink));
    assert_eq!(
        result.unwrap_err().kind,
        ProviderErrorKind::MalformedResponse
    );
    let bytes = futures::stream::iter([Ok::<_, std::io::Error>("data: {oops\n\n")]);
    let result = futures::executor::block_on(parse_stream(bytes, &sink));
    let error = result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::MalformedResponse);
    assert!(error.message.contains("{oops"), "{error}");
}

#[test]
fn a_stream_that_closes_before_response_completed_is_cut_short_and_discarded() {
    // Cut after a call's arguments began: the call must never run.
    let events = [
        json!({"type": "response.output_item.added", "output_index": 0, "item":
               {"type": "function_call", "call_id": "c1", "name": "write_file", "arguments": ""}}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 0,
               "delta": "{\"pa"}),
    ];
    let (result, deltas) = run(&events);
    let error = result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Network);
    assert!(
        error.message.contains("before response.completed"),
        "{error}"
    );
    assert_eq!(
        deltas.last(),
        Some(&StreamDelta::Finished { stop_reason: None })
    );

    // Text that ends cleanly but without its terminal event is not an answer either.
    let events = [
        json!({"type": "response.output_item.added", "output_index": 0, "item":
               {"type": "message", "role": "assistant", "content": []}}),
        json!({"type": "response.output_text.delta", "output_index": 0, "content_index": 0,
               "delta": "one"}),
    ];
    let (result, _) = run(&events);
    assert_eq!(result.unwrap_err().kind, ProviderErrorKind::Network);
}
