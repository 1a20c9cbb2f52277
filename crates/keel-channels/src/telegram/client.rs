//! A thin Bot API client: `POST {api_url}/bot{token}/{method}` with a JSON body, the answer's
//! `result` or its error (`ok: false`, `error_code`, `description`, `parameters.retry_after`),
//! and files downloaded from `{api_url}/file/bot{token}/{file_path}`. The token is never logged:
//! errors name the method, not the URL.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::outlet::DeliveryError;

/// How a Bot API call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// Telegram answered `ok: false` (or an HTTP error without a body it explains).
    #[error("telegram {method}: {code} {description}")]
    Refused {
        /// The method called.
        method: String,
        /// `error_code` (or the HTTP status).
        code: u16,
        /// `description`.
        description: String,
        /// `parameters.retry_after`, for a 429.
        retry_after: Option<Duration>,
    },
    /// No answer (a refused connection, a timeout) or one that is not the Bot API's.
    #[error("telegram {method}: {why}")]
    Transport {
        /// The method called.
        method: String,
        /// What went wrong.
        why: String,
    },
}

impl ApiError {
    /// The error's code, when Telegram answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            ApiError::Refused { code, .. } => Some(*code),
            ApiError::Transport { .. } => None,
        }
    }

    /// Whether the same call may succeed later (a 429, a 5xx, no answer).
    pub fn is_transient(&self) -> bool {
        match self {
            ApiError::Refused { code, .. } => matches!(code, 408 | 429 | 500..=599),
            ApiError::Transport { .. } => true,
        }
    }

    /// Whether an edit was refused because the message already reads so (`message is not
    /// modified`): the edit's text is shown.
    pub fn is_unchanged(&self) -> bool {
        matches!(self, ApiError::Refused { code: 400, description, .. }
            if description.contains("message is not modified"))
    }

    /// Whether Telegram refused a message's HTML (`can't parse entities`).
    pub fn is_bad_html(&self) -> bool {
        matches!(self, ApiError::Refused { code: 400, description, .. }
            if description.contains("can't parse entities"))
    }
}

impl From<ApiError> for DeliveryError {
    fn from(error: ApiError) -> Self {
        match &error {
            ApiError::Refused {
                code, retry_after, ..
            } => DeliveryError::from_status(*code, *retry_after, error.to_string()),
            ApiError::Transport { .. } => DeliveryError::Transient(error.to_string()),
        }
    }
}

/// A bot's client of the Bot API.
pub struct Client {
    http: reqwest::Client,
    base: String,
    files: String,
}

impl Client {
    /// A client of the Bot API at `api_url` for the bot with `token`.
    pub fn new(http: reqwest::Client, api_url: &str, token: &str) -> Self {
        let api_url = api_url.trim_end_matches('/');
        Client {
            http,
            base: format!("{api_url}/bot{token}"),
            files: format!("{api_url}/file/bot{token}"),
        }
    }

    /// Calls `method` with `body`; its `result` as `T`.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        body: &Value,
    ) -> Result<T, ApiError> {
        self.call_within(method, body, Duration::from_secs(30))
            .await
    }

    /// [`Client::call`] that may take up to `timeout` (a long poll).
    pub async fn call_within<T: DeserializeOwned>(
        &self,
        method: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<T, ApiError> {
        let transport = |why: String| ApiError::Transport {
            method: method.to_string(),
            why,
        };
        let response = self
            .http
            .post(format!("{}/{method}", self.base))
            .json(body)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| transport(without_url(e)))?;
        let status = response.status().as_u16();
        let text = response
            .text()
            .await
            .map_err(|e| transport(without_url(e)))?;
        let answer: Value = match serde_json::from_str(&text) {
            Ok(answer) => answer,
            Err(_) if status >= 400 => {
                return Err(ApiError::Refused {
                    method: method.into(),
                    code: status,
                    description: format!("HTTP {status}"),
                    retry_after: None,
                });
            }
            Err(e) => return Err(transport(format!("the answer is not JSON: {e}"))),
        };
        if answer["ok"].as_bool() == Some(true) {
            return serde_json::from_value(answer["result"].clone())
                .map_err(|e| transport(format!("unexpected result: {e}")));
        }
        let code = answer["error_code"]
            .as_u64()
            .and_then(|code| u16::try_from(code).ok())
            .unwrap_or(if status >= 400 { status } else { 500 });
        Err(ApiError::Refused {
            method: method.into(),
            code,
            description: answer["description"].as_str().unwrap_or("").to_string(),
            retry_after: answer["parameters"]["retry_after"]
                .as_u64()
                .map(Duration::from_secs),
        })
    }

    /// Downloads the file at `file_path` (from `getFile`), refusing more than `max_bytes`.
    pub async fn download(&self, file_path: &str, max_bytes: usize) -> Result<Vec<u8>, ApiError> {
        let transport = |why: String| ApiError::Transport {
            method: "file".into(),
            why,
        };
        let mut response = self
            .http
            .get(format!("{}/{file_path}", self.files))
            .timeout(Duration::from_secs(120))
            .send()
            .await
            .map_err(|e| transport(without_url(e)))?;
        let status = response.status().as_u16();
        if status >= 400 {
            return Err(ApiError::Refused {
                method: "file".into(),
                code: status,
                description: format!("HTTP {status}"),
                retry_after: None,
            });
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| transport(without_url(e)))?
        {
            if bytes.len() + chunk.len() > max_bytes {
                return Err(ApiError::Refused {
                    method: "file".into(),
                    code: 413,
                    description: format!("the file is larger than {max_bytes} bytes"),
                    retry_after: None,
                });
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }
}

/// A reqwest error in words, without its URL (which holds the token).
fn without_url(error: reqwest::Error) -> String {
    error.without_url().to_string()
}
