//! The data of the routing and skills events (`agent.route.decided`,
//! `agent.skills.matched`).

use serde::{Deserialize, Serialize};

/// A skill in the system prompt, and why (see [`EventKind::SkillsMatched`]).
///
/// [`EventKind::SkillsMatched`]: super::EventKind::SkillsMatched
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MatchedSkill {
    /// The skill's name.
    pub name: String,
    /// `trigger "deploy"`, or `description (score 2.3)`.
    pub why: String,
}

/// How demanding a message looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Greetings, acknowledgements, short plain questions.
    Fast,
    /// Everything between.
    Primary,
    /// Code, multi-step work, requests that need tools, long or attached material.
    Smart,
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Tier::Fast => "fast",
            Tier::Primary => "primary",
            Tier::Smart => "smart",
        })
    }
}
