//! `[serve]` of keel.toml: how the daemon listens and runs.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use keel_core::LanePolicy;
use serde::Deserialize;

use crate::config::{self, ConfigError};

/// `[serve]` as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeConfig {
    /// Address to listen on (127.0.0.1:8787).
    pub bind: Option<String>,
    /// Runs driven at once (256).
    pub workers: Option<usize>,
    /// Runs a conversation may hold queued (16).
    pub queue_limit: Option<usize>,
    /// What a message for a busy conversation does, for conversations made without a policy
    /// (`queue`): `queue`, `interrupt`, `reject`, `steer`, `collect` or `rollback`.
    pub lane_policy: Option<String>,
    /// Under `collect`: milliseconds the first message of an idle conversation waits for more
    /// before its run starts, restarted by each message (1500).
    pub collect_quiet_ms: Option<u64>,
    /// Under `collect`: the most messages one run carries; beyond, the oldest are left out and
    /// the text says so (20).
    pub collect_cap: Option<usize>,
    /// Seconds SIGTERM waits for runs to reach their next boundary (30).
    pub shutdown_grace_secs: Option<f64>,
    /// Largest request body, in bytes (1048576).
    pub max_request_bytes: Option<usize>,
    /// Seconds between reconciler passes (300).
    pub reconcile_every_secs: Option<f64>,
    /// The monthly token budget of a guest made for an unknown platform user (5000, seed 003).
    pub guest_monthly_tokens: Option<u64>,
    /// The tool modules of a run no persona serves (every module).
    pub default_modules: Option<Vec<String>>,
    /// The most bytes one attachment may hold (10485760).
    pub max_attachment_bytes: Option<usize>,
    /// HTTP connections held open at once; one more is answered 503 (1024).
    pub max_connections: Option<usize>,
    /// Seconds a client may take to send a request's head, and an idle connection stays (10).
    pub header_timeout_secs: Option<f64>,
    /// Seconds a client may take to send a request's whole body (60).
    pub body_timeout_secs: Option<f64>,
    /// A channel conversation whose context stands above this share of the window after a run
    /// is compacted before its next message (0.85, seed 004); `0` or `false`: never.
    pub compact_between_turns: Option<ShareOrSwitch>,
}

/// A share of the context window, or a switch (`true`: the default share, `false`: off).
#[derive(Clone, Copy, Debug)]
pub enum ShareOrSwitch {
    /// On at the default share, or off.
    Switch(bool),
    /// This share of the window.
    Share(f64),
}

impl<'de> Deserialize<'de> for ShareOrSwitch {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ShareOrSwitch;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("compact_between_turns: a share of the context window (0.85), or false")
            }
            fn visit_bool<E>(self, on: bool) -> Result<ShareOrSwitch, E> {
                Ok(ShareOrSwitch::Switch(on))
            }
            fn visit_f64<E>(self, share: f64) -> Result<ShareOrSwitch, E> {
                Ok(ShareOrSwitch::Share(share))
            }
            fn visit_i64<E>(self, share: i64) -> Result<ShareOrSwitch, E> {
                Ok(ShareOrSwitch::Share(share as f64))
            }
            fn visit_u64<E>(self, share: u64) -> Result<ShareOrSwitch, E> {
                Ok(ShareOrSwitch::Share(share as f64))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// The share of the window above which a channel conversation is compacted between turns.
pub const DEFAULT_COMPACT_BETWEEN_TURNS: f64 = 0.85;

impl ServeConfig {
    /// Says what is wrong, naming the key.
    pub fn validate(&self) -> Result<(), String> {
        self.settings().map(drop)
    }

    fn settings(&self) -> Result<ServeSettings, String> {
        let secs = |value: Option<f64>, key: &str, default: f64| match value.unwrap_or(default) {
            v if v.is_finite() && v > 0.0 && v < 1e9 => Ok(Duration::from_secs_f64(v)),
            v => Err(format!(
                "[serve] {key} = {v}: use a number of seconds above 0"
            )),
        };
        let at_least_one = |value: Option<usize>, key: &str, default: usize| match value {
            Some(0) => Err(format!("[serve] {key} must be at least 1")),
            value => Ok(value.unwrap_or(default)),
        };
        let bind = self.bind.as_deref().unwrap_or(DEFAULT_BIND);
        Ok(ServeSettings {
            bind: bind.parse().map_err(|_| {
                format!("[serve] bind = \"{bind}\": use an address and port, e.g. 127.0.0.1:8787")
            })?,
            workers: at_least_one(self.workers, "workers", 256)?,
            queue_limit: at_least_one(self.queue_limit, "queue_limit", 16)?,
            lane_policy: match self.lane_policy.as_deref() {
                None => LanePolicy::Queue,
                Some(name) => LanePolicy::parse(name).ok_or_else(|| {
                    format!(
                        "[serve] lane_policy = \"{name}\": use one of {}",
                        LanePolicy::names()
                    )
                })?,
            },
            collect_quiet: Duration::from_millis(self.collect_quiet_ms.unwrap_or(1500)),
            collect_cap: at_least_one(self.collect_cap, "collect_cap", 20)?,
            shutdown_grace: secs(self.shutdown_grace_secs, "shutdown_grace_secs", 30.0)?,
            max_request_bytes: at_least_one(self.max_request_bytes, "max_request_bytes", 1 << 20)?,
            reconcile_every: secs(self.reconcile_every_secs, "reconcile_every_secs", 300.0)?,
            guest_monthly_tokens: self.guest_monthly_tokens.unwrap_or(DEFAULT_GUEST_TOKENS),
            default_modules: self.default_modules.clone(),
            max_attachment_bytes: at_least_one(
                self.max_attachment_bytes,
                "max_attachment_bytes",
                keel_core::files::DEFAULT_MAX_FILE_BYTES,
            )?,
            max_connections: at_least_one(self.max_connections, "max_connections", 1024)?,
            header_timeout: secs(self.header_timeout_secs, "header_timeout_secs", 10.0)?,
            body_timeout: secs(self.body_timeout_secs, "body_timeout_secs", 60.0)?,
            compact_between_turns: match self.compact_between_turns {
                None | Some(ShareOrSwitch::Switch(true)) => DEFAULT_COMPACT_BETWEEN_TURNS,
                Some(ShareOrSwitch::Switch(false)) => 0.0,
                Some(ShareOrSwitch::Share(share)) if (0.0..=1.0).contains(&share) => share,
                Some(ShareOrSwitch::Share(share)) => {
                    return Err(format!(
                        "[serve] compact_between_turns = {share}: use a share of the context \
                         window between 0 and 1 (0.85), or false to turn it off"
                    ));
                }
            },
        })
    }
}

/// A guest's monthly token budget unless configured (seed 003).
pub const DEFAULT_GUEST_TOKENS: u64 = 5000;

/// Where the daemon listens unless told otherwise.
pub const DEFAULT_BIND: &str = "127.0.0.1:8787";

/// The daemon's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ServeSettings {
    /// Address to listen on.
    pub bind: SocketAddr,
    /// Runs driven at once.
    pub workers: usize,
    /// Runs a conversation may hold queued.
    pub queue_limit: usize,
    /// The policy of conversations made without one.
    pub lane_policy: LanePolicy,
    /// Under `collect`: the quiet window after the first message of an idle conversation.
    pub collect_quiet: Duration,
    /// Under `collect`: the most messages one run carries.
    pub collect_cap: usize,
    /// How long SIGTERM waits for runs to reach their next boundary.
    pub shutdown_grace: Duration,
    /// Largest request body, in bytes.
    pub max_request_bytes: usize,
    /// Time between reconciler passes.
    pub reconcile_every: Duration,
    /// The monthly token budget of a guest made for an unknown platform user.
    pub guest_monthly_tokens: u64,
    /// The tool modules of a run no persona serves; `None`: every module.
    pub default_modules: Option<Vec<String>>,
    /// The most bytes one attachment may hold.
    pub max_attachment_bytes: usize,
    /// HTTP connections held open at once.
    pub max_connections: usize,
    /// The most a client may take to send a request's head; also an idle connection's life.
    pub header_timeout: Duration,
    /// The most a client may take to send a request's whole body.
    pub body_timeout: Duration,
    /// A channel conversation whose context stands above this share of the window after a run
    /// is compacted before its next message; 0: never.
    pub compact_between_turns: f64,
}

/// The `[serve]` settings of the configuration in use.
pub fn load(config_file: Option<&Path>, home: &Path) -> Result<ServeSettings, ConfigError> {
    let loaded = config::load(config_file, home)?;
    loaded.file.serve.settings().map_err(ConfigError)
}

/// `[channels]` and `[[webhooks]]` as written, for keel-channels to read.
pub fn load_channels(
    config_file: Option<&Path>,
    home: &Path,
) -> Result<(toml::Table, Vec<toml::Value>), ConfigError> {
    let loaded = config::load(config_file, home)?;
    Ok((loaded.file.channels, loaded.file.webhooks))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ServeSettings, String> {
        let file = config::parse_file(text)?;
        file.serve.settings()
    }

    #[test]
    fn defaults_and_every_key() {
        let defaults = parse("").unwrap();
        assert_eq!(defaults.bind.to_string(), DEFAULT_BIND);
        assert_eq!((defaults.workers, defaults.queue_limit), (256, 16));
        assert_eq!(defaults.lane_policy, LanePolicy::Queue);
        assert_eq!(defaults.shutdown_grace, Duration::from_secs(30));
        let set = parse(
            "[serve]\nbind = \"0.0.0.0:9000\"\nworkers = 8\nqueue_limit = 2\n\
             lane_policy = \"interrupt\"\nshutdown_grace_secs = 5\nmax_request_bytes = 1000\n\
             reconcile_every_secs = 60\n",
        )
        .unwrap();
        assert_eq!(set.bind.port(), 9000);
        assert_eq!(
            (set.workers, set.queue_limit, set.max_request_bytes),
            (8, 2, 1000)
        );
        assert_eq!(set.lane_policy, LanePolicy::Interrupt);
        assert_eq!(set.reconcile_every, Duration::from_secs(60));
    }

    #[test]
    fn connection_limits_default_and_set() {
        let defaults = parse("").unwrap();
        assert_eq!(defaults.max_connections, 1024);
        assert_eq!(defaults.header_timeout, Duration::from_secs(10));
        assert_eq!(defaults.body_timeout, Duration::from_secs(60));
        let set = parse(
            "[serve]\nmax_connections = 50\nheader_timeout_secs = 2\nbody_timeout_secs = 5\n",
        )
        .unwrap();
        assert_eq!(set.max_connections, 50);
        assert_eq!(set.header_timeout, Duration::from_secs(2));
        assert_eq!(set.body_timeout, Duration::from_secs(5));
        for (text, key) in [
            ("[serve]\nmax_connections = 0\n", "max_connections"),
            ("[serve]\nheader_timeout_secs = 0\n", "header_timeout_secs"),
            ("[serve]\nbody_timeout_secs = -3\n", "body_timeout_secs"),
        ] {
            assert!(parse(text).unwrap_err().contains(key), "{text}");
        }
    }

    #[test]
    fn compaction_between_turns_defaults_on_and_turns_off() {
        let share = |text: &str| parse(text).map(|set| set.compact_between_turns);
        assert_eq!(share(""), Ok(0.85));
        assert_eq!(share("[serve]\ncompact_between_turns = 0.9\n"), Ok(0.9));
        assert_eq!(share("[serve]\ncompact_between_turns = true\n"), Ok(0.85));
        assert_eq!(share("[serve]\ncompact_between_turns = false\n"), Ok(0.0));
        assert_eq!(share("[serve]\ncompact_between_turns = 0\n"), Ok(0.0));
        for text in [
            "[serve]\ncompact_between_turns = 1.5\n",
            "[serve]\ncompact_between_turns = -0.1\n",
            "[serve]\ncompact_between_turns = \"soon\"\n",
        ] {
            assert!(
                parse(text).unwrap_err().contains("compact_between_turns"),
                "{text}"
            );
        }
    }

    #[test]
    fn every_lane_policy_and_the_collect_window_are_accepted() {
        for policy in LanePolicy::ALL {
            let text = format!("[serve]\nlane_policy = \"{}\"\n", policy.as_str());
            assert_eq!(parse(&text).unwrap().lane_policy, policy);
        }
        let defaults = parse("").unwrap();
        assert_eq!(defaults.collect_quiet, Duration::from_millis(1500));
        assert_eq!(defaults.collect_cap, 20);
        let set = parse("[serve]\ncollect_quiet_ms = 200\ncollect_cap = 3\n").unwrap();
        assert_eq!(
            (set.collect_quiet, set.collect_cap),
            (Duration::from_millis(200), 3)
        );
        let error = parse("[serve]\nlane_policy = \"drop\"\n").unwrap_err();
        assert!(error.contains("\"collect\""), "{error}");
    }

    #[test]
    fn mistakes_name_their_key() {
        for (text, key) in [
            ("[serve]\nworkers = 0\n", "workers"),
            ("[serve]\nbind = \"here\"\n", "bind"),
            ("[serve]\nlane_policy = \"drop\"\n", "lane_policy"),
            ("[serve]\nshutdown_grace_secs = -1\n", "shutdown_grace_secs"),
            ("[serve]\nworkrs = 3\n", "workrs"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(key), "{text}: {error}");
        }
    }
}
