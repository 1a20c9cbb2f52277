//! Taking a session's lane before a run (one active run per session, see keel-core's `lane`
//! module): `keel run` and `keel chat` wait while another run holds it, saying so once, or give
//! up at once with `--no-wait`.

use std::process::ExitCode;
use std::time::Duration;

use keel_core::worker::WorkerProbe;
use keel_core::{LaneClaim, LaneHolder, LaneOutcome, Store};
use tokio_util::sync::CancellationToken;

use crate::worker::ProcProbe;

/// The first wait between two claims while the lane is busy; doubled each time.
const FIRST_WAIT: Duration = Duration::from_millis(50);

/// The longest wait between two claims.
const LONGEST_WAIT: Duration = Duration::from_secs(1);

/// How the claim ended.
#[derive(Debug)]
pub enum Lane {
    /// The run holds the lane.
    Claimed,
    /// The run must not start; the message says why and what to do.
    Refused(String),
    /// Ctrl-C while waiting.
    Cancelled,
}

impl Lane {
    /// For a lane not claimed: says why on stderr and gives the exit code (3 refused, 130
    /// Ctrl-C while waiting). `None` when the run holds the lane.
    pub fn refusal(self, session_id: &str) -> Option<ExitCode> {
        match self {
            Lane::Claimed => None,
            Lane::Refused(message) => {
                eprintln!("{message}");
                Some(ExitCode::from(3))
            }
            Lane::Cancelled => {
                eprintln!("keel: cancelled while waiting for session {session_id}");
                Some(ExitCode::from(130))
            }
        }
    }
}

/// Who is asking for a lane, and how patiently.
pub struct LaneRequest<'a> {
    /// The session.
    pub session_id: &'a str,
    /// The run that will hold the lane.
    pub run_id: &'a str,
    /// A running holder silent this long lost its worker (`[runs] stale_after_secs`).
    pub stale_after: Duration,
    /// Wait while the lane is busy (else refuse at once).
    pub wait: bool,
}

/// Claims the session's lane for the run; while another run holds it, waits (polling with a
/// backoff, saying so once on stderr) or refuses. A holder that waits for a human is not
/// waited for: it may never be answered.
pub async fn claim(
    store: &dyn Store,
    request: &LaneRequest<'_>,
    cancel: &CancellationToken,
) -> anyhow::Result<Lane> {
    let worker = worker();
    let stale_after = chrono::Duration::from_std(request.stale_after)?;
    let mut wait = FIRST_WAIT;
    let mut said = false;
    loop {
        let claim = LaneClaim {
            session_id: request.session_id,
            run_id: request.run_id,
            worker: &worker,
            at: chrono::Utc::now(),
            stale_after,
        };
        let holder = match store.claim_session(&claim).await? {
            LaneOutcome::Claimed => return Ok(Lane::Claimed),
            LaneOutcome::Busy(holder) => holder,
        };
        if holder.paused {
            return Ok(Lane::Refused(paused(request.session_id, &holder)));
        }
        if !request.wait {
            return Ok(Lane::Refused(format!(
                "keel: session {} is busy with run {} ({}); not waiting (--no-wait)",
                request.session_id, holder.run_id, holder.worker
            )));
        }
        if !said {
            eprintln!(
                "keel: session {} is busy with run {}; waiting (use --no-wait to fail fast)",
                request.session_id, holder.run_id
            );
            said = true;
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = cancel.cancelled() => return Ok(Lane::Cancelled),
        }
        wait = (wait * 2).min(LONGEST_WAIT);
    }
}

fn paused(session_id: &str, holder: &LaneHolder) -> String {
    format!(
        "keel: session {session_id} waits for an answer in run {run}: answer it with \
         `keel answer {run} \"...\"` (or `keel approve {run} once|session|deny --call-id ID` when \
         it waits for approval of a tool call: its report names the call), or stop it with `keel runs cancel {run}`",
        run = holder.run_id
    )
}

/// This process, as a lane holder: `host:pid`.
fn worker() -> String {
    match ProcProbe::new().this_process() {
        Some(this) => format!("{}:{}", this.host, this.pid),
        None => format!("localhost:{}", std::process::id()),
    }
}
