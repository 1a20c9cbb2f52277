//! `[memory]` of keel.toml: the `memory` tool's notes (see [`keel_extensions::memory_notes`]) and,
//! when `facts = true`, known facts recalled into each run's system prompt (the `keel-memory`
//! crate) with the `remember` and `forget` tools.
//!
//! ```toml
//! [memory]
//! enabled = true        # memory at all: the `memory` tool and its notes in new sessions (true)
//! memory_chars = 2200   # the limit of MEMORY.md, what the agent learned (2200)
//! user_chars = 1375     # the limit of USER.md, about the user (1375)
//! facts = false         # known facts: recall, `remember` and `forget` (false)
//! embeddings_model = "text-embedding-3-small"  # on the primary provider's /v1/embeddings;
//!                                              # without it, full text and recency alone
//! embeddings_fallback = ["azure"]  # providers serving the same model, asked in order when
//!                                  # the primary's retries are spent ([retry] applies)
//! top_k = 5             # facts recalled by relevance (pinned ones come on top)
//! token_budget = 500    # the most tokens the known-facts section takes
//! extract = false       # after each run, the summary model (else the run's) names the facts
//!                       # in what the user said, and they are remembered (false)
//! importance = "rules"  # how stored messages are scored: keel's rules as they are stored,
//!                       # or "model": rescored by the summary model after each run
//! ```
//!
//! With `facts = true`, messages of the user's earlier sessions are recalled too: by full text,
//! and by meaning once embedded (messages scoring at least 0.5 are embedded after their run
//! when `embeddings_model` is set); the user's three latest messages scoring at least 0.9 are
//! pinned.
//!
//! The notes are files under `$KEEL_HOME/memory/<user>/`, out of the file tools' reach (they
//! never touch keel's home), so the model edits them only through the tool and its limits.

use std::path::PathBuf;
use std::sync::Arc;

use keel_core::recovery::RetryPolicy;
use keel_extensions::memory_notes::MemoryLimits;
use keel_memory::embedding::EmbedderChain;
use keel_memory::{Memory, RetrievalSettings};
use keel_platform::DaemonStore;
use keel_providers::{OpenAiConfig, OpenAiEmbeddings};
use keel_tools::FileMemory;
use serde::Deserialize;

use crate::config::ConfigError;
use crate::resolve::ProviderChoice;

/// The most characters a note's limit may be: the notes go into every session's prompt.
pub const MAX_NOTE_CHARS: usize = 100_000;

/// `[memory]` as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryConfig {
    /// Whether runs have memory at all (true).
    pub enabled: Option<bool>,
    /// The limit of `MEMORY.md`, in characters (2200).
    pub memory_chars: Option<usize>,
    /// The limit of `USER.md`, in characters (1375).
    pub user_chars: Option<usize>,
    /// Known facts: recalled into each run, written with `remember` (false).
    pub facts: Option<bool>,
    /// The embeddings model, on the primary provider's OpenAI-compatible endpoint.
    pub embeddings_model: Option<String>,
    /// Providers serving the same embeddings model, asked in order when the primary fails.
    pub embeddings_fallback: Option<Vec<String>>,
    /// Facts recalled by relevance.
    pub top_k: Option<usize>,
    /// The most tokens recalled facts take.
    pub token_budget: Option<usize>,
    /// Extract facts from what the user said after each run (false).
    pub extract: Option<bool>,
    /// How stored messages are scored: `rules` or `model`.
    pub importance: Option<String>,
}

/// `[memory]`, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct MemorySettings {
    /// Whether runs are offered the `memory` tool.
    pub enabled: bool,
    /// The notes' limits.
    pub limits: MemoryLimits,
    /// Where the notes are (`$KEEL_HOME/memory`); set when the settings are loaded for a home.
    pub dir: Option<PathBuf>,
    /// Whether known facts are on.
    pub facts: bool,
    /// The embeddings model, when vectors are wanted.
    pub embeddings_model: Option<String>,
    /// The providers asked for the same model's embeddings, in order, when the primary's
    /// retries are spent; resolved with the rest of the settings.
    pub embeddings_fallbacks: Vec<ProviderChoice>,
    /// How retrieval chooses.
    pub retrieval: RetrievalSettings,
    /// Whether facts are extracted after each run.
    pub extract: bool,
    /// Whether a model rescores messages after each run.
    pub model_importance: bool,
}

impl MemoryConfig {
    /// The effective settings, or what is wrong with the section.
    pub fn settings(&self) -> Result<MemorySettings, String> {
        let defaults = MemoryLimits::default();
        let limit = |value: Option<usize>, default: usize, key: &str| match value {
            None => Ok(default),
            Some(n) if (1..=MAX_NOTE_CHARS).contains(&n) => Ok(n),
            Some(n) => Err(format!(
                "[memory] {key} = {n}: use 1 to {MAX_NOTE_CHARS} characters"
            )),
        };
        let mut retrieval = RetrievalSettings::default();
        if let Some(k) = self.top_k {
            if !(1..=50).contains(&k) {
                return Err(format!("[memory] top_k must be 1 to 50, not {k}"));
            }
            retrieval.top_k = k;
        }
        if let Some(budget) = self.token_budget {
            if !(16..=20_000).contains(&budget) {
                return Err(format!(
                    "[memory] token_budget must be 16 to 20000, not {budget}"
                ));
            }
            retrieval.token_budget = budget;
        }
        let embeddings_model = self.embeddings_model.as_deref().map(str::trim);
        if embeddings_model == Some("") {
            return Err(
                "[memory] embeddings_model must not be empty; leave it out for full text and \
                 recency alone"
                    .into(),
            );
        }
        let model_importance = match self.importance.as_deref().map(str::trim) {
            None | Some("rules") => false,
            Some("model") => true,
            Some(other) => {
                return Err(format!(
                    "[memory] importance = {other:?}: use \"rules\" or \"model\""
                ));
            }
        };
        let enabled = self.enabled.unwrap_or(true);
        let facts = enabled && self.facts.unwrap_or(false);
        if !facts && (self.extract == Some(true) || model_importance) {
            return Err(
                "[memory] extract and importance = \"model\" need facts = true (and memory \
                 enabled)"
                    .into(),
            );
        }
        Ok(MemorySettings {
            enabled,
            limits: MemoryLimits {
                memory_chars: limit(self.memory_chars, defaults.memory_chars, "memory_chars")?,
                user_chars: limit(self.user_chars, defaults.user_chars, "user_chars")?,
            },
            dir: None,
            facts,
            embeddings_model: embeddings_model.map(str::to_string),
            embeddings_fallbacks: Vec::new(),
            retrieval,
            extract: self.extract.unwrap_or(false),
            model_importance,
        })
    }
}

impl MemorySettings {
    /// The notes' backend, when memory is on and the settings know keel's home.
    pub fn backend(&self) -> Option<Arc<FileMemory>> {
        let dir = self.dir.as_ref().filter(|_| self.enabled)?;
        Some(Arc::new(FileMemory::new(dir)))
    }
}

/// The known facts of an agent on `store`, when `facts = true`: embeddings from the primary
/// provider's `/v1/embeddings` when a model is named, retried under `retry` and failing over
/// to the configured fallbacks as model calls do; extraction and model scores, when on, with
/// `learning_model` (the summary model, else the run's).
pub fn memory(
    settings: &MemorySettings,
    provider: &ProviderChoice,
    retry: &RetryPolicy,
    store: Arc<dyn DaemonStore>,
    learning_model: Option<(Arc<dyn keel_core::provider::Provider>, String)>,
) -> Result<Option<Arc<Memory>>, ConfigError> {
    if !settings.facts {
        return Ok(None);
    }
    let mut memory = Memory::new(store)
        .with_settings(settings.retrieval.clone())
        .with_learning(keel_memory::Learning {
            model: learning_model,
            extract: settings.extract,
            model_importance: settings.model_importance,
        });
    if let Some(model) = &settings.embeddings_model {
        let primary = embeddings(provider, model)?;
        let fallbacks = settings
            .embeddings_fallbacks
            .iter()
            .map(|fallback| embeddings(fallback, model))
            .collect::<Result<Vec<_>, _>>()?;
        let chain = EmbedderChain::new(primary, fallbacks, retry.clone())
            .map_err(|e| ConfigError(format!("[memory] {e}")))?;
        memory = memory.with_embedder(Arc::new(chain));
    }
    Ok(Some(Arc::new(memory)))
}

/// `model`'s embeddings at `provider`'s OpenAI-compatible endpoint.
fn embeddings(
    provider: &ProviderChoice,
    model: &str,
) -> Result<Arc<dyn keel_memory::Embedder>, ConfigError> {
    let mut config = OpenAiConfig::new(provider.base_url.clone());
    config.name = provider.name.clone();
    config.api_key = provider.api_key.clone();
    let embeddings = OpenAiEmbeddings::new(&config, model).map_err(|e| {
        ConfigError(format!(
            "[memory] cannot reach embeddings at provider `{}`: {e}",
            provider.name
        ))
    })?;
    Ok(Arc::new(embeddings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_bad_limits() {
        let settings = MemoryConfig::default().settings().unwrap();
        assert!(settings.enabled && !settings.facts);
        assert_eq!(settings.limits, MemoryLimits::default());
        assert_eq!(settings.retrieval, RetrievalSettings::default());
        assert!(settings.backend().is_none(), "no home, no notes");
        let config: MemoryConfig = toml::from_str("memory_chars = 0").unwrap();
        assert!(config.settings().unwrap_err().contains("memory_chars = 0"));
        let config: MemoryConfig = toml::from_str("user_chars = 100001").unwrap();
        assert!(config.settings().unwrap_err().contains("user_chars"));
        assert!(toml::from_str::<MemoryConfig>("chars = 1").is_err());
        let config: MemoryConfig = toml::from_str("enabled = false\nmemory_chars = 10").unwrap();
        let mut settings = config.settings().unwrap();
        assert_eq!(settings.limits.memory_chars, 10);
        settings.dir = Some("/tmp/x".into());
        assert!(settings.backend().is_none(), "off");
    }

    #[test]
    fn facts_are_off_by_default_and_bounds_checked() {
        let on: MemoryConfig = toml::from_str("facts = true").unwrap();
        assert!(on.settings().unwrap().facts);
        let off: MemoryConfig = toml::from_str("facts = true\nenabled = false").unwrap();
        assert!(
            !off.settings().unwrap().facts,
            "enabled = false turns all memory off"
        );
        let bad: MemoryConfig = toml::from_str("top_k = 0").unwrap();
        assert!(bad.settings().unwrap_err().contains("top_k"));
        let blank: MemoryConfig = toml::from_str("embeddings_model = \" \"").unwrap();
        assert!(blank.settings().unwrap_err().contains("embeddings_model"));
    }

    #[test]
    fn extraction_and_model_scores_are_off_by_default_and_need_facts() {
        let settings = MemoryConfig::default().settings().unwrap();
        assert!(!settings.extract && !settings.model_importance);
        let on: MemoryConfig =
            toml::from_str("facts = true\nextract = true\nimportance = \"model\"").unwrap();
        let on = on.settings().unwrap();
        assert!(on.extract && on.model_importance);
        let rules: MemoryConfig = toml::from_str("facts = true\nimportance = \"rules\"").unwrap();
        assert!(!rules.settings().unwrap().model_importance);
        let bad: MemoryConfig = toml::from_str("facts = true\nimportance = \"vibes\"").unwrap();
        assert!(
            bad.settings()
                .unwrap_err()
                .contains("\"rules\" or \"model\"")
        );
        let orphan: MemoryConfig = toml::from_str("extract = true").unwrap();
        assert!(orphan.settings().unwrap_err().contains("need facts = true"));
    }
}
