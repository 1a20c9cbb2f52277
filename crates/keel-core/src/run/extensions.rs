//! The run's extensions: which one answers each loop tool the run offers, found once per run
//! (and again when a restored run is given its resuming agent's extensions).

use std::sync::Arc;

use super::Run;
use crate::agent_tools;
use crate::extension::{Extension, ExtensionSet};

impl Run {
    /// Finds which extension answers each offered loop tool.
    pub(super) fn index_loop_tools(&mut self) {
        self.by_loop.clear();
        for (index, extension) in self.settings.extensions.iter().enumerate() {
            for spec in extension.loop_tools(&self.settings) {
                if self.has_tool(&spec.name) && !self.by_loop.iter().any(|(n, _)| *n == spec.name) {
                    self.by_loop.push((spec.name, index));
                }
            }
        }
    }

    /// The run with `extensions` (a restored run gets its resuming agent's).
    pub fn with_extensions(mut self, extensions: ExtensionSet) -> Self {
        self.settings.extensions = extensions;
        self.index_loop_tools();
        self
    }

    /// True when the loop answers calls to `name` itself.
    pub(super) fn answered_by_loop(&self, name: &str) -> bool {
        name == agent_tools::ASK_HUMAN || self.by_loop.iter().any(|(n, _)| n == name)
    }

    /// The extension that answers the loop tool `name`.
    pub(super) fn loop_extension(&self, name: &str) -> Option<Arc<dyn Extension>> {
        let (_, index) = self.by_loop.iter().find(|(n, _)| n == name)?;
        self.settings.extensions.iter().nth(*index).cloned()
    }
}
