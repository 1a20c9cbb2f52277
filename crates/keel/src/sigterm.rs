//! SIGTERM stops keel at a safe point and leaves its run resumable, where Ctrl-C cancels the
//! run. A process manager (systemd, a container runtime, the coming daemon's supervisor) sends
//! SIGTERM to stop a worker, not to throw its work away: so keel exits with 143 once nothing
//! would be lost — at once between runs or while the model is answering (the call is made
//! again on resume), else right after the next checkpoint is committed (a tool batch finishes
//! first, so no side effect is left half done). The run is then still `running` with a worker
//! that is gone, which `keel resume` and the reconciler see at once. A second SIGTERM exits at
//! once.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use keel_core::{Event, EventKind, EventSink};

/// The exit code after SIGTERM: 128 + 15, as a shell reports a process ended by it.
pub const EXIT_CODE: i32 = 143;

/// What the process is doing, as its runs' events tell.
#[derive(Debug, Default)]
struct Activity {
    /// The run being driven, if one is: its id.
    run: Option<String>,
    /// A model call of that run is under way.
    in_model_call: bool,
}

static ACTIVITY: Mutex<Activity> = Mutex::new(Activity {
    run: None,
    in_model_call: false,
});
static STOPPING: AtomicBool = AtomicBool::new(false);

/// Handles SIGTERM for the rest of the process; call once, on the runtime.
pub async fn watch() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut terms) = signal(SignalKind::terminate()) else {
        return;
    };
    while terms.recv().await.is_some() {
        let activity = ACTIVITY.lock().unwrap_or_else(|e| e.into_inner());
        match &activity.run {
            Some(run) if !activity.in_model_call && !STOPPING.swap(true, Ordering::SeqCst) => {
                eprintln!(
                    "\nkeel: SIGTERM: stopping after the next checkpoint; run {run} stays \
                     resumable (SIGTERM again to quit at once)"
                );
            }
            Some(run) => stop(run),
            None => std::process::exit(EXIT_CODE),
        }
    }
}

/// Exits, saying how to go on with `run`.
fn stop(run: &str) -> ! {
    eprintln!("\nkeel: stopped by SIGTERM at a safe point; go on with: keel resume {run}");
    std::process::exit(EXIT_CODE)
}

/// The event sink that follows the process's runs, and exits at the checkpoint SIGTERM waits
/// for.
#[derive(Debug, Default)]
pub struct SafePointExit;

impl EventSink for SafePointExit {
    fn emit(&self, event: &Event) {
        // A sub-agent runs inside its parent's tool batch: SIGTERM waits for the parent's
        // next checkpoint, as for any batch, and names the parent.
        if keel_core::SessionKind::of(&event.session_id).depth() > 0 {
            return;
        }
        let mut activity = ACTIVITY.lock().unwrap_or_else(|e| e.into_inner());
        match &event.kind {
            EventKind::RunStarted { .. } | EventKind::Resumed { .. } => {
                activity.run = Some(event.run_id.clone());
            }
            EventKind::ModelRequest { .. } => activity.in_model_call = true,
            EventKind::ModelResponse { .. } | EventKind::ModelError { .. } => {
                activity.in_model_call = false;
            }
            EventKind::Checkpoint { boundary, .. } => {
                activity.in_model_call = false;
                if !boundary.resumable() {
                    // The run is over, or waits for a human: nothing more to stop.
                    activity.run = None;
                } else if STOPPING.load(Ordering::SeqCst) {
                    stop(&event.run_id);
                } else {
                    activity.run = Some(event.run_id.clone());
                }
            }
            _ => {}
        }
    }
}
