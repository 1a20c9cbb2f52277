//! keel's own client of the Discord Gateway, the subset a bot that reads messages needs:
//! Hello (op 10) → a heartbeat (op 1, with the last sequence) every `heartbeat_interval`;
//! Identify (op 2) with the intents GUILD_MESSAGES, DIRECT_MESSAGES and MESSAGE_CONTENT, or
//! Resume (op 6) of the last session; Ready keeps the session, its resume URL and the bot's own
//! id; `MESSAGE_CREATE` dispatches go, in order, to the intake. Reconnect (op 7), Invalid
//! Session (op 9), a heartbeat not acknowledged, a dropped or closed socket: connect again
//! (resuming when Discord allows), with backoff while it keeps failing. A close Discord says is
//! final (a bad token, intents not enabled) stops the gateway with the reason in `keel channels
//! status`; nothing here ends the daemon.

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout};
use tokio_tungstenite::tungstenite::Message as Frame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::message::{Message, inbound_of};
use super::{CHANNEL, Discord};

/// GUILD_MESSAGES (1 << 9) | DIRECT_MESSAGES (1 << 12) | MESSAGE_CONTENT (1 << 15).
pub const INTENTS: u64 = (1 << 9) | (1 << 12) | (1 << 15);

/// How long a connection and its Hello may take.
const HANDSHAKE: Duration = Duration::from_secs(30);

/// The longest wait between attempts while the Gateway keeps failing.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The wait before connecting again after a connection that worked.
const AGAIN: Duration = Duration::from_millis(250);

/// What keel keeps of a session, to resume it.
#[derive(Clone, Debug, Default)]
struct Session {
    id: Option<String>,
    resume_url: Option<String>,
    seq: Option<u64>,
    bot_id: Option<String>,
}

/// How a connection ended.
#[derive(Debug, PartialEq)]
enum Ended {
    /// The daemon stops.
    Stopped,
    /// Connect again; `resume` whether the session may be resumed, `worked` whether this
    /// connection got as far as Ready (or Resumed).
    Again { resume: bool, worked: bool },
    /// Discord refused for good; the reason.
    Fatal(String),
}

/// Keeps the Gateway connected until the daemon stops (or Discord refuses for good).
pub async fn run(discord: Arc<Discord>, token: String, configured: Option<String>) {
    let (messages, inbox) = mpsc::channel(256);
    discord
        .ctx
        .tasks
        .spawn(take_messages(discord.clone(), inbox));
    let mut session = Session::default();
    let mut failures = 0u32;
    loop {
        let url = match session.resume_url.clone().or_else(|| configured.clone()) {
            Some(url) => Ok(url),
            None => discord.rest.gateway_url().await.map_err(|e| e.to_string()),
        };
        let ended = match url {
            Ok(url) => connect(&discord, &token, &url, &mut session, &messages).await,
            Err(error) => {
                discord
                    .ctx
                    .note_error(
                        CHANNEL,
                        &format!("cannot find the Discord Gateway: {error}"),
                    )
                    .await;
                Ended::Again {
                    resume: false,
                    worked: false,
                }
            }
        };
        let wait = match ended {
            Ended::Stopped => return,
            Ended::Fatal(why) => {
                discord
                    .ctx
                    .note_error(
                        CHANNEL,
                        &format!("the Discord Gateway refused keel for good: {why}"),
                    )
                    .await;
                return;
            }
            Ended::Again { resume, worked } => {
                if !resume {
                    session = Session {
                        bot_id: session.bot_id.take(),
                        ..Session::default()
                    };
                }
                if worked {
                    failures = 0;
                    AGAIN
                } else {
                    failures = failures.saturating_add(1);
                    backoff(failures)
                }
            }
        };
        tracing::info!(
            channel = CHANNEL,
            wait_ms = wait.as_millis() as u64,
            resume = session.id.is_some(),
            "connecting to the Discord Gateway again"
        );
        tokio::select! {
            () = discord.ctx.stop.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// The wait after `failures` failed attempts in a row: 1 s, 2 s, 4 s, … up to a minute.
fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.saturating_sub(1).min(6)).min(MAX_BACKOFF)
}

/// One connection, from the handshake to its end.
async fn connect(
    discord: &Arc<Discord>,
    token: &str,
    base: &str,
    session: &mut Session,
    messages: &mpsc::Sender<(Message, Option<String>)>,
) -> Ended {
    let again = Ended::Again {
        resume: true,
        worked: false,
    };
    let url = format!("{}/?v=10&encoding=json", base.trim_end_matches('/'));
    let connector = match tls(&url) {
        Ok(connector) => connector,
        Err(why) => return Ended::Fatal(why),
    };
    let connecting =
        tokio_tungstenite::connect_async_tls_with_config(url.as_str(), None, true, connector);
    let socket = tokio::select! {
        () = discord.ctx.stop.cancelled() => return Ended::Stopped,
        socket = timeout(HANDSHAKE, connecting) => socket,
    };
    let mut socket = match socket {
        Ok(Ok((socket, _))) => socket,
        Ok(Err(error)) => {
            tracing::warn!(channel = CHANNEL, %error, "cannot connect to the Discord Gateway");
            return again;
        }
        Err(_) => {
            tracing::warn!(
                channel = CHANNEL,
                "the Discord Gateway did not answer in time"
            );
            return again;
        }
    };
    // Hello: the heartbeat's interval.
    let interval = match timeout(HANDSHAKE, socket.next()).await {
        Ok(Some(Ok(Frame::Text(text)))) => serde_json::from_str::<Value>(&text)
            .ok()
            .filter(|hello| hello["op"] == 10)
            .and_then(|hello| hello["d"]["heartbeat_interval"].as_u64()),
        _ => None,
    };
    let Some(interval) = interval.filter(|ms| *ms > 0) else {
        tracing::warn!(channel = CHANNEL, "the Discord Gateway did not say Hello");
        return again;
    };
    let interval = Duration::from_millis(interval);
    let first = match (&session.id, session.seq) {
        (Some(id), Some(seq)) => {
            json!({"op": 6, "d": {"token": token, "session_id": id, "seq": seq}})
        }
        _ => json!({"op": 2, "d": {
            "token": token,
            "intents": INTENTS,
            "properties": {"os": std::env::consts::OS, "browser": "keel", "device": "keel"},
        }}),
    };
    if socket.send(Frame::text(first.to_string())).await.is_err() {
        return again;
    }
    let mut heartbeat = tokio::time::interval_at(Instant::now() + interval, interval);
    let mut acknowledged = true;
    let mut worked = false;
    loop {
        let frame = tokio::select! {
            () = discord.ctx.stop.cancelled() => {
                let _ = socket.close(None).await;
                return Ended::Stopped;
            }
            _ = heartbeat.tick() => {
                if !acknowledged {
                    tracing::warn!(channel = CHANNEL,
                        "the Discord Gateway did not acknowledge a heartbeat: connecting again");
                    return Ended::Again { resume: true, worked };
                }
                acknowledged = false;
                if socket.send(beat(session.seq)).await.is_err() {
                    return Ended::Again { resume: true, worked };
                }
                continue;
            }
            frame = socket.next() => frame,
        };
        let text = match frame {
            Some(Ok(Frame::Text(text))) => text,
            Some(Ok(Frame::Close(close))) => {
                return closed(close.map(|c| (c.code, c.reason.to_string())), worked);
            }
            Some(Ok(_)) => continue,
            Some(Err(error)) => {
                tracing::warn!(channel = CHANNEL, %error, "the Discord Gateway connection failed");
                return Ended::Again {
                    resume: true,
                    worked,
                };
            }
            None => {
                tracing::warn!(channel = CHANNEL, "the Discord Gateway connection dropped");
                return Ended::Again {
                    resume: true,
                    worked,
                };
            }
        };
        let Ok(payload) = serde_json::from_str::<Value>(&text) else {
            let shown: String = text.chars().take(120).collect();
            tracing::warn!(channel = CHANNEL, frame = %shown,
                "a Discord Gateway frame that is not JSON was ignored");
            continue;
        };
        match payload["op"].as_u64() {
            Some(0) => {
                if let Some(seq) = payload["s"].as_u64() {
                    session.seq = Some(seq);
                }
                if dispatch(&payload, session, messages).await {
                    worked = true;
                }
            }
            Some(1) => {
                if socket.send(beat(session.seq)).await.is_err() {
                    return Ended::Again {
                        resume: true,
                        worked,
                    };
                }
            }
            Some(7) => {
                tracing::info!(
                    channel = CHANNEL,
                    "the Discord Gateway asked keel to reconnect"
                );
                return Ended::Again {
                    resume: true,
                    worked: true,
                };
            }
            Some(9) => {
                let resume = payload["d"].as_bool().unwrap_or(false);
                tracing::warn!(
                    channel = CHANNEL,
                    resume,
                    "the Discord Gateway invalidated the session"
                );
                return Ended::Again {
                    resume,
                    worked: false,
                };
            }
            Some(10) => {}
            Some(11) => acknowledged = true,
            other => {
                tracing::warn!(channel = CHANNEL, op = ?other,
                    "a Discord Gateway payload of an unknown op was ignored");
            }
        }
    }
}

/// A heartbeat with the last sequence seen.
fn beat(seq: Option<u64>) -> Frame {
    Frame::text(json!({"op": 1, "d": seq}).to_string())
}

/// Handles a dispatch; true when it shows the session works (Ready, Resumed).
async fn dispatch(
    payload: &Value,
    session: &mut Session,
    messages: &mpsc::Sender<(Message, Option<String>)>,
) -> bool {
    let kind = payload["t"].as_str().unwrap_or_default();
    let data = &payload["d"];
    match kind {
        "READY" => {
            session.id = data["session_id"].as_str().map(str::to_string);
            session.resume_url = data["resume_gateway_url"].as_str().map(str::to_string);
            session.bot_id = data["user"]["id"].as_str().map(str::to_string);
            tracing::info!(channel = CHANNEL, bot = ?session.bot_id, "the Discord Gateway is ready");
            true
        }
        "RESUMED" => {
            tracing::info!(channel = CHANNEL, "the Discord Gateway session was resumed");
            true
        }
        "MESSAGE_CREATE" => {
            match serde_json::from_value::<Message>(data.clone()) {
                Ok(message) => {
                    if messages
                        .send((message, session.bot_id.clone()))
                        .await
                        .is_err()
                    {
                        tracing::warn!(
                            channel = CHANNEL,
                            "a Discord message came after the channel stopped"
                        );
                    }
                }
                Err(error) => {
                    tracing::warn!(channel = CHANNEL, %error,
                        "a MESSAGE_CREATE keel cannot read was ignored");
                }
            }
            false
        }
        other => {
            tracing::debug!(
                channel = CHANNEL,
                dispatch = other,
                "a Discord dispatch keel does not use was ignored"
            );
            false
        }
    }
}

/// How a close frame ends the connection: Discord's final codes stop the gateway.
fn closed(close: Option<(CloseCode, String)>, worked: bool) -> Ended {
    let Some((code, reason)) = close else {
        return Ended::Again {
            resume: true,
            worked,
        };
    };
    let number = u16::from(code);
    tracing::warn!(
        channel = CHANNEL,
        code = number,
        reason,
        "the Discord Gateway closed the connection"
    );
    match number {
        4004 => {
            Ended::Fatal("4004: the bot token is wrong (check the variable token_env names)".into())
        }
        4010..=4013 => Ended::Fatal(format!("{number}: {reason}")),
        4014 => Ended::Fatal(
            "4014: the bot may not use the intents it asked for; enable MESSAGE CONTENT INTENT \
             on the application's Bot page"
                .into(),
        ),
        4007 | 4009 => Ended::Again {
            resume: false,
            worked,
        },
        _ => Ended::Again {
            resume: true,
            worked,
        },
    }
}

/// The TLS connector for a `wss://` URL: rustls with the platform's root certificates.
fn tls(url: &str) -> Result<Option<tokio_tungstenite::Connector>, String> {
    if !url.starts_with("wss://") {
        return Ok(None);
    }
    use rustls_platform_verifier::ConfigVerifierExt;
    keel_providers::install_crypto_provider();
    let mut config = rustls::ClientConfig::with_platform_verifier()
        .map_err(|e| format!("cannot set up TLS for the Gateway: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(tokio_tungstenite::Connector::Rustls(Arc::new(config))))
}

/// Hands the Gateway's messages to the intake, one at a time, in the order they came.
async fn take_messages(
    discord: Arc<Discord>,
    mut inbox: mpsc::Receiver<(Message, Option<String>)>,
) {
    loop {
        let next = tokio::select! {
            () = discord.ctx.stop.cancelled() => return,
            next = inbox.recv() => next,
        };
        let Some((message, bot_id)) = next else {
            return;
        };
        match inbound_of(&message, bot_id.as_deref(), discord.respond) {
            Ok(inbound) => {
                let _ = discord.take(inbound, &message.channel_id).await;
            }
            Err(skipped) => {
                tracing::debug!(channel = CHANNEL, message = %message.id, ?skipped,
                    "a Discord message not for keel was passed over");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intents_ask_for_messages_and_their_content() {
        assert_eq!(INTENTS, 512 + 4096 + 32768);
    }

    #[test]
    fn backoff_doubles_up_to_a_minute() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(40), MAX_BACKOFF);
    }

    #[test]
    fn final_closes_stop_others_reconnect() {
        assert!(matches!(
            closed(Some((CloseCode::from(4004), String::new())), true),
            Ended::Fatal(_)
        ));
        assert!(
            matches!(closed(Some((CloseCode::from(4014), String::new())), true), Ended::Fatal(why) if why.contains("MESSAGE CONTENT"))
        );
        assert_eq!(
            closed(Some((CloseCode::from(4009), String::new())), true),
            Ended::Again {
                resume: false,
                worked: true
            }
        );
        assert_eq!(
            closed(Some((CloseCode::from(1001), String::new())), false),
            Ended::Again {
                resume: true,
                worked: false
            }
        );
        assert_eq!(
            closed(None, true),
            Ended::Again {
                resume: true,
                worked: true
            }
        );
    }
}
