//! The console's pages besides the run page: home, runs, conversations, usage, schedules,
//! channels. Each reads the store as the API's handlers do, through the viewer's
//! [`keel_server::Caller`].

pub mod channels;
pub mod conversations;
pub mod home;
pub mod runs;
pub mod schedules;
pub mod usage;

use axum::Router;
use axum::routing::get;

use crate::ConsoleState;

/// The routes of the pages.
pub fn routes() -> Router<ConsoleState> {
    Router::new()
        .route("/", get(home::show))
        .route("/runs", get(runs::list))
        .route("/conversations", get(conversations::list))
        .route("/conversations/{id}", get(conversations::show))
        .route("/usage", get(usage::show))
        .route("/schedules", get(schedules::list))
        .route("/channels", get(channels::list))
}
