//! A run's answer in the Responses API's shapes: the `response` object (one `message` item
//! with one `output_text` part), and the events of a streamed one, each with its
//! `sequence_number`: `response.created`, `response.in_progress`,
//! `response.output_item.added`, `response.content_part.added`, `response.output_text.delta`
//! …, `response.output_text.done`, `response.content_part.done`, `response.output_item.done`,
//! then `response.completed` (or `response.incomplete` for a run that ended on a budget).
//!
//! The text streams as in chat completions ([`crate::stream`]); reasoning is not streamed
//! (a reasoning item would be a second output item that clients would have to expect).

use axum::response::sse::Event as SseEvent;
use keel_core::Usage;
use serde_json::{Value, json};

use crate::answer::Answer;
use crate::responses::RESPONSE_PREFIX;
use crate::stream::Shape;

/// What every shape of one answer names.
#[derive(Clone, Debug)]
pub struct Meta {
    /// The run answering.
    pub run_id: String,
    /// The model the client named.
    pub model: String,
    /// When the answer was made (Unix seconds).
    pub created: i64,
    /// The `previous_response_id` the request gave, echoed.
    pub previous: Option<String>,
}

impl Meta {
    /// `resp_<run id>`.
    pub fn id(&self) -> String {
        format!("{RESPONSE_PREFIX}{}", self.run_id)
    }

    /// The message item's id, `msg_<run id>`.
    pub fn item_id(&self) -> String {
        format!("msg_{}", self.run_id)
    }
}

/// The Responses API's usage object.
pub fn usage(usage: &Usage) -> Value {
    json!({
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cache_read_tokens},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total(),
    })
}

/// `completed`, or `incomplete` for an answer that ended on a budget.
fn status(answer: &Answer) -> &'static str {
    if answer.finish_reason == "length" {
        "incomplete"
    } else {
        "completed"
    }
}

fn part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

fn item(meta: &Meta, status: &str, content: Vec<Value>) -> Value {
    json!({"type": "message", "id": meta.item_id(), "status": status, "role": "assistant",
        "content": content})
}

/// The `response` object: `in_progress` with no output while `answer` is `None`; else
/// `completed` (or `incomplete`, `incomplete_details.reason: "max_output_tokens"`, for a run
/// that ended on a budget) with one message of the answer's text, and the usage.
pub fn object(meta: &Meta, answer: Option<&Answer>, run_usage: &Usage) -> Value {
    let (status, output, text, usage, incomplete) = match answer {
        None => (
            "in_progress",
            Vec::new(),
            Value::Null,
            Value::Null,
            Value::Null,
        ),
        Some(answer) => {
            let status = status(answer);
            let incomplete = if status == "incomplete" {
                json!({"reason": "max_output_tokens"})
            } else {
                Value::Null
            };
            (
                status,
                vec![item(meta, status, vec![part(&answer.content)])],
                Value::String(answer.content.clone()),
                self::usage(run_usage),
                incomplete,
            )
        }
    };
    json!({
        "id": meta.id(),
        "object": "response",
        "created_at": meta.created,
        "status": status,
        "error": null,
        "incomplete_details": incomplete,
        "instructions": null,
        "model": meta.model,
        "output": output,
        "output_text": text,
        "parallel_tool_calls": false,
        "previous_response_id": meta.previous,
        "tools": [],
        "usage": usage,
        "metadata": {},
    })
}

/// The stream of a Responses answer: the events around the text, numbered.
pub struct Events {
    meta: Meta,
    /// The next event's `sequence_number`.
    sequence: u64,
    /// The text sent so far.
    text: String,
}

impl Events {
    /// The events of `meta`'s answer.
    pub fn new(meta: Meta) -> Self {
        Events {
            meta,
            sequence: 0,
            text: String::new(),
        }
    }

    /// One event of `kind` with `fields` and the next sequence number.
    fn event(&mut self, kind: &str, fields: Value) -> SseEvent {
        let mut body = json!({"type": kind, "sequence_number": self.sequence});
        if let (Some(body), Value::Object(fields)) = (body.as_object_mut(), fields) {
            body.extend(fields);
        }
        self.sequence += 1;
        SseEvent::default().event(kind).data(body.to_string())
    }

    /// The fields naming the one part of the one message.
    fn at(&self) -> Value {
        json!({"item_id": self.meta.item_id(), "output_index": 0, "content_index": 0})
    }

    fn with(mut base: Value, more: Value) -> Value {
        if let (Some(base), Value::Object(more)) = (base.as_object_mut(), more) {
            base.extend(more);
        }
        base
    }
}

impl Shape for Events {
    fn start(&mut self) -> Vec<SseEvent> {
        let response = object(&self.meta, None, &Usage::default());
        let item = item(&self.meta, "in_progress", Vec::new());
        let at = self.at();
        vec![
            self.event("response.created", json!({"response": response})),
            self.event("response.in_progress", json!({"response": response})),
            self.event(
                "response.output_item.added",
                json!({"output_index": 0, "item": item}),
            ),
            self.event(
                "response.content_part.added",
                Self::with(at, json!({"part": part("")})),
            ),
        ]
    }

    fn text(&mut self, text: &str) -> SseEvent {
        self.text.push_str(text);
        let fields = Self::with(self.at(), json!({"delta": text, "logprobs": []}));
        self.event("response.output_text.delta", fields)
    }

    fn reasoning(&mut self, _text: &str) -> Option<SseEvent> {
        None
    }

    fn finish(&mut self, answer: &Answer, run_usage: &Usage) -> Vec<SseEvent> {
        // What the client saw is the answer (with whatever streamed before a tool call).
        let told = Answer {
            content: self.text.clone(),
            finish_reason: answer.finish_reason,
        };
        let status = status(&told);
        let response = object(&self.meta, Some(&told), run_usage);
        let item = item(&self.meta, status, vec![part(&told.content)]);
        let at = self.at();
        let end = if status == "completed" {
            "response.completed"
        } else {
            "response.incomplete"
        };
        vec![
            self.event(
                "response.output_text.done",
                Self::with(at.clone(), json!({"text": told.content, "logprobs": []})),
            ),
            self.event(
                "response.content_part.done",
                Self::with(at, json!({"part": part(&told.content)})),
            ),
            self.event(
                "response.output_item.done",
                json!({"output_index": 0, "item": item}),
            ),
            self.event(end, json!({"response": response})),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> Meta {
        Meta {
            run_id: "r1".into(),
            model: "keel".into(),
            created: 5,
            previous: None,
        }
    }

    #[test]
    fn an_answer_is_a_completed_response_with_one_message() {
        let answer = Answer {
            content: "hi".into(),
            finish_reason: "stop",
        };
        let usage = Usage {
            input_tokens: 3,
            output_tokens: 4,
            ..Usage::default()
        };
        let body = object(&meta(), Some(&answer), &usage);
        assert_eq!(body["id"], "resp_r1");
        assert_eq!(body["object"], "response");
        assert_eq!(body["status"], "completed");
        assert_eq!(body["output_text"], "hi");
        assert_eq!(body["output"][0]["content"][0]["text"], "hi");
        assert_eq!(body["output"][0]["content"][0]["type"], "output_text");
        assert_eq!(body["usage"]["total_tokens"], 7);
        assert!(body["incomplete_details"].is_null());
    }

    #[test]
    fn a_budget_end_is_incomplete() {
        let answer = Answer {
            content: "note".into(),
            finish_reason: "length",
        };
        let body = object(&meta(), Some(&answer), &Usage::default());
        assert_eq!(body["status"], "incomplete");
        assert_eq!(body["incomplete_details"]["reason"], "max_output_tokens");
        assert_eq!(body["output"][0]["status"], "incomplete");
    }
}
