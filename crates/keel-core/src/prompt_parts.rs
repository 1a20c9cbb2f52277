//! The system prompt is the base (the agent's or the persona's) followed by sections chosen
//! for each run: matched skills, known facts, memory (DESIGN.md section 3: "system prompt :=
//! base/persona + matched skills + known facts + journal digest"). A [`PromptPart`] computes
//! one section when a run starts; the run keeps the prompt it started with, so a resumed run
//! and the provider's prompt cache see the same text.

use async_trait::async_trait;

use crate::event::EventKind;

/// What a part sees of the run it writes for.
#[derive(Clone, Copy, Debug)]
pub struct PromptRequest<'a> {
    /// The conversation.
    pub session_id: &'a str,
    /// The user, when known.
    pub user_id: Option<&'a str>,
    /// The new message.
    pub message: &'a str,
}

/// One section of the system prompt.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptSection {
    /// Its heading, e.g. `Skills`.
    pub title: String,
    /// Its text, under the heading.
    pub text: String,
    /// What to tell the event stream about why the section holds what it holds.
    pub event: Option<EventKind>,
}

/// A source of one system-prompt section.
#[async_trait]
pub trait PromptPart: Send + Sync {
    /// The section for the run `request` starts; `None` when there is nothing to add. A part
    /// that fails adds nothing and logs why: a prompt section never stops a run.
    async fn section(&self, request: &PromptRequest<'_>) -> Option<PromptSection>;
}

/// `base` followed by each section under its heading.
pub fn compose(base: Option<&str>, sections: &[PromptSection]) -> Option<String> {
    if sections.is_empty() {
        return base.map(str::to_string);
    }
    let mut prompt = base.unwrap_or_default().trim_end().to_string();
    for section in sections {
        if !prompt.is_empty() {
            prompt.push_str("\n\n");
        }
        prompt.push_str("## ");
        prompt.push_str(&section.title);
        prompt.push('\n');
        prompt.push_str(section.text.trim_end());
    }
    Some(prompt)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(title: &str, text: &str) -> PromptSection {
        PromptSection {
            title: title.into(),
            text: text.into(),
            event: None,
        }
    }

    #[test]
    fn sections_follow_the_base_under_their_headings() {
        assert_eq!(compose(Some("Base."), &[]), Some("Base.".into()));
        assert_eq!(compose(None, &[]), None);
        let prompt = compose(
            Some("Base.\n"),
            &[section("Skills", "Use X.\n"), section("Known facts", "- a")],
        );
        assert_eq!(
            prompt.as_deref(),
            Some("Base.\n\n## Skills\nUse X.\n\n## Known facts\n- a")
        );
        assert_eq!(
            compose(None, &[section("Skills", "Y")]).as_deref(),
            Some("## Skills\nY")
        );
    }
}
