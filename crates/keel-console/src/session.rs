//! Console sessions. Signing in with an API key makes a session: a random token sent back in a
//! cookie (`HttpOnly`, `SameSite=Strict`, `Secure` unless the console is reached over plain
//! HTTP on a loopback address), held here in memory against the key's hash and a per-session
//! CSRF token. Every request re-checks the key in the store, so a revoked key ends its
//! sessions at once; a session also ends at its expiry and at sign-out. Sessions live in the
//! daemon's memory: a restart signs everyone out.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, TimeDelta, Utc};
use keel_server::Caller;
use keel_server::keys::hash_key;

use crate::ConsoleState;
use crate::error::ConsoleError;

/// The session cookie's name over plain HTTP on a loopback address.
pub const SESSION_COOKIE: &str = "keel_session";

/// The session cookie's name everywhere else: the `__Host-` prefix makes the browser take it
/// only when `Secure`, for this host alone, on path `/`.
pub const SECURE_SESSION_COOKIE: &str = "__Host-keel_session";

/// The signed-in person of a console request, from their session: who they are to the API
/// (their key's [`Caller`]) and the CSRF token every form of theirs carries. As an extractor it
/// sends anyone without a live session to the sign-in page.
#[derive(Clone, Debug)]
pub struct Viewer {
    /// What the session's key may see and do.
    pub caller: Caller,
    /// The session's CSRF token: every form posts it as `csrf` (see [`crate::csrf`]).
    pub csrf: String,
}

impl Viewer {
    /// Who the viewer is, in a few words: their user, or "admin", or the platforms.
    pub fn who(&self) -> String {
        match (&self.caller.user_id, self.caller.admin) {
            (Some(user), true) => format!("{user} (admin)"),
            (Some(user), false) => user.clone(),
            (None, true) => "admin".to_string(),
            (None, false) => format!("a key for {}", self.caller.platforms.join(", ")),
        }
    }
}

/// One session, as held in memory.
#[derive(Clone, Debug)]
struct Session {
    key_hash: String,
    csrf: String,
    expires_at: DateTime<Utc>,
}

/// The live sessions, by the hash of their token.
pub struct Sessions {
    lifetime: TimeDelta,
    max: usize,
    by_token_hash: Mutex<HashMap<String, Session>>,
}

/// A session just made: the token for the cookie, and when it ends.
pub struct NewSession {
    /// The token, for the cookie only; never stored.
    pub token: String,
    /// When it expires.
    pub expires_at: DateTime<Utc>,
}

impl Sessions {
    /// No sessions; new ones last `lifetime`, at most `max` at once.
    pub fn new(lifetime: TimeDelta, max: usize) -> Self {
        Sessions {
            lifetime,
            max: max.max(1),
            by_token_hash: Mutex::new(HashMap::new()),
        }
    }

    /// Starts a session for the key whose hash is `key_hash`, at `now`.
    pub fn start(&self, key_hash: String, now: DateTime<Utc>) -> Result<NewSession, ConsoleError> {
        let token = random_token()?;
        let session = Session {
            key_hash,
            csrf: random_token()?,
            expires_at: now + self.lifetime,
        };
        let expires_at = session.expires_at;
        let mut sessions = self.lock();
        sessions.retain(|_, s| s.expires_at > now);
        while sessions.len() >= self.max {
            let oldest = sessions
                .iter()
                .min_by_key(|(_, s)| s.expires_at)
                .map(|(hash, _)| hash.clone());
            match oldest {
                Some(hash) => sessions.remove(&hash),
                None => break,
            };
        }
        sessions.insert(hash_key(&token), session);
        Ok(NewSession { token, expires_at })
    }

    /// The live session of `token` at `now`: its key's hash and CSRF token. An expired one is
    /// forgotten.
    fn live(&self, token: &str, now: DateTime<Utc>) -> Option<Session> {
        let hash = hash_key(token);
        let mut sessions = self.lock();
        match sessions.get(&hash) {
            Some(session) if session.expires_at > now => Some(session.clone()),
            Some(_) => {
                sessions.remove(&hash);
                None
            }
            None => None,
        }
    }

    /// The CSRF token of `token`'s live session at `now`.
    pub fn csrf_of(&self, token: &str, now: DateTime<Utc>) -> Option<String> {
        self.live(token, now).map(|session| session.csrf)
    }

    /// Ends the session of `token` (sign-out, or its key revoked).
    pub fn end(&self, token: &str) {
        self.lock().remove(&hash_key(token));
    }

    /// How many sessions are held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no session is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        // A panic while holding the lock leaves a map that is still whole: keep using it.
        self.by_token_hash
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// 32 random bytes, as hex.
pub(crate) fn random_token() -> Result<String, ConsoleError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|_| {
        ConsoleError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "no randomness from the system",
        )
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether the console is reached over HTTPS as far as the browser knows: everything but plain
/// HTTP to a loopback host (`localhost`, `127.0.0.0/8`, `[::1]`) not forwarded as `https`.
pub fn secure_request(headers: &HeaderMap) -> bool {
    let forwarded_https = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|proto| proto.trim().eq_ignore_ascii_case("https"));
    if forwarded_https {
        return true;
    }
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    !loopback_host(host)
}

fn loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The name of the session cookie for a request like this one.
pub fn cookie_name(headers: &HeaderMap) -> &'static str {
    if secure_request(headers) {
        SECURE_SESSION_COOKIE
    } else {
        SESSION_COOKIE
    }
}

/// The value of cookie `name` in `headers`, if sent.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|line| line.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.trim_matches('"'))
}

/// A `Set-Cookie` value for cookie `name` = `value` on path `/` with the console's flags,
/// lasting `max_age` seconds (0 removes it).
pub fn set_cookie(headers: &HeaderMap, name: &str, value: &str, max_age: i64) -> HeaderValue {
    let secure = if secure_request(headers) {
        "; Secure"
    } else {
        ""
    };
    let line =
        format!("{name}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}");
    // Names and values are ours: ASCII letters, digits, `_` and `-`.
    HeaderValue::from_str(&line).unwrap_or_else(|_| HeaderValue::from_static("x=; Max-Age=0"))
}

/// The session token the request's cookie holds, if any.
pub fn session_token(headers: &HeaderMap) -> Option<&str> {
    cookie(headers, cookie_name(headers)).filter(|token| !token.is_empty())
}

/// Why a request has no [`Viewer`]: no live session (sent to sign in) or the store failed.
pub enum NoViewer {
    /// Sign in first, then come back to the path held (for a GET).
    SignIn(Option<String>),
    /// The store could not be read.
    Failed(ConsoleError),
}

impl IntoResponse for NoViewer {
    fn into_response(self) -> Response {
        match self {
            NoViewer::SignIn(Some(back)) => {
                Redirect::to(&format!("/sign-in?next={}", crate::sign_in::encode(&back)))
                    .into_response()
            }
            NoViewer::SignIn(None) => Redirect::to("/sign-in").into_response(),
            NoViewer::Failed(error) => error.into_response(),
        }
    }
}

impl Viewer {
    /// The viewer of a request with these headers, from its session: `None` without a live
    /// session, or when the session's key is revoked (its session then ends).
    pub async fn of(
        state: &ConsoleState,
        headers: &HeaderMap,
    ) -> Result<Option<Viewer>, ConsoleError> {
        let Some(token) = session_token(headers) else {
            return Ok(None);
        };
        let Some(session) = state.sessions.live(token, state.clock.now()) else {
            return Ok(None);
        };
        match state.app.store.api_key_by_hash(&session.key_hash).await? {
            Some(record) if record.revoked_at.is_none() => Ok(Some(Viewer {
                caller: Caller {
                    key_id: record.id,
                    user_id: record.user_id,
                    admin: record.admin,
                    platforms: record.platforms,
                },
                csrf: session.csrf,
            })),
            _ => {
                state.sessions.end(token);
                Ok(None)
            }
        }
    }
}

impl FromRequestParts<ConsoleState> for Viewer {
    type Rejection = NoViewer;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &ConsoleState,
    ) -> Result<Self, Self::Rejection> {
        match Viewer::of(state, &parts.headers).await {
            Ok(Some(viewer)) => Ok(viewer),
            Ok(None) => Err(NoViewer::SignIn(
                (parts.method == Method::GET)
                    .then(|| parts.uri.path_and_query().map(|p| p.as_str().to_string()))
                    .flatten(),
            )),
            Err(error) => Err(NoViewer::Failed(error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn only_plain_http_on_loopback_is_not_secure() {
        for plain in [
            "127.0.0.1:8080",
            "localhost",
            "LOCALHOST:1",
            "[::1]:80",
            "127.2.3.4",
        ] {
            assert!(!secure_request(&host(plain)), "{plain}");
        }
        for secure in [
            "example.com",
            "10.0.0.1:80",
            "[fe80::1]:80",
            "localhost.evil.com",
            "",
        ] {
            assert!(secure_request(&host(secure)), "{secure}");
        }
        let mut forwarded = host("127.0.0.1:8080");
        forwarded.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        assert!(secure_request(&forwarded));
    }

    #[test]
    fn sessions_expire_and_end() {
        let sessions = Sessions::new(TimeDelta::minutes(5), 2);
        let now = Utc::now();
        let a = sessions.start("k".into(), now).unwrap();
        assert!(
            sessions
                .live(&a.token, now + TimeDelta::minutes(4))
                .is_some()
        );
        assert!(
            sessions
                .live(&a.token, now + TimeDelta::minutes(5))
                .is_none()
        );
        assert!(sessions.is_empty());
        let b = sessions.start("k".into(), now).unwrap();
        sessions.end(&b.token);
        assert!(sessions.live(&b.token, now).is_none());
    }

    #[test]
    fn past_the_most_sessions_the_oldest_ends() {
        let sessions = Sessions::new(TimeDelta::minutes(5), 2);
        let now = Utc::now();
        let a = sessions.start("k".into(), now).unwrap();
        let b = sessions
            .start("k".into(), now + TimeDelta::seconds(1))
            .unwrap();
        let c = sessions
            .start("k".into(), now + TimeDelta::seconds(2))
            .unwrap();
        assert_eq!(sessions.len(), 2);
        assert!(sessions.live(&a.token, now).is_none());
        assert!(sessions.live(&b.token, now).is_some() && sessions.live(&c.token, now).is_some());
    }
}
