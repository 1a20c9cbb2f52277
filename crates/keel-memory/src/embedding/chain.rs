//! Embeddings that outlast a failing endpoint: the classified retries and the fallback order of
//! a model call ([`keel_core::recovery::decide`]) over a chain of endpoints serving the same
//! embeddings model (seed 004's auxiliary-task chains). Vectors of different models cannot be
//! compared, so every link must serve the primary's model.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use keel_core::recovery::{self, Recovery, RetryPolicy};
use keel_core::{ProviderError, ProviderErrorKind};

use super::Embedder;

/// Embeddings from the first endpoint of a chain that answers: a transient failure is retried
/// after a backoff (or the endpoint's Retry-After), and once the endpoint's retries are spent,
/// or it lacks the model, the next one is asked.
pub struct EmbedderChain {
    links: Vec<Arc<dyn Embedder>>,
    retry: RetryPolicy,
    /// Spreads the backoffs of concurrent callers (xorshift state).
    jitter: AtomicU64,
}

impl EmbedderChain {
    /// `primary`, then `fallbacks` in order, with `retry`'s retries on each; an error names a
    /// fallback that serves another model than the primary.
    pub fn new(
        primary: Arc<dyn Embedder>,
        fallbacks: Vec<Arc<dyn Embedder>>,
        retry: RetryPolicy,
    ) -> Result<Self, String> {
        if let Some(other) = fallbacks.iter().find(|f| f.model() != primary.model()) {
            return Err(format!(
                "an embeddings fallback must serve the same model as the primary (`{}`), not \
                 `{}`: vectors of different models cannot be compared",
                primary.model(),
                other.model()
            ));
        }
        let mut links = vec![primary];
        links.extend(fallbacks);
        Ok(EmbedderChain {
            links,
            retry,
            jitter: AtomicU64::new(0x9E37_79B9_7F4A_7C15),
        })
    }

    /// A number in [0, 1) for the next backoff.
    fn next_jitter(&self) -> f64 {
        let mut x = self.jitter.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.jitter.store(x, Ordering::Relaxed);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[async_trait]
impl Embedder for EmbedderChain {
    fn model(&self) -> &str {
        self.links[0].model()
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
        self.embed_classified(texts)
            .await
            .map_err(|e| e.to_string())
    }

    async fn embed_classified(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ProviderError> {
        let mut index = 0;
        let mut retries = 0;
        loop {
            let error = match self.links[index].embed_classified(texts).await {
                Ok(vectors) => return Ok(vectors),
                Err(error) => error,
            };
            let has_next = index + 1 < self.links.len();
            match recovery::decide(&error, retries, has_next, &self.retry, self.next_jitter()) {
                Recovery::Retry { wait } => {
                    retries += 1;
                    tokio::time::sleep(wait).await;
                }
                // Texts too long for this endpoint may fit the next one's limits.
                Recovery::Fallback | Recovery::ContextOverflow if has_next => {
                    index += 1;
                    retries = 0;
                }
                Recovery::Fail(message) if self.links.len() > 1 => {
                    return Err(ProviderError::new(
                        error.kind,
                        format!(
                            "{message} (embeddings endpoint {} of {})",
                            index + 1,
                            self.links.len()
                        ),
                    ));
                }
                _ => return Err(error),
            }
        }
    }
}

/// A failure an [`Embedder`] reported in words only: not classified, so neither retried nor
/// passed on to the next endpoint.
pub(super) fn unclassified(message: String) -> ProviderError {
    ProviderError::new(ProviderErrorKind::Unknown, message)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;

    /// Answers with the scripted outcomes in order (the last one forever), counting calls.
    struct Scripted {
        model: String,
        outcomes: Mutex<Vec<Result<f32, ProviderError>>>,
        calls: AtomicU64,
    }

    impl Scripted {
        fn new(model: &str, outcomes: Vec<Result<f32, ProviderError>>) -> Arc<Scripted> {
            Arc::new(Scripted {
                model: model.into(),
                outcomes: Mutex::new(outcomes),
                calls: AtomicU64::new(0),
            })
        }

        fn calls(&self) -> u64 {
            self.calls.load(Ordering::SeqCst)
        }
    }

    #[async_trait]
    impl Embedder for Scripted {
        fn model(&self) -> &str {
            &self.model
        }

        async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
            self.embed_classified(texts)
                .await
                .map_err(|e| e.to_string())
        }

        async fn embed_classified(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ProviderError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let mut outcomes = self.outcomes.lock().unwrap();
            let outcome = if outcomes.len() > 1 {
                outcomes.remove(0)
            } else {
                outcomes[0].clone()
            };
            outcome.map(|x| texts.iter().map(|_| vec![x, 0.0]).collect())
        }
    }

    fn error(kind: ProviderErrorKind) -> ProviderError {
        ProviderError::new(kind, "embeddings down")
    }

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_retries: 2,
            base_delay: Duration::from_secs(1),
            ..RetryPolicy::default()
        }
    }

    fn texts() -> Vec<String> {
        vec!["the deploy target is eu-west-3".into()]
    }

    #[tokio::test(start_paused = true)]
    async fn a_transient_failure_is_retried_after_its_backoff() {
        let primary = Scripted::new(
            "e",
            vec![
                Err(error(ProviderErrorKind::RateLimit).with_retry_after(Duration::from_secs(3))),
                Ok(1.0),
            ],
        );
        let chain = EmbedderChain::new(primary.clone(), vec![], policy()).unwrap();
        let started = tokio::time::Instant::now();
        let vectors = chain.embed(&texts()).await.unwrap();
        assert_eq!(vectors, [vec![1.0, 0.0]]);
        assert_eq!(primary.calls(), 2);
        assert_eq!(started.elapsed(), Duration::from_secs(3), "waited as asked");
    }

    #[tokio::test(start_paused = true)]
    async fn an_endpoint_that_stays_down_fails_over_to_the_next() {
        let primary = Scripted::new("e", vec![Err(error(ProviderErrorKind::Server))]);
        let backup = Scripted::new("e", vec![Ok(2.0)]);
        let chain = EmbedderChain::new(primary.clone(), vec![backup.clone()], policy()).unwrap();
        let vectors = chain.embed(&texts()).await.unwrap();
        assert_eq!(vectors, [vec![2.0, 0.0]]);
        assert_eq!(
            (primary.calls(), backup.calls()),
            (3, 1),
            "two retries first"
        );
        assert_eq!(chain.model(), "e");
    }

    #[tokio::test(start_paused = true)]
    async fn a_missing_model_fails_over_at_once_and_a_bad_key_stops() {
        let primary = Scripted::new("e", vec![Err(error(ProviderErrorKind::ModelNotFound))]);
        let backup = Scripted::new("e", vec![Ok(3.0)]);
        let chain = EmbedderChain::new(primary.clone(), vec![backup.clone()], policy()).unwrap();
        assert_eq!(chain.embed(&texts()).await.unwrap(), [vec![3.0, 0.0]]);
        assert_eq!(primary.calls(), 1);

        let locked = Scripted::new("e", vec![Err(error(ProviderErrorKind::Auth))]);
        let unused = Scripted::new("e", vec![Ok(4.0)]);
        let chain = EmbedderChain::new(locked, vec![unused.clone()], policy()).unwrap();
        let error = chain.embed(&texts()).await.unwrap_err();
        assert!(
            error.contains("API key") && error.contains("endpoint 1 of 2"),
            "{error}"
        );
        assert_eq!(unused.calls(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn when_every_endpoint_fails_the_last_error_is_told() {
        let primary = Scripted::new("e", vec![Err(error(ProviderErrorKind::Network))]);
        let backup = Scripted::new("e", vec![Err(error(ProviderErrorKind::Overloaded))]);
        let chain = EmbedderChain::new(primary, vec![backup.clone()], policy()).unwrap();
        let error = chain.embed_classified(&texts()).await.unwrap_err();
        assert_eq!(error.kind, ProviderErrorKind::Overloaded);
        assert!(error.message.contains("endpoint 2 of 2"), "{error}");
        assert_eq!(backup.calls(), 3);
    }

    #[test]
    fn a_fallback_of_another_model_is_refused() {
        let primary = Scripted::new("small", vec![Ok(1.0)]);
        let other = Scripted::new("large", vec![Ok(1.0)]);
        let Err(error) = EmbedderChain::new(primary, vec![other], policy()) else {
            panic!("a chain of two models was built");
        };
        assert!(error.contains("same model"), "{error}");
    }
}
