//! `POST /v1/responses`: OpenAI's Responses API over the same turns as chat completions
//! ([`crate::chat`]): the `input` is read as the messages of a chat, so its conversation, its
//! redeliveries and a run waiting on a person are found exactly as there. Besides,
//! `previous_response_id` (`resp_<run id>` of a run the caller sees) continues that run's
//! conversation. The answer is a `response` object, or its stream of events
//! ([`crate::responses_stream`]).

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use keel_core::{SessionInfo, Usage};
use keel_platform::MAX_TEXT_BYTES;
use keel_server::AppState;
use serde::Deserialize;
use serde_json::Value;

use crate::answer::Answer;
use crate::chat::{self, Render, Request};
use crate::errors::OpenAiError;
use crate::responses_stream::{self, Events};
use crate::stream::StreamSetup;
use crate::wire::{self, InMessage, Turn};
use crate::{OpenAiCaller, OpenAiOptions};

/// The prefix of a response id: `resp_<run id>`.
pub const RESPONSE_PREFIX: &str = "resp_";

/// `POST /v1/responses`, as sent.
#[derive(Debug, Deserialize)]
pub struct ResponsesRequest {
    /// `keel`, the configured model's name, or a persona's.
    pub model: String,
    /// A string (the user's message), or items: messages of `user`, `assistant`, `system`
    /// or `developer`, and other items (counted in the turn key only).
    pub input: Value,
    /// Like a system message: counted in the turn key, not put into keel's prompt.
    #[serde(default)]
    pub instructions: Option<String>,
    /// `resp_<run id>`: continue that run's conversation.
    #[serde(default)]
    pub previous_response_id: Option<String>,
    /// Answer as server-sent events.
    #[serde(default)]
    pub stream: Option<bool>,
    /// `keel_conversation`, `keel_progress`.
    #[serde(default)]
    pub metadata: Option<serde_json::Map<String, Value>>,
    /// OpenAI's background mode: not supported (400).
    #[serde(default)]
    pub background: Option<bool>,
    /// OpenAI's conversation objects: not supported (400; name a keel conversation with
    /// `metadata.keel_conversation`).
    #[serde(default)]
    pub conversation: Option<Value>,
}

/// A checked Responses request: the turn, and the previous response it continues.
#[derive(Debug)]
pub struct Parsed {
    /// The turn, as a chat's.
    pub turn: Turn,
    /// `previous_response_id`.
    pub previous: Option<String>,
}

/// Parses and checks a Responses body: 400 for JSON that does not parse or fit, an empty
/// `model`, an `input` that is neither a string nor items, no items, a last item that is not
/// the user's message, an empty or oversized user message, a part keel cannot take,
/// `background`, `conversation`, or a `previous_response_id` together with a named
/// conversation.
pub fn parse(body: &[u8], max_text_bytes: usize) -> Result<Parsed, OpenAiError> {
    let request: ResponsesRequest = serde_json::from_slice(body).map_err(|error| {
        OpenAiError::invalid(
            None,
            format!("the body is not a Responses request: {error}"),
        )
    })?;
    if request.model.trim().is_empty() {
        return Err(OpenAiError::invalid(
            Some("model"),
            "`model` must not be empty",
        ));
    }
    if request.background == Some(true) {
        return Err(OpenAiError::invalid(
            Some("background"),
            "keel does not run responses in the background: every run is durable anyway; \
             ask without `background` (a dropped stream is picked up by asking again)",
        ));
    }
    if request.conversation.as_ref().is_some_and(|c| !c.is_null()) {
        return Err(OpenAiError::invalid(
            Some("conversation"),
            "keel has no conversation objects here: name a keel conversation with \
             `metadata.keel_conversation` or the `X-Keel-Conversation` header",
        ));
    }
    let messages = messages(request.input)?;
    let Some(last) = messages.last() else {
        return Err(OpenAiError::invalid(
            Some("input"),
            "`input` must not be empty",
        ));
    };
    if last.role != "user" {
        return Err(OpenAiError::invalid(
            Some("input"),
            format!(
                "the last input item must be the user's message (it is `{}`): keel answers a \
                 user's message",
                last.role
            ),
        ));
    }
    let text = last.text(true).map_err(|mut error| {
        error.param = Some("input");
        error
    })?;
    wire::check_text(&text, max_text_bytes, "input")?;
    let mut history = Vec::with_capacity(messages.len() + 1);
    if let Some(instructions) = request.instructions.filter(|i| !i.is_empty()) {
        history.push(("system".to_string(), instructions));
    }
    for message in &messages {
        history.push((message.role.clone(), message.text(false)?));
    }
    let (conversation, progress) = wire::read_metadata(request.metadata)?;
    let previous = request.previous_response_id.filter(|id| !id.is_empty());
    if previous.is_some() && conversation.is_some() {
        return Err(OpenAiError::invalid(
            Some("previous_response_id"),
            "give `previous_response_id` or a conversation name, not both",
        ));
    }
    Ok(Parsed {
        turn: Turn {
            model: request.model,
            history,
            text,
            stream: request.stream.unwrap_or(false),
            include_usage: true,
            conversation,
            progress,
        },
        previous,
    })
}

/// The input as chat messages: a string is one user message; an item with a `role` is a
/// message (its `content` a string or parts); any other item (a function call, its output, a
/// reasoning item, …) is kept as its type and JSON.
fn messages(input: Value) -> Result<Vec<InMessage>, OpenAiError> {
    let items = match input {
        Value::String(text) => {
            return Ok(vec![InMessage {
                role: "user".to_string(),
                content: Some(Value::String(text)),
            }]);
        }
        Value::Array(items) => items,
        _ => {
            return Err(OpenAiError::invalid(
                Some("input"),
                "`input` is a string or an array of items",
            ));
        }
    };
    let mut messages = Vec::with_capacity(items.len());
    for item in items {
        let Value::Object(mut fields) = item else {
            return Err(OpenAiError::invalid(
                Some("input"),
                "each input item is an object",
            ));
        };
        let kind = fields.get("type").and_then(Value::as_str).unwrap_or("");
        let message = match fields.get("role").and_then(Value::as_str) {
            Some(role) if matches!(kind, "" | "message") => InMessage {
                role: role.to_string(),
                content: fields.remove("content"),
            },
            _ if !kind.is_empty() => InMessage {
                role: kind.to_string(),
                content: Some(Value::String(Value::Object(fields).to_string())),
            },
            _ => {
                return Err(OpenAiError::invalid(
                    Some("input"),
                    "an input item has a `role` (a message) or a `type`",
                ));
            }
        };
        messages.push(message);
    }
    Ok(messages)
}

/// The answers of the Responses API: a `response` object, or its events.
struct Responses;

impl Render for Responses {
    type Shape = Events;

    fn whole(&self, request: &Request, run_id: &str, answer: &Answer, usage: &Usage) -> Value {
        responses_stream::object(&meta(request, run_id), Some(answer), usage)
    }

    fn shape(&self, request: &Request, setup: &StreamSetup) -> Events {
        Events::new(meta(request, &setup.run_id))
    }
}

fn meta(request: &Request, run_id: &str) -> responses_stream::Meta {
    responses_stream::Meta {
        run_id: run_id.to_string(),
        model: request.turn.model.clone(),
        created: request.created,
        previous: request
            .continues
            .as_ref()
            .map(|(_, run)| format!("{RESPONSE_PREFIX}{run}")),
    }
}

/// `POST /v1/responses`.
pub async fn create(
    State(state): State<AppState>,
    axum::Extension(settings): axum::Extension<OpenAiOptions>,
    OpenAiCaller(caller): OpenAiCaller,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, OpenAiError> {
    let mut previous = None;
    let turn = |bytes: &[u8]| {
        let parsed = parse(bytes, MAX_TEXT_BYTES)?;
        previous = parsed.previous;
        Ok(parsed.turn)
    };
    let mut request = chat::checked(&state, caller, &headers, body, turn).await?;
    if let Some(previous) = previous {
        if request.turn.conversation.is_some() {
            return Err(OpenAiError::invalid(
                Some("previous_response_id"),
                "give `previous_response_id` or a conversation name, not both",
            ));
        }
        request.continues = Some(continued(&state, &request, &previous).await?);
    }
    chat::take(state, settings, request, Responses).await
}

/// The conversation of the response `previous` names, and its run: 404 unless it is a run
/// of a conversation the caller sees (another user's is not found, as one that never was).
async fn continued(
    state: &AppState,
    request: &Request,
    previous: &str,
) -> Result<(SessionInfo, String), OpenAiError> {
    let not_found = || {
        let mut error = OpenAiError::invalid(
            Some("previous_response_id"),
            format!("no response `{previous}` of yours was found"),
        );
        error.status = StatusCode::NOT_FOUND;
        error.with_code("previous_response_not_found")
    };
    let run_id = previous
        .strip_prefix(RESPONSE_PREFIX)
        .filter(|id| !id.is_empty() && id.len() <= 128)
        .ok_or_else(not_found)?;
    let run = state.store.run(run_id).await?.ok_or_else(not_found)?;
    let conversation = state
        .store
        .session(&run.session_id)
        .await?
        .filter(|conversation| request.caller.sees(conversation))
        .ok_or_else(not_found)?;
    Ok((conversation, run.id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parsed(body: Value) -> Result<Parsed, OpenAiError> {
        parse(body.to_string().as_bytes(), 1024)
    }

    #[test]
    fn a_string_input_is_one_user_message() {
        let p = parsed(
            json!({"model": "keel", "input": "hi", "instructions": "be brief",
            "previous_response_id": "resp_r1", "metadata": {"keel_progress": "true"}}),
        )
        .unwrap();
        assert_eq!(p.turn.text, "hi");
        assert_eq!(p.previous.as_deref(), Some("resp_r1"));
        assert!(p.turn.progress && !p.turn.stream);
        assert_eq!(
            p.turn.history,
            vec![
                ("system".to_string(), "be brief".to_string()),
                ("user".to_string(), "hi".to_string())
            ]
        );
    }

    #[test]
    fn items_are_read_as_a_chat() {
        let p = parsed(json!({"model": "keel", "stream": true, "input": [
            {"role": "developer", "content": "dev"},
            {"role": "user", "content": [{"type": "input_text", "text": "one"}]},
            {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
             "content": [{"type": "output_text", "text": "1", "annotations": []}]},
            {"type": "function_call_output", "call_id": "c", "output": "x"},
            {"role": "user", "content": [{"type": "input_text", "text": "two"},
                {"type": "input_text", "text": "three"}]}]}))
        .unwrap();
        assert_eq!(p.turn.text, "two\nthree");
        assert!(p.turn.stream);
        assert_eq!(
            p.turn.history[2],
            ("assistant".to_string(), "1".to_string())
        );
        assert_eq!(p.turn.history[3].0, "function_call_output");
    }

    #[test]
    fn what_keel_cannot_answer_is_refused() {
        let bad = [
            json!({"model": "keel", "input": []}),
            json!({"model": "keel", "input": 3}),
            json!({"model": "keel", "input": [3]}),
            json!({"model": "keel", "input": [{"content": "x"}]}),
            json!({"model": "keel", "input": [{"role": "assistant", "content": "x"}]}),
            json!({"model": "keel", "input": "  "}),
            json!({"model": "keel", "input": "x".repeat(2000)}),
            json!({"model": "keel", "input": [{"role": "user", "content":
                [{"type": "input_image", "image_url": "data:"}]}]}),
            json!({"model": "", "input": "x"}),
            json!({"input": "x"}),
            json!({"model": "keel"}),
            json!({"model": "keel", "input": "x", "background": true}),
            json!({"model": "keel", "input": "x", "conversation": "conv_1"}),
            json!({"model": "keel", "input": "x", "previous_response_id": "resp_1",
                "metadata": {"keel_conversation": "c"}}),
        ];
        for body in bad {
            let error = parsed(body.clone()).unwrap_err();
            assert_eq!(error.status.as_u16(), 400, "{body}");
        }
        assert!(parse(b"{not json", 10).is_err());
    }
}
