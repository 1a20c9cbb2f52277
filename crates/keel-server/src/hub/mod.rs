//! Live events: every event of the runs of this process, numbered, for the SSE streams.

/// Live events (placeholder until the hub is built).
pub struct Hub;
