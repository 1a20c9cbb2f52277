//! What the incoming-message pipeline decides for a run beyond its message: the persona's
//! prompt and model settings, which tool modules it may use, and the session's trust and place.
//! It travels with a queued run, so a run started after a restart is the run that was accepted.
//! keel-platform's persona cascade fills it in; the run only applies it.

use serde::{Deserialize, Serialize};

pub use crate::place::PlatformPlace;
use crate::run_settings::RunSettings;
use crate::tool::ToolSpec;

/// Per-run choices on top of the agent's settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunOptions {
    /// The persona's name, for the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persona: Option<String>,
    /// Replaces the agent's system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Replaces the model asked for (same provider).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Cap on output tokens per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// The tool modules the run may use; `None`: every module. A tool of no module is not
    /// offered when it is set: every tool belongs to a module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_modules: Option<Vec<String>>,
    /// The session came from an untrusted source (an email, an event).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub untrusted: bool,
    /// Where the conversation is, for tools that notify.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub place: Option<PlatformPlace>,
}

impl RunOptions {
    /// Applies the options to a run's settings.
    pub fn apply(&self, settings: &mut RunSettings) {
        if let Some(prompt) = &self.system_prompt {
            settings.system_prompt = Some(prompt.clone());
        }
        if let Some(model) = &self.model {
            settings.model = model.clone();
        }
        if self.max_tokens.is_some() {
            settings.max_tokens = self.max_tokens;
        }
        if self.temperature.is_some() {
            settings.temperature = self.temperature;
        }
        settings.untrusted = settings.untrusted || self.untrusted;
        if self.place.is_some() {
            settings.place = self.place.clone();
        }
    }

    /// Whether a tool's module is one the run may use: any tool without `allowed_modules`,
    /// else only a tool of a module it names (never one of no module).
    pub fn allows(&self, tool: &ToolSpec) -> bool {
        match &self.allowed_modules {
            None => true,
            Some(allowed) => tool
                .module
                .as_ref()
                .is_some_and(|module| allowed.contains(module)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(module: Option<&str>) -> ToolSpec {
        let mut spec = ToolSpec::new("t", "", serde_json::json!({"type": "object"}));
        spec.module = module.map(str::to_string);
        spec
    }

    #[test]
    fn allowed_modules_withhold_every_other_tool_even_one_of_no_module() {
        let open = RunOptions::default();
        assert!(open.allows(&tool(None)) && open.allows(&tool(Some("files"))));
        let files = RunOptions {
            allowed_modules: Some(vec!["files".into()]),
            ..RunOptions::default()
        };
        assert!(files.allows(&tool(Some("files"))));
        assert!(!files.allows(&tool(Some("memory"))));
        assert!(
            !files.allows(&tool(None)),
            "a tool of no module slips through"
        );
        let none = RunOptions {
            allowed_modules: Some(Vec::new()),
            ..RunOptions::default()
        };
        assert!(!none.allows(&tool(None)));
    }
}
