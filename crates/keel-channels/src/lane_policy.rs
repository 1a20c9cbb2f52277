//! Each channel's default double-texting policy (issue 34): `[channels.<name>] lane_policy =
//! "collect"` for every chat of the channel, or by kind of chat, `lane_policy = { dm =
//! "collect", group = "queue", thread = "steer" }` (a kind not named takes `[serve]
//! lane_policy`). It is the policy of a conversation the channel makes; a conversation keeps
//! its policy after that, unless `PATCH /v1/conversations/{id}` changes it.

use std::collections::BTreeMap;

use keel_core::LanePolicy;
use keel_platform::ChatKind;

/// The channels' lane policies, by channel name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChannelLanePolicies {
    by_channel: BTreeMap<String, BTreeMap<ChatKind, LanePolicy>>,
}

impl ChannelLanePolicies {
    /// Reads `lane_policy` of section `[channels.<channel>]` (a name, or a table by kind).
    pub fn read(&mut self, channel: &str, value: &toml::Value) -> Result<(), String> {
        let section = format!("[channels.{channel}] lane_policy");
        let policy = |value: &toml::Value| {
            value
                .as_str()
                .and_then(LanePolicy::parse)
                .ok_or_else(|| format!("{section}: use one of {}", LanePolicy::names()))
        };
        let mut kinds = BTreeMap::new();
        match value {
            toml::Value::Table(table) => {
                for (kind, value) in table {
                    let Some(kind) = ChatKind::ALL.into_iter().find(|k| k.as_str() == kind) else {
                        return Err(format!(
                            "{section}: `{kind}` is not a kind of chat; use dm, group and thread"
                        ));
                    };
                    kinds.insert(kind, policy(value)?);
                }
            }
            value => {
                let policy = policy(value)?;
                kinds.extend(ChatKind::ALL.into_iter().map(|kind| (kind, policy)));
            }
        }
        self.by_channel.insert(channel.to_string(), kinds);
        Ok(())
    }

    /// The policy `channel` sets for a chat of `kind`, if it sets one.
    pub fn of(&self, channel: &str, kind: ChatKind) -> Option<LanePolicy> {
        self.by_channel.get(channel)?.get(&kind).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<ChannelLanePolicies, String> {
        let value: toml::Table = toml::from_str(text).unwrap();
        let mut policies = ChannelLanePolicies::default();
        policies.read("telegram", &value["lane_policy"])?;
        Ok(policies)
    }

    #[test]
    fn one_policy_for_every_chat_or_one_per_kind() {
        let all = read("lane_policy = \"collect\"").unwrap();
        for kind in ChatKind::ALL {
            assert_eq!(all.of("telegram", kind), Some(LanePolicy::Collect));
        }
        assert_eq!(all.of("slack", ChatKind::Dm), None);
        let kinds = read("lane_policy = { dm = \"collect\", thread = \"steer\" }").unwrap();
        assert_eq!(
            kinds.of("telegram", ChatKind::Dm),
            Some(LanePolicy::Collect)
        );
        assert_eq!(
            kinds.of("telegram", ChatKind::Thread),
            Some(LanePolicy::Steer)
        );
        assert_eq!(
            kinds.of("telegram", ChatKind::Group),
            None,
            "[serve]'s then"
        );
    }

    #[test]
    fn mistakes_say_what_is_accepted() {
        let error = read("lane_policy = \"drop\"").unwrap_err();
        assert!(error.contains("\"reject\""), "{error}");
        let error = read("lane_policy = { room = \"queue\" }").unwrap_err();
        assert!(error.contains("dm, group and thread"), "{error}");
    }
}
