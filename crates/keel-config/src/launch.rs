//! The launch spec: how a run was started — provider, API, base URL, model chain, workspace,
//! limits, tool policy — stored with the run (as JSON, never with a key: only the name of the
//! variable the key came from) so that `keel resume` and `keel answer` with no flags go on
//! exactly as it started. Flags given to them override it, and each override is said.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::overrides::Overrides;
use crate::resolve::{ProviderChoice, Settings};

/// How a run was started.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaunchSpec {
    /// Provider name (built-in or a `[providers.NAME]`).
    pub provider: String,
    /// The wire API it spoke.
    pub api: String,
    /// Its base URL, without user info or query (they may hold secrets).
    pub base_url: String,
    /// The environment variable its key came from, when it needs one.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// The primary model.
    pub model: String,
    /// The fallback chain, as `provider:model`.
    #[serde(default)]
    pub fallbacks: Vec<String>,
    /// The directory the file tools were confined to, absolute.
    pub workspace: PathBuf,
    /// Cap on model calls per turn, when set.
    #[serde(default)]
    pub max_iterations: Option<u32>,
    /// Token limit of the run.
    #[serde(default)]
    pub token_budget: Option<u64>,
    /// Dollar limit of the run.
    #[serde(default)]
    pub cost_limit: Option<f64>,
    /// Soft time limit, in seconds.
    #[serde(default)]
    pub soft_timeout_secs: Option<f64>,
    /// Hard time limit, in seconds.
    #[serde(default)]
    pub hard_timeout_secs: Option<f64>,
    /// Answers were streamed.
    pub stream: bool,
    /// The context window given with `--context-window`.
    #[serde(default)]
    pub context_window: Option<u32>,
    /// The user the run is for.
    #[serde(default)]
    pub user: Option<String>,
    /// Hosts `http_get` could fetch from; empty: any.
    #[serde(default)]
    pub http_allowed_hosts: Vec<String>,
}

impl LaunchSpec {
    /// The spec of a run started with `settings`, its file tools confined to `workspace`.
    pub fn of(settings: &Settings, workspace: &Path) -> LaunchSpec {
        let provider = &settings.provider;
        LaunchSpec {
            provider: provider.name.clone(),
            api: provider.api.as_str().to_string(),
            base_url: redacted(&provider.base_url),
            api_key_env: provider.api_key_env.clone(),
            model: settings.model.clone(),
            fallbacks: settings
                .fallbacks
                .iter()
                .map(|fallback| {
                    let name = fallback.provider.as_ref().map_or(&provider.name, name_of);
                    format!("{name}:{}", fallback.model)
                })
                .collect(),
            workspace: workspace.to_path_buf(),
            max_iterations: settings.max_iterations,
            token_budget: settings.budgets.token_budget,
            cost_limit: settings.budgets.cost_limit,
            soft_timeout_secs: settings.soft_timeout.map(|d| d.as_secs_f64()),
            hard_timeout_secs: settings.hard_timeout.map(|d| d.as_secs_f64()),
            stream: settings.stream,
            context_window: settings.context.window,
            user: settings.user.clone(),
            http_allowed_hosts: settings.http_allowed_hosts.clone(),
        }
    }

    /// The spec as stored with the run.
    pub fn to_json(&self) -> String {
        // A struct of strings, numbers and paths always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The spec a run's record holds, when it holds one keel can read.
    pub fn from_json(text: &str) -> Option<LaunchSpec> {
        serde_json::from_str(text).ok()
    }

    /// The flags that go on as the run started: each flag in `given` wins over the spec, and
    /// every one that differs from it is described in the returned notes ("resuming with
    /// --model X instead of the run's Y"). Fallbacks come from the configuration as before.
    pub fn flags(&self, given: &Overrides) -> (Overrides, Vec<String>) {
        let mut notes = Vec::new();
        let mut note = |flag: &str, given: Option<String>, was: Option<String>| {
            let was = was.unwrap_or_else(|| "none".to_string());
            if let Some(given) = given.filter(|given| *given != was) {
                notes.push(format!(
                    "resuming with --{flag} {given} instead of the run's {was}"
                ));
            }
        };
        let workspace = given.workspace.as_ref().map(|dir| {
            let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
            absolute.display().to_string()
        });
        note(
            "provider",
            given.provider.clone(),
            Some(self.provider.clone()),
        );
        note("api", given.api.clone(), Some(self.api.clone()));
        note(
            "base-url",
            given.base_url.as_deref().map(redacted),
            Some(self.base_url.clone()),
        );
        note("model", given.model.clone(), Some(self.model.clone()));
        note(
            "workspace",
            workspace,
            Some(self.workspace.display().to_string()),
        );
        note(
            "max-iterations",
            shown(given.max_iterations),
            shown(self.max_iterations),
        );
        note(
            "token-budget",
            shown(given.token_budget),
            shown(self.token_budget),
        );
        note(
            "cost-limit",
            shown(given.cost_limit),
            shown(self.cost_limit),
        );
        note(
            "soft-timeout",
            shown(given.soft_timeout),
            shown(self.soft_timeout_secs),
        );
        note(
            "hard-timeout",
            shown(given.hard_timeout),
            shown(self.hard_timeout_secs),
        );
        note(
            "context-window",
            shown(given.context_window),
            shown(self.context_window),
        );
        note("user", given.user.clone(), self.user.clone());
        if given.no_stream && self.stream {
            notes.push("resuming with --no-stream instead of the run's streamed answers".into());
        }
        // The provider, its API and base URL go together: naming another provider starts from
        // its own configuration, not from this one's URL.
        let same_provider = given
            .provider
            .as_ref()
            .is_none_or(|name| *name == self.provider);
        let flags = Overrides {
            provider: Some(
                given
                    .provider
                    .clone()
                    .unwrap_or_else(|| self.provider.clone()),
            ),
            api: given
                .api
                .clone()
                .or_else(|| same_provider.then(|| self.api.clone())),
            base_url: given
                .base_url
                .clone()
                .or_else(|| same_provider.then(|| self.base_url.clone())),
            model: given
                .model
                .clone()
                .or_else(|| same_provider.then(|| self.model.clone())),
            workspace: Some(
                given
                    .workspace
                    .clone()
                    .unwrap_or_else(|| self.workspace.clone()),
            ),
            max_iterations: given.max_iterations.or(self.max_iterations),
            token_budget: given.token_budget.or(self.token_budget),
            cost_limit: given.cost_limit.or(self.cost_limit),
            soft_timeout: given.soft_timeout.or(self.soft_timeout_secs),
            hard_timeout: given.hard_timeout.or(self.hard_timeout_secs),
            context_window: given.context_window.or(self.context_window),
            user: given.user.clone().or_else(|| self.user.clone()),
            no_stream: given.no_stream || !self.stream,
            fallback_models: given.fallback_models.clone(),
        };
        (flags, notes)
    }
}

/// A setting as a note shows it.
fn shown(value: Option<impl ToString>) -> Option<String> {
    value.map(|value| value.to_string())
}

fn name_of(choice: &ProviderChoice) -> &String {
    &choice.name
}

/// `url` without user info (`https://user:pass@host`) or query (`?key=...`).
pub fn redacted(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or(url);
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> LaunchSpec {
        LaunchSpec {
            provider: "mock".into(),
            api: "openai-chat".into(),
            base_url: "http://127.0.0.1:9/v1".into(),
            api_key_env: None,
            model: "m1".into(),
            fallbacks: vec![],
            workspace: "/w".into(),
            max_iterations: Some(7),
            token_budget: None,
            cost_limit: None,
            soft_timeout_secs: None,
            hard_timeout_secs: None,
            stream: false,
            context_window: None,
            user: None,
            http_allowed_hosts: vec![],
        }
    }

    #[test]
    fn urls_lose_their_secrets() {
        assert_eq!(
            redacted("https://me:secret@host:8/v1?key=k"),
            "https://host:8/v1"
        );
        assert_eq!(redacted("http://host/v1?token=t#f"), "http://host/v1");
        assert_eq!(redacted("http://host/a@b"), "http://host/a@b");
        assert_eq!(redacted("http://host"), "http://host");
    }

    #[test]
    fn no_flags_go_on_as_started() {
        let (flags, notes) = spec().flags(&Overrides::default());
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(flags.provider.as_deref(), Some("mock"));
        assert_eq!(flags.base_url.as_deref(), Some("http://127.0.0.1:9/v1"));
        assert_eq!(flags.model.as_deref(), Some("m1"));
        assert_eq!(flags.workspace.as_deref(), Some(Path::new("/w")));
        assert_eq!(flags.max_iterations, Some(7));
        assert!(flags.no_stream);
    }

    #[test]
    fn flags_win_and_say_so() {
        let given = Overrides {
            model: Some("m2".into()),
            max_iterations: Some(7),
            ..Overrides::default()
        };
        let (flags, notes) = spec().flags(&given);
        assert_eq!(flags.model.as_deref(), Some("m2"));
        assert_eq!(notes, ["resuming with --model m2 instead of the run's m1"]);

        let given = Overrides {
            provider: Some("openai".into()),
            ..Overrides::default()
        };
        let (flags, notes) = spec().flags(&given);
        assert_eq!(flags.base_url, None, "another provider's own URL");
        assert_eq!(flags.model, None);
        assert_eq!(
            notes,
            ["resuming with --provider openai instead of the run's mock"]
        );
    }
}
