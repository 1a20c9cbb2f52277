//! The memory store's share of the platform (DESIGN.md section 9): the token log, personas
//! and files.

use std::collections::BTreeMap;

use super::Data;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::files::{FileOrigin, FileRecord};
use keel_core::store::RunRecord;
use keel_core::store::StoreError;
use keel_core::store::UserRecord;
use keel_core::token_log::{TokenCharge, usage_month};
use keel_platform::Persona;
use keel_platform::usage::{UsageLine, UsageQuery};
use keel_platform::{ApiKeyRecord, PlatformLink, PlatformStore};

use super::MemoryStore;

impl Data {
    /// Keeps a file (see [`keel_core::Store::save_file`]).
    pub(super) fn save_file(
        &mut self,
        record: &FileRecord,
        content: &[u8],
    ) -> Result<(), StoreError> {
        record.check_content(content).map_err(StoreError::Backend)?;
        if !self.sessions.contains_key(&record.session_id) {
            return Err(StoreError::NotFound(format!(
                "session `{}`",
                record.session_id
            )));
        }
        if self.files.iter().any(|file| file.id == record.id) {
            return Err(StoreError::Conflict(format!(
                "file `{}` exists already",
                record.id
            )));
        }
        self.blobs
            .entry(record.sha256.clone())
            .or_insert_with(|| content.to_vec());
        self.files.push(record.clone());
        Ok(())
    }

    /// Forgets a refused message's attachments (see [`keel_core::Store::forget_attachments`]).
    pub(super) fn forget_attachments(&mut self, files: &[FileRecord]) {
        self.files.retain(|kept| {
            !files.iter().any(|file| {
                file.id == kept.id && kept.origin == FileOrigin::Attachment && kept.run_id.is_none()
            })
        });
        for file in files {
            if !self.files.iter().any(|kept| kept.sha256 == file.sha256) {
                self.blobs.remove(&file.sha256);
            }
        }
    }

    /// Creates or replaces a persona (see [`keel_core::Store::save_persona`]).
    pub(super) fn save_persona(&mut self, persona: &Persona) -> Result<(), StoreError> {
        if persona.platform.is_some()
            && let Some(other) = self.personas.values().find(|other| {
                other.name != persona.name
                    && other.platform == persona.platform
                    && other.platform_server_id == persona.platform_server_id
            })
        {
            return Err(persona.conflict_with(&other.name));
        }
        if persona.is_default {
            for other in self.personas.values_mut() {
                other.is_default = false;
            }
        }
        self.personas.insert(persona.name.clone(), persona.clone());
        Ok(())
    }

    /// Writes a commit's token log rows and adds them to their users' months.
    pub(super) fn log_tokens(&mut self, run: &RunRecord, charges: &[TokenCharge]) {
        for charge in charges {
            if let Some(user) = &charge.user_id {
                *self
                    .usage
                    .entry((user.clone(), usage_month(charge.at)))
                    .or_default() += charge.usage;
            }
            self.token_log
                .push((run.session_id.clone(), run.id.clone(), charge.clone()));
        }
    }

    /// The month's token log summed per user and model.
    pub(super) fn usage_lines(&self, query: &UsageQuery) -> Vec<UsageLine> {
        let mut lines: BTreeMap<(Option<String>, String), UsageLine> = BTreeMap::new();
        let rows = self
            .token_log
            .iter()
            .map(|(_, _, charge)| charge)
            .filter(|charge| {
                usage_month(charge.at) == query.month
                    && (query.user_id.is_none() || charge.user_id == query.user_id)
            });
        for charge in rows {
            let line = lines
                .entry((charge.user_id.clone(), charge.model.clone()))
                .or_insert_with(|| UsageLine {
                    user_id: charge.user_id.clone(),
                    model: charge.model.clone(),
                    calls: 0,
                    usage: Default::default(),
                    cost: 0.0,
                });
            line.calls += 1;
            line.usage += charge.usage;
            line.cost += charge.cost;
        }
        lines.into_values().collect()
    }
}

#[async_trait]
impl PlatformStore for MemoryStore {
    async fn link_user(&self, link: &PlatformLink) -> Result<(), StoreError> {
        self.lock()?.link_user(link)
    }

    async fn user_by_link(
        &self,
        platform: &str,
        platform_user_id: &str,
    ) -> Result<Option<UserRecord>, StoreError> {
        let data = self.lock()?;
        Ok(data
            .links
            .get(&(platform.to_string(), platform_user_id.to_string()))
            .and_then(|link| data.users.get(&link.user_id))
            .cloned())
    }

    async fn user_links(&self, user_id: &str) -> Result<Vec<PlatformLink>, StoreError> {
        Ok(self.lock()?.user_links(user_id))
    }

    async fn save_api_key(&self, key: &ApiKeyRecord) -> Result<(), StoreError> {
        self.lock()?.save_api_key(key)
    }

    async fn api_key_by_hash(&self, hash: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        Ok(self
            .lock()?
            .api_keys
            .iter()
            .find(|k| k.hash == hash)
            .cloned())
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        Ok(self.lock()?.api_keys.clone())
    }

    async fn revoke_api_key(&self, id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        self.lock()?.revoke_api_key(id, at)
    }

    async fn save_persona(&self, persona: &Persona) -> Result<(), StoreError> {
        self.lock()?.save_persona(persona)
    }

    async fn personas(&self) -> Result<Vec<Persona>, StoreError> {
        Ok(self.lock()?.personas.values().cloned().collect())
    }

    async fn usage_lines(&self, query: &UsageQuery) -> Result<Vec<UsageLine>, StoreError> {
        Ok(self.lock()?.usage_lines(query))
    }
}
