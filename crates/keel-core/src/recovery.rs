//! What to do when a model call fails (DESIGN.md section 4): retry after a wait, move to the
//! next model of the fallback chain, or stop — decided from the error's class alone.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::provider_error::{ProviderError, ProviderErrorKind};

/// How hard to try before giving up on a model (`[models]` / `[recovery]` in keel.toml).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RetryPolicy {
    /// Retries per model for transient failures (rate limit, overload, server, network...).
    pub max_retries: u32,
    /// The first backoff; each retry doubles it.
    #[serde(with = "millis")]
    pub base_delay: Duration,
    /// The longest backoff.
    #[serde(with = "millis")]
    pub max_delay: Duration,
    /// The longest wait a provider's Retry-After may impose.
    #[serde(with = "millis")]
    pub retry_after_cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 2,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(30),
            retry_after_cap: Duration::from_secs(60),
        }
    }
}

/// The decision for one failure.
#[derive(Clone, Debug, PartialEq)]
pub enum Recovery {
    /// Call the same model again after `wait`.
    Retry {
        /// How long to wait first.
        wait: Duration,
    },
    /// Move to the next model of the chain now.
    Fallback,
    /// The context is too long: hand it to context management.
    ContextOverflow,
    /// Stop; the message tells the user what to do.
    Fail(String),
}

/// Decides what to do about `error`, the `retries` already spent on the current model, and
/// whether a next model exists. `jitter` in [0, 1) spreads backoffs so that many runs do not
/// retry in lockstep.
pub fn decide(
    error: &ProviderError,
    retries: u32,
    has_fallback: bool,
    policy: &RetryPolicy,
    jitter: f64,
) -> Recovery {
    use ProviderErrorKind::*;
    let exhausted = || {
        if has_fallback {
            Recovery::Fallback
        } else {
            Recovery::Fail(format!(
                "model call failed after {} retries: {error}",
                retries
            ))
        }
    };
    match error.kind {
        Auth => Recovery::Fail(format!(
            "{error}. Check the API key: it is missing, wrong, or not allowed to use this model."
        )),
        Billing => Recovery::Fail(format!(
            "{error}. The account is out of credit or quota: add credit or raise the limit."
        )),
        ModelNotFound => {
            if has_fallback {
                Recovery::Fallback
            } else {
                Recovery::Fail(format!(
                    "{error}. Check the model name, or configure a fallback model."
                ))
            }
        }
        ContextOverflow => Recovery::ContextOverflow,
        InvalidRequest | Unknown => Recovery::Fail(format!("model call failed: {error}")),
        RateLimit | Overloaded | Server | Timeout | Network | MalformedResponse => {
            if retries >= policy.max_retries {
                return exhausted();
            }
            let wait = match (error.kind, error.retry_after) {
                (_, Some(asked)) => asked.min(policy.retry_after_cap),
                _ => backoff(retries, policy, jitter),
            };
            Recovery::Retry { wait }
        }
    }
}

/// Exponential backoff with jitter: base × 2^retries, capped, then scaled into [50%, 100%].
pub fn backoff(retries: u32, policy: &RetryPolicy, jitter: f64) -> Duration {
    let exponential = policy
        .base_delay
        .saturating_mul(1u32 << retries.min(16))
        .min(policy.max_delay);
    exponential.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(value.as_millis() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(kind: ProviderErrorKind) -> ProviderError {
        ProviderError::new(kind, "boom")
    }

    #[test]
    fn auth_and_billing_stop_at_once_and_say_what_to_fix() {
        let policy = RetryPolicy::default();
        let Recovery::Fail(message) =
            decide(&error(ProviderErrorKind::Auth), 0, true, &policy, 0.0)
        else {
            panic!("auth must stop");
        };
        assert!(message.contains("API key"));
        let Recovery::Fail(message) =
            decide(&error(ProviderErrorKind::Billing), 0, true, &policy, 0.0)
        else {
            panic!("billing must stop");
        };
        assert!(message.contains("credit"));
    }

    #[test]
    fn rate_limits_wait_as_asked_but_never_more_than_the_cap() {
        let policy = RetryPolicy::default();
        let asked = error(ProviderErrorKind::RateLimit).with_retry_after(Duration::from_secs(7));
        assert_eq!(
            decide(&asked, 0, false, &policy, 0.3),
            Recovery::Retry {
                wait: Duration::from_secs(7)
            }
        );
        let greedy = error(ProviderErrorKind::RateLimit).with_retry_after(Duration::from_secs(600));
        assert_eq!(
            decide(&greedy, 0, false, &policy, 0.3),
            Recovery::Retry {
                wait: Duration::from_secs(60)
            }
        );
    }

    #[test]
    fn transient_errors_back_off_then_fall_back_then_fail() {
        let policy = RetryPolicy::default();
        let server = error(ProviderErrorKind::Server);
        let Recovery::Retry { wait: first } = decide(&server, 0, true, &policy, 1.0) else {
            panic!()
        };
        let Recovery::Retry { wait: second } = decide(&server, 1, true, &policy, 1.0) else {
            panic!()
        };
        assert_eq!(
            (first, second),
            (Duration::from_secs(1), Duration::from_secs(2))
        );
        assert_eq!(decide(&server, 2, true, &policy, 0.0), Recovery::Fallback);
        assert!(matches!(
            decide(&server, 2, false, &policy, 0.0),
            Recovery::Fail(_)
        ));
    }

    #[test]
    fn a_missing_model_falls_back_at_once() {
        let policy = RetryPolicy::default();
        let missing = error(ProviderErrorKind::ModelNotFound);
        assert_eq!(decide(&missing, 0, true, &policy, 0.0), Recovery::Fallback);
        assert!(matches!(
            decide(&missing, 0, false, &policy, 0.0),
            Recovery::Fail(_)
        ));
    }

    #[test]
    fn backoff_is_capped_and_jitter_stays_within_half() {
        let policy = RetryPolicy::default();
        assert_eq!(backoff(10, &policy, 1.0), Duration::from_secs(30));
        assert_eq!(backoff(0, &policy, 0.0), Duration::from_millis(500));
    }

    #[test]
    fn context_overflow_goes_to_context_management() {
        let policy = RetryPolicy::default();
        let overflow = error(ProviderErrorKind::ContextOverflow);
        assert_eq!(
            decide(&overflow, 0, true, &policy, 0.0),
            Recovery::ContextOverflow
        );
    }
}
