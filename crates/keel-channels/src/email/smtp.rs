//! The email channel's outlet: a reply mailed back by SMTP (lettre) to the mail's sender, in
//! its thread: `Subject: Re: …`, `In-Reply-To` its `Message-ID`, `References` the chain. The
//! receipt is the `Message-ID` keel gave the reply. SMTP 4xx answers and connection failures
//! are transient (tried again), 5xx permanent.

use std::time::Duration;

use async_trait::async_trait;
use lettre::message::{Mailbox, header::ContentType};
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use crate::outlet::{DeliveryError, Outlet, Reply, Target};

/// How the SMTP connection is secured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SmtpTls {
    /// Plain text (a local relay, the tests' sink).
    None,
    /// Plain, then STARTTLS (required), usually port 587.
    #[default]
    Starttls,
    /// TLS from the start, usually port 465.
    Tls,
}

/// Where and as whom replies are sent.
#[derive(Clone, Debug)]
pub struct SmtpSettings {
    /// `smtp://`, `smtps://` URL (lettre's form), instead of host and port.
    pub url: Option<String>,
    /// The server.
    pub host: Option<String>,
    /// Its port (by default 25, 587 or 465 as `tls` says).
    pub port: Option<u16>,
    /// How it is secured.
    pub tls: SmtpTls,
    /// The login, with `password`.
    pub user: Option<String>,
    /// The password (read from the environment variable the section names).
    pub password: Option<String>,
    /// The replies' `From`.
    pub from: String,
}

/// Mails replies.
pub struct SmtpOutlet {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    domain: String,
}

impl SmtpOutlet {
    /// An outlet for `settings`; a wrong address or URL is an error saying which.
    pub fn new(settings: &SmtpSettings) -> Result<Self, String> {
        type Smtp = AsyncSmtpTransport<Tokio1Executor>;
        let from: Mailbox = settings
            .from
            .parse()
            .map_err(|e| format!("`from` = `{}` is not a mail address: {e}", settings.from))?;
        let domain = from.email.domain().to_string();
        let mut builder = match (&settings.url, &settings.host) {
            (Some(url), _) => {
                Smtp::from_url(url).map_err(|e| format!("`smtp_url` is not usable: {e}"))?
            }
            (None, Some(host)) => {
                let (builder, port) = match settings.tls {
                    SmtpTls::None => (Smtp::builder_dangerous(host.as_str()), 25),
                    SmtpTls::Starttls => (
                        Smtp::starttls_relay(host).map_err(|e| format!("`smtp_host`: {e}"))?,
                        587,
                    ),
                    SmtpTls::Tls => (
                        Smtp::relay(host).map_err(|e| format!("`smtp_host`: {e}"))?,
                        465,
                    ),
                };
                builder.port(settings.port.unwrap_or(port))
            }
            (None, None) => return Err("replies need `smtp_url` or `smtp_host`".into()),
        };
        if let Some(user) = &settings.user {
            let password = settings.password.clone().unwrap_or_default();
            builder = builder.credentials(Credentials::new(user.clone(), password));
        }
        let transport = builder.timeout(Some(Duration::from_secs(30))).build();
        Ok(SmtpOutlet {
            transport,
            from,
            domain,
        })
    }

    /// The mail replying with `text` to `target`, and its `Message-ID`.
    pub fn compose(&self, target: &Target, text: &str) -> Result<(Message, String), DeliveryError> {
        let to: Mailbox = target.chat.parse().map_err(|e| {
            DeliveryError::Permanent(format!("`{}` is not a mail address: {e}", target.chat))
        })?;
        let id = format!("<{}@{}>", uuid::Uuid::now_v7().as_simple(), self.domain);
        let subject = reply_subject(target.subject.as_deref().unwrap_or_default());
        let mut builder = Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(subject)
            .message_id(Some(id.clone()))
            .header(ContentType::TEXT_PLAIN);
        if let Some(thread) = &target.thread {
            builder = builder.in_reply_to(format!("<{}>", thread.trim_matches(['<', '>'])));
        }
        if let Some(references) = &target.references {
            builder = builder.references(references.clone());
        }
        let message = builder
            .body(text.to_string())
            .map_err(|e| DeliveryError::Permanent(format!("the reply cannot be built: {e}")))?;
        Ok((message, id))
    }
}

/// `Re: ` and the subject, unless it already starts so.
pub fn reply_subject(subject: &str) -> String {
    let subject = subject.trim();
    if subject.len() >= 3 && subject[..3].eq_ignore_ascii_case("re:") {
        subject.to_string()
    } else if subject.is_empty() {
        "Re: your message".into()
    } else {
        format!("Re: {subject}")
    }
}

/// How a failed SMTP exchange classifies: 4xx and no answer at all are transient, 5xx
/// permanent.
fn classify(error: &lettre::transport::smtp::Error) -> DeliveryError {
    let what = format!("SMTP: {error}");
    if error.is_permanent() {
        DeliveryError::Permanent(what)
    } else {
        DeliveryError::Transient(what)
    }
}

#[async_trait]
impl Outlet for SmtpOutlet {
    fn channel(&self) -> &str {
        "email"
    }

    async fn deliver(&self, target: &str, reply: &Reply) -> Result<String, DeliveryError> {
        let target = Target::decode(target)?;
        let mut text = reply.text().to_string();
        if matches!(reply, Reply::Approval { .. } | Reply::Question { .. })
            && !reply.buttons().is_empty()
        {
            text.push_str(
                "\n\n(Decide this in keel: `keel approve`, or the API's /v1/runs/{id}/approval; \
                 mail cannot press buttons.)",
            );
        }
        let (message, id) = self.compose(&target, &text)?;
        self.transport
            .send(message)
            .await
            .map_err(|error| classify(&error))?;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_get_one_re() {
        assert_eq!(reply_subject("the report"), "Re: the report");
        assert_eq!(reply_subject("RE: the report"), "RE: the report");
        assert_eq!(reply_subject(""), "Re: your message");
    }

    #[test]
    fn a_reply_is_threaded() {
        let outlet = SmtpOutlet::new(&SmtpSettings {
            url: None,
            host: Some("127.0.0.1".into()),
            port: Some(2525),
            tls: SmtpTls::None,
            user: None,
            password: None,
            from: "keel <keel@example.net>".into(),
        })
        .unwrap();
        let target = Target {
            chat: "alice@example.com".into(),
            thread: Some("m3@example.com".into()),
            subject: Some("the report".into()),
            references: Some("<m1@example.com> <m3@example.com>".into()),
            reply_to: None,
        };
        let (message, id) = outlet.compose(&target, "Here it is.").unwrap();
        let raw = String::from_utf8(message.formatted()).unwrap();
        assert!(id.ends_with("@example.net>"), "{id}");
        assert!(raw.contains("Subject: Re: the report"), "{raw}");
        assert!(raw.contains("In-Reply-To: <m3@example.com>"), "{raw}");
        assert!(
            raw.contains("References: <m1@example.com> <m3@example.com>"),
            "{raw}"
        );
        assert!(raw.contains(&format!("Message-ID: {id}")), "{raw}");
        assert!(raw.contains("To: alice@example.com"), "{raw}");
        assert!(
            SmtpOutlet::new(&SmtpSettings {
                from: "not an address".into(),
                ..SmtpSettings {
                    url: None,
                    host: Some("h".into()),
                    port: None,
                    tls: SmtpTls::None,
                    user: None,
                    password: None,
                    from: String::new(),
                }
            })
            .is_err()
        );
    }
}
