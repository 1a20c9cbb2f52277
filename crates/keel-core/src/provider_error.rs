//! Classified provider errors: every failure of a model call, sorted into the classes the
//! recovery policy acts on.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The class of a provider failure. See DESIGN.md section 4 for what the loop does with each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderErrorKind {
    /// Bad or missing credentials (401, 403).
    Auth,
    /// Out of credit or quota (402, insufficient_quota).
    Billing,
    /// Too many requests (429).
    RateLimit,
    /// The provider is overloaded (Anthropic 529, `overloaded_error`).
    Overloaded,
    /// A server-side failure (5xx).
    Server,
    /// The call took too long.
    Timeout,
    /// Connection refused or reset, DNS failure, a stream that broke mid-way.
    Network,
    /// The model does not exist or is not available to this key.
    ModelNotFound,
    /// The prompt does not fit the model's context window.
    ContextOverflow,
    /// The provider rejected the request as malformed.
    InvalidRequest,
    /// The provider answered something keel cannot read.
    MalformedResponse,
    /// Anything else.
    Unknown,
}

impl ProviderErrorKind {
    /// The snake_case name used in events and output.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderErrorKind::Auth => "auth",
            ProviderErrorKind::Billing => "billing",
            ProviderErrorKind::RateLimit => "rate_limit",
            ProviderErrorKind::Overloaded => "overloaded",
            ProviderErrorKind::Server => "server",
            ProviderErrorKind::Timeout => "timeout",
            ProviderErrorKind::Network => "network",
            ProviderErrorKind::ModelNotFound => "model_not_found",
            ProviderErrorKind::ContextOverflow => "context_overflow",
            ProviderErrorKind::InvalidRequest => "invalid_request",
            ProviderErrorKind::MalformedResponse => "malformed_response",
            ProviderErrorKind::Unknown => "unknown",
        }
    }
}

impl fmt::Display for ProviderErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed model call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
pub struct ProviderError {
    /// What kind of failure.
    pub kind: ProviderErrorKind,
    /// One line a human can act on.
    pub message: String,
    /// HTTP status, when there was a response.
    pub status: Option<u16>,
    /// How long the provider asked us to wait before retrying.
    #[serde(default, with = "duration_ms_opt")]
    pub retry_after: Option<Duration>,
}

impl ProviderError {
    /// An error of `kind` with a message.
    pub fn new(kind: ProviderErrorKind, message: impl Into<String>) -> Self {
        ProviderError {
            kind,
            message: message.into(),
            status: None,
            retry_after: None,
        }
    }

    /// Sets the HTTP status.
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    /// Sets the wait the provider asked for.
    pub fn with_retry_after(mut self, wait: Duration) -> Self {
        self.retry_after = Some(wait);
        self
    }
}

impl fmt::Display for ProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Some(status) => write!(f, "{} (HTTP {status}): {}", self.kind, self.message),
            None => write!(f, "{}: {}", self.kind, self.message),
        }
    }
}

mod duration_ms_opt {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => s.serialize_some(&(d.as_millis() as u64)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}
