//! Embeddings: the [`Embedder`] trait (texts in, vectors out), its implementation on an
//! OpenAI-compatible `/v1/embeddings` endpoint ([`keel_providers::OpenAiEmbeddings`]), and the
//! cosine similarity that compares stored vectors in Rust.

use std::time::Duration;

use async_trait::async_trait;
use keel_core::ProviderError;
use keel_providers::OpenAiEmbeddings;

mod chain;

pub use chain::EmbedderChain;

/// The longest one embeddings request may take before recall goes on without vectors.
pub const EMBED_TIMEOUT: Duration = Duration::from_secs(10);

/// Computes embeddings.
#[async_trait]
pub trait Embedder: Send + Sync {
    /// The model's name, for events.
    fn model(&self) -> &str;

    /// One vector per text, in order; an error says in words why there are none.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String>;

    /// The same, with a failure classified as a model call's is, so that an [`EmbedderChain`]
    /// knows whether to retry it or ask the next endpoint. By default a failure is `unknown`:
    /// neither retried nor passed on.
    async fn embed_classified(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ProviderError> {
        self.embed(texts).await.map_err(chain::unclassified)
    }
}

#[async_trait]
impl Embedder for OpenAiEmbeddings {
    fn model(&self) -> &str {
        OpenAiEmbeddings::model(self)
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
        Embedder::embed_classified(self, texts)
            .await
            .map_err(|e| e.to_string())
    }

    async fn embed_classified(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ProviderError> {
        OpenAiEmbeddings::embed(self, texts, EMBED_TIMEOUT).await
    }
}

/// Embeddings computed in this process by a function: a local model, or a deterministic one for
/// tests and benchmarks (`keel_mock::embeddings::embed`).
pub struct InProcess {
    model: String,
    embed: fn(&str) -> Vec<f32>,
}

impl InProcess {
    /// Embeddings by `embed`, reported as model `model`.
    pub fn new(model: impl Into<String>, embed: fn(&str) -> Vec<f32>) -> Self {
        InProcess {
            model: model.into(),
            embed,
        }
    }
}

#[async_trait]
impl Embedder for InProcess {
    fn model(&self) -> &str {
        &self.model
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
        Ok(texts.iter().map(|text| (self.embed)(text)).collect())
    }
}

/// `vector` scaled to length 1 (unchanged when it is all zeros).
pub fn normalized(mut vector: Vec<f32>) -> Vec<f32> {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 && norm.is_finite() {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
    vector
}

/// The cosine similarity of two vectors of length 1: their dot product. `None` when their
/// lengths differ (vectors of another model).
pub fn cosine(a: &[f32], b: &[f32]) -> Option<f32> {
    (a.len() == b.len()).then(|| dot(a, b))
}

/// The dot product, in eight lanes the compiler can vectorize (a plain sum of floats must be
/// added in order, which it cannot).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a8
        .remainder()
        .iter()
        .zip(b8.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a8.zip(b8) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_of_unit_vectors() {
        let a = normalized(vec![3.0, 4.0]);
        assert!((cosine(&a, &a).unwrap() - 1.0).abs() < 1e-6);
        assert_eq!(cosine(&a, &[1.0, 0.0, 0.0]), None);
        assert_eq!(normalized(vec![0.0, 0.0]), vec![0.0, 0.0]);
        let opposite = normalized(vec![-3.0, -4.0]);
        assert!((cosine(&a, &opposite).unwrap() + 1.0).abs() < 1e-6);
        let long: Vec<f32> = (0..19).map(|i| i as f32).collect();
        let plain: f32 = long.iter().map(|x| x * x).sum();
        assert!((cosine(&long, &long).unwrap() - plain).abs() < 1e-3);
    }
}
