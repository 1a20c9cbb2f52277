//! What the engine holds in memory, counted: a long-lived daemon must not grow with the runs
//! it finished, and a test checks these counts go back to zero.

use super::Engine;

/// What an [`Engine`] holds in memory, counted ([`Engine::sizes`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineSizes {
    /// Conversations with a lane here: a run queued, driven, or being accepted.
    pub lanes: usize,
    /// Runs waiting in those lanes.
    pub queued: usize,
    /// Runs whose report someone may wait for: queued or driven here.
    pub reports: usize,
    /// Runs being driven here.
    pub driven: usize,
}

impl Engine {
    /// The sizes of what the engine holds in memory, to check that they stay bounded: every
    /// one counts runs queued or driven here, and is 0 once they all ended.
    pub fn sizes(&self) -> EngineSizes {
        let lanes = self.lock_lanes();
        EngineSizes {
            lanes: lanes.len(),
            queued: lanes.values().map(|lane| lane.queued.len()).sum(),
            reports: self.lock_reports().len(),
            driven: self.boundaries.len(),
        }
    }
}
