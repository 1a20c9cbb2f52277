//! The Responses `response` object and its output items: a `reasoning` item (one summary
//! text), a `message` item (one `output_text` part), then one `function_call` item per call.
//! The response echoes the request's parameters as the real API does.

use keel_core::Usage;
use serde::Serialize;
use serde_json::{Value, json};

use crate::answer::{Answer, estimate_tokens};
use crate::script::FinishReason;
use crate::wire::{RequestInfo, fresh_id, to_json, unix_now};

/// The ids of one response and its output items.
pub(super) struct Ids {
    pub response: String,
    pub created_at: u64,
    pub reasoning: String,
    pub message: String,
    pub calls: Vec<String>,
}

impl Ids {
    pub(super) fn new(answer: &Answer) -> Ids {
        Ids {
            response: fresh_id("resp_"),
            created_at: unix_now(),
            reasoning: fresh_id("rs_"),
            message: fresh_id("msg_"),
            calls: answer.calls.iter().map(|_| fresh_id("fc_")).collect(),
        }
    }
}

/// Where a response object stands.
pub(super) enum Phase<'a> {
    /// Just created (`response.created`, `response.in_progress`): no output, no usage.
    InProgress,
    /// Done: `completed`, or `incomplete` when cut at the token limit.
    Done,
    /// Failed mid-stream with this `code` and `message`.
    Failed { code: &'a str, message: &'a str },
}

/// A whole answer.
pub(super) fn whole_body(answer: &Answer, request: &RequestInfo) -> String {
    let ids = Ids::new(answer);
    let mut response = response_object(answer, request, &ids, Phase::Done);
    response.billing = Some(json!({"payer": "developer"}));
    to_json(&response)
}

/// The response object in `phase`.
pub(super) fn response_object(
    answer: &Answer,
    request: &RequestInfo,
    ids: &Ids,
    phase: Phase<'_>,
) -> WireResponse {
    let echo = |key: &str, default: Value| match request.echo.get(key) {
        Some(Value::Null) | None => default,
        Some(value) => value.clone(),
    };
    let service_tier = match phase {
        Phase::InProgress => "auto",
        Phase::Done | Phase::Failed { .. } => "default",
    };
    let (status, error, incomplete_details, output, usage) = match phase {
        Phase::InProgress => ("in_progress", None, None, Vec::new(), None),
        Phase::Failed { code, message } => (
            "failed",
            Some(json!({"code": code, "message": message})),
            None,
            Vec::new(),
            None,
        ),
        Phase::Done => {
            let incomplete = answer.finish == FinishReason::Length;
            (
                if incomplete {
                    "incomplete"
                } else {
                    "completed"
                },
                None,
                incomplete.then(|| json!({"reason": "max_output_tokens"})),
                output_items(answer, ids),
                Some(WireUsage::new(answer)),
            )
        }
    };
    WireResponse {
        id: ids.response.clone(),
        object: "response",
        created_at: ids.created_at,
        status,
        background: false,
        billing: None,
        error,
        incomplete_details,
        instructions: echo("instructions", Value::Null),
        max_output_tokens: echo("max_output_tokens", Value::Null),
        max_tool_calls: echo("max_tool_calls", Value::Null),
        model: answer.model.clone(),
        output,
        parallel_tool_calls: echo("parallel_tool_calls", json!(true)),
        previous_response_id: echo("previous_response_id", Value::Null),
        prompt_cache_key: echo("prompt_cache_key", Value::Null),
        reasoning: echo("reasoning", json!({"effort": null, "summary": null})),
        safety_identifier: echo("safety_identifier", Value::Null),
        service_tier,
        store: echo("store", json!(true)),
        temperature: echo("temperature", json!(1.0)),
        text: echo(
            "text",
            json!({"format": {"type": "text"}, "verbosity": "medium"}),
        ),
        tool_choice: echo("tool_choice", json!("auto")),
        tools: echo("tools", json!([])),
        top_logprobs: 0,
        top_p: echo("top_p", json!(1.0)),
        truncation: echo("truncation", json!("disabled")),
        usage,
        user: echo("user", Value::Null),
        metadata: echo("metadata", json!({})),
    }
}

/// The finished output items of an answer.
pub(super) fn output_items(answer: &Answer, ids: &Ids) -> Vec<Item> {
    let mut items = Vec::new();
    if let Some(reasoning) = &answer.reasoning {
        items.push(reasoning_item(&ids.reasoning, reasoning));
    }
    if let Some(text) = &answer.text {
        items.push(message_item(&ids.message, message_status(answer), text));
    }
    for (call, id) in answer.calls.iter().zip(&ids.calls) {
        items.push(Item::FunctionCall {
            id: id.clone(),
            status: "completed",
            arguments: call.arguments.clone(),
            call_id: call.id.clone(),
            name: call.name.clone(),
        });
    }
    items
}

/// A message item cut at the token limit is `incomplete`.
pub(super) fn message_status(answer: &Answer) -> &'static str {
    if answer.finish == FinishReason::Length {
        "incomplete"
    } else {
        "completed"
    }
}

pub(super) fn reasoning_item(id: &str, summary: &str) -> Item {
    Item::Reasoning {
        id: id.to_string(),
        summary: vec![SummaryText::new(summary)],
    }
}

pub(super) fn message_item(id: &str, status: &'static str, text: &str) -> Item {
    Item::Message {
        id: id.to_string(),
        status,
        content: vec![OutputText::new(text)],
        role: "assistant",
    }
}

#[derive(Serialize)]
pub(super) struct WireResponse {
    id: String,
    object: &'static str,
    created_at: u64,
    status: &'static str,
    background: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    billing: Option<Value>,
    error: Option<Value>,
    incomplete_details: Option<Value>,
    instructions: Value,
    max_output_tokens: Value,
    max_tool_calls: Value,
    model: String,
    output: Vec<Item>,
    parallel_tool_calls: Value,
    previous_response_id: Value,
    prompt_cache_key: Value,
    reasoning: Value,
    safety_identifier: Value,
    service_tier: &'static str,
    store: Value,
    temperature: Value,
    text: Value,
    tool_choice: Value,
    tools: Value,
    top_logprobs: u32,
    top_p: Value,
    truncation: Value,
    usage: Option<WireUsage>,
    user: Value,
    metadata: Value,
}

/// One output item.
#[derive(Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Item {
    Reasoning {
        id: String,
        summary: Vec<SummaryText>,
    },
    Message {
        id: String,
        status: &'static str,
        content: Vec<OutputText>,
        role: &'static str,
    },
    FunctionCall {
        id: String,
        status: &'static str,
        arguments: String,
        call_id: String,
        name: String,
    },
}

#[derive(Clone, Serialize)]
pub(super) struct OutputText {
    #[serde(rename = "type")]
    kind: &'static str,
    annotations: [Value; 0],
    logprobs: [Value; 0],
    text: String,
}

impl OutputText {
    pub(super) fn new(text: &str) -> OutputText {
        OutputText {
            kind: "output_text",
            annotations: [],
            logprobs: [],
            text: text.to_string(),
        }
    }
}

#[derive(Clone, Serialize)]
pub(super) struct SummaryText {
    #[serde(rename = "type")]
    kind: &'static str,
    text: String,
}

impl SummaryText {
    pub(super) fn new(text: &str) -> SummaryText {
        SummaryText {
            kind: "summary_text",
            text: text.to_string(),
        }
    }
}

#[derive(Serialize)]
pub(super) struct WireUsage {
    input_tokens: u64,
    input_tokens_details: InputDetails,
    output_tokens: u64,
    output_tokens_details: OutputDetails,
    total_tokens: u64,
}

#[derive(Serialize)]
struct InputDetails {
    cached_tokens: u64,
}

#[derive(Serialize)]
struct OutputDetails {
    reasoning_tokens: u64,
}

impl WireUsage {
    fn new(answer: &Answer) -> WireUsage {
        let usage: Usage = answer.usage;
        // The reasoning's share of the output, estimated like the rest.
        let reasoning_tokens = answer
            .reasoning
            .as_ref()
            .map_or(0, |r| estimate_tokens(r.chars().count()))
            .min(usage.output_tokens);
        WireUsage {
            input_tokens: usage.input_tokens,
            input_tokens_details: InputDetails {
                cached_tokens: usage.cache_read_tokens,
            },
            output_tokens: usage.output_tokens,
            output_tokens_details: OutputDetails { reasoning_tokens },
            total_tokens: usage.total(),
        }
    }
}
