//! The SSE streams: a run's (stored events, then live ones, then an end frame) and a
//! conversation's (every run's, staying open). Each is a task writing frames into a bounded
//! channel; it stops when the client leaves, the stream ends, or the daemon shuts down.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::Stream;
use keel_core::{AgentState, Event, RunRecord};
use keel_platform::RunFilter;
use tokio::sync::{broadcast, mpsc};

use super::{EventId, Frame, Hub};

/// The name of the frame that ends a run's stream.
pub const STREAM_END: &str = "keel.stream.end";

/// How often a stream waiting for a run driven elsewhere looks at the store again (at once,
/// on a shared store, when the run stores events: [`stored_events`]).
const POLL: Duration = Duration::from_secs(1);

/// An SSE response fed by a task sending into `frames`.
type Frames = mpsc::Sender<SseEvent>;

/// The SSE response of a run's events after `after`.
pub fn run_events(
    hub: Arc<Hub>,
    run: RunRecord,
    after: EventId,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    respond(move |frames| follow_run(hub, run, after, frames))
}

/// The SSE response of a conversation's events after `after` (a run and an id in it).
pub fn conversation_events(
    hub: Arc<Hub>,
    session_id: String,
    after: Option<(String, EventId)>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    respond(move |frames| follow_conversation(hub, session_id, after, frames))
}

fn respond<F, Fut>(task: F) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>>
where
    F: FnOnce(Frames) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (sender, receiver) = mpsc::channel(256);
    tokio::spawn(task(sender));
    let stream = futures::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|event| (Ok(event), receiver))
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

fn frame(id: String, name: &str, data: &str) -> SseEvent {
    SseEvent::default().id(id).event(name).data(data)
}

fn stored_frame(seq: u64, event: &Event) -> Option<(EventId, &'static str, String)> {
    let data = serde_json::to_string(event).ok()?;
    Some((EventId { seq, delta: 0 }, event.kind.name(), data))
}

fn end_frame(run_id: &str, state: AgentState) -> SseEvent {
    let data = serde_json::json!({ "run_id": run_id, "state": state }).to_string();
    SseEvent::default().event(STREAM_END).data(data)
}

/// Whether a run in `state` is done for its stream.
fn ends_stream(state: AgentState) -> bool {
    state.is_terminal() || state == AgentState::WaitingOnHuman
}

async fn follow_run(hub: Arc<Hub>, run: RunRecord, mut last: EventId, frames: Frames) {
    let run_id = run.id.clone();
    let mut closing = hub.closing();
    let mut started = hub.start_of(&run_id);
    follow_run_from(
        &hub,
        &run_id,
        &mut last,
        &frames,
        &mut closing,
        &mut started,
    )
    .await;
    drop(started);
    hub.forget_start(&run_id);
}

async fn follow_run_from(
    hub: &Arc<Hub>,
    run_id: &str,
    last: &mut EventId,
    frames: &Frames,
    closing: &mut tokio::sync::watch::Receiver<bool>,
    started: &mut tokio::sync::watch::Receiver<bool>,
) {
    let run_id = run_id.to_string();
    // Shared by many workers, the store tells when a run driven elsewhere stores events.
    let mut signals = hub.store().signals();
    loop {
        if let Some(snapshot) = hub.snapshot(&run_id) {
            if last.seq < snapshot.stored_before
                && send_stored(hub, &run_id, last, snapshot.stored_before, frames)
                    .await
                    .is_err()
            {
                return;
            }
            let mut changes = snapshot.changes;
            let mut kept = snapshot.frames;
            let mut stopped = snapshot.stopped;
            let mut next = 0;
            loop {
                for kept_frame in &kept[next..] {
                    if kept_frame.id > *last {
                        let sent = frames
                            .send(frame(
                                kept_frame.id.to_string(),
                                kept_frame.name,
                                &kept_frame.data,
                            ))
                            .await;
                        if sent.is_err() {
                            return;
                        }
                        *last = kept_frame.id;
                    }
                }
                next = kept.len();
                match stopped {
                    Some(state) if ends_stream(state) => {
                        let _ = frames.send(end_frame(&run_id, state)).await;
                        return;
                    }
                    // Stopped by shutdown, resumable: the stream ends without an end frame.
                    Some(_) => return,
                    None => {}
                }
                tokio::select! {
                    changed = changes.changed() => if changed.is_err() { break },
                    _ = closed(closing) => return,
                    _ = frames.closed() => return,
                }
                match hub.snapshot(&run_id) {
                    Some(snapshot) => {
                        kept = snapshot.frames;
                        stopped = snapshot.stopped;
                    }
                    None => break,
                }
            }
            continue;
        }
        // Not driven here: what the store has, then the end, or wait for it to start here.
        if send_stored(hub, &run_id, last, u64::MAX, frames)
            .await
            .is_err()
        {
            return;
        }
        let state = match hub.store().run(&run_id).await {
            Ok(Some(run)) => run.state,
            _ => return,
        };
        if ends_stream(state) {
            let _ = frames.send(end_frame(&run_id, state)).await;
            return;
        }
        // Once it started here, the signal stays set: look again after the poll only.
        let start = async {
            if started.wait_for(|started| !*started).await.is_ok() {
                let _ = started.wait_for(|started| *started).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            _ = start => {}
            _ = stored_events(&mut signals, &run_id) => {}
            _ = tokio::time::sleep(POLL) => {}
            _ = closed(closing) => return,
            _ = frames.closed() => return,
        }
    }
}

/// Resolves when the store signals that `run_id` stored events (or that some signals were
/// missed); never without signals (a store no other worker shares: polling only).
async fn stored_events(
    signals: &mut Option<broadcast::Receiver<keel_platform::StoreSignal>>,
    run_id: &str,
) {
    let Some(receiver) = signals else {
        return std::future::pending().await;
    };
    loop {
        match receiver.recv().await {
            Ok(keel_platform::StoreSignal::Events(id)) if id == run_id => return,
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(_)) => return,
            Err(broadcast::error::RecvError::Closed) => break,
        }
    }
    *signals = None;
    std::future::pending().await
}

/// Sends the stored events of `run_id` after `last` up to seq `up_to`, moving `last`; an error
/// when the store cannot be read or the client left.
async fn send_stored(
    hub: &Hub,
    run_id: &str,
    last: &mut EventId,
    up_to: u64,
    frames: &Frames,
) -> Result<(), ()> {
    let stored = hub
        .store()
        .events_after(run_id, last.seq)
        .await
        .map_err(drop)?;
    for (seq, event) in stored.iter().filter(|(seq, _)| *seq <= up_to) {
        let Some((id, name, data)) = stored_frame(*seq, event) else {
            continue;
        };
        frames
            .send(frame(id.to_string(), name, &data))
            .await
            .map_err(drop)?;
        *last = id;
    }
    Ok(())
}

async fn follow_conversation(
    hub: Arc<Hub>,
    session_id: String,
    after: Option<(String, EventId)>,
    frames: Frames,
) {
    let mut live = hub.follow_conversation(&session_id);
    let mut closing = hub.closing();
    let mut sent: HashMap<String, EventId> = HashMap::new();
    let Ok(mut runs) = hub
        .store()
        .find_runs(&RunFilter {
            session_id: Some(session_id.clone()),
            limit: 10_000,
            ..RunFilter::default()
        })
        .await
    else {
        return;
    };
    runs.reverse();
    if let Some((run_id, id)) = &after {
        let from = runs.iter().position(|run| &run.id == run_id).unwrap_or(0);
        runs.drain(..from);
        sent.insert(run_id.clone(), *id);
    }
    for run in &runs {
        let last = sent.get(&run.id).copied().unwrap_or_default();
        let Ok(stored) = hub.store().events_after(&run.id, last.seq).await else {
            return;
        };
        let mut newest = last;
        for (seq, event) in &stored {
            let Some((id, name, data)) = stored_frame(*seq, event) else {
                continue;
            };
            if id > newest {
                if frames
                    .send(frame(format!("{}:{id}", run.id), name, &data))
                    .await
                    .is_err()
                {
                    return;
                }
                newest = id;
            }
        }
        if let Some(snapshot) = hub.snapshot(&run.id) {
            for kept in &snapshot.frames {
                if kept.id > newest {
                    if send_kept(&frames, kept).await.is_err() {
                        return;
                    }
                    newest = kept.id;
                }
            }
        }
        sent.insert(run.id.clone(), newest);
    }
    loop {
        tokio::select! {
            received = live.recv() => match received {
                Ok(kept) => {
                    let last = sent.get(&kept.run_id).copied().unwrap_or_default();
                    if kept.id > last {
                        if send_kept(&frames, &kept).await.is_err() {
                            return;
                        }
                        sent.insert(kept.run_id.clone(), kept.id);
                    }
                }
                // Too slow to follow: the client reconnects with its last id and reads the rest.
                Err(broadcast::error::RecvError::Lagged(_)) | Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = closed(&mut closing) => return,
            _ = frames.closed() => return,
        }
    }
}

async fn send_kept(frames: &Frames, kept: &Frame) -> Result<(), mpsc::error::SendError<SseEvent>> {
    if kept.announced {
        // No id: it cannot be replayed, so the client's last id stays the stored event's.
        let event = SseEvent::default().event(kept.name).data(&kept.data);
        return frames.send(event).await;
    }
    frames
        .send(frame(
            format!("{}:{}", kept.run_id, kept.id),
            kept.name,
            &kept.data,
        ))
        .await
}

/// Resolves when the daemon shuts down.
async fn closed(closing: &mut tokio::sync::watch::Receiver<bool>) {
    let shut = closing.wait_for(|closed| *closed).await.is_ok();
    if !shut {
        std::future::pending::<()>().await;
    }
}
