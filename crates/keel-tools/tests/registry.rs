//! The file tools' specs as the registry sees them: schemas that compile, flags the loop relies
//! on, and arguments checked before a tool runs.

mod common;

use std::sync::Arc;

use common::{Fixture, ctx};
use keel_core::{ToolCall, ToolRegistry};
use keel_tools::{FILES_MODULE, Workspace, file_tools};
use serde_json::json;

fn registry(fx: &Fixture) -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    for tool in file_tools(Arc::new(Workspace::new(&fx.root).unwrap())) {
        registry.register(tool).unwrap();
    }
    registry
}

fn call(name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: "c".into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

#[test]
fn specs_are_plain_object_schemas_with_the_right_flags() {
    let fx = Fixture::new();
    let specs = registry(&fx).specs();
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["read_file", "write_file", "append_file", "list_dir"]
    );
    for spec in &specs {
        let schema = &spec.parameters;
        assert_eq!(schema["type"], "object", "{}", spec.name);
        assert_eq!(schema["additionalProperties"], false, "{}", spec.name);
        assert!(schema.get("$schema").is_none() && schema.get("title").is_none());
        assert_eq!(schema["properties"]["path"]["type"], "string");
        assert!(!spec.description.is_empty() && !spec.interactive);
        assert_eq!(spec.module.as_deref(), Some(FILES_MODULE));
    }
    assert!(specs[0].idempotent && !specs[1].idempotent && !specs[2].idempotent);
    assert!(specs[3].idempotent);
    assert_eq!(specs[0].parameters["required"], json!(["path"]));
    assert_eq!(specs[0].parameters["properties"]["offset"]["minimum"], 1);
    for spec in &specs[1..3] {
        let mut required: Vec<&str> = spec.parameters["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        required.sort();
        assert_eq!(required, ["content", "path"], "{}", spec.name);
        assert_eq!(spec.parameters["properties"]["content"]["type"], "string");
    }
    assert_eq!(specs[3].parameters["properties"]["path"]["default"], ".");
    assert!(specs[3].parameters.get("required").is_none());
}

#[test]
fn wrong_arguments_are_rejected_before_a_tool_runs() {
    let fx = Fixture::new();
    let registry = registry(&fx);
    for (name, arguments, mentions) in [
        ("read_file", r#"{"path": 3}"#, "/path"),
        ("read_file", r#"{"path": "a", "offset": "2"}"#, "/offset"),
        ("read_file", r#"{"path": "a", "offset": 0}"#, "/offset"),
        ("read_file", r#"{"path": "a", "limit": 1.5}"#, "/limit"),
        ("read_file", r#"{}"#, "path"),
        ("write_file", r#"{"path": "a"}"#, "content"),
        (
            "write_file",
            r#"{"path": "a", "content": ["x"]}"#,
            "/content",
        ),
        ("append_file", r#"{"path": "a"}"#, "content"),
        ("append_file", r#"{"path": "a", "content": 1}"#, "/content"),
        (
            "append_file",
            r#"{"path": "a", "content": "x", "newline": true}"#,
            "newline",
        ),
        ("list_dir", r#"{"path": true}"#, "/path"),
        ("list_dir", r#"{"dir": "src"}"#, "dir"),
    ] {
        let err = registry.prepare(&call(name, arguments)).err().unwrap();
        assert!(err.contains(mentions), "{name} {arguments}: {err}");
    }
}

#[tokio::test]
async fn prepared_calls_run() {
    let fx = Fixture::new();
    let registry = registry(&fx);
    let prepared = registry
        .prepare(&call("write_file", r#"{"path": "n.txt", "content": "hi"}"#))
        .ok()
        .unwrap();
    prepared.tool.call(prepared.args, &ctx()).await.unwrap();
    for (name, arguments, expected) in [
        (
            "append_file",
            r#"{"path": "n.txt", "content": "!"}"#,
            "appended 1 bytes to n.txt (it now has 3 bytes)",
        ),
        ("read_file", r#"{"path": "n.txt"}"#, "hi!"),
        ("read_file", r#"{"path": "n.txt", "offset": null}"#, "hi!"),
        ("list_dir", "", "./ (1 entry)\nn.txt  (3 bytes)"),
    ] {
        let prepared = registry.prepare(&call(name, arguments)).ok().unwrap();
        let out = prepared.tool.call(prepared.args, &ctx()).await.unwrap();
        assert_eq!(out.content, expected, "{name} {arguments}");
    }
}
