//! The platform's endpoints (DESIGN.md section 9): incoming platform messages, their files,
//! personas and the token log's usage report.

pub mod files;
pub mod messages;
pub mod personas;
pub mod usage;

use utoipa_axum::router::OpenApiRouter;

use crate::state::AppState;

/// The routes of this part.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(files::routes())
        .merge(messages::routes())
        .merge(personas::routes())
        .merge(usage::routes())
}
