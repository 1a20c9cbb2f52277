//! Every console request that changes something (any method but GET, HEAD and OPTIONS) passes
//! two checks before its handler runs: it comes from the console's own pages (`Sec-Fetch-Site`
//! and `Origin`, when the browser sends them), and its form carries the right `csrf` field —
//! the session's token, or on the sign-in form the token of the sign-in cookie (a form posted
//! before any session). Handlers of POSTs therefore never see a forged form; they read their
//! fields with `axum::Form` as usual (an extra `csrf` field is ignored by serde).

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use subtle::ConstantTimeEq;

use crate::ConsoleState;
use crate::error::ConsoleError;
use crate::session::{cookie, secure_request, session_token};

/// The form field every console form carries its CSRF token in.
pub const FIELD: &str = "csrf";

/// The path of the sign-in form, the one POST checked against the sign-in cookie.
pub const SIGN_IN_PATH: &str = "/sign-in";

/// The sign-in cookie's name over plain HTTP on loopback (its value is the sign-in form's
/// token).
pub const SIGN_IN_COOKIE: &str = "keel_sign_in";

/// The sign-in cookie's name everywhere else.
pub const SECURE_SIGN_IN_COOKIE: &str = "__Host-keel_sign_in";

/// The sign-in cookie's name for a request like this one.
pub fn sign_in_cookie_name(headers: &HeaderMap) -> &'static str {
    if secure_request(headers) {
        SECURE_SIGN_IN_COOKIE
    } else {
        SIGN_IN_COOKIE
    }
}

const REFUSED: &str = "This form is out of date or did not come from this console's own pages. \
                       Go back, reload the page and try again.";

/// The middleware: lets reads through, checks everything else (see the module's doc).
pub async fn check(State(state): State<ConsoleState>, request: Request, next: Next) -> Response {
    if matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    ) {
        return next.run(request).await;
    }
    if !same_origin(request.headers()) {
        return ConsoleError::forbidden(REFUSED).into_response();
    }
    let expected = if request.uri().path() == SIGN_IN_PATH {
        cookie(request.headers(), sign_in_cookie_name(request.headers())).map(str::to_string)
    } else {
        let now = state.clock.now();
        match session_token(request.headers()).and_then(|token| state.sessions.csrf_of(token, now))
        {
            Some(csrf) => Some(csrf),
            None => return Redirect::to(SIGN_IN_PATH).into_response(),
        }
    };
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, state.app.max_request_bytes).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return ConsoleError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "This form is larger than the daemon accepts.",
            )
            .into_response();
        }
    };
    let form_content = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/x-www-form-urlencoded"));
    let posted = form_content.then(|| posted_token(&bytes)).flatten();
    match (expected, posted) {
        (Some(expected), Some(posted))
            if !expected.is_empty() && bool::from(expected.as_bytes().ct_eq(posted.as_bytes())) =>
        {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        _ => ConsoleError::forbidden(REFUSED).into_response(),
    }
}

/// The `csrf` field of a urlencoded form.
fn posted_token(body: &[u8]) -> Option<String> {
    serde_urlencoded::from_bytes::<Vec<(String, String)>>(body)
        .ok()?
        .into_iter()
        .find(|(name, _)| name == FIELD)
        .map(|(_, value)| value)
}

/// Whether the browser says the request comes from this origin: `Sec-Fetch-Site` is
/// `same-origin` and `Origin` names the host the request was sent to, each when sent (the CSRF
/// token is checked either way).
pub fn same_origin(headers: &HeaderMap) -> bool {
    let site_ok = headers
        .get("sec-fetch-site")
        .map(|v| v.as_bytes() == b"same-origin")
        .unwrap_or(true);
    let origin_ok = match headers.get(header::ORIGIN) {
        None => true,
        Some(origin) => {
            let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
            let authority = origin.to_str().ok().and_then(|origin| {
                origin
                    .strip_prefix("http://")
                    .or_else(|| origin.strip_prefix("https://"))
            });
            matches!((authority, host), (Some(a), Some(h)) if a.eq_ignore_ascii_case(h))
        }
    };
    site_ok && origin_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn another_origin_or_site_is_refused() {
        assert!(same_origin(&headers(&[("host", "a:1")])));
        assert!(same_origin(&headers(&[
            ("host", "a:1"),
            ("origin", "http://a:1"),
            ("sec-fetch-site", "same-origin")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "a:1"),
            ("origin", "http://b:1")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "a:1"),
            ("origin", "null")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "a:1"),
            ("sec-fetch-site", "cross-site")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "a:1"),
            ("sec-fetch-site", "same-site")
        ])));
    }

    #[test]
    fn the_token_is_read_from_the_form() {
        assert_eq!(
            posted_token(b"a=1&csrf=abc%2B&b=2").as_deref(),
            Some("abc+")
        );
        assert_eq!(posted_token(b"a=1"), None);
    }
}
