//! Discord's REST API, the little keel uses: post a message, show typing, find the Gateway.
//! Every request carries `Authorization: Bot TOKEN`; failures are classified for the courier
//! (429 waits Discord's `retry_after`, 5xx and network errors are transient, other 4xx final).

use std::time::Duration;

use serde_json::Value;

use crate::outlet::DeliveryError;

/// A REST client of one bot.
#[derive(Clone)]
pub struct Rest {
    http: reqwest::Client,
    base: String,
    authorization: String,
}

impl Rest {
    /// A client of the API at `base` (e.g. `https://discord.com/api/v10`) for the bot `token`.
    pub fn new(http: reqwest::Client, base: &str, token: &str) -> Result<Self, String> {
        let base = base.trim().trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(format!("`{base}` is not an http(s) URL"));
        }
        Ok(Rest {
            http,
            base,
            authorization: format!("Bot {token}"),
        })
    }

    /// `POST /channels/{channel_id}/messages` with `body`: the new message's id.
    pub async fn post_message(
        &self,
        channel_id: &str,
        body: &Value,
    ) -> Result<String, DeliveryError> {
        let path = format!("/channels/{}/messages", segment(channel_id)?);
        let answer = self.send(reqwest::Method::POST, &path, Some(body)).await?;
        answer["id"].as_str().map(str::to_string).ok_or_else(|| {
            DeliveryError::Transient(format!("Discord answered {path} without a message id"))
        })
    }

    /// `POST /channels/{channel_id}/typing`.
    pub async fn typing(&self, channel_id: &str) -> Result<(), DeliveryError> {
        let path = format!("/channels/{}/typing", segment(channel_id)?);
        self.send(reqwest::Method::POST, &path, None)
            .await
            .map(|_| ())
    }

    /// `GET /gateway/bot`: the Gateway's URL.
    pub async fn gateway_url(&self) -> Result<String, DeliveryError> {
        let answer = self
            .send(reqwest::Method::GET, "/gateway/bot", None)
            .await?;
        answer["url"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| DeliveryError::Transient("GET /gateway/bot gave no url".into()))
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, DeliveryError> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header(reqwest::header::AUTHORIZATION, &self.authorization);
        request = match body {
            Some(body) => request.json(body),
            // Discord wants a length on an empty POST.
            None => request.header(reqwest::header::CONTENT_LENGTH, "0"),
        };
        let response = request
            .send()
            .await
            .map_err(|e| DeliveryError::from_transport(&e))?;
        let status = response.status().as_u16();
        let header_wait = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok());
        let text = response
            .text()
            .await
            .map_err(|e| DeliveryError::from_transport(&e))?;
        let json: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if (200..300).contains(&status) {
            return Ok(json);
        }
        let wait = json["retry_after"].as_f64().or(header_wait).map(seconds);
        let said: String = text.chars().take(300).collect();
        Err(DeliveryError::from_status(
            status,
            wait,
            format!("Discord answered {path} with {status}: {said}"),
        ))
    }
}

/// A wait of `secs` seconds (Discord's float `retry_after`), bounded to an hour.
fn seconds(secs: f64) -> Duration {
    Duration::from_secs_f64(if secs.is_finite() {
        secs.clamp(0.0, 3600.0)
    } else {
        1.0
    })
}

/// A Discord id as a path segment: digits only (a snowflake), or the send is refused for good.
fn segment(id: &str) -> Result<&str, DeliveryError> {
    if !id.is_empty() && id.len() <= 24 && id.bytes().all(|b| b.is_ascii_digit()) {
        Ok(id)
    } else {
        Err(DeliveryError::Permanent(format!(
            "`{id}` is not a Discord channel id"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_snowflakes_make_paths() {
        assert!(segment("123456789012345678").is_ok());
        assert!(segment("../users/@me").is_err());
        assert!(segment("").is_err());
    }

    #[test]
    fn retry_after_is_read_as_float_seconds() {
        assert_eq!(seconds(1.5), Duration::from_millis(1500));
        assert_eq!(seconds(-3.0), Duration::ZERO);
        assert_eq!(seconds(f64::NAN), Duration::from_secs(1));
    }
}
