//! The chat-completions request as keel reads it, checked: what a field means for keel, and
//! what is refused (400) before anything is stored. Fields keel does not use (`tools`,
//! `tool_choice`, `functions`, `temperature`, `max_tokens`, …) are accepted and ignored.

use serde::Deserialize;
use serde_json::Value;

use crate::errors::OpenAiError;

/// The longest conversation name a client may choose.
pub const MAX_NAME_CHARS: usize = 128;

/// `POST /v1/chat/completions`, as sent.
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    /// `keel`, the configured model's name, or a persona's.
    pub model: String,
    /// The conversation as the client keeps it.
    pub messages: Vec<InMessage>,
    /// Answer as server-sent `chat.completion.chunk`s.
    #[serde(default)]
    pub stream: Option<bool>,
    /// `include_usage`: a last chunk with the usage.
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// Answers wanted: keel gives one.
    #[serde(default)]
    pub n: Option<u64>,
    /// `keel_conversation`, `keel_progress`.
    #[serde(default)]
    pub metadata: Option<serde_json::Map<String, Value>>,
}

/// `stream_options`.
#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    /// Send the usage in a last chunk with no choices.
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// One message of the request.
#[derive(Debug, Deserialize)]
pub struct InMessage {
    /// `system`, `developer`, `user`, `assistant`, `tool`, …
    pub role: String,
    /// A string, an array of parts, or nothing (an assistant's tool calls).
    #[serde(default)]
    pub content: Option<Value>,
}

impl InMessage {
    /// The message's text: a string, or its text parts joined by newlines. Parts that are not
    /// text are kept as their JSON when `strict` is false (they count in a turn's key), and
    /// refused when it is true (the message keel runs).
    pub fn text(&self, strict: bool) -> Result<String, OpenAiError> {
        match &self.content {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(text)) => Ok(text.clone()),
            Some(Value::Array(parts)) => {
                let mut texts = Vec::new();
                for part in parts {
                    let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
                    match (kind, part.get("text").and_then(Value::as_str)) {
                        ("text" | "input_text" | "output_text", Some(text)) => {
                            texts.push(text.to_string())
                        }
                        _ if strict => {
                            return Err(OpenAiError::invalid(
                                Some("messages"),
                                format!(
                                    "keel takes text parts only; a `{kind}` part (an image, \
                                     audio or a file) is not supported yet"
                                ),
                            ));
                        }
                        _ => texts.push(part.to_string()),
                    }
                }
                Ok(texts.join("\n"))
            }
            Some(_) => Err(OpenAiError::invalid(
                Some("messages"),
                "a message's `content` is a string or an array of parts",
            )),
        }
    }
}

/// A checked request: what keel acts on.
#[derive(Debug)]
pub struct Turn {
    /// The model named.
    pub model: String,
    /// Every message up to and including the last user message, as (role, text).
    pub history: Vec<(String, String)>,
    /// The last user message: the run's message.
    pub text: String,
    /// Streamed.
    pub stream: bool,
    /// A last chunk with the usage.
    pub include_usage: bool,
    /// `metadata.keel_conversation`.
    pub conversation: Option<String>,
    /// `metadata.keel_progress == "true"`.
    pub progress: bool,
}

impl Turn {
    /// The messages before the last user message, less the assistant messages right before
    /// it: the turn this one follows (empty for a first turn).
    pub fn previous(&self) -> &[(String, String)] {
        let mut end = self.history.len().saturating_sub(1);
        while end > 0 && self.history[end - 1].0 == "assistant" {
            end -= 1;
        }
        &self.history[..end]
    }

    /// The assistant's text right before the last user message (what the client was
    /// answered last), joined; empty when there is none.
    pub fn last_answer(&self) -> String {
        let before = self.previous().len();
        let end = self.history.len().saturating_sub(1);
        self.history[before..end]
            .iter()
            .map(|(_, text)| text.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Parses and checks a request body: 400 for JSON that does not parse or does not fit, no
/// messages, a last message that is not the user's, an empty or oversized user message,
/// `n` > 1, or a part keel cannot take.
pub fn parse(body: &[u8], max_text_bytes: usize) -> Result<Turn, OpenAiError> {
    let request: ChatRequest = serde_json::from_slice(body).map_err(|error| {
        OpenAiError::invalid(
            None,
            format!("the body is not a chat-completions request: {error}"),
        )
    })?;
    if request.model.trim().is_empty() {
        return Err(OpenAiError::invalid(
            Some("model"),
            "`model` must not be empty",
        ));
    }
    if request.n.is_some_and(|n| n != 1) {
        return Err(OpenAiError::invalid(
            Some("n"),
            "keel gives one answer: `n` must be 1",
        ));
    }
    let Some(last) = request.messages.last() else {
        return Err(OpenAiError::invalid(
            Some("messages"),
            "`messages` must not be empty",
        ));
    };
    if last.role != "user" {
        return Err(OpenAiError::invalid(
            Some("messages"),
            format!(
                "the last message must be the user's (it is `{}`): keel answers a user's message",
                last.role
            ),
        ));
    }
    let text = last.text(true)?;
    check_text(&text, max_text_bytes, "messages")?;
    let mut history = Vec::with_capacity(request.messages.len());
    for message in &request.messages {
        history.push((message.role.clone(), message.text(false)?));
    }
    let (conversation, progress) = read_metadata(request.metadata)?;
    Ok(Turn {
        model: request.model,
        history,
        text,
        stream: request.stream.unwrap_or(false),
        include_usage: request
            .stream_options
            .and_then(|options| options.include_usage)
            .unwrap_or(false),
        conversation,
        progress,
    })
}

/// Checks the user's message keel runs: 400 when it is empty or over `max_text_bytes`
/// (`param` names the field it came from).
pub fn check_text(
    text: &str,
    max_text_bytes: usize,
    param: &'static str,
) -> Result<(), OpenAiError> {
    if text.trim().is_empty() {
        return Err(OpenAiError::invalid(
            Some(param),
            "the user's message is empty",
        ));
    }
    if text.len() > max_text_bytes {
        return Err(OpenAiError::invalid(
            Some(param),
            format!(
                "the user's message is {} bytes; at most {max_text_bytes}",
                text.len()
            ),
        ));
    }
    Ok(())
}

/// Reads keel's fields of a request's `metadata`: `keel_conversation` (a string) and
/// `keel_progress` (`"true"` or `true`).
pub fn read_metadata(
    metadata: Option<serde_json::Map<String, Value>>,
) -> Result<(Option<String>, bool), OpenAiError> {
    let metadata = metadata.unwrap_or_default();
    let conversation = match metadata.get("keel_conversation") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => Some(name.clone()),
        Some(_) => {
            return Err(OpenAiError::invalid(
                Some("metadata"),
                "`metadata.keel_conversation` is a string",
            ));
        }
    };
    let progress = matches!(metadata.get("keel_progress"), Some(Value::String(v)) if v == "true")
        || matches!(metadata.get("keel_progress"), Some(Value::Bool(true)));
    Ok((conversation, progress))
}

/// Checks a client-chosen conversation name: 1–128 of `[A-Za-z0-9._:-]`.
pub fn check_name(name: &str) -> Result<(), OpenAiError> {
    let fits = !name.is_empty()
        && name.chars().count() <= MAX_NAME_CHARS
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'));
    if fits {
        Ok(())
    } else {
        Err(OpenAiError::invalid(
            Some("metadata"),
            format!(
                "a conversation name is 1 to {MAX_NAME_CHARS} of A-Z a-z 0-9 . _ : - \
                 (`X-Keel-Conversation` or `metadata.keel_conversation`)"
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(body: Value) -> Result<Turn, OpenAiError> {
        parse(body.to_string().as_bytes(), 1024)
    }

    #[test]
    fn a_request_is_read_and_its_previous_turn_found() {
        let t = turn(serde_json::json!({"model": "keel", "stream": true,
            "stream_options": {"include_usage": true}, "tools": [{"type": "function"}],
            "messages": [{"role": "system", "content": "be brief"},
                {"role": "user", "content": "one"}, {"role": "assistant", "content": "1"},
                {"role": "user", "content": [{"type": "text", "text": "two"},
                    {"type": "text", "text": "three"}]}]}))
        .unwrap();
        assert_eq!(t.text, "two\nthree");
        assert!(t.stream && t.include_usage && !t.progress);
        assert_eq!(t.previous().len(), 2);
        assert_eq!(t.previous()[1], ("user".to_string(), "one".to_string()));
        assert_eq!(t.last_answer(), "1");
    }

    #[test]
    fn what_keel_cannot_answer_is_refused() {
        let bad = [
            serde_json::json!({"model": "keel", "messages": []}),
            serde_json::json!({"model": "keel", "messages": [{"role": "assistant", "content": "x"}]}),
            serde_json::json!({"model": "keel", "n": 2, "messages": [{"role": "user", "content": "x"}]}),
            serde_json::json!({"model": "keel", "messages": [{"role": "user", "content": "  "}]}),
            serde_json::json!({"model": "keel", "messages": [{"role": "user", "content": "x".repeat(2000)}]}),
            serde_json::json!({"model": "keel", "messages": [{"role": "user", "content":
                [{"type": "image_url", "image_url": {"url": "data:"}}]}]}),
            serde_json::json!({"messages": [{"role": "user", "content": "x"}]}),
        ];
        for body in bad {
            let error = turn(body.clone()).unwrap_err();
            assert_eq!(error.status.as_u16(), 400, "{body}");
        }
        assert!(parse(b"{not json", 10).is_err());
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("chat-1:a.b_c").is_ok());
        for bad in ["", "a b", "ä", &"x".repeat(129), "a/b"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}
