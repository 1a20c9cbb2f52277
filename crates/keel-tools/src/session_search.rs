//! `session_search`: full-text search over the caller's past sessions (seed 004), through the
//! store's index ([`keel_core::Store::search_sessions`], BM25-ranked). Whose sessions is the
//! loop's to say, never the model's: the search is for the run's user (`ToolContext.user_id`;
//! a run for no user searches only sessions without an owner, see
//! [`keel_core::session_search`]), and the session it is called from is left out.

use std::sync::Arc;

use async_trait::async_trait;
use keel_core::{Permission, Reach, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use keel_platform::DaemonStore;
use keel_platform::session_search::{MAX_QUERY_TERMS, SessionHit, SessionSearch, search_terms};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::schema::{parameters_for, parse_args};

/// The tool's name.
pub const SESSION_SEARCH: &str = "session_search";

/// The module of the tool, for personas' `allowed_modules`.
pub const SESSIONS_MODULE: &str = "sessions";

/// Sessions returned when the call names no `limit`.
pub const DEFAULT_SESSION_LIMIT: usize = 5;

/// The most sessions one call may ask for.
pub const MAX_SESSION_LIMIT: usize = 10;

/// The longest query accepted, in characters.
pub const MAX_QUERY_CHARS: usize = 1000;

const DESCRIPTION: &str = "Search the user's past conversations with you (full text, best \
matches first) for something said before: a fact, a decision, a name, a number. Give the words \
to look for; returns the best-matching sessions with their dates and the matching passages. \
The current conversation is not searched.";

/// The arguments of `session_search`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SessionSearchArgs {
    /// The words to look for (plain words; no search syntax).
    query: String,
    /// Most sessions to return, 1 to 10. Default: 5.
    #[schemars(range(min = 1, max = 10))]
    limit: Option<usize>,
}

/// The `session_search` tool: idempotent, for any caller, confined to the caller's sessions.
pub struct SessionSearchTool {
    store: Arc<dyn DaemonStore>,
    spec: ToolSpec,
}

impl SessionSearchTool {
    /// A `session_search` tool over the sessions `store` keeps.
    pub fn new(store: Arc<dyn DaemonStore>) -> Self {
        let mut spec = ToolSpec::new(
            SESSION_SEARCH,
            DESCRIPTION,
            parameters_for::<SessionSearchArgs>(),
        )
        .idempotent()
        // The user's other conversations: private beyond this one.
        .reach(Reach::Private);
        spec.module = Some(SESSIONS_MODULE.to_string());
        // Anyone may search their own past; a guest has only its own sessions.
        spec.required_permission = Permission::Guest;
        SessionSearchTool { store, spec }
    }
}

#[async_trait]
impl Tool for SessionSearchTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(
        &self,
        args: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: SessionSearchArgs = parse_args(SESSION_SEARCH, args)?;
        if args.query.chars().count() > MAX_QUERY_CHARS {
            return Err(ToolError::invalid_arguments(format!(
                "the query is longer than {MAX_QUERY_CHARS} characters; give the few words \
                 that matter"
            )));
        }
        if search_terms(&args.query).is_empty() {
            return Err(ToolError::invalid_arguments(
                "the query has no words to search for (letters or digits)",
            ));
        }
        let limit = args.limit.unwrap_or(DEFAULT_SESSION_LIMIT);
        if !(1..=MAX_SESSION_LIMIT).contains(&limit) {
            return Err(ToolError::invalid_arguments(format!(
                "`limit` must be between 1 and {MAX_SESSION_LIMIT}"
            )));
        }
        let search = SessionSearch {
            query: args.query.clone(),
            owner: ctx.user_id.clone(),
            exclude_session: Some(ctx.session_id.clone()),
            limit,
        };
        let hits = self
            .store
            .search_sessions(&search)
            .await
            .map_err(|e| ToolError::failed(format!("cannot search past sessions: {e}")))?;
        Ok(ToolOutput::text(describe(&args.query, &hits)))
    }
}

/// The tool's answer: the sessions found, newest facts with their dates.
fn describe(query: &str, hits: &[SessionHit]) -> String {
    let terms = search_terms(query);
    let shown = terms.join(" ");
    let note = if terms.len() == MAX_QUERY_TERMS {
        " (only the first words were searched)"
    } else {
        ""
    };
    if hits.is_empty() {
        return format!("No past session matches `{shown}`{note}.");
    }
    let mut out = format!(
        "{} past session{} match `{shown}`{note}, best first:",
        hits.len(),
        if hits.len() == 1 { "" } else { "s" }
    );
    for (i, hit) in hits.iter().enumerate() {
        out.push_str(&format!(
            "\n\n{}. session {} — started {}, last message {}",
            i + 1,
            hit.session_id,
            hit.created_at.format("%Y-%m-%d %H:%M UTC"),
            hit.updated_at.format("%Y-%m-%d %H:%M UTC"),
        ));
        if let Some(title) = &hit.title {
            out.push_str(&format!("\n   title: {title}"));
        }
        for snippet in &hit.snippets {
            out.push_str(&format!("\n   > {}", snippet.replace('\n', " ")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_core::Message;
    use keel_core::Store;
    use keel_platform::{ConversationStore, NewConversation};
    use keel_store::MemoryStore;
    use serde_json::json;
    use tokio_util::sync::CancellationToken;

    fn context(session: &str, user: Option<&str>) -> ToolContext {
        ToolContext {
            session_id: session.into(),
            run_id: "r".into(),
            call_id: "c".into(),
            user_id: user.map(str::to_string),
            untrusted_source: false,
            place: None,
            cancel: CancellationToken::new(),
        }
    }

    async fn said(store: &MemoryStore, session: &str, owner: Option<&str>, text: &str) {
        store
            .create_conversation(&NewConversation {
                id: session.into(),
                owner: owner.map(str::to_string),
                lane_policy: Default::default(),
                at: chrono::Utc::now(),
                place: None,
                trusted: true,
            })
            .await
            .unwrap();
        store
            .append_messages(session, None, &[Message::user(text)])
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn finds_the_callers_sessions_only_and_not_the_current_one() {
        let store = Arc::new(MemoryStore::new());
        said(&store, "ann-old", Some("ann"), "my locker code is 1234").await;
        said(&store, "ann-now", Some("ann"), "what is my locker code?").await;
        said(&store, "bob-old", Some("bob"), "my locker code is 9999").await;
        let tool = SessionSearchTool::new(store.clone());
        let ask = json!({"query": "locker code"});
        let ann = tool
            .call(ask.clone(), &context("ann-now", Some("ann")))
            .await
            .unwrap()
            .content;
        assert!(ann.contains("ann-old") && ann.contains("1234"), "{ann}");
        assert!(!ann.contains("ann-now") && !ann.contains("9999"), "{ann}");
        // The arguments cannot name another owner: unknown fields are refused.
        let trick = tool
            .call(
                json!({"query": "locker", "user_id": "bob", "owner": "bob"}),
                &context("ann-now", Some("ann")),
            )
            .await;
        assert!(trick.is_err());
        // A run for no user sees no user's sessions.
        let nobody = tool.call(ask, &context("x", None)).await.unwrap().content;
        assert!(nobody.starts_with("No past session"), "{nobody}");
    }

    #[tokio::test]
    async fn bad_queries_are_refused_with_a_reason() {
        let tool = SessionSearchTool::new(Arc::new(MemoryStore::new()));
        let ctx = context("s", None);
        for args in [
            json!({"query": "  \"*():  "}),
            json!({"query": "x".repeat(MAX_QUERY_CHARS + 1)}),
            json!({"query": "ok", "limit": 0}),
            json!({"query": "ok", "limit": 11}),
        ] {
            let error = tool.call(args.clone(), &ctx).await.unwrap_err();
            assert!(!error.to_string().is_empty(), "{args}");
        }
    }
}
