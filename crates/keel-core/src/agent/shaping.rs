//! What an agent decides per message before a run starts: the model by the message's tier
//! (when the caller named none) and the system prompt's sections (skills, known facts, memory).
//! See [`crate::routing`] and [`crate::prompt_parts`].

use std::sync::Arc;

use super::AgentBuilder;
use crate::event::EventKind;
use crate::prompt_parts::{self, Placement, PromptPart, PromptRequest, PromptSection};
use crate::routing::{self, RoutingPolicy};
use crate::run_settings::RunSettings;

/// The agent's per-message choices.
#[derive(Clone, Default)]
pub(crate) struct Shaping {
    routing: Option<RoutingPolicy>,
    parts: Vec<Arc<dyn PromptPart>>,
}

impl AgentBuilder {
    /// Routes each message to a model by its tier when the caller names no model (no persona
    /// model): greetings to `fast`, code and multi-step work to `smart` (default: no routing).
    pub fn routing(mut self, policy: RoutingPolicy) -> Self {
        self.shaping.routing = Some(policy);
        self
    }

    /// Adds a section source to every run's system prompt, after the base prompt and the
    /// sections added before it.
    pub fn prompt_part(mut self, part: Arc<dyn PromptPart>) -> Self {
        self.shaping.parts.push(part);
        self
    }
}

impl Shaping {
    /// Applies routing (unless `model_named`) and the system-prompt sections to `settings`;
    /// returns the turn context's sections and the events that say what was chosen and why.
    pub(crate) async fn shape(
        &self,
        settings: &mut RunSettings,
        model_named: bool,
        request: PromptRequest<'_>,
    ) -> Shaped {
        let mut events = Vec::new();
        if let Some(policy) = self.routing.as_ref().filter(|_| !model_named) {
            let route = routing::classify(request.message);
            if let Some(model) = policy.model(route.tier) {
                settings.model = model.to_string();
            }
            events.push(EventKind::RouteDecided {
                tier: route.tier,
                model: settings.model.clone(),
                reasons: route.reasons,
            });
        }
        let mut system: Vec<PromptSection> = Vec::new();
        let mut turn: Vec<PromptSection> = Vec::new();
        for part in &self.parts {
            if let Some(mut section) = part.section(&request).await {
                events.extend(section.event.take());
                match part.placement() {
                    Placement::System => system.push(section),
                    Placement::Turn => turn.push(section),
                }
            }
        }
        if !system.is_empty() {
            settings.system_prompt =
                prompt_parts::compose(settings.system_prompt.as_deref(), &system);
        }
        Shaped {
            events,
            turn: prompt_parts::compose(None, &turn).unwrap_or_default(),
        }
    }
}

/// What shaping chose for a run besides its settings.
pub(crate) struct Shaped {
    /// The events that say what was chosen and why.
    pub(crate) events: Vec<EventKind>,
    /// The sections of the run's turn context (see [`Placement::Turn`]), under their headings;
    /// empty when there are none.
    pub(crate) turn: String,
}
