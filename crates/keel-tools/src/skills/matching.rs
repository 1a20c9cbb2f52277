//! Which skills a message calls for: first those with a trigger the message contains (as whole
//! words), then those whose name and description share enough rare words with it (a small
//! BM25-like score: each shared word weighs by how few skills use it). The matched skills go
//! into the system prompt in that order until the token budget is spent.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use keel_core::event::{EventKind, MatchedSkill};
use keel_core::prompt_parts::{PromptPart, PromptRequest, PromptSection};
use keel_core::tokens::Encoding;
use keel_extensions::routing::contains_phrase;

use super::{SKILL_VIEW, SKILLS_LIST, Skill, SkillSet};

/// A description match needs at least this score (about two uncommon shared words).
const MIN_DESCRIPTION_SCORE: f64 = 1.5;

/// Words too common to say what a message is about.
const STOPWORDS: [&str; 40] = [
    "the", "and", "for", "with", "that", "this", "from", "into", "your", "you", "are", "was",
    "what", "how", "can", "will", "would", "should", "could", "please", "about", "have", "has",
    "not", "but", "all", "any", "our", "out", "use", "using", "when", "where", "which", "who",
    "why", "its", "it's", "then", "them",
];

/// A skill that matched, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct SkillMatch<'a> {
    /// The skill.
    pub skill: &'a Skill,
    /// `trigger "deploy"`, or `description (score 2.3)`.
    pub why: String,
}

impl SkillSet {
    /// The skills `message` calls for, triggers first, then by description score.
    pub fn matching(&self, message: &str) -> Vec<SkillMatch<'_>> {
        let lower = message.to_lowercase();
        let mut matches = Vec::new();
        let mut rest = Vec::new();
        for skill in self.all() {
            match skill
                .triggers
                .iter()
                .find(|t| !t.trim().is_empty() && contains_phrase(&lower, &t.trim().to_lowercase()))
            {
                Some(trigger) => matches.push(SkillMatch {
                    skill,
                    why: format!("trigger \"{trigger}\""),
                }),
                None => rest.push(skill),
            }
        }
        let words = content_words(&lower);
        let document_frequency = self.document_frequency();
        let count = self.all().len() as f64;
        let mut scored: Vec<(f64, &Skill)> = rest
            .into_iter()
            .map(|skill| {
                let own = skill_words(skill);
                let score = words
                    .iter()
                    .filter(|w| own.contains(*w))
                    .map(|w| {
                        let df = document_frequency.get(w.as_str()).copied().unwrap_or(1) as f64;
                        (1.0 + count / df).ln()
                    })
                    .sum::<f64>();
                (score, skill)
            })
            .filter(|(score, _)| *score >= MIN_DESCRIPTION_SCORE)
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.name.cmp(&b.1.name)));
        matches.extend(scored.into_iter().map(|(score, skill)| SkillMatch {
            skill,
            why: format!("description (score {score:.1})"),
        }));
        matches
    }

    fn document_frequency(&self) -> HashMap<String, usize> {
        let mut df = HashMap::new();
        for skill in self.all() {
            for word in skill_words(skill) {
                *df.entry(word).or_insert(0) += 1;
            }
        }
        df
    }
}

fn skill_words(skill: &Skill) -> HashSet<String> {
    let text = format!(
        "{} {}",
        skill.name.replace(['-', '_'], " "),
        skill.description
    );
    content_words(&text.to_lowercase())
}

fn content_words(lower: &str) -> HashSet<String> {
    lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 3 && !STOPWORDS.contains(w))
        .map(str::to_string)
        .collect()
}

/// The system-prompt section of the skills a message matches, within a token budget (counted
/// in cl100k_base, keel's proxy for every model: the budget bounds the prompt, it need not be
/// exact to the model's own tokenizer).
pub struct SkillPrompt {
    skills: Arc<SkillSet>,
    max_tokens: usize,
}

impl SkillPrompt {
    /// Matched skills of `skills`, at most `max_tokens` of them.
    pub fn new(skills: Arc<SkillSet>, max_tokens: usize) -> Self {
        SkillPrompt { skills, max_tokens }
    }

    /// The section for `message`, if any skill matches.
    pub fn section_for(&self, message: &str) -> Option<PromptSection> {
        let matches = self.skills.matching(message);
        if matches.is_empty() {
            return None;
        }
        let mut text = String::new();
        let mut used = 0;
        let mut injected = Vec::new();
        let mut left_out = Vec::new();
        for m in matches {
            let block = format!(
                "### {}\n{}\n\n{}\n\n",
                m.skill.name, m.skill.description, m.skill.body
            );
            let tokens = Encoding::Cl100kBase.count(&block) as usize;
            if used + tokens > self.max_tokens {
                left_out.push(m.skill.name.clone());
                continue;
            }
            used += tokens;
            text.push_str(&block);
            injected.push(MatchedSkill {
                name: m.skill.name.clone(),
                why: m.why,
            });
        }
        if !left_out.is_empty() {
            text.push_str(&format!(
                "Also relevant but not shown (open with `{SKILL_VIEW}`): {}.\n",
                left_out.join(", ")
            ));
        }
        text.push_str(&format!(
            "Other skills: `{SKILLS_LIST}` lists them, `{SKILL_VIEW}` opens one."
        ));
        Some(PromptSection {
            title: "Skills".into(),
            text,
            event: Some(EventKind::SkillsMatched {
                skills: injected,
                left_out,
            }),
        })
    }
}

#[async_trait]
impl PromptPart for SkillPrompt {
    async fn section(&self, request: &PromptRequest<'_>) -> Option<PromptSection> {
        self.section_for(request.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(name: &str, description: &str, triggers: &[&str], body: &str) -> Skill {
        Skill {
            name: name.into(),
            description: description.into(),
            triggers: triggers.iter().map(|t| t.to_string()).collect(),
            body: body.into(),
            dir: "/nowhere".into(),
        }
    }

    fn set() -> SkillSet {
        SkillSet::from_skills(vec![
            skill(
                "deploy",
                "Ship the service to production with blue/green releases",
                &["deploy", "roll back"],
                "Run ./ship.",
            ),
            skill(
                "postgres-tuning",
                "Tune PostgreSQL queries: indexes, vacuum, explain plans",
                &[],
                "Use EXPLAIN.",
            ),
            skill(
                "release-notes",
                "Write release notes from the git log",
                &["changelog"],
                "Group by kind.",
            ),
        ])
    }

    #[test]
    fn triggers_match_whole_words_and_come_first() {
        let set = set();
        let names = |m: &str| -> Vec<String> {
            set.matching(m)
                .iter()
                .map(|m| m.skill.name.clone())
                .collect()
        };
        assert_eq!(names("Please deploy the api"), ["deploy"]);
        assert_eq!(names("we must Roll Back now"), ["deploy"]);
        assert!(names("redeployment plans").is_empty(), "not a whole word");
        assert!(names("hi there").is_empty());
        let both = set.matching("deploy, then check the slow postgresql queries and indexes");
        assert_eq!(both[0].skill.name, "deploy");
        assert!(both[0].why.contains("trigger"));
        assert_eq!(both[1].skill.name, "postgres-tuning");
        assert!(both[1].why.contains("description"), "{both:?}");
    }

    #[test]
    fn the_budget_leaves_out_what_does_not_fit_and_says_so() {
        let big = SkillSet::from_skills(vec![
            // "word " is one token: each block is about 85 tokens, so one fits in 150.
            skill("a", "first", &["go"], &"word ".repeat(80)),
            skill("b", "second", &["go"], &"word ".repeat(80)),
        ]);
        let prompt = SkillPrompt::new(Arc::new(big), 150);
        let section = prompt.section_for("go").unwrap();
        assert!(section.text.contains("### a") && !section.text.contains("### b"));
        assert!(section.text.contains("not shown"));
        match section.event.unwrap() {
            EventKind::SkillsMatched { skills, left_out } => {
                assert_eq!(skills.len(), 1);
                assert_eq!(skills[0].why, "trigger \"go\"");
                assert_eq!(left_out, ["b"]);
            }
            other => panic!("{other:?}"),
        }
        assert!(prompt.section_for("nothing relevant").is_none());
    }

    #[test]
    fn the_budget_counts_tokens_not_characters() {
        // 3,000 characters (750 at four a token) but ~605 tokens: it fits in 650.
        let long = SkillSet::from_skills(vec![skill("a", "first", &["go"], &"word ".repeat(600))]);
        let section = SkillPrompt::new(Arc::new(long), 650)
            .section_for("go")
            .unwrap();
        assert!(section.text.contains("### a"), "{}", section.text);
    }
}
