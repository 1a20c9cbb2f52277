//! How far delegation may go (`[delegation]` in keel.toml), and the bounds a policy may not pass.

use serde::{Deserialize, Serialize};

/// Default for [`DelegationPolicy::max_parallel`].
pub const DEFAULT_MAX_PARALLEL: u32 = 3;
/// Default for [`DelegationPolicy::max_depth`].
pub const DEFAULT_MAX_DEPTH: u32 = 2;
/// Default for [`DelegationPolicy::max_iterations`].
pub const DEFAULT_MAX_ITERATIONS: u32 = 50;

/// Upper bounds a policy may not pass: beyond them a setting is a mistake, not a choice.
pub(super) const MAX_PARALLEL_LIMIT: u32 = 16;
const MAX_DEPTH_LIMIT: u32 = 5;
const MAX_ITERATIONS_LIMIT: u32 = 1000;

/// How far delegation may go (`[delegation]` in keel.toml).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelegationPolicy {
    /// Most tasks one call may run concurrently.
    pub max_parallel: u32,
    /// Deepest a sub-agent may be: a run at this depth has no `delegate_task`.
    pub max_depth: u32,
    /// Most iterations a child may use; a task asking for more gets this many.
    pub max_iterations: u32,
    /// The model children use (on the parent's provider); the parent's when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl Default for DelegationPolicy {
    fn default() -> Self {
        DelegationPolicy {
            max_parallel: DEFAULT_MAX_PARALLEL,
            max_depth: DEFAULT_MAX_DEPTH,
            max_iterations: DEFAULT_MAX_ITERATIONS,
            model: None,
        }
    }
}

impl DelegationPolicy {
    /// Checks every bound; the error names the setting and what it may be.
    pub fn validate(&self) -> Result<(), String> {
        let check = |name: &str, value: u32, max: u32| {
            if value == 0 || value > max {
                Err(format!(
                    "[delegation] {name} must be between 1 and {max}, not {value}"
                ))
            } else {
                Ok(())
            }
        };
        check("max_parallel", self.max_parallel, MAX_PARALLEL_LIMIT)?;
        check("max_depth", self.max_depth, MAX_DEPTH_LIMIT)?;
        check("max_iterations", self.max_iterations, MAX_ITERATIONS_LIMIT)?;
        if self.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
            return Err("[delegation] model must not be empty".into());
        }
        Ok(())
    }
}
