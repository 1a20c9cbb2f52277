//! keel-telemetry owns keel's traces: the loop's events as OpenTelemetry spans following the
//! GenAI semantic conventions, exported over OTLP/HTTP (protobuf) to `{endpoint}/v1/traces`.
//!
//! - `invoke_agent {agent}`: one per run (per *segment* of a run: a run that stops to wait for
//!   a person, or is resumed, continues in a new span of the same trace, linked to its first);
//!   a delegated child run's span is a child of its parent's `execute_tool delegate_task`.
//! - `chat {model}`: one per model call, retried and fallback calls included; `error.type` on a
//!   failed one.
//! - `execute_tool {name}`: one per tool call.
//! - Retries, fallbacks, compactions, recoveries, loop detections, approvals, questions and
//!   resumes are span events on the run's `invoke_agent` span (tool retries and hooks on their
//!   tool's span), named by keel's stable event names.
//!
//! Trace ids come from run ids (see [`ids`]): a top-level run's trace id is its run id's UUID.
//! Spans carry message content (answers, tool arguments and results, questions and answers)
//! only when asked to ([`TraceOptions::record_content`]). Nothing here starts without an
//! endpoint: [`Traces::start`] with none returns `None`.
//!
//! Depends on keel-core (events) and keel-providers (the HTTP client keel uses everywhere);
//! nothing depends on it but the `keel` binary.

pub mod attributes;
mod content;
pub mod export;
pub mod ids;
mod pipeline;
mod sink;
mod span;
mod tracks;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use opentelemetry_sdk::trace::SpanExporter;
use tokio_util::sync::CancellationToken;

pub use export::OtlpHttpExporter;
pub use pipeline::BatchOptions;
pub use sink::TraceSink;

/// What the traces are built from.
#[derive(Clone, Debug)]
pub struct TraceOptions {
    /// The OTLP/HTTP collector's base address; `None`: no traces, nothing starts.
    pub endpoint: Option<String>,
    /// Whether spans carry message content.
    pub record_content: bool,
    /// `service.name`, also the agent's name in `invoke_agent {agent}`.
    pub service_name: String,
    /// The configured provider's name, for runs continued in this process that do not say
    /// theirs.
    pub provider: Option<String>,
}

/// The traces of one process: the sink to give the agent, and the exporter behind it.
pub struct Traces {
    sink: Arc<TraceSink>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    counts: Arc<pipeline::Counts>,
    url: String,
}

/// What the exporter did over the process's life.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportReport {
    /// Where the spans went.
    pub url: String,
    /// Spans the collector accepted.
    pub exported: u64,
    /// Spans dropped because the queue was full (the collector too slow or away).
    pub dropped: u64,
    /// Spans whose export failed.
    pub failed: u64,
    /// The last export error.
    pub last_error: Option<String>,
    /// The exporter had not finished when the shutdown's time was up.
    pub timed_out: bool,
}

/// Why traces could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot start the OTLP exporter: {0}")]
pub struct TraceError(String);

impl Traces {
    /// Starts exporting to `options.endpoint` over keel's HTTP client; `Ok(None)` when no
    /// endpoint is set (nothing is started). Must run inside a tokio runtime when an endpoint
    /// is set.
    pub fn start(options: &TraceOptions) -> Result<Option<Traces>, TraceError> {
        let Some(endpoint) = options.endpoint.as_deref() else {
            return Ok(None);
        };
        let client = keel_providers::build_client(Duration::from_secs(5), Duration::from_secs(10))
            .map_err(|error| TraceError(error.to_string()))?;
        let exporter = OtlpHttpExporter::new(client, endpoint, &options.service_name);
        let url = exporter.url().to_string();
        Ok(Some(Traces::with_exporter(
            options,
            exporter,
            url,
            BatchOptions::default(),
        )))
    }

    /// Starts with any exporter (tests, or another transport).
    pub fn with_exporter<E: SpanExporter + 'static>(
        options: &TraceOptions,
        exporter: E,
        url: String,
        batch: BatchOptions,
    ) -> Traces {
        let stop = CancellationToken::new();
        let (queue, counts, task) = pipeline::start(exporter, batch, stop.clone());
        let tracks = tracks::Tracks::new(
            options.service_name.clone(),
            options.provider.clone(),
            options.record_content,
        );
        Traces {
            sink: Arc::new(TraceSink::new(tracks, queue)),
            stop,
            task,
            counts,
            url,
        }
    }

    /// The event sink to add to the agent's sinks.
    pub fn sink(&self) -> Arc<TraceSink> {
        self.sink.clone()
    }

    /// Ends the spans still open (marked `keel.span.unfinished`), sends everything queued,
    /// and stops; waits at most `within` for the collector.
    pub async fn shutdown(self, within: Duration) -> ExportReport {
        self.sink.end_all();
        self.stop.cancel();
        let mut task = self.task;
        let timed_out = tokio::time::timeout(within, &mut task).await.is_err();
        if timed_out {
            task.abort();
        }
        let counts = &self.counts;
        ExportReport {
            url: self.url,
            exported: counts.exported.load(Ordering::Relaxed),
            dropped: counts.dropped.load(Ordering::Relaxed),
            failed: counts.failed.load(Ordering::Relaxed),
            last_error: counts.last_error.lock().ok().and_then(|e| e.clone()),
            timed_out,
        }
    }
}
