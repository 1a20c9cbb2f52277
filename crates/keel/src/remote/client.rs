//! The daemon's HTTP API, as `keel` calls it: one typed method per endpoint, and its errors as
//! one clear line (the server's own `{"error": {"code", "message"}}`).

use std::time::Duration;

use keel_core::RunReport;
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

/// A call to the daemon failed.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The daemon could not be reached, or the connection broke.
    #[error("cannot reach the keel server at {url}: {detail}")]
    Unreachable {
        /// The server's URL.
        url: String,
        /// What went wrong.
        detail: String,
    },
    /// The daemon answered with an error.
    #[error("the keel server refused: {message} ({status} {code})")]
    Refused {
        /// HTTP status.
        status: u16,
        /// The error's code, e.g. `unauthorized`.
        code: String,
        /// The server's message.
        message: String,
        /// `Retry-After`, when given.
        retry_after: Option<u64>,
    },
    /// The daemon answered something that is not the API's JSON.
    #[error("the keel server at {url} answered something unexpected: {detail}")]
    Unexpected {
        /// The server's URL.
        url: String,
        /// What was wrong with it.
        detail: String,
    },
}

impl RemoteError {
    /// The HTTP status of a refusal.
    pub fn status(&self) -> Option<u16> {
        match self {
            RemoteError::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// The daemon's answer to a message: its run, and how many runs are ahead of it.
#[derive(Clone, Debug, Deserialize)]
pub struct Accepted {
    /// The run the message became.
    pub run_id: String,
    /// Runs ahead of it in the conversation's lane (0: it starts now).
    #[serde(default)]
    pub position: u64,
}

/// A client of one daemon, with one API key.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    key: Option<String>,
}

impl Client {
    /// A client of the daemon at `base` (e.g. `http://127.0.0.1:8787`), authenticating with
    /// `key`.
    pub fn new(base: &str, key: Option<String>) -> Result<Client, RemoteError> {
        let base = base.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(RemoteError::Unexpected {
                url: base,
                detail: "--server must be an http:// or https:// URL".into(),
            });
        }
        keel_providers::install_crypto_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| RemoteError::Unreachable {
                url: base.clone(),
                detail: e.to_string(),
            })?;
        Ok(Client { http, base, key })
    }

    /// A request to `path` (e.g. `/v1/runs`), with the key.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// Sends `request` and turns anything but a 2xx into a [`RemoteError`].
    pub async fn send(&self, request: RequestBuilder) -> Result<Response, RemoteError> {
        let response = request.send().await.map_err(|e| self.unreachable(e))?;
        if response.status().is_success() {
            return Ok(response);
        }
        Err(refusal(response).await)
    }

    async fn json<T: serde::de::DeserializeOwned>(
        &self,
        request: RequestBuilder,
    ) -> Result<T, RemoteError> {
        let response = self.send(request).await?;
        let text = response.text().await.map_err(|e| self.unreachable(e))?;
        serde_json::from_str(&text).map_err(|e| RemoteError::Unexpected {
            url: self.base.clone(),
            detail: format!("{e}"),
        })
    }

    /// Makes a new conversation; returns its id.
    pub async fn create_conversation(&self) -> Result<String, RemoteError> {
        let body: Value = self
            .json(
                self.request(Method::POST, "/v1/conversations")
                    .json(&json!({})),
            )
            .await?;
        body.get("id")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| RemoteError::Unexpected {
                url: self.base.clone(),
                detail: "a conversation without an id".into(),
            })
    }

    /// Sends `text` to `conversation`: it becomes a run, queued behind the lane.
    pub async fn send_message(
        &self,
        conversation: &str,
        text: &str,
    ) -> Result<Accepted, RemoteError> {
        let path = format!("/v1/conversations/{}/messages", segment(conversation));
        self.json(
            self.request(Method::POST, &path)
                .json(&json!({ "text": text })),
        )
        .await
    }

    /// The report of a run that ended or waits for a human.
    pub async fn report(&self, run_id: &str) -> Result<RunReport, RemoteError> {
        let path = format!("/v1/runs/{}/report", segment(run_id));
        self.json(self.request(Method::GET, &path)).await
    }

    /// Asks the daemon to cancel a run at its next safe point.
    pub async fn cancel(&self, run_id: &str) -> Result<(), RemoteError> {
        let path = format!("/v1/runs/{}/cancel", segment(run_id));
        self.send(self.request(Method::POST, &path)).await?;
        Ok(())
    }

    /// Answers the question a run waits on.
    pub async fn answer(&self, run_id: &str, text: &str) -> Result<(), RemoteError> {
        let path = format!("/v1/runs/{}/answer", segment(run_id));
        self.send(
            self.request(Method::POST, &path)
                .json(&json!({ "text": text })),
        )
        .await?;
        Ok(())
    }

    /// The server's URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The error of a failed request.
    pub fn unreachable(&self, error: reqwest::Error) -> RemoteError {
        RemoteError::Unreachable {
            url: self.base.clone(),
            detail: without_url(error),
        }
    }
}

/// A path segment: ids are made by keel (uuids, `slack:…`); anything that could change the
/// path is percent-encoded.
pub fn segment(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// reqwest's error text, without the URL it appends (the caller says which server).
fn without_url(error: reqwest::Error) -> String {
    let error = error.without_url();
    let mut text = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

async fn refusal(response: Response) -> RemoteError {
    let status = response.status();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let text = response.text().await.unwrap_or_default();
    let parsed: Option<Value> = serde_json::from_str(&text).ok();
    let field = |name: &str| {
        parsed
            .as_ref()
            .and_then(|body| body.pointer(&format!("/error/{name}")))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    RemoteError::Refused {
        status: status.as_u16(),
        code: field("code").unwrap_or_else(|| default_code(status)),
        message: field("message").unwrap_or_else(|| {
            crate::output::one_line(&crate::terminal_text::terminal_safe(&text), 200)
        }),
        retry_after,
    }
}

fn default_code(status: StatusCode) -> String {
    status
        .canonical_reason()
        .unwrap_or("error")
        .to_lowercase()
        .replace(' ', "_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_cannot_change_the_path() {
        assert_eq!(segment("slack:C1"), "slack:C1");
        assert_eq!(segment("../keys"), "..%2Fkeys");
        assert_eq!(segment("a?b#c d"), "a%3Fb%23c%20d");
    }

    #[test]
    fn a_server_url_is_http() {
        assert!(Client::new("127.0.0.1:8787", None).is_err());
        assert_eq!(
            Client::new("http://127.0.0.1:8787/", None).unwrap().base(),
            "http://127.0.0.1:8787"
        );
    }
}
