//! Routing (seed 000 "auto-route model"): when the caller names no model, each message is
//! classified by keel's own rules into a tier — `fast` for greetings and short plain questions,
//! `smart` for code, multi-step work and tool-needing requests, `primary` for the rest — and the
//! tier is mapped to a model by `[routing]`. The decision and its reasons are an event
//! (`agent.route.decided`), so a person can see why a model was chosen.

use std::sync::Arc;

use async_trait::async_trait;
use keel_core::event::EventKind;
use keel_core::extension::{Extension, RunStart};
use serde::{Deserialize, Serialize};

pub use keel_core::event::Tier;

/// The models of the three tiers; a tier without one uses the agent's model.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutingPolicy {
    /// Model for the `fast` tier.
    pub fast: Option<String>,
    /// Model for the `primary` tier.
    pub primary: Option<String>,
    /// Model for the `smart` tier.
    pub smart: Option<String>,
}

impl RoutingPolicy {
    /// The model configured for `tier`, if any.
    pub fn model(&self, tier: Tier) -> Option<&str> {
        match tier {
            Tier::Fast => self.fast.as_deref(),
            Tier::Primary => self.primary.as_deref(),
            Tier::Smart => self.smart.as_deref(),
        }
    }
}

/// A message's tier and the rules that put it there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The tier.
    pub tier: Tier,
    /// Why, in words a person can check against the message.
    pub reasons: Vec<String>,
}

/// Messages at most this many words with no other signal are `fast`.
const SHORT_WORDS: usize = 12;
/// Messages longer than this many characters are `smart`.
const LONG_CHARS: usize = 1_500;

const GREETINGS: [&str; 16] = [
    "hi",
    "hello",
    "hey",
    "thanks",
    "thank you",
    "thx",
    "ok",
    "okay",
    "cool",
    "great",
    "good morning",
    "good evening",
    "bye",
    "yes",
    "no",
    "sure",
];

/// Words that ask for work done with tools or over several steps.
const WORK_VERBS: [&str; 22] = [
    "implement",
    "refactor",
    "debug",
    "fix",
    "write a",
    "write the",
    "write tests",
    "build",
    "deploy",
    "migrate",
    "investigate",
    "analyze",
    "analyse",
    "optimize",
    "benchmark",
    "compile",
    "run the",
    "search the",
    "download",
    "install",
    "set up",
    "configure",
];

/// Words that order steps.
const STEP_WORDS: [&str; 7] = [
    "first",
    "then",
    "after that",
    "afterwards",
    "finally",
    "step by step",
    "and then",
];

/// Source-code file endings that name code.
const CODE_FILES: [&str; 14] = [
    ".rs", ".py", ".ts", ".js", ".go", ".java", ".c", ".cpp", ".h", ".sql", ".sh", ".toml",
    ".yaml", ".json",
];

/// Classifies `message` by keel's rules (see the module docs).
pub fn classify(message: &str) -> Route {
    let text = message.trim();
    let lower = text.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric() && c != '.' && c != '_' && c != '-')
        .filter(|w| !w.is_empty())
        .collect();
    let mut smart = Vec::new();
    if text.contains("```") || looks_like_code(text) {
        smart.push("contains code".to_string());
    }
    if let Some(file) = words.iter().find(|w| {
        CODE_FILES
            .iter()
            .any(|end| w.ends_with(end) && w.len() > end.len())
    }) {
        smart.push(format!("names a source file (`{file}`)"));
    }
    let steps = STEP_WORDS
        .iter()
        .filter(|w| contains_phrase(&lower, w))
        .count()
        + numbered_items(text);
    if steps >= 2 {
        smart.push("asks for several steps".to_string());
    }
    if let Some(verb) = WORK_VERBS.iter().find(|w| contains_phrase(&lower, w)) {
        smart.push(format!("asks for work with tools (`{verb}`)"));
    }
    if text.chars().count() > LONG_CHARS {
        smart.push(format!("is long (over {LONG_CHARS} characters)"));
    }
    if text.contains("[Attached files:") {
        smart.push("has attachments".to_string());
    }
    // One signal alone (a single "fix", a file name) is ordinary work; two make it demanding,
    // and code or attachments are demanding by themselves.
    let strong = smart
        .iter()
        .any(|r| r == "contains code" || r == "has attachments" || r.starts_with("is long"));
    if smart.len() >= 2 || strong {
        return Route {
            tier: Tier::Smart,
            reasons: smart,
        };
    }
    let greeting = GREETINGS.iter().any(|g| {
        lower.trim_end_matches(['!', '.', '?', ' ']) == *g || lower.starts_with(&format!("{g} "))
    });
    if smart.is_empty() && (greeting || words.len() <= SHORT_WORDS) {
        let why = if greeting {
            "is a greeting or an acknowledgement".to_string()
        } else {
            format!("is short ({} words) with no code or task", words.len())
        };
        return Route {
            tier: Tier::Fast,
            reasons: vec![why],
        };
    }
    let mut reasons = smart;
    if reasons.is_empty() {
        reasons.push(format!("{} words, no strong signal", words.len()));
    }
    Route {
        tier: Tier::Primary,
        reasons,
    }
}

/// True when `phrase` occurs in `haystack` with no letter or digit touching either end: whole
/// words only (`fix` is in "please fix it", not in "prefix"). Both are compared as given.
pub fn contains_phrase(haystack: &str, phrase: &str) -> bool {
    haystack.match_indices(phrase).any(|(at, _)| {
        let before = haystack[..at].chars().next_back();
        let after = haystack[at + phrase.len()..].chars().next();
        !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
    })
}

/// Lines that begin `1.`, `2)`, `- ` count as listed steps.
fn numbered_items(text: &str) -> usize {
    text.lines()
        .map(str::trim_start)
        .filter(|line| {
            let digits = line.chars().take_while(char::is_ascii_digit).count();
            (digits > 0 && matches!(line[digits..].chars().next(), Some('.' | ')')))
                || line.starts_with("- ")
        })
        .count()
}

fn looks_like_code(text: &str) -> bool {
    const MARKS: [&str; 9] = [
        "fn ", "def ", "class ", "impl ", "#include", "=> {", "();", "import ", "SELECT ",
    ];
    let lines_with_semicolons = text
        .lines()
        .filter(|line| line.trim_end().ends_with(';') || line.trim_end().ends_with('{'))
        .count();
    lines_with_semicolons >= 2 || MARKS.iter().any(|m| text.contains(m))
}

/// Routing as an extension: when the caller named no model, each run's model is its
/// message's tier's (when the policy has one), and an `agent.route.decided` event says why.
#[derive(Clone, Debug)]
pub struct Routing(pub Arc<RoutingPolicy>);

#[async_trait]
impl Extension for Routing {
    fn name(&self) -> &'static str {
        "routing"
    }

    async fn prepare(&self, start: &mut RunStart<'_>) {
        if start.model_named {
            return;
        }
        let route = classify(start.message);
        if let Some(model) = self.0.model(route.tier) {
            start.settings.model = model.to_string();
        }
        start.events.push(EventKind::RouteDecided {
            tier: route.tier,
            model: start.settings.model.clone(),
            reasons: route.reasons,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greetings_and_short_questions_are_fast() {
        for message in ["hi", "Hello!", "thanks", "ok.", "What time is it in Paris?"] {
            let route = classify(message);
            assert_eq!(route.tier, Tier::Fast, "{message}: {route:?}");
            assert_eq!(route.reasons.len(), 1);
        }
    }

    #[test]
    fn code_steps_and_tool_work_are_smart() {
        let multi = "First read src/main.rs, then refactor the parser into its own module, \
                     and finally run the tests.";
        let route = classify(multi);
        assert_eq!(route.tier, Tier::Smart, "{route:?}");
        assert!(route.reasons.iter().any(|r| r.contains("several steps")));
        assert!(route.reasons.iter().any(|r| r.contains("main.rs")));
        let code = "Why does this not compile?\n```rust\nfn main() { let x: u8 = 300; }\n```";
        assert_eq!(classify(code).tier, Tier::Smart);
        let attached = "Summarize this.\n\n[Attached files:]\n- a.pdf";
        assert_eq!(classify(attached).tier, Tier::Smart);
        let long = "word ".repeat(400);
        assert_eq!(classify(&long).tier, Tier::Smart);
    }

    #[test]
    fn ordinary_requests_are_primary() {
        let message = "Can you explain the difference between a process and a thread, with an \
                       example from everyday life?";
        let route = classify(message);
        assert_eq!(route.tier, Tier::Primary, "{route:?}");
        // One signal alone is ordinary work.
        let one = "Please fix the typo in the greeting of our welcome email to customers today";
        assert_eq!(classify(one).tier, Tier::Primary);
    }

    #[test]
    fn phrases_match_whole_words_only() {
        assert!(contains_phrase("please fix it", "fix"));
        assert!(!contains_phrase("a prefix here", "fix"));
        assert!(!contains_phrase("thence", "then"));
        assert_eq!(classify("hi there, prefixed").tier, Tier::Fast);
    }

    #[test]
    fn hostile_text_never_panics() {
        for message in [
            "",
            "   ",
            "1.",
            "é".repeat(5_000).as_str(),
            "```",
            "\u{0}\u{202e}",
        ] {
            let _ = classify(message);
        }
        assert_eq!(classify("").tier, Tier::Fast);
    }

    #[test]
    fn a_policy_maps_tiers_to_models() {
        let policy = RoutingPolicy {
            fast: Some("small".into()),
            primary: None,
            smart: Some("big".into()),
        };
        assert_eq!(policy.model(Tier::Fast), Some("small"));
        assert_eq!(policy.model(Tier::Primary), None);
        assert_eq!(policy.model(Tier::Smart), Some("big"));
    }
}
