//! A step resolved against one request: the concrete answer (ids, argument text, finish reason,
//! usage, model) and its streaming pieces, still independent of any wire API. Also the
//! API-neutral reading of error steps (class, message, retry-after).

use std::time::Duration;

use keel_core::{ProviderErrorKind, Usage};

use crate::script::{ErrorReply, FinishReason, Step};

/// Characters of tool-call arguments per streamed fragment.
const ARGUMENT_FRAGMENT_CHARS: usize = 8;

/// One tool call of an answer.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AnswerCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// A scripted reply, resolved for one request.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Answer {
    pub text: Option<String>,
    pub reasoning: Option<String>,
    pub calls: Vec<AnswerCall>,
    pub finish: FinishReason,
    pub usage: Usage,
    pub model: String,
}

/// One streamed piece of an answer, in order: reasoning, text, then each tool call.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Piece {
    Reasoning(String),
    Text(String),
    CallStarted {
        index: usize,
        id: String,
        name: String,
    },
    CallArguments {
        index: usize,
        fragment: String,
    },
}

impl Answer {
    /// Resolves `step`, the answer numbered `number`, for a request of `request_bytes()` bytes
    /// of JSON asking for `request_model` (the size is asked for only when the step's usage
    /// leaves the input tokens to estimate). Tool calls without a scripted id get
    /// `<call_prefix>_<number>_<index>`.
    pub(crate) fn from_step(
        step: &Step,
        number: usize,
        request_bytes: impl FnOnce() -> usize,
        request_model: &str,
        call_prefix: &str,
    ) -> Answer {
        let calls: Vec<AnswerCall> = step
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, call)| AnswerCall {
                id: call
                    .id
                    .clone()
                    .unwrap_or_else(|| format!("{call_prefix}_{number}_{i}")),
                name: call.name.clone(),
                arguments: call.arguments.to_wire(),
            })
            .collect();
        let finish = step.finish_reason.unwrap_or(if calls.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        });
        let output_chars = || {
            [&step.text, &step.reasoning]
                .into_iter()
                .flatten()
                .map(|s| s.chars().count())
                .chain(
                    calls
                        .iter()
                        .map(|c| c.name.chars().count() + c.arguments.chars().count()),
                )
                .sum()
        };
        let scripted = step.usage.unwrap_or_default();
        let usage = Usage {
            input_tokens: scripted
                .input_tokens
                .unwrap_or_else(|| estimate_tokens(request_bytes())),
            output_tokens: scripted
                .output_tokens
                .unwrap_or_else(|| estimate_tokens(output_chars())),
            cache_read_tokens: scripted.cache_read_tokens.unwrap_or(0),
            cache_write_tokens: 0,
        };
        Answer {
            text: step.text.clone(),
            reasoning: step.reasoning.clone(),
            calls,
            finish,
            usage,
            model: step
                .model
                .clone()
                .unwrap_or_else(|| request_model.to_string()),
        }
    }

    /// The answer as streamed pieces: text and reasoning split by words, each tool call
    /// announced and then its arguments in several fragments.
    pub(crate) fn pieces(&self) -> Vec<Piece> {
        let mut pieces = Vec::new();
        if let Some(reasoning) = &self.reasoning {
            pieces.extend(split_words(reasoning).into_iter().map(Piece::Reasoning));
        }
        if let Some(text) = &self.text {
            pieces.extend(split_words(text).into_iter().map(Piece::Text));
        }
        for (index, call) in self.calls.iter().enumerate() {
            pieces.push(Piece::CallStarted {
                index,
                id: call.id.clone(),
                name: call.name.clone(),
            });
            pieces.extend(
                argument_fragments(&call.arguments)
                    .into_iter()
                    .map(|fragment| Piece::CallArguments { index, fragment }),
            );
        }
        pieces
    }
}

/// Tool-call argument text as streamed: fragments of a few characters each.
pub(crate) fn argument_fragments(arguments: &str) -> Vec<String> {
    split_chars(arguments, ARGUMENT_FRAGMENT_CHARS)
}

/// The deterministic token estimate: a quarter of the length, at least 1.
pub(crate) fn estimate_tokens(len: usize) -> u64 {
    (len as u64 / 4).max(1)
}

/// Splits text where whitespace follows a word, so each piece but the first starts with the
/// whitespace in front of its word ("a b" → "a", " b"). The pieces join back to the text.
pub(crate) fn split_words(text: &str) -> Vec<String> {
    let mut pieces: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut previous_was_space = false;
    for c in text.chars() {
        let space = c.is_whitespace();
        if space && !previous_was_space && !current.is_empty() {
            pieces.push(std::mem::take(&mut current));
        }
        current.push(c);
        previous_was_space = space;
    }
    if !current.is_empty() {
        pieces.push(current);
    }
    pieces
}

/// Splits text into pieces of at most `size` characters.
fn split_chars(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(size.max(1))
        .map(|chunk| chunk.iter().collect())
        .collect()
}

/// The error class of an error step: its `kind`, or the one its status implies.
pub(crate) fn error_kind(reply: &ErrorReply) -> ProviderErrorKind {
    reply.kind.unwrap_or(match reply.status {
        401 | 403 => ProviderErrorKind::Auth,
        402 => ProviderErrorKind::Billing,
        404 => ProviderErrorKind::ModelNotFound,
        408 => ProviderErrorKind::Timeout,
        429 => ProviderErrorKind::RateLimit,
        529 => ProviderErrorKind::Overloaded,
        400 => ProviderErrorKind::InvalidRequest,
        500..=599 => ProviderErrorKind::Server,
        _ => ProviderErrorKind::Unknown,
    })
}

/// The HTTP status an error of `kind` comes with when nothing more specific is known (each
/// wire API may answer some kinds differently).
pub(crate) fn status_for_kind(kind: ProviderErrorKind) -> u16 {
    match kind {
        ProviderErrorKind::Auth => 401,
        ProviderErrorKind::Billing => 402,
        ProviderErrorKind::RateLimit => 429,
        ProviderErrorKind::Overloaded => 529,
        ProviderErrorKind::Timeout => 408,
        ProviderErrorKind::ModelNotFound => 404,
        ProviderErrorKind::ContextOverflow | ProviderErrorKind::InvalidRequest => 400,
        ProviderErrorKind::Network | ProviderErrorKind::MalformedResponse => 502,
        ProviderErrorKind::Server | ProviderErrorKind::Unknown => 500,
    }
}

/// The `retry-after` header of an error step, read as seconds.
pub(crate) fn retry_after(reply: &ErrorReply) -> Option<Duration> {
    let (_, value) = reply
        .headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("retry-after"))?;
    let seconds: f64 = value.trim().parse().ok()?;
    Duration::try_from_secs_f64(seconds).ok()
}

/// A provider-like message for an error of `kind` on a request for `model`.
pub(crate) fn default_error_message(kind: ProviderErrorKind, model: &str) -> String {
    match kind {
        ProviderErrorKind::Auth => "Incorrect API key provided (keel-mock scripted error).".into(),
        ProviderErrorKind::Billing => {
            "You exceeded your current quota, please check your plan and billing details.".into()
        }
        ProviderErrorKind::RateLimit => {
            format!(
                "Rate limit reached for {model} on requests per min (RPM). Please try again later."
            )
        }
        ProviderErrorKind::Overloaded => "The server is overloaded. Please try again later.".into(),
        ProviderErrorKind::Server => {
            "The server had an error while processing your request. Sorry about that!".into()
        }
        ProviderErrorKind::Timeout => "Request timed out.".into(),
        ProviderErrorKind::ModelNotFound => {
            format!("The model `{model}` does not exist or you do not have access to it.")
        }
        ProviderErrorKind::ContextOverflow => format!(
            "This model's maximum context length is 128000 tokens. However, your messages \
             resulted in more tokens than {model} allows. Please reduce the length of the messages."
        ),
        ProviderErrorKind::InvalidRequest => "Invalid request (keel-mock scripted error).".into(),
        ProviderErrorKind::Network
        | ProviderErrorKind::MalformedResponse
        | ProviderErrorKind::Unknown => format!("keel-mock scripted {kind} error."),
    }
}

/// The message of the answer to a request that finds its step list exhausted: the top-level
/// steps (`model` is `None`), or the steps of its model.
pub(crate) fn exhausted_message(served: usize, model: Option<&str>) -> String {
    match model {
        None => format!("keel-mock: script exhausted after {served} responses"),
        Some(model) => {
            format!("keel-mock: script for model `{model}` exhausted after {served} responses")
        }
    }
}

/// `step` with the request's last user message appended to its text when it asks for that
/// (`echo_user`); `user` reads the message.
pub(crate) fn echoed(
    step: std::sync::Arc<Step>,
    user: impl FnOnce() -> String,
) -> std::sync::Arc<Step> {
    if !step.echo_user {
        return step;
    }
    let mut echoed = (*step).clone();
    let text = echoed.text.take().unwrap_or_default();
    echoed.text = Some(format!("{text}{}", user()));
    std::sync::Arc::new(echoed)
}

/// The text of the last user message of a request body of any of the three APIs: its string
/// content, or its text parts joined (a message of tool results alone has none and is passed).
pub(crate) fn last_user_text(body: &[u8]) -> String {
    let Ok(request) = serde_json::from_slice::<serde_json::Value>(body) else {
        return String::new();
    };
    let entries = request["messages"]
        .as_array()
        .or_else(|| request["input"].as_array());
    let text_of = |content: &serde_json::Value| match content {
        serde_json::Value::String(text) => text.clone(),
        serde_json::Value::Array(parts) => parts
            .iter()
            .filter(|part| matches!(part["type"].as_str(), Some("text" | "input_text")))
            .filter_map(|part| part["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    };
    entries
        .into_iter()
        .flatten()
        .rev()
        .filter(|entry| entry["role"] == "user")
        .map(|entry| text_of(&entry["content"]))
        .find(|text| !text.is_empty())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::ScriptUsage;
    use serde_json::json;

    #[test]
    fn words_keep_their_leading_space_and_join_back() {
        for text in ["Hello there  world\n", " lead", "one", "", "a\n\nb c "] {
            let pieces = split_words(text);
            assert_eq!(pieces.concat(), text);
        }
        assert_eq!(
            split_words("Hello there world"),
            ["Hello", " there", " world"]
        );
    }

    #[test]
    fn arguments_split_into_fragments_on_char_boundaries() {
        let pieces = split_chars("{\"città\":\"Zürich\"}", 8);
        assert!(pieces.len() > 1);
        assert_eq!(pieces.concat(), "{\"città\":\"Zürich\"}");
        assert!(split_chars("", 8).is_empty());
    }

    #[test]
    fn defaults_ids_finish_usage_and_model() {
        let step = Step::tool_call("f", json!({"a": 1})).with_tool_call("g", json!("oops"));
        let answer = Answer::from_step(&step, 3, || 400, "gpt-x", "call");
        assert_eq!(answer.calls[0].id, "call_3_0");
        assert_eq!(answer.calls[1].id, "call_3_1");
        assert_eq!(answer.calls[1].arguments, "oops");
        assert_eq!(answer.finish, FinishReason::ToolCalls);
        assert_eq!(answer.usage.input_tokens, 100);
        // "f" + {"a":1} + "g" + oops = 1 + 7 + 1 + 4 characters.
        assert_eq!(answer.usage.output_tokens, 3);
        assert_eq!(answer.model, "gpt-x");

        let text = Answer::from_step(&Step::text("hi"), 0, || 2, "m", "call");
        assert_eq!(text.finish, FinishReason::Stop);
        assert_eq!((text.usage.input_tokens, text.usage.output_tokens), (1, 1));
    }

    #[test]
    fn scripted_usage_and_model_win() {
        let mut step = Step::text("hi")
            .with_model("other")
            .with_finish_reason(FinishReason::Length);
        step.usage = Some(ScriptUsage {
            input_tokens: None,
            output_tokens: Some(9),
            cache_read_tokens: Some(4),
        });
        let answer = Answer::from_step(&step, 0, || 40, "m", "toolu");
        assert_eq!(answer.usage.input_tokens, 10);
        assert_eq!(answer.usage.output_tokens, 9);
        assert_eq!(answer.usage.cache_read_tokens, 4);
        assert_eq!(answer.model, "other");
        assert_eq!(answer.finish, FinishReason::Length);
    }

    #[test]
    fn the_request_size_is_only_read_to_estimate_input_tokens() {
        let mut step = Step::text("hi");
        step.usage = Some(ScriptUsage {
            input_tokens: Some(7),
            output_tokens: None,
            cache_read_tokens: None,
        });
        let answer = Answer::from_step(&step, 0, || panic!("size asked for"), "m", "call");
        assert_eq!(answer.usage.input_tokens, 7);
    }

    #[test]
    fn pieces_come_in_wire_order() {
        let step = Step::text("a b")
            .with_reasoning("r")
            .with_tool_call("f", json!({"long_argument": "value"}));
        let pieces = Answer::from_step(&step, 0, || 0, "m", "call").pieces();
        assert_eq!(pieces[0], Piece::Reasoning("r".into()));
        assert_eq!(pieces[1], Piece::Text("a".into()));
        assert_eq!(pieces[2], Piece::Text(" b".into()));
        assert!(matches!(&pieces[3], Piece::CallStarted { index: 0, name, .. } if name == "f"));
        let arguments: String = pieces[4..]
            .iter()
            .map(|p| match p {
                Piece::CallArguments { fragment, .. } => fragment.as_str(),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(arguments, r#"{"long_argument":"value"}"#);
        assert!(pieces.len() > 5, "arguments come in several fragments");
    }

    #[test]
    fn error_kinds_follow_status_unless_named() {
        let kind = |status| error_kind(Step::error(status).error.as_ref().unwrap());
        assert_eq!(kind(401), ProviderErrorKind::Auth);
        assert_eq!(kind(403), ProviderErrorKind::Auth);
        assert_eq!(kind(402), ProviderErrorKind::Billing);
        assert_eq!(kind(404), ProviderErrorKind::ModelNotFound);
        assert_eq!(kind(429), ProviderErrorKind::RateLimit);
        assert_eq!(kind(529), ProviderErrorKind::Overloaded);
        assert_eq!(kind(503), ProviderErrorKind::Server);
        assert_eq!(kind(400), ProviderErrorKind::InvalidRequest);
        assert_eq!(kind(418), ProviderErrorKind::Unknown);
        let named = Step::error(400).with_error_kind(ProviderErrorKind::ContextOverflow);
        assert_eq!(
            error_kind(named.error.as_ref().unwrap()),
            ProviderErrorKind::ContextOverflow
        );
    }

    #[test]
    fn retry_after_is_read_as_seconds() {
        let wait = |value: &str| {
            let step = Step::error(429).with_header("Retry-After", value);
            retry_after(step.error.as_ref().unwrap())
        };
        assert_eq!(wait("2"), Some(Duration::from_secs(2)));
        assert_eq!(wait("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(wait("soon"), None);
        assert_eq!(retry_after(Step::error(429).error.as_ref().unwrap()), None);
    }

    #[test]
    fn the_last_user_text_of_each_api() {
        let chat = br#"{"messages": [{"role": "user", "content": "first"}, {"role": "assistant", "content": "a"},
            {"role": "user", "content": "second"}, {"role": "tool", "content": "r"}]}"#;
        assert_eq!(last_user_text(chat), "second");
        let anthropic = br#"{"messages": [{"role": "user", "content": [{"type": "text", "text": "goal"}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "r"}]}]}"#;
        assert_eq!(last_user_text(anthropic), "goal");
        let responses = br#"{"input": [{"role": "user", "content": [{"type": "input_text", "text": "asked"}]}]}"#;
        assert_eq!(last_user_text(responses), "asked");
        assert_eq!(last_user_text(b"not json"), "");
    }

    #[test]
    fn an_echo_step_appends_the_user_text() {
        let step = std::sync::Arc::new(Step {
            text: Some("done: ".into()),
            echo_user: true,
            ..Step::default()
        });
        assert_eq!(
            echoed(step, || "task".into()).text.as_deref(),
            Some("done: task")
        );
        let plain = std::sync::Arc::new(Step::text("same"));
        assert_eq!(
            echoed(plain, || unreachable!()).text.as_deref(),
            Some("same")
        );
    }
}
