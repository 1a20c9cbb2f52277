//! A restored run taken over by another process: it records its new worker and launch, and
//! may go on with other models than it started with.

use super::Run;
use crate::run_settings::{ModelTarget, RunSettings};

impl Run {
    /// Takes the run over under `settings`: its launch and worker from now on, and — when
    /// `switch_models` — its provider, model and fallbacks, the chain starting again at its
    /// first model. The next checkpoint stores the changed frame.
    pub fn relaunch(&mut self, settings: &RunSettings, switch_models: bool) {
        if settings.launch.is_some() {
            self.settings.launch = settings.launch.clone();
        }
        self.settings.worker = settings.worker.clone();
        self.settings.context.reattach(&settings.context);
        if switch_models {
            self.settings.provider = settings.provider.clone();
            self.settings.model = settings.model.clone();
            self.settings.fallbacks = settings.fallbacks.clone();
            self.chain = self.settings.chain();
            self.chain_index = 0;
            self.retries = 0;
        }
        self.frame_stored = false;
    }

    /// The models the run goes on with: the rest of its chain from the current one.
    pub fn remaining_chain(&self) -> &[ModelTarget] {
        &self.chain[self.chain_index.min(self.chain.len().saturating_sub(1))..]
    }
}
