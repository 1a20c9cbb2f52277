//! The OpenAPI document's finishing: every response object gets the `description` that
//! OpenAPI 3.1 requires. An annotation that names only a status and a body leaves it empty, and
//! utoipa then leaves the field out, which makes the document invalid (generated clients refuse
//! it); such a response is described by what keel means by its status.

use utoipa::openapi::{OpenApi, RefOr};

/// Gives every response of `document` that has no description the meaning of its status.
pub fn describe_responses(document: &mut OpenApi) {
    for item in document.paths.paths.values_mut() {
        let operations = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.options,
            &mut item.head,
            &mut item.patch,
            &mut item.trace,
        ];
        for operation in operations.into_iter().flatten() {
            for (status, response) in operation.responses.responses.iter_mut() {
                if let RefOr::T(response) = response
                    && response.description.trim().is_empty()
                {
                    response.description = meaning(status).to_string();
                }
            }
        }
    }
}

/// What keel means by `status` when a handler's annotation does not say.
fn meaning(status: &str) -> &'static str {
    match status {
        "200" => "OK: the thing asked for",
        "201" => "Created",
        "202" => "Accepted: the work is queued or under way",
        "204" => "Done; nothing to return",
        "400" => "The request is malformed or names an unknown field (a JSON error says which)",
        "401" => "No valid API key (Authorization: Bearer …)",
        "403" => "The key may not do this",
        "404" => "No such thing, or not the caller's to see",
        "408" => "The request did not arrive in time",
        "409" => "The thing is not in a state that allows this",
        "413" => "The request body is larger than the server accepts",
        "415" => "The request body is not JSON",
        "429" => "Too many queued; try again after Retry-After",
        "503" => "The server is shutting down or not ready; try again",
        _ => "See the error body",
    }
}
