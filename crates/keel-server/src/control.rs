//! The endpoints that act: send a message, cancel, answer, resume.

use utoipa_axum::router::OpenApiRouter;

use crate::state::AppState;

/// The routes of this part.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
}
