//! A registry's tool sources: their tools are listed and called like registered ones, and a
//! change in a source shows on the next listing.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use keel_core::{
    Tool, ToolCall, ToolContext, ToolError, ToolOutput, ToolRegistry, ToolSource, ToolSpec,
};
use serde_json::json;

struct Echo(ToolSpec);

#[async_trait]
impl Tool for Echo {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    async fn call(
        &self,
        args: serde_json::Value,
        _: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(args.to_string()))
    }
}

fn echo(name: &str, schema: serde_json::Value) -> Arc<dyn Tool> {
    Arc::new(Echo(ToolSpec::new(name, "echoes", schema)))
}

fn strict() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": false
    })
}

#[derive(Default)]
struct Changing(Mutex<Vec<Arc<dyn Tool>>>);

impl Changing {
    fn set(&self, tools: Vec<Arc<dyn Tool>>) {
        *self.0.lock().unwrap() = tools;
    }
}

#[async_trait]
impl ToolSource for Changing {
    async fn ready(&self) {}
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.0.lock().unwrap().clone()
    }
}

fn call(name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: "c".into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

fn names(registry: &ToolRegistry) -> Vec<String> {
    registry.specs().into_iter().map(|spec| spec.name).collect()
}

fn setup() -> (ToolRegistry, Arc<Changing>) {
    let mut registry = ToolRegistry::new();
    registry.register(echo("local", strict())).unwrap();
    let source = Arc::new(Changing::default());
    registry.add_source(source.clone());
    (registry, source)
}

#[test]
fn a_sources_tools_follow_the_registered_ones_and_change_with_it() {
    let (registry, source) = setup();
    assert_eq!(names(&registry), ["local"]);
    source.set(vec![echo("s__a", strict())]);
    assert_eq!(names(&registry), ["local", "s__a"]);
    assert_eq!(registry.len(), 2);
    source.set(vec![echo("s__b", strict())]);
    assert_eq!(names(&registry), ["local", "s__b"]);
    assert!(registry.get("s__a").is_none());
    let err = registry.prepare(&call("s__a", "{}")).err().unwrap();
    assert!(err.contains("unknown tool `s__a`"), "{err}");
    assert!(err.contains("local, s__b"), "{err}");
}

#[test]
fn a_sources_tool_is_checked_against_its_current_schema() {
    let (registry, source) = setup();
    source.set(vec![echo("s__a", strict())]);
    assert!(registry.prepare(&call("s__a", r#"{"n": 1}"#)).is_ok());
    let err = registry
        .prepare(&call("s__a", r#"{"n": "x"}"#))
        .err()
        .unwrap();
    assert!(err.contains("invalid arguments"), "{err}");
    // The same name with a new schema: the new one applies.
    source.set(vec![echo("s__a", json!({"type": "object"}))]);
    assert!(registry.prepare(&call("s__a", r#"{"n": "x"}"#)).is_ok());
}

#[test]
fn a_source_cannot_shadow_a_registered_tool_nor_offer_a_name_twice() {
    let (registry, source) = setup();
    source.set(vec![
        echo("local", json!({"type": "object"})),
        echo("s__a", strict()),
        echo("s__a", json!({"type": "object"})),
    ]);
    assert_eq!(names(&registry), ["local", "s__a"]);
    // `local` keeps the registered tool's strict schema.
    assert!(registry.prepare(&call("local", "{}")).is_err());
    // The first `s__a` wins.
    assert!(registry.prepare(&call("s__a", "{}")).is_err());
}

#[test]
fn a_tool_with_an_invalid_schema_is_left_out() {
    let (registry, source) = setup();
    source.set(vec![
        echo("s__bad", json!({"type": "no-such-type"})),
        echo("s__good", strict()),
    ]);
    assert_eq!(names(&registry), ["local", "s__good"]);
    assert!(registry.prepare(&call("s__bad", "{}")).is_err());
}

struct Declared;

#[async_trait]
impl ToolSource for Declared {
    async fn ready(&self) {}
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        Vec::new()
    }
    fn modules(&self) -> Vec<String> {
        vec!["mcp:later".into()]
    }
}

#[test]
fn modules_include_those_a_source_declares_before_its_tools_are_listed() {
    let mut registry = ToolRegistry::new();
    let mut spec = ToolSpec::new("local", "echoes", strict());
    spec.module = Some("files".into());
    registry.register(Arc::new(Echo(spec))).unwrap();
    registry.add_source(Arc::new(Declared));
    assert_eq!(registry.modules(), ["files", "mcp:later"]);
}
