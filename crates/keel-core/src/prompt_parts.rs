//! What a run is told besides the conversation: the system prompt is the base (the agent's or
//! the persona's) followed by the sections that stay the same for the session (the project's
//! context files, memory notes); what is chosen for each message (matched skills, known facts)
//! goes with the run's message instead, in its turn context (see [`Placement`]). A
//! [`PromptPart`] computes one section when a run starts; the run keeps what it started with, so
//! every call of the run, a resumed run and the next turn send the same system prompt, and the
//! provider's prompt cache (Anthropic's breakpoints, OpenAI's prefix cache) keeps serving it.

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
    /// The session came from an untrusted source (an email, an event): what a part reads from
    /// places such a source may have written is data to it, not instructions.
    pub untrusted: bool,
}

/// Where a part's section goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Placement {
    /// In the system prompt: text that stays the same from one message of a session to the
    /// next (a project's context files). A section that changes per message here would make
    /// the provider read the whole prompt afresh on every turn.
    System,
    /// In the run's turn context, sent with the run's own message: what is chosen for this
    /// message (matched skills). It changes nothing before that message, so what the provider
    /// cached of the conversation so far stays valid.
    #[default]
    Turn,
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

    /// Where the section goes: by default in the turn context, as a section chosen for one
    /// message.
    fn placement(&self) -> Placement {
        Placement::Turn
    }
}

/// A [`PromptPart`] plugged in as an extension (see [`crate::AgentBuilder::prompt_part`]): its
/// section goes into the run's system prompt or turn context when the run starts.
pub struct PartExtension(pub std::sync::Arc<dyn PromptPart>);

#[async_trait]
impl crate::extension::Extension for PartExtension {
    fn name(&self) -> &'static str {
        "prompt_part"
    }

    async fn prepare(&self, start: &mut crate::extension::RunStart<'_>) {
        let request = PromptRequest {
            session_id: start.session_id,
            user_id: start.user_id,
            message: start.message,
            untrusted: start.settings.untrusted,
        };
        let Some(mut section) = self.0.section(&request).await else {
            return;
        };
        start.events.extend(section.event.take());
        let sections = std::slice::from_ref(&section);
        match self.0.placement() {
            Placement::System => {
                start.settings.system_prompt =
                    compose(start.settings.system_prompt.as_deref(), sections);
            }
            Placement::Turn => start.turn_sections.extend(compose(None, sections)),
        }
    }
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
