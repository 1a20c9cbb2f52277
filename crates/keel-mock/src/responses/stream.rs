//! The Responses SSE stream: `response.created`, `response.in_progress`, then per output item
//! `response.output_item.added`, its parts and deltas, `response.output_item.done`, and finally
//! `response.completed` (or `response.incomplete`). Every event carries a `sequence_number`
//! counting from 0. A scripted failure ends the stream with `response.failed` or a bare `error`.

use serde::Serialize;
use serde_json::Value;

use super::encode::{
    Ids, Item, OutputText, Phase, SummaryText, WireResponse, message_item, message_status,
    reasoning_item, response_object,
};
use crate::answer::{Answer, argument_fragments, split_words};
use crate::script::{FinishReason, ResponsesErrorEvent};
use crate::wire::{Events, RequestInfo, named_frame, to_json};

/// The stream padding the mock reports.
const OBFUSCATION: &str = "kEeLmOcK";

/// A failure to report mid-stream.
pub(super) struct Failure {
    pub after: usize,
    pub code: &'static str,
    pub message: String,
    pub event: ResponsesErrorEvent,
}

/// The events of a streamed answer.
pub(super) fn events(answer: &Answer, request: &RequestInfo, failure: Option<Failure>) -> Events {
    let ids = Ids::new(answer);
    let mut stream = Stream::default();
    let in_progress = || response_object(answer, request, &ids, Phase::InProgress);
    stream.push(Event {
        response: Some(in_progress()),
        ..Event::new("response.created")
    });
    stream.push(Event {
        response: Some(in_progress()),
        ..Event::new("response.in_progress")
    });
    let mut output_index = 0;
    if let Some(reasoning) = &answer.reasoning {
        reasoning_events(&mut stream, &ids.reasoning, output_index, reasoning);
        output_index += 1;
    }
    if let Some(text) = &answer.text {
        message_events(&mut stream, &ids.message, output_index, text, answer);
        output_index += 1;
    }
    for (call, id) in answer.calls.iter().zip(&ids.calls) {
        stream.push(Event {
            output_index: Some(output_index),
            item: Some(Item::FunctionCall {
                id: id.clone(),
                status: "in_progress",
                arguments: String::new(),
                call_id: call.id.clone(),
                name: call.name.clone(),
            }),
            ..Event::new("response.output_item.added")
        });
        for fragment in argument_fragments(&call.arguments) {
            stream.push(Event {
                item_id: Some(id),
                output_index: Some(output_index),
                delta: Some(fragment),
                obfuscation: Some(OBFUSCATION),
                ..Event::new("response.function_call_arguments.delta")
            });
        }
        stream.push(Event {
            item_id: Some(id),
            output_index: Some(output_index),
            arguments: Some(call.arguments.clone()),
            ..Event::new("response.function_call_arguments.done")
        });
        stream.push(Event {
            output_index: Some(output_index),
            item: Some(Item::FunctionCall {
                id: id.clone(),
                status: "completed",
                arguments: call.arguments.clone(),
                call_id: call.id.clone(),
                name: call.name.clone(),
            }),
            ..Event::new("response.output_item.done")
        });
        output_index += 1;
    }
    let content = stream.frames.len();
    let terminal = if answer.finish == FinishReason::Length {
        "response.incomplete"
    } else {
        "response.completed"
    };
    stream.push(Event {
        response: Some(response_object(answer, request, &ids, Phase::Done)),
        ..Event::new(terminal)
    });
    let events = Events {
        frames: stream.frames,
        content,
    };
    let Some(failure) = failure else {
        return events;
    };
    events.fail_after(failure.after, |sequence_number| {
        let event = match failure.event {
            ResponsesErrorEvent::ResponseFailed => Event {
                response: Some(response_object(
                    answer,
                    request,
                    &ids,
                    Phase::Failed {
                        code: failure.code,
                        message: &failure.message,
                    },
                )),
                ..Event::new("response.failed")
            },
            ResponsesErrorEvent::Error => Event {
                code: Some(failure.code),
                message: Some(&failure.message),
                param: Some(None),
                ..Event::new("error")
            },
        };
        frame(&event, sequence_number)
    })
}

fn reasoning_events(stream: &mut Stream, id: &str, output_index: usize, reasoning: &str) {
    stream.push(Event {
        output_index: Some(output_index),
        item: Some(Item::Reasoning {
            id: id.to_string(),
            summary: Vec::new(),
        }),
        ..Event::new("response.output_item.added")
    });
    let summary = |text: &str, name| Event {
        item_id: Some(id),
        output_index: Some(output_index),
        summary_index: Some(0),
        part: Some(Part::Summary(SummaryText::new(text))),
        ..Event::new(name)
    };
    stream.push(summary("", "response.reasoning_summary_part.added"));
    for word in split_words(reasoning) {
        stream.push(Event {
            item_id: Some(id),
            output_index: Some(output_index),
            summary_index: Some(0),
            delta: Some(word),
            obfuscation: Some(OBFUSCATION),
            ..Event::new("response.reasoning_summary_text.delta")
        });
    }
    stream.push(Event {
        item_id: Some(id),
        output_index: Some(output_index),
        summary_index: Some(0),
        text: Some(reasoning.to_string()),
        ..Event::new("response.reasoning_summary_text.done")
    });
    stream.push(summary(reasoning, "response.reasoning_summary_part.done"));
    stream.push(Event {
        output_index: Some(output_index),
        item: Some(reasoning_item(id, reasoning)),
        ..Event::new("response.output_item.done")
    });
}

fn message_events(stream: &mut Stream, id: &str, output_index: usize, text: &str, answer: &Answer) {
    stream.push(Event {
        output_index: Some(output_index),
        item: Some(Item::Message {
            id: id.to_string(),
            status: "in_progress",
            content: Vec::new(),
            role: "assistant",
        }),
        ..Event::new("response.output_item.added")
    });
    let part = |text: &str, name| Event {
        item_id: Some(id),
        output_index: Some(output_index),
        content_index: Some(0),
        part: Some(Part::Text(OutputText::new(text))),
        ..Event::new(name)
    };
    stream.push(part("", "response.content_part.added"));
    for word in split_words(text) {
        stream.push(Event {
            item_id: Some(id),
            output_index: Some(output_index),
            content_index: Some(0),
            delta: Some(word),
            logprobs: Some([]),
            obfuscation: Some(OBFUSCATION),
            ..Event::new("response.output_text.delta")
        });
    }
    stream.push(Event {
        item_id: Some(id),
        output_index: Some(output_index),
        content_index: Some(0),
        text: Some(text.to_string()),
        logprobs: Some([]),
        ..Event::new("response.output_text.done")
    });
    stream.push(part(text, "response.content_part.done"));
    stream.push(Event {
        output_index: Some(output_index),
        item: Some(message_item(id, message_status(answer), text)),
        ..Event::new("response.output_item.done")
    });
}

/// Collects frames, numbering them in order.
#[derive(Default)]
struct Stream {
    frames: Vec<String>,
}

impl Stream {
    fn push(&mut self, event: Event<'_>) {
        let sequence_number = self.frames.len();
        self.frames.push(frame(&event, sequence_number));
    }
}

fn frame(event: &Event<'_>, sequence_number: usize) -> String {
    let numbered = Numbered {
        kind: event.kind,
        sequence_number,
        event,
    };
    named_frame(event.kind, &to_json(&numbered))
}

#[derive(Serialize)]
struct Numbered<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    sequence_number: usize,
    #[serde(flatten)]
    event: &'a Event<'a>,
}

/// One event's fields besides `type` and `sequence_number`; unset ones are left out.
#[derive(Serialize)]
struct Event<'a> {
    #[serde(skip)]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    response: Option<WireResponse>,
    #[serde(skip_serializing_if = "Option::is_none")]
    item_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_index: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content_index: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    summary_index: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    item: Option<Item>,
    #[serde(skip_serializing_if = "Option::is_none")]
    part: Option<Part>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delta: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    arguments: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    /// `Some(None)` is sent as `null`.
    #[serde(skip_serializing_if = "Option::is_none")]
    param: Option<Option<&'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    logprobs: Option<[Value; 0]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    obfuscation: Option<&'static str>,
}

impl Event<'_> {
    fn new(kind: &'static str) -> Self {
        Event {
            kind,
            response: None,
            item_id: None,
            output_index: None,
            content_index: None,
            summary_index: None,
            item: None,
            part: None,
            delta: None,
            text: None,
            arguments: None,
            code: None,
            message: None,
            param: None,
            logprobs: None,
            obfuscation: None,
        }
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum Part {
    Text(OutputText),
    Summary(SummaryText),
}
