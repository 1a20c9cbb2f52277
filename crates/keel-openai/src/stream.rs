//! A run's answer as server-sent events: `chat.completion.chunk`s ending `data: [DONE]`
//! ([`Chunks`]), or another [`Shape`] (the Responses API's events).
//!
//! The text streams as the model writes it (every step's: what it says before a tool call
//! too, a blank line between steps), reasoning as `delta.reasoning_content`, tool calls as
//! progress lines when asked for. A run not driven here, or whose events are no longer kept,
//! answers its final text at once when it ends. A run waiting on a person ends its stream with
//! what is pending. The stream is written by a task of its own: a client that goes away stops
//! the task, never the run.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::Stream;
use keel_core::{AgentState, Event, EventKind, RunReport, StreamDelta};
use keel_server::AppState;
use keel_server::hub::{EventId, Following, Frame};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use crate::answer::{self, Answer};

/// What a stream says besides the run's events.
#[derive(Clone, Debug)]
pub struct StreamSetup {
    /// The run answering.
    pub run_id: String,
    /// The model the client named.
    pub model: String,
    /// When the answer was made (Unix seconds).
    pub created: i64,
    /// A last chunk with the usage.
    pub include_usage: bool,
    /// Progress lines for tool calls.
    pub progress: bool,
    /// Send the run's events kept so far first (a redelivery, or a new run); false for a run
    /// continued now, whose events kept are of its previous stretch.
    pub catch_up: bool,
    /// Text said before the run's own (a reply that answered nothing).
    pub preface: Option<String>,
}

/// How a stream is written: what comes before the text, each piece of text or reasoning, and
/// what comes after. The text and its paragraphs are the [`respond`]er's; a shape only wraps
/// them.
pub trait Shape: Send + Sync + 'static {
    /// The events before any text.
    fn start(&mut self) -> Vec<SseEvent>;
    /// A piece of the answer's text.
    fn text(&mut self, text: &str) -> SseEvent;
    /// A piece of reasoning; `None` when the shape has no place for it.
    fn reasoning(&mut self, text: &str) -> Option<SseEvent>;
    /// The events after the text: the finish, the usage, the end of the stream.
    fn finish(&mut self, answer: &Answer, usage: &keel_core::Usage) -> Vec<SseEvent>;
}

/// The chat-completions shape: a first chunk with the role, the text as `delta.content`,
/// reasoning as `delta.reasoning_content`, a chunk with the finish reason, the usage chunk
/// when asked for, `data: [DONE]`.
pub struct Chunks {
    setup: StreamSetup,
}

impl Chunks {
    /// The chunks of `setup`'s answer.
    pub fn new(setup: &StreamSetup) -> Self {
        Chunks {
            setup: setup.clone(),
        }
    }
}

impl Shape for Chunks {
    fn start(&mut self) -> Vec<SseEvent> {
        vec![chunk(
            &self.setup,
            json!({"role": "assistant", "content": ""}),
            None,
        )]
    }

    fn text(&mut self, text: &str) -> SseEvent {
        chunk(&self.setup, json!({"content": text}), None)
    }

    fn reasoning(&mut self, text: &str) -> Option<SseEvent> {
        Some(chunk(&self.setup, json!({"reasoning_content": text}), None))
    }

    fn finish(&mut self, answer: &Answer, usage: &keel_core::Usage) -> Vec<SseEvent> {
        let mut events = vec![chunk(&self.setup, json!({}), Some(answer.finish_reason))];
        if self.setup.include_usage {
            events.push(data(&answer::usage_chunk(
                &self.setup.run_id,
                &self.setup.model,
                self.setup.created,
                usage,
            )));
        }
        events.push(SseEvent::default().data("[DONE]"));
        events
    }
}

/// The SSE response of `setup.run_id`'s answer in `shape`; `following` must follow the run's
/// conversation since before the run was started or continued.
pub fn respond<S: Shape>(
    state: AppState,
    following: Following,
    setup: StreamSetup,
    shape: S,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let (sender, receiver) = mpsc::channel(256);
    tokio::spawn(write(state, following, setup, shape, sender));
    let stream = futures::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|event| (Ok(event), receiver))
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

/// The SSE response in `shape` of an answer known already (a reply that continued nothing).
pub fn respond_now<S: Shape>(
    mut shape: S,
    answer: Answer,
    usage: keel_core::Usage,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let mut events = shape.start();
    events.push(shape.text(&answer.content));
    events.extend(shape.finish(&answer, &usage));
    Sse::new(futures::stream::iter(events.into_iter().map(Ok)))
}

/// One `data:` line of JSON.
pub fn data(value: &Value) -> SseEvent {
    SseEvent::default().data(value.to_string())
}

fn chunk(setup: &StreamSetup, delta: Value, finish: Option<&str>) -> SseEvent {
    data(&answer::chunk(
        &setup.run_id,
        &setup.model,
        setup.created,
        delta,
        finish,
    ))
}

/// What has been written so far.
#[derive(Default)]
struct Written {
    /// Any answer text (or progress) sent.
    text: bool,
    /// The last text sent ended a line.
    at_line_start: bool,
    /// A step with tool calls ended since the last text: the next text starts a paragraph.
    step_ended: bool,
    /// Frames were skipped (this stream fell behind the run): the text sent has gaps.
    lost: bool,
}

/// The client went away.
struct Gone;

struct Writer<S> {
    setup: StreamSetup,
    shape: S,
    sender: mpsc::Sender<SseEvent>,
    written: Written,
}

impl<S: Shape> Writer<S> {
    async fn send(&self, event: SseEvent) -> Result<(), Gone> {
        self.sender.send(event).await.map_err(|_| Gone)
    }

    async fn text(&mut self, text: &str) -> Result<(), Gone> {
        if text.is_empty() {
            return Ok(());
        }
        let mut out = String::new();
        if self.written.step_ended && self.written.text {
            out.push_str(if self.written.at_line_start {
                "\n"
            } else {
                "\n\n"
            });
        }
        self.written.step_ended = false;
        out.push_str(text);
        self.written.text = true;
        self.written.at_line_start = out.ends_with('\n');
        let event = self.shape.text(&out);
        self.send(event).await
    }

    /// Tells one frame of the run, as the client should see it.
    async fn frame(&mut self, frame: &Frame) -> Result<(), Gone> {
        let Ok(event) = serde_json::from_str::<Event>(&frame.data) else {
            return Ok(());
        };
        match event.kind {
            EventKind::StreamDelta {
                delta: StreamDelta::Text { text },
            } => self.text(&text).await,
            EventKind::StreamDelta {
                delta: StreamDelta::Reasoning { text },
            } if !text.is_empty() => match self.shape.reasoning(&text) {
                Some(event) => self.send(event).await,
                None => Ok(()),
            },
            EventKind::ModelResponse { tool_calls, .. } if tool_calls > 0 => {
                self.written.step_ended = true;
                Ok(())
            }
            EventKind::ToolStarted { name, .. } if self.setup.progress => {
                let line = answer::progress_line(&name);
                let line = if self.written.text && !self.written.at_line_start {
                    format!("\n{line}")
                } else {
                    line
                };
                self.written.step_ended = false;
                self.written.text = true;
                self.written.at_line_start = true;
                let event = self.shape.text(&line);
                self.send(event).await?;
                self.written.step_ended = true;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The end: what is pending, a failure, or the final text when none streamed; the
    /// finish, the usage, `[DONE]`.
    async fn finish(&mut self, report: Result<RunReport, String>) -> Result<(), Gone> {
        let (answer, usage, told) = match report {
            Ok(report) => {
                // A streamed answer is the final text; anything else is told whole.
                let streamed = matches!(
                    report.state,
                    AgentState::Completed | AgentState::MaxSteps | AgentState::BudgetExceeded
                );
                (
                    answer::of(&report),
                    report.usage,
                    streamed && self.written.text && !self.written.lost,
                )
            }
            Err(error) => (
                Answer {
                    content: format!("keel could not follow the run: {error}"),
                    finish_reason: "stop",
                },
                keel_core::Usage::default(),
                false,
            ),
        };
        if !told {
            self.written.step_ended = self.written.text;
            self.text(&answer.content).await?;
        }
        for event in self.shape.finish(&answer, &usage) {
            self.send(event).await?;
        }
        Ok(())
    }
}

/// Writes the run's answer into `sender` until it ends or the client goes.
async fn write<S: Shape>(
    state: AppState,
    mut following: Following,
    setup: StreamSetup,
    shape: S,
    sender: mpsc::Sender<SseEvent>,
) {
    let run_id = setup.run_id.clone();
    let catch_up = setup.catch_up;
    let preface = setup.preface.clone();
    let mut writer = Writer {
        setup,
        shape,
        sender,
        written: Written::default(),
    };
    let _ = async {
        for event in writer.shape.start() {
            writer.send(event).await?;
        }
        if let Some(preface) = preface {
            writer.text(&preface).await?;
            writer.written.step_ended = true;
        }
        let mut seen: Option<EventId> = None;
        if catch_up {
            for frame in state.hub.frames_of(&run_id) {
                seen = Some(frame.id);
                writer.frame(&frame).await?;
            }
        }
        let engine = state.engine.clone();
        let waited = run_id.clone();
        let report = async move { engine.wait(&waited).await.map_err(|e| e.to_string()) };
        tokio::pin!(report);
        let report = loop {
            tokio::select! {
                biased;
                frame = following.recv() => match frame {
                    Ok(frame) => {
                        if fresh(&frame, &run_id, seen) {
                            seen = Some(frame.id);
                            writer.frame(&frame).await?;
                        }
                    }
                    // Told whole at the end, after what was sent.
                    Err(broadcast::error::RecvError::Lagged(_)) => writer.written.lost = true,
                    Err(broadcast::error::RecvError::Closed) => break report.await,
                },
                report = &mut report => break report,
            }
        };
        // Every frame of the run was sent before its report: take those not read yet.
        while let Ok(Ok(frame)) = tokio::time::timeout(Duration::ZERO, following.recv()).await {
            if fresh(&frame, &run_id, seen) {
                seen = Some(frame.id);
                writer.frame(&frame).await?;
            }
        }
        writer.finish(report).await
    }
    .await;
}

fn fresh(frame: &Arc<Frame>, run_id: &str, seen: Option<EventId>) -> bool {
    frame.run_id == run_id && !frame.announced && seen.is_none_or(|seen| frame.id > seen)
}
