//! Redaction: secrets never leave in text keel shows or stores. A [`Redactor`] replaces the
//! userinfo of every URL (`http://user:pass@host` → `http://[redacted]@host`) and every known
//! secret value (API keys, passwords, a base URL's `?token=`) with `[redacted]`.
//!
//! It is applied where outside text enters keel: [`RedactingProvider`] wraps a provider so its
//! errors (which quote URLs and response bodies, and so end up in events, the run record, the
//! `--json` report and the terminal) are clean before anything else sees them; and every tool
//! result passes through the process's [`registered`] secrets before it is stored, shown or
//! sent to a model (see [`crate::tool_exec`]), whatever printed them.

use std::sync::{Arc, PoisonError, RwLock};

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

    /// The secrets `url` carries, as written and percent-decoded, to redact wherever they
    /// appear on their own: the password of its userinfo (or a lone user name, which is then a
    /// token), and the value of every query parameter whose name says it is a secret
    /// (`?token=`, `key=`, `api_key=`, `sig=`, …; see [`is_secret_parameter`]). Other query
    /// values (`api-version=2024-06-01`) are not secrets and would match ordinary text.
    pub fn url_secrets(url: &str) -> Vec<String> {
        let Some((_, rest)) = url.split_once("://") else {
            return Vec::new();
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let userinfo =
            authority
                .rsplit_once('@')
                .map(|(userinfo, _)| match userinfo.split_once(':') {
                    Some((_, password)) => password,
                    None => userinfo,
                });
        let query = rest.split_once('?').map_or("", |(_, query)| query);
        let query = query.split('#').next().unwrap_or_default();
        let parameters = query
            .split(['&', ';'])
            .filter_map(|pair| pair.split_once('='))
            .filter(|(name, _)| is_secret_parameter(&percent_decoded(name)))
            .map(|(_, value)| value);
        userinfo
            .into_iter()
            .chain(parameters)
            .flat_map(|secret| [secret.to_string(), percent_decoded(secret)])
            .collect()
    }

    /// `text` without known secrets and URL userinfo. The secrets go first: one that is a
    /// whole URL with a password (a database URL) goes whole, not only its password.
    pub fn redact(&self, text: &str) -> String {
        let mut clean = text.to_string();
        for secret in &self.secrets {
            if clean.contains(secret.as_str()) {
                clean = clean.replace(secret.as_str(), REDACTED);
            }
        }
        redact_userinfo(&clean)
    }
}

/// The names of query parameters that carry secrets: any name holding `token`, `key`,
/// `secret`, `pass`, `pwd`, `auth`, `sig`, `credential` or `session`, or the name `code`
/// (compared without regard to case).
pub fn is_secret_parameter(name: &str) -> bool {
    const PARTS: [&str; 9] = [
        "token",
        "key",
        "secret",
        "pass",
        "pwd",
        "auth",
        "sig",
        "credential",
        "session",
    ];
    let name = name.to_ascii_lowercase();
    name == "code" || PARTS.iter().any(|part| name.contains(part))
}

/// The secrets of this process, added by [`register_secrets`].
static REGISTERED: RwLock<Option<Arc<Redactor>>> = RwLock::new(None);

/// Adds `secrets` to the process's own (the keys and URL secrets of the providers it set up,
/// the values of its secret environment variables), which every tool result is cleaned of.
/// They are the process's, not one agent's: a tool of any agent may print any of them.
pub fn register_secrets(secrets: impl IntoIterator<Item = String>) {
    let mut registered = REGISTERED.write().unwrap_or_else(PoisonError::into_inner);
    let mut all = registered
        .as_ref()
        .map(|redactor| redactor.secrets.clone())
        .unwrap_or_default();
    let before = all.len();
    all.extend(secrets);
    if all.len() > before {
        *registered = Some(Arc::new(Redactor::new(all)));
    }
}

/// A redactor for the secrets registered so far (and URL userinfo).
pub fn registered() -> Arc<Redactor> {
    REGISTERED
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .unwrap_or_default()
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
        let secrets = Redactor::url_secrets("http://user:p%40ss@host/v1");
        assert!(secrets.contains(&"p%40ss".to_string()), "{secrets:?}");
        assert!(secrets.contains(&"p@ss".to_string()), "{secrets:?}");
        assert!(!secrets.contains(&"user".to_string()), "{secrets:?}");
        let token = Redactor::url_secrets("https://ghp_token@host/");
        assert!(token.contains(&"ghp_token".to_string()), "{token:?}");
        assert!(Redactor::url_secrets("http://host/a@b").is_empty());
    }

    #[test]
    fn a_urls_secret_query_values_become_secrets_and_others_do_not() {
        let url = "https://host/v1?api-version=2024-06-01&token=tok-123&API_KEY=k%2Fey&sig=s1g9#x";
        let secrets = Redactor::url_secrets(url);
        for secret in ["tok-123", "k%2Fey", "k/ey", "s1g9"] {
            assert!(
                secrets.contains(&secret.to_string()),
                "{secret}: {secrets:?}"
            );
        }
        assert!(!secrets.iter().any(|s| s.contains("2024")), "{secrets:?}");
        let redactor = Redactor::new(secrets);
        let error = format!("error sending request for url ({url}/chat/completions)");
        let clean = redactor.redact(&error);
        assert!(
            !clean.contains("tok-123") && !clean.contains("s1g9"),
            "{clean}"
        );
        assert!(clean.contains("api-version=2024-06-01"), "{clean}");
        for name in [
            "token",
            "key",
            "apikey",
            "access_token",
            "X-Amz-Signature",
            "code",
        ] {
            assert!(is_secret_parameter(name), "{name}");
        }
        for name in ["api-version", "model", "q", "page"] {
            assert!(!is_secret_parameter(name), "{name}");
        }
    }

    #[test]
    fn a_secret_that_is_a_url_goes_whole() {
        let redactor = Redactor::new(["postgres://app:pw-1234@db/prod".to_string()]);
        assert_eq!(
            redactor.redact("DB=postgres://app:pw-1234@db/prod other=http://u:p@h/x"),
            "DB=[redacted] other=http://[redacted]@h/x"
        );
    }

    #[test]
    fn registered_secrets_accumulate() {
        register_secrets(["registered-one-1234".to_string()]);
        register_secrets(["registered-two-5678".to_string()]);
        let clean = registered().redact("a registered-one-1234 b registered-two-5678");
        assert_eq!(clean, "a [redacted] b [redacted]");
    }
}
