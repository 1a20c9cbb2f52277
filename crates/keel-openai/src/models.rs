//! `GET /v1/models` and what a request's `model` means: `keel` (the default: the persona the
//! cascade chooses for the `openai` platform, else none), the configured model's name (the
//! same, on that model), or the name of a persona the caller may use (one that serves no
//! platform, or `openai`).

use axum::extract::{Path, State};
use keel_core::RunOptions;
use keel_platform::persona::run_options;
use keel_platform::{Persona, choose_persona};
use keel_server::AppState;
use serde_json::{Value, json};

use crate::errors::OpenAiError;
use crate::{CHANNEL, OpenAiCaller};

/// The default model name: keel as configured.
pub const DEFAULT_MODEL: &str = "keel";

/// A model a caller may name.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    /// Its name.
    pub id: String,
    /// When it was made (a persona's creation), in Unix seconds.
    pub created: i64,
    /// The persona it is, when it is one.
    pub persona: Option<Persona>,
}

impl Model {
    /// The `model` object OpenAI clients read.
    pub fn view(&self) -> Value {
        json!({"id": self.id, "object": "model", "created": self.created, "owned_by": "keel"})
    }
}

/// The personas the OpenAI routes offer: those serving no platform or `openai`.
fn offered(personas: &[Persona]) -> impl Iterator<Item = &Persona> {
    personas.iter().filter(|p| {
        p.platform
            .as_deref()
            .is_none_or(|platform| platform == CHANNEL)
    })
}

/// Every model the caller may name: `keel`, the configured model, the personas offered.
pub async fn models(state: &AppState) -> Result<Vec<Model>, OpenAiError> {
    let personas = state.store.personas().await?;
    let mut models = vec![Model {
        id: DEFAULT_MODEL.to_string(),
        created: 0,
        persona: None,
    }];
    let configured = state.engine.model();
    if !configured.is_empty() && configured != DEFAULT_MODEL {
        models.push(Model {
            id: configured.to_string(),
            created: 0,
            persona: None,
        });
    }
    for persona in offered(&personas) {
        if models.iter().all(|model| model.id != persona.name) {
            models.push(Model {
                id: persona.name.clone(),
                created: persona.created_at.timestamp(),
                persona: Some(persona.clone()),
            });
        }
    }
    Ok(models)
}

/// The run options of a request naming `model`; 404 for a model the caller may not use.
pub async fn options_for(state: &AppState, model: &str) -> Result<RunOptions, OpenAiError> {
    let found = models(state)
        .await?
        .into_iter()
        .find(|m| m.id == model)
        .ok_or_else(|| OpenAiError::model_not_found(model))?;
    let defaults = state.inbox.settings().default_modules.clone();
    let mut options = match &found.persona {
        Some(persona) => run_options(Some(persona), defaults.as_deref()),
        None => {
            let personas = state.store.personas().await?;
            let persona = choose_persona(&personas, CHANNEL, None);
            let mut options = run_options(persona, defaults.as_deref());
            if model != DEFAULT_MODEL {
                // The configured model, named: asked for whatever the persona says.
                options.model = Some(model.to_string());
            }
            options
        }
    };
    options.untrusted = false;
    options.place = None;
    Ok(options)
}

/// `GET /v1/models`.
pub async fn list(
    State(state): State<AppState>,
    _caller: OpenAiCaller,
) -> Result<axum::Json<Value>, OpenAiError> {
    let data: Vec<Value> = models(&state).await?.iter().map(Model::view).collect();
    Ok(axum::Json(json!({"object": "list", "data": data})))
}

/// `GET /v1/models/{id}`.
pub async fn one(
    State(state): State<AppState>,
    _caller: OpenAiCaller,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, OpenAiError> {
    models(&state)
        .await?
        .iter()
        .find(|model| model.id == id)
        .map(|model| axum::Json(model.view()))
        .ok_or_else(|| OpenAiError::model_not_found(&id))
}
