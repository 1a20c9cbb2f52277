//! Mail in by IMAP polling, with a minimal IMAP4rev1 client of its own over tokio (plain, or
//! TLS by rustls when `imap_tls`, the default). Every `imap_poll_secs`: `LOGIN`, `SELECT INBOX`,
//! `UID SEARCH UNSEEN`, then for each message `UID FETCH n BODY.PEEK[]` (reading does not mark
//! it) and, only once the intake has taken it (a run queued, a duplicate, a sender refused, a
//! malformed mail dropped), `UID STORE n +FLAGS (\Seen)`. When the intake is unavailable the
//! mail stays unseen and the poll stops, so the next one reads it again.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use super::{Mailroom, Taken};
use crate::intake::IntakeError;
use crate::webhook::warn;

/// Where and as whom to poll.
#[derive(Clone, Debug)]
pub struct ImapSettings {
    /// The server.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// Whether TLS is spoken from the start.
    pub tls: bool,
    /// The login.
    pub user: String,
    /// The password.
    pub password: String,
    /// Time between polls.
    pub every: Duration,
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// Polls until `stop`.
pub(crate) async fn poll(settings: ImapSettings, room: Arc<Mailroom>, stop: CancellationToken) {
    loop {
        let polled = tokio::select! {
            _ = stop.cancelled() => return,
            polled = poll_once(&settings, &room) => polled,
        };
        match polled {
            Ok(count) if count > 0 => {
                tracing::info!(account = %room.name, count, "IMAP: mail taken")
            }
            Ok(_) => {}
            Err(error) => {
                room.ctx
                    .note_error("email", &format!("IMAP: {error}"))
                    .await
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(settings.every) => {}
        }
    }
}

async fn connect(settings: &ImapSettings) -> Result<Box<dyn Stream>, String> {
    let address = (settings.host.as_str(), settings.port);
    let tcp = tokio::time::timeout(Duration::from_secs(30), TcpStream::connect(address))
        .await
        .map_err(|_| format!("{}:{} did not answer", settings.host, settings.port))?
        .map_err(|e| format!("cannot reach {}:{}: {e}", settings.host, settings.port))?;
    if !settings.tls {
        return Ok(Box::new(tcp));
    }
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    let verifier = rustls_platform_verifier::Verifier::new(provider.clone())
        .map_err(|e| format!("no TLS verifier: {e}"))?;
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(settings.host.clone())
        .map_err(|e| format!("`{}` is not a TLS server name: {e}", settings.host))?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS with {}: {e}", settings.host))?;
    Ok(Box::new(tls))
}

/// One IMAP session: the mails taken.
async fn poll_once(settings: &ImapSettings, room: &Mailroom) -> Result<usize, String> {
    let mut session = Session {
        io: BufReader::new(connect(settings).await?),
        tag: 0,
        limit: room.max_message_bytes,
    };
    let (greeting, _) = session.line().await?;
    if !greeting.starts_with("* OK") {
        return Err(format!("the server's greeting is not OK: {greeting}"));
    }
    session
        .command(&format!(
            "LOGIN {} {}",
            quote(&settings.user),
            quote(&settings.password)
        ))
        .await
        .map_err(|e| format!("LOGIN: {e}"))?;
    session.command("SELECT INBOX").await?;
    let mut uids = Vec::new();
    for (line, _) in session.command("UID SEARCH UNSEEN").await? {
        if let Some(list) = line.strip_prefix("* SEARCH") {
            uids.extend(
                list.split_whitespace()
                    .filter_map(|n| n.parse::<u64>().ok()),
            );
        }
    }
    let mut taken = 0;
    for uid in uids {
        let fetched = session
            .command(&format!("UID FETCH {uid} BODY.PEEK[]"))
            .await?;
        let literal = fetched.into_iter().find_map(|(_, literal)| literal);
        let handled = match literal {
            Some(Literal::Bytes(raw)) => match room.take(&raw).await {
                Taken::Done(Err(IntakeError::Unavailable(why))) => {
                    warn(&format!(
                        "IMAP: mail {uid} left unseen for the next poll: {why}"
                    ));
                    break;
                }
                Taken::Done(Ok(_)) => true,
                Taken::Done(Err(IntakeError::Invalid(why))) => {
                    warn(&format!("IMAP: mail {uid} was dropped: {why}"));
                    true
                }
                Taken::Dropped(_) => true,
            },
            Some(Literal::TooLarge(size)) => {
                warn(&format!(
                    "IMAP: mail {uid} was dropped: it is {size} bytes, over max_message_bytes ({})",
                    room.max_message_bytes
                ));
                true
            }
            None => false,
        };
        if handled {
            session
                .command(&format!("UID STORE {uid} +FLAGS (\\Seen)"))
                .await?;
            taken += 1;
        }
    }
    let _ = session.command("LOGOUT").await;
    Ok(taken)
}

/// An IMAP quoted string.
fn quote(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A literal of a response: its bytes, or only its size when over the limit (then skipped).
enum Literal {
    Bytes(Vec<u8>),
    TooLarge(u64),
}

struct Session {
    io: BufReader<Box<dyn Stream>>,
    tag: u32,
    limit: usize,
}

impl Session {
    /// Sends `command` and reads its response: the untagged lines (each with the literal it
    /// carried, if any) up to the tagged `OK`; `NO`/`BAD` is an error.
    async fn command(&mut self, command: &str) -> Result<Vec<(String, Option<Literal>)>, String> {
        self.tag += 1;
        let tag = format!("k{}", self.tag);
        let line = format!("{tag} {command}\r\n");
        self.io
            .get_mut()
            .write_all(line.as_bytes())
            .await
            .map_err(|e| format!("IMAP write: {e}"))?;
        let mut untagged = Vec::new();
        loop {
            let (line, literal) = self.line().await?;
            if let Some(status) = line.strip_prefix(&format!("{tag} ")) {
                if status.starts_with("OK") {
                    return Ok(untagged);
                }
                let shown = if command.starts_with("LOGIN") {
                    "LOGIN"
                } else {
                    command
                };
                return Err(format!("`{shown}` was refused: {status}"));
            }
            untagged.push((line, literal));
        }
    }

    /// One response line, a literal (`{n}`) it announces read with it.
    async fn line(&mut self) -> Result<(String, Option<Literal>), String> {
        let mut text = String::new();
        let mut literal = None;
        loop {
            let mut raw = Vec::new();
            let read =
                tokio::time::timeout(Duration::from_secs(60), self.io.read_until(b'\n', &mut raw))
                    .await
                    .map_err(|_| "IMAP: the server stopped answering".to_string())?
                    .map_err(|e| format!("IMAP read: {e}"))?;
            if read == 0 {
                return Err("IMAP: the server closed the connection".into());
            }
            if raw.len() > 64 * 1024 {
                return Err("IMAP: a response line is over 64 KiB".into());
            }
            let part = String::from_utf8_lossy(&raw);
            let part = part.trim_end_matches(['\r', '\n']);
            text.push_str(part);
            let Some(size) = part
                .strip_suffix('}')
                .and_then(|s| s.rsplit_once('{'))
                .and_then(|(_, n)| n.parse::<u64>().ok())
            else {
                return Ok((text, literal));
            };
            if size > self.limit as u64 {
                let skipped =
                    tokio::io::copy(&mut (&mut self.io).take(size), &mut tokio::io::sink())
                        .await
                        .map_err(|e| format!("IMAP read: {e}"))?;
                if skipped < size {
                    return Err("IMAP: the server closed the connection".into());
                }
                literal = Some(Literal::TooLarge(size));
            } else {
                let mut bytes = vec![0; size as usize];
                self.io
                    .read_exact(&mut bytes)
                    .await
                    .map_err(|e| format!("IMAP read: {e}"))?;
                literal = Some(Literal::Bytes(bytes));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_quoted() {
        assert_eq!(quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
    }
}
