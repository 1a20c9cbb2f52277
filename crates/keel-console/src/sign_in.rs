//! Signing in and out. The sign-in form posts an API key (never in a URL); a valid, unrevoked
//! key starts a session and sets its cookie. The form carries the token of a short-lived
//! sign-in cookie (checked by [`crate::csrf`]), so another site cannot sign a browser in.
//! Signing out ends the session and clears the cookie.

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use keel_server::keys::hash_key;
use maud::{Markup, html};
use serde::Deserialize;

use crate::ConsoleState;
use crate::csrf::{FIELD, SIGN_IN_PATH, sign_in_cookie_name};
use crate::error::ConsoleError;
use crate::session::{Viewer, cookie_name, random_token, session_token, set_cookie};

/// How long the sign-in form's cookie lasts, in seconds.
const SIGN_IN_FORM_SECONDS: i64 = 3600;

/// The routes of this part.
pub fn routes() -> Router<ConsoleState> {
    Router::new()
        .route(SIGN_IN_PATH, get(form).post(sign_in))
        .route("/sign-out", post(sign_out))
}

/// `?next=`: where to go once signed in.
#[derive(Debug, Default, Deserialize)]
struct Next {
    next: Option<String>,
}

/// The sign-in form's fields.
#[derive(Debug, Deserialize)]
struct SignInForm {
    key: String,
    next: Option<String>,
}

async fn form(
    State(state): State<ConsoleState>,
    headers: HeaderMap,
    Query(query): Query<Next>,
) -> Result<Response, ConsoleError> {
    let next = local_path(query.next.as_deref());
    if Viewer::of(&state, &headers).await?.is_some() {
        return Ok(Redirect::to(next).into_response());
    }
    sign_in_page(&headers, next, StatusCode::OK, None)
}

async fn sign_in(
    State(state): State<ConsoleState>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<SignInForm>,
) -> Result<Response, ConsoleError> {
    let next = local_path(form.next.as_deref());
    let key_hash = hash_key(form.key.trim());
    let valid = matches!(
        state.app.store.api_key_by_hash(&key_hash).await?,
        Some(record) if record.revoked_at.is_none()
    );
    if !valid {
        return sign_in_page(
            &headers,
            next,
            StatusCode::UNAUTHORIZED,
            Some("That key is not a valid API key of this daemon (or it was revoked)."),
        );
    }
    if let Some(old) = session_token(&headers) {
        state.sessions.end(old);
    }
    let now = state.clock.now();
    let session = state.sessions.start(key_hash, now)?;
    let seconds = (session.expires_at - now).num_seconds().max(0);
    let mut response = Redirect::to(next).into_response();
    let cookies = response.headers_mut();
    cookies.append(
        header::SET_COOKIE,
        set_cookie(&headers, cookie_name(&headers), &session.token, seconds),
    );
    cookies.append(
        header::SET_COOKIE,
        set_cookie(&headers, sign_in_cookie_name(&headers), "", 0),
    );
    Ok(response)
}

async fn sign_out(State(state): State<ConsoleState>, headers: HeaderMap) -> Response {
    if let Some(token) = session_token(&headers) {
        state.sessions.end(token);
    }
    let mut response = Redirect::to(SIGN_IN_PATH).into_response();
    response.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(&headers, cookie_name(&headers), "", 0),
    );
    response
}

/// The sign-in page with a fresh form token (and its cookie), and `problem` when the last try
/// failed.
fn sign_in_page(
    headers: &HeaderMap,
    next: &str,
    status: StatusCode,
    problem: Option<&str>,
) -> Result<Response, ConsoleError> {
    let token = random_token()?;
    let body: Markup = html! {
        h1 { "Sign in" }
        p { "Sign in with an API key of this daemon (make one with " code { "keel keys create" } ")." }
        @if let Some(problem) = problem {
            p class="problem" role="alert" { (problem) }
        }
        form class="sign-in" method="post" action=(SIGN_IN_PATH) {
            input type="hidden" name=(FIELD) value=(token);
            input type="hidden" name="next" value=(next);
            label for="key" { "API key" }
            input id="key" type="password" name="key" required autocomplete="off" autofocus
                spellcheck="false";
            button type="submit" { "Sign in" }
        }
    };
    let mut response = (status, crate::layout::page("Sign in", None, body)).into_response();
    response.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(
            headers,
            sign_in_cookie_name(headers),
            &token,
            SIGN_IN_FORM_SECONDS,
        ),
    );
    Ok(response)
}

/// `next` when it is a path of this site, else `/`: a sign-in never sends anyone elsewhere.
fn local_path(next: Option<&str>) -> &str {
    match next {
        Some(path)
            if path.starts_with('/')
                && !path.starts_with("//")
                && !path.contains('\\')
                && !path.chars().any(char::is_control) =>
        {
            path
        }
        _ => "/",
    }
}

/// `text` percent-encoded for a query value.
pub(crate) fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_on_this_site() {
        assert_eq!(
            local_path(Some("/runs?state=running")),
            "/runs?state=running"
        );
        for away in ["//evil.com", "https://evil.com", "/\\evil.com", "", "runs"] {
            assert_eq!(local_path(Some(away)), "/", "{away}");
        }
        assert_eq!(local_path(None), "/");
        assert_eq!(encode("/runs?a=1&b"), "/runs%3Fa%3D1%26b");
    }
}
