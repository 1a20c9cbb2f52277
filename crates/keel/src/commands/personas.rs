//! `keel personas`: who the agent is per platform and server (seed 003's cascade: server →
//! platform → default).

use std::process::ExitCode;

use chrono::Utc;
use keel_platform::Persona;

use crate::cli::{PersonaFields, PersonasAction, PersonasArgs};
use crate::config::{ConfigError, keel_home};
use crate::setup;

/// Runs `keel personas`.
pub async fn personas(args: PersonasArgs) -> anyhow::Result<ExitCode> {
    let home = keel_home()?;
    let store = setup::open_store(&home).await?;
    let now = Utc::now();
    let (name, fields, existing) = match args.action {
        None | Some(PersonasAction::List) => {
            let personas = store.personas().await?;
            if personas.is_empty() {
                println!("no personas yet: add one with `keel personas add NAME --prompt TEXT`");
            }
            for persona in personas {
                println!("{}", describe(&persona));
            }
            return Ok(ExitCode::SUCCESS);
        }
        Some(PersonasAction::Add { name, fields }) => (name, fields, None),
        Some(PersonasAction::Set { name, fields }) => {
            let found = store
                .personas()
                .await?
                .into_iter()
                .find(|persona| persona.name == name)
                .ok_or_else(|| {
                    ConfigError(format!(
                        "no persona `{name}`: `keel personas add {name} --prompt TEXT` makes it"
                    ))
                })?;
            (name, fields, Some(found))
        }
    };
    let persona = merged(name, fields, existing, now)?;
    let modules: Vec<String> = [keel_tools::FILES_MODULE, keel_tools::HTTP_MODULE]
        .map(str::to_string)
        .to_vec();
    persona.check(&modules).map_err(ConfigError)?;
    store.save_persona(&persona).await?;
    println!("{}", describe(&persona));
    Ok(ExitCode::SUCCESS)
}

/// `fields` over `existing` (or a new persona).
fn merged(
    name: String,
    fields: PersonaFields,
    existing: Option<Persona>,
    now: chrono::DateTime<Utc>,
) -> Result<Persona, ConfigError> {
    let mut persona = match existing {
        Some(persona) => persona,
        None => Persona {
            system_prompt: fields.prompt.clone().ok_or_else(|| {
                ConfigError(format!(
                    "a new persona needs --prompt: `keel personas add {name} --prompt TEXT`"
                ))
            })?,
            name,
            platform: None,
            platform_server_id: None,
            model: None,
            max_tokens: None,
            allowed_modules: None,
            temperature: None,
            is_default: false,
            created_at: now,
            updated_at: now,
        },
    };
    if let Some(prompt) = fields.prompt {
        persona.system_prompt = prompt;
    }
    persona.platform = fields.platform.or(persona.platform);
    persona.platform_server_id = fields.server.or(persona.platform_server_id);
    persona.model = fields.model.or(persona.model);
    persona.max_tokens = fields.max_tokens.or(persona.max_tokens);
    persona.temperature = fields.temperature.or(persona.temperature);
    if !fields.modules.is_empty() {
        persona.allowed_modules = Some(fields.modules);
    }
    persona.is_default |= fields.default;
    persona.updated_at = now;
    Ok(persona)
}

fn describe(persona: &Persona) -> String {
    let place = match (&persona.platform, &persona.platform_server_id) {
        (Some(platform), Some(server)) => format!("{platform} server {server}"),
        (Some(platform), None) => platform.clone(),
        _ if persona.is_default => "default".to_string(),
        _ => "no place".to_string(),
    };
    let modules = persona
        .allowed_modules
        .as_ref()
        .map_or("every module".to_string(), |modules| modules.join(","));
    let model = persona.model.as_deref().unwrap_or("configured model");
    format!("{}  {place}  {model}  {modules}", persona.name)
}
