//! The process's traces (keel-telemetry): started with the agent when `[telemetry]
//! otlp_endpoint` (or `OTEL_EXPORTER_OTLP_ENDPOINT`) is set, flushed when the command ends
//! (`keel run`'s exit, `keel chat`'s, `keel serve`'s stop). With no endpoint nothing starts:
//! no task, no client, no sink in the agent.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel_core::EventSink;
use keel_telemetry::{TraceOptions, Traces};

/// The one exporter of the process, once started.
static TRACES: Mutex<Option<Traces>> = Mutex::new(None);

/// How long the exit waits for the collector to take the last spans.
const FLUSH_WITHIN: Duration = Duration::from_secs(5);

/// The trace sink for an agent of this process, when traces are on; the exporter starts with
/// the first call (on the current tokio runtime) and serves every later one. `provider`: the
/// configured provider, named on the spans of runs continued here.
pub fn sink(
    config_file: Option<&Path>,
    home: &Path,
    provider: &str,
) -> anyhow::Result<Option<Arc<dyn EventSink>>> {
    let settings = keel_config::telemetry_settings::load(config_file, home)?;
    let Ok(mut slot) = TRACES.lock() else {
        return Ok(None);
    };
    if let Some(traces) = slot.as_ref() {
        return Ok(Some(traces.sink()));
    }
    let options = TraceOptions {
        endpoint: settings.otlp_endpoint,
        record_content: settings.record_content,
        service_name: settings.service_name,
        provider: Some(provider.to_string()),
    };
    let Some(traces) = Traces::start(&options)? else {
        return Ok(None);
    };
    let sink = traces.sink();
    *slot = Some(traces);
    Ok(Some(sink))
}

/// Ends the spans still open, sends what is queued and stops the exporter; says on stderr
/// what could not be sent.
pub async fn flush() {
    let traces = TRACES.lock().ok().and_then(|mut slot| slot.take());
    let Some(traces) = traces else {
        return;
    };
    let report = traces.shutdown(FLUSH_WITHIN).await;
    if report.dropped > 0 || report.failed > 0 || report.timed_out {
        let why = report
            .last_error
            .map_or_else(String::new, |error| format!(" ({error})"));
        let late = if report.timed_out {
            format!("; gave up waiting after {} s", FLUSH_WITHIN.as_secs())
        } else {
            String::new()
        };
        eprintln!(
            "keel: traces: {} span(s) sent to {}, {} not accepted{why}, {} dropped (queue full){late}",
            report.exported, report.url, report.failed, report.dropped
        );
    }
}

/// `keel bench --traces`: the trace sink and exporter as in use, posting to a receiver in this
/// process that counts and discards what it gets.
pub struct BenchTraces {
    traces: Traces,
    received: Arc<std::sync::atomic::AtomicU64>,
}

impl BenchTraces {
    /// Starts the receiver and the exporter to it.
    pub async fn start() -> anyhow::Result<BenchTraces> {
        use std::sync::atomic::{AtomicU64, Ordering};
        let received = Arc::new(AtomicU64::new(0));
        let counted = received.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                counted.fetch_add(body.len() as u64, Ordering::Relaxed);
                async { "{}" }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        tokio::spawn(async move { axum::serve(listener, app).await });
        let options = TraceOptions {
            endpoint: Some(endpoint),
            record_content: false,
            service_name: "keel-bench".into(),
            provider: None,
        };
        let traces = Traces::start(&options)?
            .ok_or_else(|| anyhow::anyhow!("the bench's trace exporter did not start"))?;
        Ok(BenchTraces { traces, received })
    }

    /// The sink to give the bench's agent.
    pub fn sink(&self) -> Arc<dyn EventSink> {
        self.traces.sink()
    }

    /// Sends what is left and says on stderr what was exported.
    pub async fn finish(self) {
        let report = self.traces.shutdown(FLUSH_WITHIN).await;
        let bytes = self.received.load(std::sync::atomic::Ordering::Relaxed);
        eprintln!(
            "traces: {} span(s) exported ({} KiB of OTLP protobuf), {} dropped, {} failed",
            report.exported,
            bytes / 1024,
            report.dropped,
            report.failed
        );
    }
}
