//! The environment a command runs in: keel's own, without its secrets.

use std::ffi::{OsStr, OsString};

/// The name endings that mark a variable as a secret, compared without regard to case.
const SECRET_SUFFIXES: [&str; 6] = [
    "_API_KEY",
    "_TOKEN",
    "_SECRET",
    "_PASSWORD",
    "_SECRET_KEY",
    "_ACCESS_KEY",
];

/// The names that are secrets on their own, compared without regard to case.
const SECRET_NAMES: [&str; 4] = ["API_KEY", "TOKEN", "SECRET", "PASSWORD"];

/// Which environment variables a command must not see: every name ending in `_API_KEY`,
/// `_TOKEN`, `_SECRET`, `_PASSWORD`, `_SECRET_KEY` or `_ACCESS_KEY` (any case), the bare
/// `API_KEY`, `TOKEN`, `SECRET`, `PASSWORD`, and the configured extra names (exact, any case).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SecretFilter {
    extra: Vec<String>,
}

impl SecretFilter {
    /// The built-in rule plus `extra` names (`[tools.shell] secret_env`, providers' key
    /// variables).
    pub fn new(extra: impl IntoIterator<Item = impl Into<String>>) -> Self {
        SecretFilter {
            extra: extra.into_iter().map(Into::into).collect(),
        }
    }

    /// Adds more names.
    pub fn with(mut self, extra: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.extra.extend(extra.into_iter().map(Into::into));
        self
    }

    /// Whether the variable `name` is a secret. A name that is not valid UTF-8 is kept: keel's
    /// secrets have plain names.
    pub fn is_secret(&self, name: &OsStr) -> bool {
        let Some(name) = name.to_str() else {
            return false;
        };
        let upper = name.to_ascii_uppercase();
        SECRET_SUFFIXES.iter().any(|s| upper.ends_with(s))
            || SECRET_NAMES.contains(&upper.as_str())
            || self.extra.iter().any(|e| e.eq_ignore_ascii_case(name))
    }
}

/// Variables that change what a line does behind the command policy's back: `CDPATH` sends a
/// plain `cd dir` elsewhere, `BASH_ENV` and `ENV` run a file before the line. A command never
/// inherits them.
const LINE_CHANGING: [&str; 3] = ["CDPATH", "BASH_ENV", "ENV"];

/// Where a command's environment comes from before the secrets are taken out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ParentEnv {
    /// keel's own environment, read at each call.
    #[default]
    Process,
    /// These variables (tests, embedders).
    Fixed(Vec<(OsString, OsString)>),
}

impl ParentEnv {
    /// The environment for a command: the parent's variables that `secrets` does not hold,
    /// without those that change what a line does (`CDPATH`, `BASH_ENV`, `ENV`).
    pub fn for_command(&self, secrets: &SecretFilter) -> Vec<(OsString, OsString)> {
        let vars: Vec<(OsString, OsString)> = match self {
            ParentEnv::Process => std::env::vars_os().collect(),
            ParentEnv::Fixed(vars) => vars.clone(),
        };
        vars.into_iter()
            .filter(|(name, _)| !secrets.is_secret(name))
            .filter(|(name, _)| !LINE_CHANGING.iter().any(|changing| name == *changing))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names_are_recognized() {
        let filter = SecretFilter::new(["WORK_ANTHROPIC_KEY"]);
        for secret in [
            "OPENAI_API_KEY",
            "github_token",
            "DB_PASSWORD",
            "APP_SECRET",
            "AWS_SECRET_ACCESS_KEY",
            "TOKEN",
            "work_anthropic_key",
        ] {
            assert!(filter.is_secret(OsStr::new(secret)), "{secret}");
        }
        for plain in [
            "PATH",
            "HOME",
            "MAX_TOKENS",
            "TOKENIZER",
            "LANG",
            "KEYBOARD",
        ] {
            assert!(!filter.is_secret(OsStr::new(plain)), "{plain}");
        }
    }

    #[test]
    fn the_command_environment_has_no_secrets() {
        let parent = ParentEnv::Fixed(vec![
            ("PATH".into(), "/bin".into()),
            ("FOO_API_KEY".into(), "k".into()),
            ("EXTRA".into(), "x".into()),
        ]);
        let env = parent.for_command(&SecretFilter::new(["extra"]));
        assert_eq!(env, vec![("PATH".into(), "/bin".into())]);
    }

    #[test]
    fn a_command_never_inherits_what_changes_its_line() {
        let parent = ParentEnv::Fixed(vec![
            ("PATH".into(), "/bin".into()),
            ("CDPATH".into(), "/elsewhere".into()),
            ("BASH_ENV".into(), "/tmp/evil.sh".into()),
            ("ENV".into(), "/tmp/evil.sh".into()),
        ]);
        let env = parent.for_command(&SecretFilter::default());
        assert_eq!(env, vec![("PATH".into(), "/bin".into())]);
    }
}
