//! The OpenAI chat-completions wire format (`POST /v1/chat/completions`), written from the
//! public protocol and the recordings in `shared/fixtures/providers/oai_chat_*`: whole
//! `chat.completion` bodies, `chat.completion.chunk` SSE streams ending in `data: [DONE]`, and
//! `{"error": {...}}` bodies.

mod validate;

use std::time::{SystemTime, UNIX_EPOCH};

use keel_core::{ProviderErrorKind, Usage};
use serde::Serialize;
use serde_json::Value;

use crate::answer::{Answer, Piece};
use crate::script::FinishReason;
use crate::wire::{Events, Invalid, RequestInfo, WireApi};

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

    fn error_body(kind: ProviderErrorKind, message: &str) -> String {
        let (error_type, code, param) = match kind {
            ProviderErrorKind::Auth => ("invalid_request_error", Some("invalid_api_key"), None),
            ProviderErrorKind::Billing => ("insufficient_quota", Some("insufficient_quota"), None),
            ProviderErrorKind::RateLimit => ("requests", Some("rate_limit_exceeded"), None),
            ProviderErrorKind::ModelNotFound => {
                ("invalid_request_error", Some("model_not_found"), None)
            }
            ProviderErrorKind::ContextOverflow => (
                "invalid_request_error",
                Some("context_length_exceeded"),
                Some("messages"),
            ),
            ProviderErrorKind::InvalidRequest => ("invalid_request_error", None, None),
            ProviderErrorKind::Overloaded | ProviderErrorKind::Server => {
                ("server_error", None, None)
            }
            ProviderErrorKind::Timeout => ("timeout", None, None),
            ProviderErrorKind::Network
            | ProviderErrorKind::MalformedResponse
            | ProviderErrorKind::Unknown => ("api_error", None, None),
        };
        error_json(message, error_type, param, code)
    }

    fn whole_body(answer: &Answer) -> String {
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
            id: &completion_id(),
            object: "chat.completion",
            created: now(),
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

    fn stream_events(answer: &Answer, request: &RequestInfo) -> Events {
        let id = completion_id();
        let created = now();
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
            sse(&to_json(&chunk))
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
            frames.push(sse(&to_json(&usage_chunk)));
        }
        frames.push(sse("[DONE]"));
        Events { frames, content }
    }
}

fn sse(data: &str) -> String {
    format!("data: {data}\n\n")
}

fn finish_name(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop => "stop",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::Length => "length",
    }
}

fn completion_id() -> String {
    format!("chatcmpl-{}", uuid::Uuid::now_v7().simple())
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn to_json(value: &impl Serialize) -> String {
    // These structs hold only strings, numbers and options: serializing them cannot fail, and
    // an empty object is still a readable answer should it ever happen.
    serde_json::to_string(value).unwrap_or_else(|_| "{}".to_string())
}

fn error_json(message: &str, error_type: &str, param: Option<&str>, code: Option<&str>) -> String {
    to_json(&ErrorEnvelope {
        error: ErrorObject {
            message,
            kind: error_type,
            param,
            code,
        },
    })
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

#[derive(Serialize)]
struct ErrorEnvelope<'a> {
    error: ErrorObject<'a>,
}

#[derive(Serialize)]
struct ErrorObject<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: Option<&'a str>,
}
