//! `POST /v1/personas` and `GET /v1/personas`: who the agent is per platform and server (seed
//! 003). Admin keys only: a persona applies to everyone on its platform.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use keel_platform::Persona;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::json::ApiJson;
use crate::state::AppState;

/// The routes of this part.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(save_persona, list_personas))
}

/// A persona, as written and as read.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PersonaBody {
    /// Unique name (letters, digits, `_`, `-`, `.`); saving an existing name replaces it.
    pub name: String,
    /// The system prompt.
    pub system_prompt: String,
    /// The platform it serves.
    pub platform: Option<String>,
    /// The server on that platform it serves.
    pub platform_server_id: Option<String>,
    /// The model to ask instead of the configured one.
    pub model: Option<String>,
    /// Cap on output tokens per model call.
    pub max_tokens: Option<u32>,
    /// The tool modules it may use (default: every module).
    pub allowed_modules: Option<Vec<String>>,
    /// Sampling temperature, 0–2.
    pub temperature: Option<f32>,
    /// The persona for messages no server or platform persona serves.
    #[serde(default)]
    pub default: bool,
}

impl From<Persona> for PersonaBody {
    fn from(persona: Persona) -> Self {
        PersonaBody {
            name: persona.name,
            system_prompt: persona.system_prompt,
            platform: persona.platform,
            platform_server_id: persona.platform_server_id,
            model: persona.model,
            max_tokens: persona.max_tokens,
            allowed_modules: persona.allowed_modules,
            temperature: persona.temperature,
            default: persona.is_default,
        }
    }
}

/// Every persona, by name.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PersonaList {
    /// The personas.
    pub items: Vec<PersonaBody>,
}

fn admin_only(caller: &Caller) -> Result<(), ApiError> {
    if caller.admin {
        Ok(())
    } else {
        Err(ApiError::forbidden(
            "personas are managed with an admin key",
        ))
    }
}

/// Creates or replaces a persona.
#[utoipa::path(post, path = "/v1/personas", request_body = PersonaBody,
    responses((status = 201, body = PersonaBody), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 409, body = ErrorBody)))]
async fn save_persona(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<PersonaBody>,
) -> Result<Response, ApiError> {
    admin_only(&caller)?;
    let now = Utc::now();
    let persona = Persona {
        name: body.name,
        system_prompt: body.system_prompt,
        platform: body.platform,
        platform_server_id: body.platform_server_id,
        model: body.model,
        max_tokens: body.max_tokens,
        allowed_modules: body.allowed_modules,
        temperature: body.temperature,
        is_default: body.default,
        created_at: now,
        updated_at: now,
    };
    persona.check(&state.modules).map_err(ApiError::invalid)?;
    state.store.save_persona(&persona).await?;
    Ok((StatusCode::CREATED, axum::Json(PersonaBody::from(persona))).into_response())
}

/// Every persona.
#[utoipa::path(get, path = "/v1/personas",
    responses((status = 200, body = PersonaList), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody)))]
async fn list_personas(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<axum::Json<PersonaList>, ApiError> {
    admin_only(&caller)?;
    let items = state
        .store
        .personas()
        .await?
        .into_iter()
        .map(PersonaBody::from)
        .collect();
    Ok(axum::Json(PersonaList { items }))
}
