//! What the engine tells live-event subscribers beyond the events themselves.

/// The live-event side of the daemon, as the engine sees it: every event of the runs it drives
/// (as an [`keel_core::EventSink`] of the shared agent), and when a run starts and stops being
/// driven here.
pub trait LiveEvents: keel_core::EventSink {
    /// A run is about to be driven in this process (started, resumed or answered);
    /// `stored_events` of it are in the store already (its next durable event is seq
    /// `stored_events + 1`).
    fn run_starting(&self, run_id: &str, session_id: &str, stored_events: u64);
    /// The run stopped being driven here, in `state` (terminal, waiting_on_human, or still
    /// running when it was interrupted by shutdown).
    fn run_stopped(&self, run_id: &str, state: keel_core::AgentState);
    /// The daemon is shutting down: end every stream now.
    fn shutdown(&self);
}
