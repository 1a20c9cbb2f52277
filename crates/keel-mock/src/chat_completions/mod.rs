//! The OpenAI chat-completions wire format (`POST /v1/chat/completions`), written from the
//! public protocol and the recordings in `shared/fixtures/providers/oai_chat_*`: whole
//! `chat.completion` bodies, `chat.completion.chunk` SSE streams ending in `data: [DONE]`, and
//! `{"error": {...}}` bodies.

mod validate;

pub(crate) use validate::check;

use keel_core::{ProviderErrorKind, Usage};
use serde::Serialize;
use serde_json::Value;

use crate::answer::{Answer, Piece};
use crate::openai_common::{error_json, error_type_and_code};
use crate::script::{FinishReason, StreamError};
use crate::wire::{
    Events, Invalid, RequestInfo, WireApi, data_frame, failure_message, fresh_id, to_json, unix_now,
};

/// The fingerprint the mock reports, in OpenAI's `fp_…` shape.
const FINGERPRINT: &str = "fp_keelmock0";

/// The stream padding the mock reports.
const OBFUSCATION: &str = "kEeLmOcK";

/// The chat-completions API.
pub(crate) struct ChatCompletions;

impl WireApi for ChatCompletions {
    fn read_request(body: &[u8]) -> Result<RequestInfo, Invalid> {
        validate::read_request(body)
    }

    fn invalid_request_body(invalid: &Invalid) -> String {
        error_json(
            &invalid.message,
            "invalid_request_error",
            invalid.param.as_deref(),
            None,
        )
    }

    fn status_for(kind: ProviderErrorKind) -> u16 {
        match kind {
            // OpenAI reports an exhausted quota as a 429 and an overloaded engine as a 503.
            ProviderErrorKind::Billing => 429,
            ProviderErrorKind::Overloaded => 503,
            other => crate::answer::status_for_kind(other),
        }
    }

    fn error_body(_status: u16, kind: ProviderErrorKind, message: &str) -> String {
        let (error_type, code) = error_type_and_code(kind);
        let param = (kind == ProviderErrorKind::ContextOverflow).then_some("messages");
        error_json(message, error_type, param, code)
    }

    fn whole_body(answer: &Answer, _request: &RequestInfo) -> String {
        let tool_calls = answer
            .calls
            .iter()
            .map(|call| ToolCall {
                id: &call.id,
                kind: "function",
                function: Function {
                    name: &call.name,
                    arguments: &call.arguments,
                },
            })
            .collect();
        let content = match (&answer.text, answer.calls.is_empty()) {
            (Some(text), _) => Some(text.as_str()),
            (None, true) => Some(""),
            (None, false) => None,
        };
        let completion = Completion {
            id: &fresh_id("chatcmpl-"),
            object: "chat.completion",
            created: unix_now(),
            model: &answer.model,
            choices: [Choice {
                index: 0,
                message: AssistantMessage {
                    role: "assistant",
                    content,
                    reasoning_content: answer.reasoning.as_deref(),
                    tool_calls,
                    refusal: None,
                    annotations: [],
                },
                logprobs: None,
                finish_reason: finish_name(answer.finish),
            }],
            usage: WireUsage::from(answer.usage),
            service_tier: "default",
            system_fingerprint: FINGERPRINT,
        };
        to_json(&completion)
    }

    fn stream_events(
        answer: &Answer,
        request: &RequestInfo,
        failure: Option<&StreamError>,
    ) -> Events {
        let id = fresh_id("chatcmpl-");
        let created = unix_now();
        let chunk = |delta: Delta, finish: Option<&str>| {
            let chunk = Chunk {
                id: &id,
                object: "chat.completion.chunk",
                created,
                model: &answer.model,
                service_tier: "default",
                system_fingerprint: FINGERPRINT,
                choices: vec![ChunkChoice {
                    index: 0,
                    delta,
                    logprobs: None,
                    finish_reason: finish,
                }],
                usage: request.include_usage.then_some(None),
                obfuscation: OBFUSCATION,
            };
            data_frame(&to_json(&chunk))
        };

        let opening = Delta {
            role: Some("assistant"),
            content: Some((answer.text.is_some() || answer.calls.is_empty()).then(String::new)),
            refusal: Some(None),
            ..Delta::default()
        };
        let mut frames = vec![chunk(opening, None)];
        for piece in answer.pieces() {
            frames.push(chunk(Delta::of(&piece), None));
        }
        let content = frames.len();
        frames.push(chunk(Delta::default(), Some(finish_name(answer.finish))));
        if request.include_usage {
            let usage_chunk = Chunk {
                id: &id,
                object: "chat.completion.chunk",
                created,
                model: &answer.model,
                service_tier: "default",
                system_fingerprint: FINGERPRINT,
                choices: Vec::new(),
                usage: Some(Some(WireUsage::from(answer.usage))),
                obfuscation: OBFUSCATION,
            };
            frames.push(data_frame(&to_json(&usage_chunk)));
        }
        frames.push(data_frame("[DONE]"));
        let events = Events { frames, content };
        match failure {
            // OpenAI reports a failure mid-stream as a chunk holding only an error object.
            Some(failure) => events.fail_after(failure.after_chunks, |_| {
                let message = failure_message::<Self>(failure, request);
                let status = Self::status_for(failure.kind);
                data_frame(&Self::error_body(status, failure.kind, &message))
            }),
            None => events,
        }
    }
}

fn finish_name(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop => "stop",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::Length => "length",
    }
}

#[derive(Serialize)]
struct Completion<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [Choice<'a>; 1],
    usage: WireUsage,
    service_tier: &'static str,
    system_fingerprint: &'static str,
}

#[derive(Serialize)]
struct Choice<'a> {
    index: u32,
    message: AssistantMessage<'a>,
    logprobs: Option<Value>,
    finish_reason: &'static str,
}

#[derive(Serialize)]
struct AssistantMessage<'a> {
    role: &'static str,
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<ToolCall<'a>>,
    refusal: Option<&'a str>,
    annotations: [Value; 0],
}

#[derive(Serialize)]
struct ToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: Function<'a>,
}

#[derive(Serialize)]
struct Function<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct Chunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    service_tier: &'static str,
    system_fingerprint: &'static str,
    choices: Vec<ChunkChoice<'a>>,
    /// Absent unless usage was asked for; then `null` on every chunk but the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Option<WireUsage>>,
    /// Padding OpenAI adds to every chunk; here a fixed string, so clients learn to ignore it.
    obfuscation: &'static str,
}

#[derive(Serialize)]
struct ChunkChoice<'a> {
    index: u32,
    delta: Delta,
    logprobs: Option<Value>,
    finish_reason: Option<&'a str>,
}

/// A chunk's delta; `None` fields are left out, `Some(None)` ones are sent as `null`.
#[derive(Default, Serialize)]
struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<[DeltaToolCall; 1]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<Option<String>>,
}

impl Delta {
    fn of(piece: &Piece) -> Delta {
        match piece {
            Piece::Reasoning(text) => Delta {
                reasoning_content: Some(text.clone()),
                ..Delta::default()
            },
            Piece::Text(text) => Delta {
                content: Some(Some(text.clone())),
                ..Delta::default()
            },
            Piece::CallStarted { index, id, name } => Delta {
                tool_calls: Some([DeltaToolCall {
                    index: *index,
                    id: Some(id.clone()),
                    kind: Some("function"),
                    function: DeltaFunction {
                        name: Some(name.clone()),
                        arguments: String::new(),
                    },
                }]),
                ..Delta::default()
            },
            Piece::CallArguments { index, fragment } => Delta {
                tool_calls: Some([DeltaToolCall {
                    index: *index,
                    id: None,
                    kind: None,
                    function: DeltaFunction {
                        name: None,
                        arguments: fragment.clone(),
                    },
                }]),
                ..Delta::default()
            },
        }
    }
}

#[derive(Serialize)]
struct DeltaToolCall {
    index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", rename = "type")]
    kind: Option<&'static str>,
    function: DeltaFunction,
}

#[derive(Serialize)]
struct DeltaFunction {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    arguments: String,
}

#[derive(Serialize)]
struct WireUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
    prompt_tokens_details: PromptDetails,
    completion_tokens_details: CompletionDetails,
}

#[derive(Serialize)]
struct PromptDetails {
    cached_tokens: u64,
    audio_tokens: u64,
}

#[derive(Serialize)]
struct CompletionDetails {
    reasoning_tokens: u64,
    audio_tokens: u64,
    accepted_prediction_tokens: u64,
    rejected_prediction_tokens: u64,
}

impl From<Usage> for WireUsage {
    fn from(usage: Usage) -> WireUsage {
        WireUsage {
            prompt_tokens: usage.input_tokens,
            completion_tokens: usage.output_tokens,
            total_tokens: usage.total(),
            prompt_tokens_details: PromptDetails {
                cached_tokens: usage.cache_read_tokens,
                audio_tokens: 0,
            },
            completion_tokens_details: CompletionDetails {
                reasoning_tokens: 0,
                audio_tokens: 0,
                accepted_prediction_tokens: 0,
                rejected_prediction_tokens: 0,
            },
        }
    }
}
