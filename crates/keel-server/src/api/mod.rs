//! The endpoints that read: conversations, runs, transcripts, live events.

use utoipa_axum::router::OpenApiRouter;

use crate::state::AppState;

/// The routes of this part.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
}
