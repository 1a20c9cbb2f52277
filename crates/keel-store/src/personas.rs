//! Personas on SQL (`migrations/0011_platform.sql`).

use keel_core::StoreError;
use keel_platform::Persona;

use crate::OrBackend;
use crate::batch::Batch;
use crate::codec::{Columns, Place, column, json_column, optional_json, time_column, timestamp};
use crate::connections::Connections;

/// A new default persona takes the flag from the others first.
const CLEAR_DEFAULT: &str = "UPDATE personas SET is_default = 0 WHERE is_default AND $10";

/// Creates or replaces persona `$1` (`$10`: whether it is the default, `$9`: now).
pub(crate) const UPSERT: &str = "INSERT INTO personas (name, system_prompt, platform, platform_server_id, \
     model, max_tokens, allowed_modules, temperature, is_default, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $10, $9, $9) ON CONFLICT (name) DO UPDATE SET \
     system_prompt = excluded.system_prompt, platform = excluded.platform, \
     platform_server_id = excluded.platform_server_id, model = excluded.model, \
     max_tokens = excluded.max_tokens, allowed_modules = excluded.allowed_modules, \
     temperature = excluded.temperature, is_default = excluded.is_default, \
     updated_at = excluded.updated_at";

/// The persona already serving `$3`/`$4` under another name.
pub(crate) const SERVING: &str = "SELECT name FROM personas WHERE platform = $1 \
     AND COALESCE(platform_server_id, '') = COALESCE($2, '') AND name <> $3";

/// Every persona, by name.
pub(crate) const LIST: &str = "SELECT name, system_prompt, platform, platform_server_id, model, max_tokens, \
     allowed_modules, temperature, is_default, created_at, updated_at FROM personas ORDER BY name";

/// Creates or replaces a persona (see [`keel_core::Store::save_persona`]).
pub(crate) async fn save(conns: &Connections, persona: &Persona) -> Result<(), StoreError> {
    if let Some(platform) = &persona.platform {
        let other: Option<String> = sqlx::query_scalar(SERVING)
            .bind(platform)
            .bind(persona.platform_server_id.as_deref())
            .bind(&persona.name)
            .fetch_optional(&mut *conns.reader().await?)
            .await
            .or_backend(|| format!("cannot read personas serving {platform}"))?;
        if let Some(other) = other {
            return Err(persona.conflict_with(&other));
        }
    }
    let mut batch = Batch::of(CLEAR_DEFAULT);
    for value in [
        Some(persona.name.clone()),
        Some(persona.system_prompt.clone()),
        persona.platform.clone(),
        persona.platform_server_id.clone(),
        persona.model.clone(),
    ] {
        batch.param(value);
    }
    batch.param(persona.max_tokens.map(i64::from));
    batch.param(optional_json(
        persona.allowed_modules.as_ref(),
        "allowed modules",
    )?);
    batch.param(persona.temperature.map(f64::from));
    batch.param(timestamp(persona.updated_at));
    batch.param(persona.is_default);
    batch.end_statement().sql(UPSERT);
    conns.transaction(vec![batch]).await.map(drop).map_err(|e| {
        // The unique indexes decide a race between two saves.
        if e.contains("UNIQUE") {
            persona.conflict_with("another")
        } else {
            StoreError::Backend(format!("cannot save persona `{}`: {e}", persona.name))
        }
    })
}

/// Every persona, by name.
pub(crate) async fn list(conns: &Connections) -> Result<Vec<Persona>, StoreError> {
    let rows = sqlx::query(LIST)
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(|| "cannot read personas".to_string())?;
    rows.iter().map(decode).collect()
}

/// Decodes a row of [`LIST`]'s columns.
pub(crate) fn decode(row: &impl Columns) -> Result<Persona, StoreError> {
    let place = Place::Table("personas");
    let max_tokens: Option<i64> = column(row, "max_tokens", place)?;
    let temperature: Option<f64> = column(row, "temperature", place)?;
    Ok(Persona {
        name: column(row, "name", place)?,
        system_prompt: column(row, "system_prompt", place)?,
        platform: column(row, "platform", place)?,
        platform_server_id: column(row, "platform_server_id", place)?,
        model: column(row, "model", place)?,
        max_tokens: max_tokens.and_then(|n| u32::try_from(n).ok()),
        allowed_modules: json_column(row, "allowed_modules", place)?,
        temperature: temperature.map(|t| t as f32),
        is_default: column(row, "is_default", place)?,
        created_at: time_column(row, "created_at", place)?,
        updated_at: time_column(row, "updated_at", place)?,
    })
}
