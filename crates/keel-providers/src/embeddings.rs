//! An OpenAI-compatible embeddings endpoint (`POST {base}/embeddings`, which OpenAI, Ollama
//! and vLLM serve): texts in, one vector per text out, in order. Built on the adapters' HTTP
//! plumbing, so its transport and HTTP errors are classified as a chat call's are.

use std::time::Duration;

use keel_core::{ProviderError, ProviderErrorKind};
use reqwest::Url;
use serde::Deserialize;
use serde_json::json;

use crate::http::{self, ConfigError};
use crate::openai_chat::OpenAiConfig;

/// The most texts one request carries; longer lists go in several requests.
pub const BATCH_SIZE: usize = 64;

/// A client of one embeddings model.
#[derive(Debug)]
pub struct OpenAiEmbeddings {
    model: String,
    api_key: Option<String>,
    client: reqwest::Client,
    origin: String,
    endpoint: Url,
}

#[derive(Deserialize)]
struct Answer {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    index: usize,
    embedding: Vec<f32>,
}

impl OpenAiEmbeddings {
    /// A client of `model` at the endpoint `config` names (its base URL, key and timeouts).
    pub fn new(config: &OpenAiConfig, model: impl Into<String>) -> Result<Self, ConfigError> {
        let (origin, _) = http::checked_base_url(&config.base_url)?;
        let client = http::build_client(config.connect_timeout, config.request_timeout)?;
        Ok(OpenAiEmbeddings {
            model: model.into(),
            api_key: config.api_key.clone(),
            endpoint: http::endpoint(&origin, "/embeddings")?,
            origin,
            client,
        })
    }

    /// The model it asks.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The embeddings of `texts`, in order, in requests of at most [`BATCH_SIZE`] texts, each
    /// bounded by `timeout`.
    pub async fn embed(
        &self,
        texts: &[String],
        timeout: Duration,
    ) -> Result<Vec<Vec<f32>>, ProviderError> {
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(BATCH_SIZE) {
            vectors.extend(self.embed_batch(batch, timeout).await?);
        }
        Ok(vectors)
    }

    async fn embed_batch(
        &self,
        texts: &[String],
        timeout: Duration,
    ) -> Result<Vec<Vec<f32>>, ProviderError> {
        let body = json!({"model": self.model, "input": texts});
        let mut request = self
            .client
            .post(self.endpoint.clone())
            .json(&body)
            .timeout(timeout);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = http::send(request, &self.origin).await?;
        let bytes = http::read_body(response, &self.origin).await?;
        let malformed = |why: String| {
            ProviderError::new(
                ProviderErrorKind::MalformedResponse,
                format!("{} answered embeddings {why}", self.origin),
            )
        };
        let mut answer: Answer = serde_json::from_slice(&bytes)
            .map_err(|e| malformed(format!("that do not decode: {e}")))?;
        answer.data.sort_by_key(|item| item.index);
        let in_order = answer
            .data
            .iter()
            .enumerate()
            .all(|(i, item)| item.index == i);
        if answer.data.len() != texts.len() || !in_order {
            return Err(malformed(format!(
                "for {} of the {} texts sent",
                answer.data.len(),
                texts.len()
            )));
        }
        Ok(answer.data.into_iter().map(|item| item.embedding).collect())
    }
}
