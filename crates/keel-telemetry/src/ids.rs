//! Trace and span ids derived from run ids, so that every process that drives a run (the one
//! that started it, the one that resumed it after a crash, the one an approval continued it
//! in) puts it in the same trace and can link to its first span without asking anyone.
//!
//! A top-level run's trace id is its run id: keel's run ids are UUIDs (v7), whose 128 bits are
//! the trace id as they are (`0190…` in the run id is `0190…` in the trace), so a trace is
//! found by the run id a person already has. A run id that is not a UUID is hashed (SHA-256,
//! first 16 bytes). A run's first `invoke_agent` span id is the first 8 bytes of
//! SHA-256(`invoke_agent:` + run id); every later segment of the run links to it.

use opentelemetry::trace::{SpanId, TraceId};
use sha2::{Digest, Sha256};

/// The trace of the run tree whose root is `run_id`.
pub fn trace_id_of(run_id: &str) -> TraceId {
    let bytes = match uuid::Uuid::parse_str(run_id) {
        Ok(uuid) if !uuid.is_nil() => *uuid.as_bytes(),
        _ => {
            let digest = Sha256::digest(run_id.as_bytes());
            let mut bytes = [0u8; 16];
            bytes.copy_from_slice(&digest[..16]);
            bytes
        }
    };
    let id = TraceId::from_bytes(bytes);
    if id == TraceId::INVALID {
        TraceId::from_bytes([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1])
    } else {
        id
    }
}

/// The span id of the first `invoke_agent` span of `run_id` (the one its continuations link
/// to).
pub fn first_span_id_of(run_id: &str) -> SpanId {
    let mut hasher = Sha256::new();
    hasher.update(b"invoke_agent:");
    hasher.update(run_id.as_bytes());
    let digest = hasher.finalize();
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    let id = SpanId::from_bytes(bytes);
    if id == SpanId::INVALID {
        SpanId::from_bytes([0, 0, 0, 0, 0, 0, 0, 1])
    } else {
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uuid_run_id_is_its_own_trace_id() {
        let run = "0192f1c4-7a7e-7cc0-9c1b-2a64f2d1e0aa";
        assert_eq!(
            trace_id_of(run).to_string(),
            "0192f1c47a7e7cc09c1b2a64f2d1e0aa"
        );
    }

    #[test]
    fn other_ids_hash_stably_and_never_to_the_invalid_id() {
        assert_eq!(trace_id_of("run-1"), trace_id_of("run-1"));
        assert_ne!(trace_id_of("run-1"), trace_id_of("run-2"));
        assert_ne!(trace_id_of("run-1"), TraceId::INVALID);
        assert_ne!(
            trace_id_of("00000000-0000-0000-0000-000000000000"),
            TraceId::INVALID
        );
        assert_eq!(first_span_id_of("run-1"), first_span_id_of("run-1"));
        assert_ne!(first_span_id_of("run-1"), first_span_id_of("run-2"));
    }
}
