//! Server-sent events: the read loop that feeds an adapter's stream accumulator (a stream that
//! breaks, stalls or closes early is an error, never a silently truncated answer), the one
//! `Finished` delta that ends every stream, and the deltas of a whole answer given to a
//! streamed request.

use std::error::Error as StdError;
use std::pin::pin;

use bytes::Bytes;
use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use keel_core::{ChatResponse, DeltaSink, ProviderError, ProviderErrorKind, StreamDelta};
use serde::de::DeserializeOwned;

use crate::classify::excerpt;
use crate::http::{Stage, transport_error};

/// What an accumulator wants after an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SseFlow {
    /// Keep reading.
    Continue,
    /// The stream's terminal marker arrived; stop reading.
    Done,
}

/// One adapter's reading of an event stream: fed event by event, it sends deltas to the sink
/// and finally assembles the answer. It never sends [`StreamDelta::Finished`]; the caller does,
/// exactly once, through [`finish_stream`].
pub(crate) trait SseAccumulator {
    /// Takes one event (never one whose data is blank: those are skipped).
    fn on_event(&mut self, event: &Event, sink: &dyn DeltaSink) -> Result<SseFlow, ProviderError>;

    /// Assembles the answer once the stream is over (terminal marker or close).
    fn finish(self, sink: &dyn DeltaSink) -> Result<ChatResponse, ProviderError>;
}

/// Reads server-sent events from a byte stream into `accumulator` until its terminal marker
/// or the end of the stream. A transport error mid-way ends the read with that error: an
/// answer is never returned silently truncated.
pub(crate) async fn read_sse<S, B, E, A>(
    bytes: S,
    mut accumulator: A,
    sink: &dyn DeltaSink,
    origin: &str,
) -> Result<ChatResponse, ProviderError>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
    E: StdError + 'static,
    A: SseAccumulator,
{
    let mut events = pin!(in_pieces(bytes).eventsource());
    while let Some(item) = events.next().await {
        let event = item.map_err(|err| event_stream_error(err, origin))?;
        if !event.data.trim().is_empty() && accumulator.on_event(&event, sink)? == SseFlow::Done {
            break;
        }
    }
    accumulator.finish(sink)
}

/// The largest piece handed to the event-stream parser at once. eventsource-stream 0.2 copies
/// what remains of its buffer after every line, so one large read (a local server sends a whole
/// answer in one) costs time quadratic in its size; pieces of this size keep it linear.
const SSE_PIECE: usize = 4096;

/// `bytes` cut into pieces of at most [`SSE_PIECE`] bytes (each chunk copied once).
fn in_pieces<S, B, E>(bytes: S) -> impl Stream<Item = Result<Bytes, E>>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
{
    bytes.flat_map(|item| {
        let pieces = match item {
            Ok(chunk) => {
                let mut chunk = Bytes::copy_from_slice(chunk.as_ref());
                let mut pieces = Vec::with_capacity(chunk.len().div_ceil(SSE_PIECE));
                while chunk.len() > SSE_PIECE {
                    pieces.push(Ok(chunk.split_to(SSE_PIECE)));
                }
                pieces.push(Ok(chunk));
                pieces
            }
            Err(err) => vec![Err(err)],
        };
        futures::stream::iter(pieces)
    })
}

fn event_stream_error<E: StdError + 'static>(
    err: EventStreamError<E>,
    origin: &str,
) -> ProviderError {
    match err {
        EventStreamError::Transport(err) => transport_error(&err, origin, Stage::Stream),
        EventStreamError::Utf8(err) => ProviderError::new(
            ProviderErrorKind::MalformedResponse,
            format!("the stream from {origin} is not valid UTF-8: {err}"),
        ),
        EventStreamError::Parser(err) => ProviderError::new(
            ProviderErrorKind::MalformedResponse,
            format!("the stream from {origin} is not a valid event stream: {err}"),
        ),
    }
}

/// The error for a stream that closed cleanly before its API's terminal marker (`marker`):
/// whatever it delivered may be cut anywhere (mid-text, mid-arguments), so none of it may be
/// used. It is a `network` error, retried like a broken connection.
pub(crate) fn cut_short(marker: &str) -> ProviderError {
    ProviderError::new(
        ProviderErrorKind::Network,
        format!("the stream closed before {marker}: the answer is incomplete and was discarded"),
    )
}

/// The JSON of an event's `data`; data that is not is a malformed answer, named as a stream
/// `what` (`chunk`, `event`) with an excerpt of the data.
pub(crate) fn event_json<T: DeserializeOwned>(data: &str, what: &str) -> Result<T, ProviderError> {
    serde_json::from_str(data).map_err(|err| {
        ProviderError::new(
            ProviderErrorKind::MalformedResponse,
            format!("unreadable stream {what} ({err}): {}", excerpt(data)),
        )
    })
}

/// Reads an event stream (the raw bytes of a `text/event-stream` body, in chunks split
/// anywhere) through `accumulator` into the complete answer, sending deltas to `sink` as they
/// arrive and exactly one [`StreamDelta::Finished`] at the end, also on failure: what each
/// adapter's public `parse_stream` does.
pub(crate) async fn parse_stream(
    bytes: impl Stream<Item = Result<impl AsRef<[u8]>, impl StdError + 'static>>,
    accumulator: impl SseAccumulator,
    sink: &dyn DeltaSink,
) -> Result<ChatResponse, ProviderError> {
    finish_stream(read_sse(bytes, accumulator, sink, "the server").await, sink)
}

/// Defines an adapter's public `parse_stream`: [`parse_stream`] through its accumulator
/// `$accumulator`, documented for the stream of `$api` (`"a Messages"`).
macro_rules! public_parse_stream {
    ($accumulator:ty, $api:literal) => {
        #[doc = concat!(
            "Reads ", $api, " event stream (the raw bytes of a `text/event-stream` body, in ",
            "chunks split anywhere) into the complete answer, sending deltas to `sink` as they ",
            "arrive and exactly one [`StreamDelta::Finished`](keel_core::StreamDelta::Finished) ",
            "at the end, also on failure."
        )]
        pub async fn parse_stream(
            bytes: impl futures::Stream<
                Item = Result<impl AsRef<[u8]>, impl std::error::Error + 'static>,
            >,
            sink: &dyn keel_core::DeltaSink,
        ) -> Result<keel_core::ChatResponse, keel_core::ProviderError> {
            $crate::sse::parse_stream(bytes, <$accumulator>::default(), sink).await
        }
    };
}
pub(crate) use public_parse_stream;

/// Sends the one [`StreamDelta::Finished`] of a stream (with the stop reason on success,
/// `None` on failure) and passes the result through.
pub(crate) fn finish_stream(
    result: Result<ChatResponse, ProviderError>,
    sink: &dyn DeltaSink,
) -> Result<ChatResponse, ProviderError> {
    sink.delta(&StreamDelta::Finished {
        stop_reason: result.as_ref().ok().map(|response| response.stop_reason),
    });
    result
}

/// Sends the deltas a stream of `response` would have carried (for a server that answered a
/// streamed request with one whole JSON body).
pub(crate) fn replay_as_deltas(response: &ChatResponse, sink: &dyn DeltaSink) {
    let message = &response.message;
    if let Some(reasoning) = message.reasoning.as_ref().filter(|r| !r.text.is_empty()) {
        sink.delta(&StreamDelta::Reasoning {
            text: reasoning.text.clone(),
        });
    }
    if !message.content.is_empty() {
        sink.delta(&StreamDelta::Text {
            text: message.content.clone(),
        });
    }
    for (index, call) in message.tool_calls.iter().enumerate() {
        sink.delta(&StreamDelta::ToolCallStarted {
            index,
            id: call.id.clone(),
            name: call.name.clone(),
        });
        sink.delta(&StreamDelta::ToolCallArguments {
            index,
            fragment: call.arguments.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    #[tokio::test]
    async fn a_large_read_is_cut_into_pieces_that_parse_as_the_whole() {
        // One read holding many events; the first one's `é` straddles the first piece boundary.
        let mut body = format!("data: {}é\n\n", "x".repeat(SSE_PIECE - 1 - "data: ".len()));
        assert_eq!(body.find('é'), Some(SSE_PIECE - 1));
        for i in 1..200 {
            body.push_str(&format!("data: {i} {}é\n\n", "x".repeat(SSE_PIECE / 20)));
        }
        let read = futures::stream::iter([Ok::<_, io::Error>(body.as_bytes())]);
        let pieces: Vec<Bytes> = in_pieces(read)
            .map(Result::unwrap)
            .collect::<Vec<_>>()
            .await;
        assert!(pieces.iter().all(|piece| piece.len() <= SSE_PIECE));
        assert_eq!(pieces.concat(), body.as_bytes());

        let read = futures::stream::iter([Ok::<_, io::Error>(body.as_bytes())]);
        let events: Vec<String> = in_pieces(read)
            .eventsource()
            .map(|event| event.unwrap().data)
            .collect()
            .await;
        assert_eq!(events.len(), 200);
        assert!(events.iter().all(|data| data.ends_with("xé")), "{events:?}");
    }

    #[tokio::test]
    async fn a_transport_error_passes_through_in_order() {
        let reads =
            futures::stream::iter([Ok(&b"data: a\n\n"[..]), Err(io::Error::other("reset"))]);
        let items: Vec<Result<Bytes, io::Error>> = in_pieces(reads).collect().await;
        assert_eq!(items[0].as_ref().unwrap(), &b"data: a\n\n"[..]);
        assert_eq!(items[1].as_ref().unwrap_err().to_string(), "reset");
    }
}
