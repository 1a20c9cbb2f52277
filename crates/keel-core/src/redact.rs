//! Redaction: secrets never leave in text keel shows or stores. A [`Redactor`] replaces the
//! userinfo of every URL (`http://user:pass@host` → `http://[redacted]@host`) and every known
//! secret value (API keys, passwords) with `[redacted]`.
//!
//! It is applied where outside text enters keel: [`RedactingProvider`] wraps a provider so its
//! errors (which quote URLs and response bodies, and so end up in events, the run record, the
//! `--json` report and the terminal) are clean before anything else sees them.

use std::sync::Arc;

use async_trait::async_trait;

use crate::provider::{ChatRequest, ChatResponse, DeltaSink, Provider, StreamDelta};
use crate::provider_error::ProviderError;

/// What stands in for a removed secret.
pub const REDACTED: &str = "[redacted]";

/// Secrets shorter than this are not searched for: they would match ordinary text.
const MIN_SECRET_CHARS: usize = 4;

/// Removes URL userinfo and known secret values from text.
#[derive(Clone, Debug, Default)]
pub struct Redactor {
    secrets: Vec<String>,
}

impl Redactor {
    /// A redactor for `secrets` (blank and very short values are ignored) and URL userinfo.
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Self {
        let mut secrets: Vec<String> = secrets
            .into_iter()
            .filter(|s| s.trim().chars().count() >= MIN_SECRET_CHARS)
            .collect();
        // Longest first, so a secret containing another is removed whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Redactor { secrets }
    }

    /// The secret `url` carries in its userinfo (the password, or a lone user name, which is
    /// then a token), as written and percent-decoded, to redact wherever it appears on its own.
    pub fn userinfo_secrets(url: &str) -> Vec<String> {
        let Some((_, rest)) = url.split_once("://") else {
            return Vec::new();
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let Some((userinfo, _)) = authority.rsplit_once('@') else {
            return Vec::new();
        };
        let secret = match userinfo.split_once(':') {
            Some((_, password)) => password,
            None => userinfo,
        };
        vec![secret.to_string(), percent_decoded(secret)]
    }

    /// `text` without URL userinfo and known secrets.
    pub fn redact(&self, text: &str) -> String {
        let mut clean = redact_userinfo(text);
        for secret in &self.secrets {
            if clean.contains(secret.as_str()) {
                clean = clean.replace(secret.as_str(), REDACTED);
            }
        }
        clean
    }
}

/// `text` with the userinfo of every `scheme://user:pass@host` replaced by [`REDACTED`].
pub fn redact_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        // The authority ends at the path, query, fragment, or anything that cannot be in a URL.
        let end = after
            .find(|c: char| {
                matches!(c, '/' | '?' | '#' | '"' | '\'' | '<' | '>' | '`' | '\\')
                    || c.is_whitespace()
            })
            .unwrap_or(after.len());
        let authority = &after[..end];
        match authority.rfind('@') {
            Some(at) => {
                out.push_str(REDACTED);
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// `%XX` escapes decoded; anything undecodable is kept as written.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                decoded.push(byte);
                i += 3;
            }
            (byte, _) => {
                decoded.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(decoded).unwrap_or_else(|_| text.to_string())
}

/// A provider whose errors and stream warnings are redacted.
pub struct RedactingProvider {
    inner: Arc<dyn Provider>,
    redactor: Redactor,
}

impl RedactingProvider {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Provider>, redactor: Redactor) -> Self {
        RedactingProvider { inner, redactor }
    }
}

#[async_trait]
impl Provider for RedactingProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        sink: &dyn DeltaSink,
    ) -> Result<ChatResponse, ProviderError> {
        let sink = RedactingSink {
            inner: sink,
            redactor: &self.redactor,
        };
        self.inner.chat(request, &sink).await.map_err(|mut error| {
            error.message = self.redactor.redact(&error.message);
            error
        })
    }
}

/// Passes deltas on, with warnings redacted.
struct RedactingSink<'a> {
    inner: &'a dyn DeltaSink,
    redactor: &'a Redactor,
}

impl DeltaSink for RedactingSink<'_> {
    fn delta(&self, delta: &StreamDelta) {
        match delta {
            StreamDelta::Warning { message } => self.inner.delta(&StreamDelta::Warning {
                message: self.redactor.redact(message),
            }),
            other => self.inner.delta(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_is_removed_from_every_url() {
        assert_eq!(
            redact_userinfo("cannot reach http://user:pw@127.0.0.1:1/v1: refused"),
            "cannot reach http://[redacted]@127.0.0.1:1/v1: refused"
        );
        assert_eq!(
            redact_userinfo("a https://tok@h/x and \"ws://u:p@h\" b"),
            "a https://[redacted]@h/x and \"ws://[redacted]@h\" b"
        );
        let plain = "see http://example.com/a@b and mailto:x@y.z, no scheme://";
        assert_eq!(redact_userinfo(plain), plain);
    }

    #[test]
    fn known_secrets_are_removed_longest_first() {
        let redactor = Redactor::new(["sk-abc".to_string(), "sk-abcdef".into(), "x".into()]);
        assert_eq!(
            redactor.redact("key sk-abcdef and sk-abc, x stays"),
            "key [redacted] and [redacted], x stays"
        );
    }

    #[test]
    fn a_urls_userinfo_parts_become_secrets() {
        let secrets = Redactor::userinfo_secrets("http://user:p%40ss@host/v1");
        assert!(secrets.contains(&"p%40ss".to_string()), "{secrets:?}");
        assert!(secrets.contains(&"p@ss".to_string()), "{secrets:?}");
        assert!(!secrets.contains(&"user".to_string()), "{secrets:?}");
        let token = Redactor::userinfo_secrets("https://ghp_token@host/");
        assert!(token.contains(&"ghp_token".to_string()), "{token:?}");
        assert!(Redactor::userinfo_secrets("http://host/a@b").is_empty());
    }
}
