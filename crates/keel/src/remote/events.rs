//! A run's live events from the daemon (`GET /v1/runs/{id}/events`, Server-Sent Events), handed
//! to an [`EventSink`] as they arrive — the terminal shows them as it shows a local run. A
//! stream that breaks is opened again from the last event seen (`Last-Event-ID`), so nothing
//! is shown twice and nothing is missed.

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use keel_core::{Event, EventSink};
use reqwest::Method;
use serde::Deserialize;

use crate::remote::client::{Client, RemoteError, segment};

/// The frame that ends a run's stream.
pub const STREAM_END: &str = "keel.stream.end";

/// How many times a broken stream is opened again before giving up.
const RECONNECTS: u32 = 5;

/// How a run's stream ended: the data of its end frame.
#[derive(Clone, Debug, Deserialize)]
struct StreamEnd {
    /// Its state when the stream ended (terminal, or `waiting_on_human`).
    state: keel_core::AgentState,
}

/// Follows `run_id`'s events into `sink` until the run ends or waits for a human; returns
/// its state then.
pub async fn follow(
    client: &Client,
    run_id: &str,
    sink: &dyn EventSink,
) -> Result<keel_core::AgentState, RemoteError> {
    let mut last_id: Option<String> = None;
    let mut broken = 0;
    loop {
        match follow_once(client, run_id, sink, &mut last_id).await {
            Ok(Some(end)) => return Ok(end.state),
            Ok(None) | Err(RemoteError::Unreachable { .. }) if broken < RECONNECTS => {
                broken += 1;
                tokio::time::sleep(Duration::from_millis(200 * u64::from(broken))).await;
            }
            Ok(None) => {
                return Err(RemoteError::Unexpected {
                    url: client.base().to_string(),
                    detail: format!(
                        "the event stream of run {run_id} kept breaking; see `keel runs` on \
                         the server or GET /v1/runs/{run_id}"
                    ),
                });
            }
            Err(error) => return Err(error),
        }
    }
}

/// One connection: `Some` when the end frame came, `None` when the stream broke first.
async fn follow_once(
    client: &Client,
    run_id: &str,
    sink: &dyn EventSink,
    last_id: &mut Option<String>,
) -> Result<Option<StreamEnd>, RemoteError> {
    let path = format!("/v1/runs/{}/events", segment(run_id));
    let mut request = client
        .request(Method::GET, &path)
        .header(reqwest::header::ACCEPT, "text/event-stream");
    if let Some(id) = last_id.as_deref() {
        request = request.header("Last-Event-ID", id);
    }
    let response = client.send(request).await?;
    let mut frames = response.bytes_stream().eventsource();
    while let Some(frame) = frames.next().await {
        let Ok(frame) = frame else {
            return Ok(None);
        };
        if frame.event == STREAM_END {
            let end = serde_json::from_str(&frame.data).map_err(|e| RemoteError::Unexpected {
                url: client.base().to_string(),
                detail: format!("a malformed end of stream: {e}"),
            })?;
            return Ok(Some(end));
        }
        // An event keel does not know (a newer server) is skipped, not fatal.
        if let Ok(event) = serde_json::from_str::<Event>(&frame.data) {
            sink.emit(&event);
        }
        if !frame.id.is_empty() {
            *last_id = Some(frame.id);
        }
    }
    Ok(None)
}
