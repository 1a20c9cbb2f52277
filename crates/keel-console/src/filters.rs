//! The lists' filters (state, user, platform, age) and paging, read from the query string, and
//! the scan that applies them: the store filters what it can (state, owner, the page's cursor)
//! and the rest (platform, age, visibility) is checked here, a bounded number of rows per
//! request, so a page never reads the whole store.

use std::collections::HashMap;

use chrono::{DateTime, TimeDelta, Utc};
use keel_core::{AgentState, RunRecord, SessionInfo};
use keel_platform::{ConversationFilter, RunFilter};
use keel_server::{AppState, Caller};
use maud::{Markup, html};
use serde::Deserialize;

use crate::error::ConsoleError;

/// Rows a list page shows.
pub const PAGE: usize = 50;

/// Rows read from the store per batch.
const BATCH: usize = 200;

/// The most rows one page reads before it stops and offers the next page from where it got.
pub const MAX_SCAN: usize = 2000;

/// The ages a filter offers: the query value, the label, and how far back.
pub const AGES: [(&str, &str, TimeDelta); 4] = [
    ("1h", "Last hour", TimeDelta::hours(1)),
    ("24h", "Last day", TimeDelta::days(1)),
    ("7d", "Last 7 days", TimeDelta::days(7)),
    ("30d", "Last 30 days", TimeDelta::days(30)),
];

/// A list's query: `?state=&user=&platform=&age=&before=` (empty values are no filter).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ListQuery {
    /// A run state (a conversation's: its last run's).
    pub state: Option<String>,
    /// The user who owns the conversation.
    pub user: Option<String>,
    /// The platform the conversation is on; `api` for one made through the API.
    pub platform: Option<String>,
    /// One of [`AGES`]' values.
    pub age: Option<String>,
    /// The previous page's last id.
    pub before: Option<String>,
}

/// A [`ListQuery`], checked.
#[derive(Clone, Debug, Default)]
pub struct Filters {
    /// The state wanted.
    pub state: Option<AgentState>,
    /// The user wanted.
    pub user: Option<String>,
    /// The platform wanted.
    pub platform: Option<String>,
    /// The age wanted, as its query value.
    pub age: Option<&'static str>,
    /// The page's cursor.
    pub before: Option<String>,
}

fn given(value: &Option<String>) -> Option<String> {
    value
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

impl ListQuery {
    /// The filters this query asks for; 400 for a state or age that does not exist.
    pub fn filters(&self) -> Result<Filters, ConsoleError> {
        let state =
            match given(&self.state) {
                None => None,
                Some(name) => Some(name.parse::<AgentState>().map_err(|_| {
                    ConsoleError::invalid(format!("There is no run state `{name}`."))
                })?),
            };
        let age = match given(&self.age) {
            None => None,
            Some(age) => Some(
                AGES.iter()
                    .find(|(value, _, _)| *value == age)
                    .map(|(value, _, _)| *value)
                    .ok_or_else(|| ConsoleError::invalid(format!("There is no age `{age}`.")))?,
            ),
        };
        Ok(Filters {
            state,
            user: given(&self.user),
            platform: given(&self.platform),
            age,
            before: given(&self.before),
        })
    }
}

impl Filters {
    /// The earliest instant the age filter lets through, at `now`.
    pub fn since(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let age = self.age?;
        AGES.iter()
            .find(|(value, _, _)| *value == age)
            .map(|(_, _, span)| now - *span)
    }

    /// The owner to ask the store for: the filter's user for an admin; for anyone else their
    /// own user, or `Err` when they asked for someone else's (they see nothing of theirs).
    fn owner(&self, caller: &Caller) -> Result<Option<String>, ()> {
        if caller.admin {
            return Ok(self.user.clone());
        }
        let own = caller.owner_filter();
        match &self.user {
            Some(user) if Some(user) != own.as_ref() => Err(()),
            _ => Ok(own),
        }
    }

    /// Whether `conversation` is on the platform asked for.
    fn on_platform(&self, conversation: &SessionInfo) -> bool {
        match (&self.platform, &conversation.place) {
            (None, _) => true,
            (Some(wanted), Some(place)) => place.platform == *wanted,
            (Some(wanted), None) => wanted == "api",
        }
    }

    /// This query with the page's cursor at `before`, as a query string.
    pub fn query_with_before(&self, before: Option<&str>) -> String {
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        if let Some(state) = self.state {
            pairs.push(("state", state.as_str()));
        }
        if let Some(user) = &self.user {
            pairs.push(("user", user));
        }
        if let Some(platform) = &self.platform {
            pairs.push(("platform", platform));
        }
        if let Some(age) = self.age {
            pairs.push(("age", age));
        }
        if let Some(before) = before {
            pairs.push(("before", before));
        }
        serde_urlencoded::to_string(pairs).unwrap_or_default()
    }

    /// The filter form for a list at `action`; `with_state` offers the state filter.
    pub fn form(&self, action: &str, admin: bool) -> Markup {
        html! {
            form class="filters" method="get" action=(action) role="search" {
                label {
                    "State"
                    select name="state" {
                        option value="" { "Any" }
                        @for state in AgentState::ALL {
                            option value=(state.as_str()) selected[self.state == Some(state)] {
                                (state.as_str())
                            }
                        }
                    }
                }
                @if admin {
                    label {
                        "User"
                        input type="text" name="user" value=[self.user.as_deref()]
                            autocomplete="off" spellcheck="false";
                    }
                }
                label {
                    "Platform"
                    input type="text" name="platform" value=[self.platform.as_deref()]
                        placeholder="telegram, slack, api…" autocomplete="off" spellcheck="false";
                }
                label {
                    "Age"
                    select name="age" {
                        option value="" { "Any" }
                        @for (value, label, _) in AGES {
                            option value=(value) selected[self.age == Some(value)] { (label) }
                        }
                    }
                }
                button type="submit" { "Filter" }
                " "
                a href=(action) { "Clear" }
            }
        }
    }
}

/// A page of a list and where the next one starts.
pub struct Scanned<T> {
    /// The rows.
    pub items: Vec<T>,
    /// The cursor of the next page, when there may be one.
    pub next: Option<String>,
}

/// The conversations of runs, read once per scan.
struct Conversations<'a> {
    state: &'a AppState,
    known: HashMap<String, Option<SessionInfo>>,
}

impl Conversations<'_> {
    async fn get(&mut self, id: &str) -> Result<Option<SessionInfo>, ConsoleError> {
        if let Some(known) = self.known.get(id) {
            return Ok(known.clone());
        }
        let found = self.state.store.session(id).await?;
        self.known.insert(id.to_string(), found.clone());
        Ok(found)
    }
}

/// The runs `caller` may see that `filters` let through (of one conversation when
/// `conversation` is given), newest first, a page from the filters' cursor.
pub async fn runs(
    state: &AppState,
    caller: &Caller,
    filters: &Filters,
    conversation: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Scanned<(RunRecord, SessionInfo)>, ConsoleError> {
    let mut out = Scanned {
        items: Vec::new(),
        next: None,
    };
    let Ok(owner) = filters.owner(caller) else {
        return Ok(out);
    };
    let since = filters.since(now);
    let mut conversations = Conversations {
        state,
        known: HashMap::new(),
    };
    let mut cursor = filters.before.clone();
    let mut scanned = 0;
    loop {
        let batch = state
            .store
            .find_runs(&RunFilter {
                session_id: conversation.map(str::to_string),
                state: filters.state,
                // A conversation's runs are checked by `sees` below; its owner may not be the
                // viewer (a platform key, an admin).
                owner: if conversation.is_some() {
                    None
                } else {
                    owner.clone()
                },
                before: cursor.clone(),
                limit: BATCH,
            })
            .await?;
        let full = batch.len() == BATCH;
        for run in batch {
            scanned += 1;
            cursor = Some(run.id.clone());
            if since.is_some_and(|since| run.started_at < since) {
                return Ok(out);
            }
            let Some(session) = conversations.get(&run.session_id).await? else {
                continue;
            };
            if !caller.sees(&session) || !filters.on_platform(&session) {
                continue;
            }
            if conversation.is_some() && filters.user.is_some() && session.owner != filters.user {
                continue;
            }
            out.items.push((run, session));
            if out.items.len() == PAGE || scanned >= MAX_SCAN {
                out.next = cursor;
                return Ok(out);
            }
        }
        if !full {
            return Ok(out);
        }
        if scanned >= MAX_SCAN {
            out.next = cursor;
            return Ok(out);
        }
    }
}

/// The conversations `caller` may see that `filters` let through, newest first, each with
/// its last run, a page from the filters' cursor. The age is of its last message.
pub async fn conversations(
    state: &AppState,
    caller: &Caller,
    filters: &Filters,
    now: DateTime<Utc>,
) -> Result<Scanned<(SessionInfo, Option<RunRecord>)>, ConsoleError> {
    let mut out = Scanned {
        items: Vec::new(),
        next: None,
    };
    let Ok(owner) = filters.owner(caller) else {
        return Ok(out);
    };
    let since = filters.since(now);
    let mut cursor = filters.before.clone();
    let mut scanned = 0;
    loop {
        let batch = state
            .store
            .list_conversations(&ConversationFilter {
                owner: owner.clone(),
                before: cursor.clone(),
                limit: BATCH,
            })
            .await?;
        let full = batch.len() == BATCH;
        for session in batch {
            scanned += 1;
            cursor = Some(session.id.clone());
            let wanted = caller.sees(&session)
                && filters.on_platform(&session)
                && since.is_none_or(|since| session.updated_at >= since);
            if wanted {
                let last = state
                    .store
                    .find_runs(&RunFilter {
                        session_id: Some(session.id.clone()),
                        limit: 1,
                        ..RunFilter::default()
                    })
                    .await?
                    .pop();
                let state_ok = filters
                    .state
                    .is_none_or(|wanted| last.as_ref().is_some_and(|run| run.state == wanted));
                if state_ok {
                    out.items.push((session, last));
                }
            }
            if out.items.len() == PAGE || scanned >= MAX_SCAN {
                out.next = cursor;
                return Ok(out);
            }
        }
        if !full {
            return Ok(out);
        }
    }
}
