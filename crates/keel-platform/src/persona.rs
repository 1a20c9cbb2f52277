//! Personas (seed 003, step 3): a system prompt and model settings, chosen per message by the
//! cascade server-specific → platform-specific → default.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use keel_core::{RunOptions, StoreError};

use crate::place::check_platform_text;

/// Longest system prompt a persona may hold, in bytes.
pub const MAX_PROMPT_BYTES: usize = 64 * 1024;

/// A persona: who the agent is on a platform or server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Persona {
    /// Unique name.
    pub name: String,
    /// The system prompt.
    pub system_prompt: String,
    /// The platform it serves; `None` for one that serves none by place (a default).
    #[serde(default)]
    pub platform: Option<String>,
    /// The server on that platform it serves.
    #[serde(default)]
    pub platform_server_id: Option<String>,
    /// The model to ask instead of the configured one (same provider).
    #[serde(default)]
    pub model: Option<String>,
    /// Cap on output tokens per model call.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// The tool modules it may use; `None`: every module.
    #[serde(default)]
    pub allowed_modules: Option<Vec<String>>,
    /// Sampling temperature.
    #[serde(default)]
    pub temperature: Option<f32>,
    /// The persona for messages no server or platform persona serves. At most one.
    #[serde(default)]
    pub is_default: bool,
    /// When it was made.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

impl Persona {
    /// Checks what a persona holds, against the tool modules that exist: a clear message for
    /// the first problem.
    pub fn check(&self, known_modules: &[String]) -> Result<(), String> {
        check_platform_text("name", &self.name, true)?;
        if self.system_prompt.trim().is_empty() {
            return Err("`system_prompt` must not be empty".into());
        }
        if self.system_prompt.len() > MAX_PROMPT_BYTES {
            return Err(format!(
                "`system_prompt` is {} bytes; at most {MAX_PROMPT_BYTES}",
                self.system_prompt.len()
            ));
        }
        if let Some(platform) = &self.platform {
            check_platform_text("platform", platform, true)?;
        }
        if let Some(server) = &self.platform_server_id {
            check_platform_text("platform_server_id", server, false)?;
            if self.platform.is_none() {
                return Err(
                    "`platform_server_id` needs a `platform`: server ids are per platform".into(),
                );
            }
        }
        if let Some(model) = &self.model {
            check_platform_text("model", model, false)?;
        }
        if self.max_tokens == Some(0) {
            return Err("`max_tokens` must be at least 1".into());
        }
        if let Some(temperature) = self.temperature
            && !(0.0..=2.0).contains(&temperature)
        {
            return Err(format!(
                "`temperature` must be between 0 and 2, not {temperature}"
            ));
        }
        for module in self.allowed_modules.iter().flatten() {
            if !known_modules.contains(module) {
                return Err(format!(
                    "unknown module `{module}` in `allowed_modules`; the tools' modules are: {}",
                    if known_modules.is_empty() {
                        "none".to_string()
                    } else {
                        known_modules.join(", ")
                    }
                ));
            }
        }
        Ok(())
    }
}

impl Persona {
    /// The error of saving this persona while `other` serves the same platform and server.
    pub fn conflict_with(&self, other: &str) -> StoreError {
        StoreError::Conflict(format!(
            "persona `{other}` already serves {}{}; change that one, or give this one another \
             place",
            self.platform.as_deref().unwrap_or_default(),
            self.platform_server_id
                .as_deref()
                .map_or(String::new(), |server| format!(" server {server}"))
        ))
    }
}

/// The persona for a message on `platform` (in `server`, when it has one), by seed 003's
/// cascade: the one serving that server, else the one serving the platform with no server, else
/// the default.
pub fn choose_persona<'a>(
    personas: &'a [Persona],
    platform: &str,
    server: Option<&str>,
) -> Option<&'a Persona> {
    let serving = |wanted_server: Option<&str>| {
        personas.iter().find(|persona| {
            persona.platform.as_deref() == Some(platform)
                && persona.platform_server_id.as_deref() == wanted_server
        })
    };
    server
        .and_then(|server| serving(Some(server)))
        .or_else(|| serving(None))
        .or_else(|| personas.iter().find(|persona| persona.is_default))
}

/// Run options carrying `persona`'s choices (or none), `default_modules` when it has none.
pub fn run_options(persona: Option<&Persona>, default_modules: Option<&[String]>) -> RunOptions {
    match persona {
        None => RunOptions {
            allowed_modules: default_modules.map(<[String]>::to_vec),
            ..RunOptions::default()
        },
        Some(persona) => RunOptions {
            persona: Some(persona.name.clone()),
            system_prompt: Some(persona.system_prompt.clone()),
            model: persona.model.clone(),
            max_tokens: persona.max_tokens,
            temperature: persona.temperature,
            allowed_modules: persona.allowed_modules.clone(),
            ..RunOptions::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn persona(name: &str, platform: Option<&str>, server: Option<&str>, default: bool) -> Persona {
        Persona {
            name: name.into(),
            system_prompt: format!("You are {name}."),
            platform: platform.map(str::to_string),
            platform_server_id: server.map(str::to_string),
            model: None,
            max_tokens: None,
            allowed_modules: None,
            temperature: None,
            is_default: default,
            created_at: Utc::now(),
            updated_at: Utc::now(),
        }
    }

    #[test]
    fn the_cascade_is_server_then_platform_then_default() {
        let personas = [
            persona("fallback", None, None, true),
            persona("slacker", Some("slack"), None, false),
            persona("acme", Some("slack"), Some("T-acme"), false),
            persona(
                "other-platform-server",
                Some("discord"),
                Some("T-acme"),
                false,
            ),
        ];
        let chosen =
            |platform, server| choose_persona(&personas, platform, server).map(|p| p.name.as_str());
        assert_eq!(chosen("slack", Some("T-acme")), Some("acme"));
        assert_eq!(chosen("slack", Some("T-other")), Some("slacker"));
        assert_eq!(chosen("slack", None), Some("slacker"));
        assert_eq!(chosen("telegram", None), Some("fallback"));
        assert_eq!(chosen("telegram", Some("T-acme")), Some("fallback"));
        assert_eq!(choose_persona(&personas[1..2], "telegram", None), None);
    }

    #[test]
    fn a_persona_is_checked() {
        let known = vec!["files".to_string(), "http".to_string()];
        let mut good = persona("helper", Some("slack"), Some("T1"), false);
        good.allowed_modules = Some(vec!["files".into()]);
        assert!(good.check(&known).is_ok());
        let mut bad = good.clone();
        bad.allowed_modules = Some(vec!["shell".into()]);
        assert!(
            bad.check(&known)
                .unwrap_err()
                .contains("unknown module `shell`")
        );
        let mut bad = good.clone();
        bad.platform = None;
        assert!(
            bad.check(&known)
                .unwrap_err()
                .contains("needs a `platform`")
        );
        let mut bad = good.clone();
        bad.temperature = Some(3.0);
        assert!(bad.check(&known).is_err());
        let mut bad = good.clone();
        bad.name = "../x".into();
        assert!(bad.check(&known).is_err());
        let mut bad = good;
        bad.system_prompt = " ".into();
        assert!(bad.check(&known).is_err());
    }
}
