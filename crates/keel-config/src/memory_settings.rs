//! `[memory]`: long-term memory (the `keel-memory` crate). Off unless `enabled = true`; then
//! every run recalls known facts about its user into its system prompt, and the model gets the
//! `remember` and `forget` tools.
//!
//! ```toml
//! [memory]
//! enabled = true
//! embeddings_model = "text-embedding-3-small"  # on the primary provider's /v1/embeddings;
//!                                              # without it, full text and recency alone
//! top_k = 5            # facts recalled by relevance (pinned ones come on top)
//! token_budget = 500   # the most tokens the known-facts section takes
//! ```

use std::sync::Arc;

use keel_core::Store;
use keel_memory::{Memory, RetrievalSettings};
use keel_providers::{OpenAiConfig, OpenAiEmbeddings};
use serde::Deserialize;

use crate::config::ConfigError;
use crate::resolve::ProviderChoice;

/// `[memory]` as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryConfig {
    /// Turns memory on.
    pub enabled: Option<bool>,
    /// The embeddings model, on the primary provider's OpenAI-compatible endpoint.
    pub embeddings_model: Option<String>,
    /// Facts recalled by relevance.
    pub top_k: Option<usize>,
    /// The most tokens recalled facts take.
    pub token_budget: Option<usize>,
}

/// `[memory]`, checked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemorySettings {
    /// Memory is on.
    pub enabled: bool,
    /// The embeddings model, when vectors are wanted.
    pub embeddings_model: Option<String>,
    /// How retrieval chooses.
    pub retrieval: RetrievalSettings,
}

impl MemoryConfig {
    /// The settings, or what is wrong with the table.
    pub fn settings(&self) -> Result<MemorySettings, String> {
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
                "[memory] embeddings_model must not be empty; leave it out for full \
                        text and recency alone"
                    .into(),
            );
        }
        Ok(MemorySettings {
            enabled: self.enabled.unwrap_or(false),
            embeddings_model: embeddings_model.map(str::to_string),
            retrieval,
        })
    }
}

/// The memory of an agent on `store`, when `[memory]` is on: embeddings from the primary
/// provider's `/v1/embeddings` when a model is named.
pub fn memory(
    settings: &MemorySettings,
    provider: &ProviderChoice,
    store: Arc<dyn Store>,
) -> Result<Option<Arc<Memory>>, ConfigError> {
    if !settings.enabled {
        return Ok(None);
    }
    let mut memory = Memory::new(store).with_settings(settings.retrieval.clone());
    if let Some(model) = &settings.embeddings_model {
        let mut config = OpenAiConfig::new(provider.base_url.clone());
        config.name = provider.name.clone();
        config.api_key = provider.api_key.clone();
        let embeddings = OpenAiEmbeddings::new(&config, model.clone()).map_err(|e| {
            ConfigError(format!(
                "[memory] cannot reach embeddings at provider `{}`: {e}",
                provider.name
            ))
        })?;
        memory = memory.with_embedder(Arc::new(embeddings));
    }
    Ok(Some(Arc::new(memory)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_by_default_and_bounds_checked() {
        let settings = MemoryConfig::default().settings().unwrap();
        assert!(!settings.enabled);
        assert_eq!(settings.retrieval, RetrievalSettings::default());
        let bad = MemoryConfig {
            top_k: Some(0),
            ..MemoryConfig::default()
        };
        assert!(bad.settings().unwrap_err().contains("top_k"));
        let blank = MemoryConfig {
            embeddings_model: Some(" ".into()),
            ..MemoryConfig::default()
        };
        assert!(blank.settings().unwrap_err().contains("embeddings_model"));
    }
}
