//! Between the sink and the exporter: a bounded queue the sink never waits on (a full queue
//! drops the span and counts it), and one task that sends the queue in batches — when a batch
//! is full or a short delay after its first span — and sends what is left at shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// How the queue and batches are sized.
#[derive(Clone, Copy, Debug)]
pub struct BatchOptions {
    /// Spans waiting at most; more are dropped (and counted).
    pub queue: usize,
    /// Spans per export at most.
    pub batch: usize,
    /// How long a batch waits for more spans after its first.
    pub delay: Duration,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            queue: 4096,
            batch: 512,
            delay: Duration::from_secs(1),
        }
    }
}

/// What the exporter did, counted since start.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub(crate) exported: AtomicU64,
    pub(crate) dropped: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) last_error: std::sync::Mutex<Option<String>>,
}

/// The sink's end of the queue.
#[derive(Clone)]
pub(crate) struct Queue {
    sender: mpsc::Sender<SpanData>,
    counts: Arc<Counts>,
}

impl Queue {
    /// Queues `span`, or drops and counts it when the queue is full or closed.
    pub(crate) fn push(&self, span: SpanData) {
        if self.sender.try_send(span).is_err() {
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Starts the exporting task on the current tokio runtime; it stops (sending what is queued)
/// when `stop` is cancelled.
pub(crate) fn start<E: SpanExporter + 'static>(
    exporter: E,
    options: BatchOptions,
    stop: CancellationToken,
) -> (Queue, Arc<Counts>, tokio::task::JoinHandle<()>) {
    let (sender, receiver) = mpsc::channel(options.queue.max(1));
    let counts = Arc::new(Counts::default());
    let task = tokio::spawn(export_loop(
        exporter,
        receiver,
        options,
        stop,
        counts.clone(),
    ));
    (
        Queue {
            sender,
            counts: counts.clone(),
        },
        counts,
        task,
    )
}

async fn export_loop<E: SpanExporter>(
    exporter: E,
    mut receiver: mpsc::Receiver<SpanData>,
    options: BatchOptions,
    stop: CancellationToken,
    counts: Arc<Counts>,
) {
    let size = options.batch.max(1);
    let mut batch = Vec::with_capacity(size);
    loop {
        let stopping = tokio::select! {
            received = receiver.recv_many(&mut batch, size) => received == 0,
            () = stop.cancelled() => true,
        };
        if !stopping && batch.len() < size {
            // Wait a little for more, so that a run's spans go in one request.
            let deadline = tokio::time::Instant::now() + options.delay;
            while batch.len() < size {
                let room = size - batch.len();
                tokio::select! {
                    received = receiver.recv_many(&mut batch, room) => if received == 0 { break },
                    () = tokio::time::sleep_until(deadline) => break,
                    () = stop.cancelled() => break,
                }
            }
        }
        if !batch.is_empty() {
            send(&exporter, std::mem::take(&mut batch), &counts).await;
        }
        if stopping || stop.is_cancelled() {
            // Nothing more is taken; what is queued goes out, then the task ends.
            receiver.close();
            while let Some(span) = receiver.recv().await {
                batch.push(span);
                if batch.len() >= size {
                    send(&exporter, std::mem::take(&mut batch), &counts).await;
                }
            }
            if !batch.is_empty() {
                send(&exporter, std::mem::take(&mut batch), &counts).await;
            }
            return;
        }
    }
}

async fn send<E: SpanExporter>(exporter: &E, batch: Vec<SpanData>, counts: &Counts) {
    let spans = batch.len() as u64;
    match exporter.export(batch).await {
        Ok(()) => {
            counts.exported.fetch_add(spans, Ordering::Relaxed);
        }
        Err(error) => {
            counts.failed.fetch_add(spans, Ordering::Relaxed);
            let error = error.to_string();
            if let Ok(mut last) = counts.last_error.lock() {
                // One line per kind of failure, not one per batch of a collector that is away.
                if last.as_deref() != Some(error.as_str()) {
                    tracing::warn!(target: "keel_telemetry", "traces not exported: {error}");
                }
                *last = Some(error);
            }
        }
    }
}
