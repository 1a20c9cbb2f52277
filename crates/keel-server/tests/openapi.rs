//! `/openapi.json` is a valid OpenAPI 3.1 document, checked against the OpenAPI Initiative's
//! own JSON Schema for 3.1 (`fixtures/openapi-3.1-schema.json`, the 2022-10-07 schema as
//! published at spec.openapis.org, here as data), not against the generator that wrote it.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

const OPENAPI_31_SCHEMA: &str = include_str!("fixtures/openapi-3.1-schema.json");

async fn document() -> Value {
    let (state, _) = common::state().await;
    let response = keel_server::router(state)
        .oneshot(Request::get("/openapi.json").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test]
async fn the_document_validates_against_the_openapi_3_1_schema() {
    let schema: Value = serde_json::from_str(OPENAPI_31_SCHEMA).unwrap();
    let validator = jsonschema::draft202012::new(&schema).unwrap();
    let document = document().await;
    let errors: Vec<String> = validator
        .iter_errors(&document)
        .map(|error| format!("{} at {}", error, error.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{} errors:\n{}",
        errors.len(),
        errors.join("\n")
    );
}

#[tokio::test]
async fn the_schema_catches_a_response_without_its_description() {
    let schema: Value = serde_json::from_str(OPENAPI_31_SCHEMA).unwrap();
    let validator = jsonschema::draft202012::new(&schema).unwrap();
    let mut document = document().await;
    let responses = document["paths"]["/readyz"]["get"]["responses"]
        .as_object_mut()
        .unwrap();
    for response in responses.values_mut() {
        response.as_object_mut().unwrap().remove("description");
    }
    assert!(!validator.is_valid(&document));
}
