//! A run's answer as server-sent `chat.completion.chunk`s, ending `data: [DONE]`.
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

/// The SSE response of `setup.run_id`'s answer; `following` must follow the run's conversation
/// since before the run was started or continued.
pub fn respond(
    state: AppState,
    following: Following,
    setup: StreamSetup,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let (sender, receiver) = mpsc::channel(256);
    tokio::spawn(write(state, following, setup, sender));
    let stream = futures::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|event| (Ok(event), receiver))
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

/// The SSE response of an answer known already (a reply that continued nothing).
pub fn respond_now(
    setup: StreamSetup,
    answer: Answer,
    usage: keel_core::Usage,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let mut events = vec![
        chunk(&setup, json!({"role": "assistant", "content": ""}), None),
        chunk(&setup, json!({"content": answer.content}), None),
        chunk(&setup, json!({}), Some(answer.finish_reason)),
    ];
    if setup.include_usage {
        events.push(data(&answer::usage_chunk(
            &setup.run_id,
            &setup.model,
            setup.created,
            &usage,
        )));
    }
    events.push(SseEvent::default().data("[DONE]"));
    Sse::new(futures::stream::iter(events.into_iter().map(Ok)))
}

fn data(value: &Value) -> SseEvent {
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

struct Writer {
    setup: StreamSetup,
    sender: mpsc::Sender<SseEvent>,
    written: Written,
}

impl Writer {
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
        let event = chunk(&self.setup, json!({"content": out}), None);
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
            } if !text.is_empty() => {
                let event = chunk(&self.setup, json!({"reasoning_content": text}), None);
                self.send(event).await
            }
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
                let event = chunk(&self.setup, json!({"content": line}), None);
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
        let end = chunk(&self.setup, json!({}), Some(answer.finish_reason));
        self.send(end).await?;
        if self.setup.include_usage {
            let last = answer::usage_chunk(
                &self.setup.run_id,
                &self.setup.model,
                self.setup.created,
                &usage,
            );
            self.send(data(&last)).await?;
        }
        self.send(SseEvent::default().data("[DONE]")).await
    }
}

/// Writes the run's answer into `sender` until it ends or the client goes.
async fn write(
    state: AppState,
    mut following: Following,
    setup: StreamSetup,
    sender: mpsc::Sender<SseEvent>,
) {
    let run_id = setup.run_id.clone();
    let catch_up = setup.catch_up;
    let preface = setup.preface.clone();
    let mut writer = Writer {
        setup,
        sender,
        written: Written::default(),
    };
    let _ = async {
        writer
            .send(chunk(
                &writer.setup,
                json!({"role": "assistant", "content": ""}),
                None,
            ))
            .await?;
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
