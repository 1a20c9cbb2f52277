//! The console's stylesheet and script, embedded in the binary (`assets/`), served at
//! `/assets/{name}`. Pages link them with a `?v=` of their content hash, so a new binary's
//! assets are fetched anew while each is cached for a day.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rust_embed::Embed;

use crate::ConsoleState;

#[derive(Embed)]
#[folder = "assets/"]
struct Assets;

/// The routes of this part.
pub fn routes() -> Router<ConsoleState> {
    Router::new().route("/assets/{name}", get(asset))
}

async fn asset(Path(name): Path<String>) -> Response {
    let Some(file) = Assets::get(&name) else {
        return crate::ConsoleError::not_found("this asset").into_response();
    };
    let content_type = match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("css") => "text/css; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("svg") => "image/svg+xml",
        _ => "application/octet-stream",
    };
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=86400"),
            ),
        ],
        file.data.into_owned(),
    )
        .into_response()
}

/// The path to link asset `name` by, with its content hash (or the bare path for an unknown
/// one).
pub fn href(name: &str) -> String {
    match Assets::get(name) {
        Some(file) => {
            let hash = file.metadata.sha256_hash();
            let short: String = hash[..6].iter().map(|b| format!("{b:02x}")).collect();
            format!("/assets/{name}?v={short}")
        }
        None => format!("/assets/{name}"),
    }
}
