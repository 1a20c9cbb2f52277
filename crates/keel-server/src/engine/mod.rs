//! The run engine: lanes, their queues, the worker pool, the reconciler, shutdown.

/// Runs the lanes (placeholder until the engine is built).
pub struct Engine;
