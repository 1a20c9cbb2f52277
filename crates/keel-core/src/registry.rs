//! The tool registry: the tools a run may use, and the checks every call passes before a tool
//! sees it (known name, arguments that are JSON, arguments that fit the schema). Its tools are
//! the ones registered once, then those of its [`ToolSource`]s, asked afresh each time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::message::ToolCall;
use crate::tool::{Tool, ToolSpec};
use crate::tool_source::ToolSource;

/// Why a tool could not be registered.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// Two tools share a name.
    #[error("a tool named `{0}` is already registered")]
    Duplicate(String),
    /// The parameter schema is not a valid JSON Schema.
    #[error("tool `{name}` has an invalid parameter schema: {message}")]
    InvalidSchema {
        /// The tool.
        name: String,
        /// What is wrong with the schema.
        message: String,
    },
}

struct Entry {
    tool: Arc<dyn Tool>,
    validator: Arc<jsonschema::Validator>,
}

/// The compiled schemas of the sources' tools, by tool name, with the schema each was compiled
/// from (a source may change a tool's schema under the same name). `None`: the schema is not
/// a valid JSON Schema.
type SourceSchemas = HashMap<String, (serde_json::Value, Option<Arc<jsonschema::Validator>>)>;

/// A call that passed every check, ready to run.
pub struct PreparedCall {
    /// The tool to run.
    pub tool: Arc<dyn Tool>,
    /// Its parsed arguments.
    pub args: serde_json::Value,
}

/// The tools available to a run, by name, in registration order.
#[derive(Default)]
pub struct ToolRegistry {
    entries: Vec<Entry>,
    by_name: HashMap<String, usize>,
    sources: Vec<Arc<dyn ToolSource>>,
    source_schemas: Mutex<SourceSchemas>,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool; its schema is compiled once here.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let spec = tool.spec();
        if self.by_name.contains_key(&spec.name) {
            return Err(RegistryError::Duplicate(spec.name.clone()));
        }
        let validator = jsonschema::validator_for(&spec.parameters).map_err(|e| {
            RegistryError::InvalidSchema {
                name: spec.name.clone(),
                message: e.to_string(),
            }
        })?;
        self.by_name.insert(spec.name.clone(), self.entries.len());
        self.entries.push(Entry {
            tool,
            validator: Arc::new(validator),
        });
        Ok(())
    }

    /// Adds a source of tools that may change at run time. Its tools come after the registered
    /// ones; one whose name is already taken, or whose schema is not a valid JSON Schema, is
    /// left out.
    pub fn add_source(&mut self, source: Arc<dyn ToolSource>) {
        self.sources.push(source);
    }

    /// Waits until every source knows its first list of tools (each source bounds its wait).
    pub async fn ready(&self) {
        for source in &self.sources {
            source.ready().await;
        }
    }

    /// The specs of every tool: the registered ones in registration order, then the sources'.
    pub fn specs(&self) -> Vec<ToolSpec> {
        let mut specs: Vec<ToolSpec> = self.entries.iter().map(|e| e.tool.spec().clone()).collect();
        specs.extend(
            self.source_tools()
                .into_iter()
                .map(|(tool, _)| tool.spec().clone()),
        );
        specs
    }

    /// The modules of the registered tools and of the sources, sorted, each once.
    pub fn modules(&self) -> Vec<String> {
        let mut modules: Vec<String> = self
            .entries
            .iter()
            .filter_map(|e| e.tool.spec().module.clone())
            .chain(self.sources.iter().flat_map(|source| source.modules()))
            .collect();
        modules.sort();
        modules.dedup();
        modules
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.lookup(name).map(|(tool, _)| tool)
    }

    /// The tool called `name` and its compiled schema.
    fn lookup(&self, name: &str) -> Option<(Arc<dyn Tool>, Arc<jsonschema::Validator>)> {
        if let Some(&i) = self.by_name.get(name) {
            let entry = &self.entries[i];
            return Some((entry.tool.clone(), entry.validator.clone()));
        }
        self.source_tools()
            .into_iter()
            .find(|(tool, _)| tool.spec().name == name)
    }

    /// The sources' tools now, each once by name, not shadowing a registered tool, with their
    /// compiled schemas (compiled once per name and schema).
    fn source_tools(&self) -> Vec<(Arc<dyn Tool>, Arc<jsonschema::Validator>)> {
        if self.sources.is_empty() {
            return Vec::new();
        }
        let Ok(mut schemas) = self.source_schemas.lock() else {
            return Vec::new();
        };
        let mut seen = std::collections::HashSet::new();
        let mut tools = Vec::new();
        for tool in self.sources.iter().flat_map(|source| source.tools()) {
            let spec = tool.spec();
            if self.by_name.contains_key(&spec.name) || !seen.insert(spec.name.clone()) {
                continue;
            }
            let fresh = schemas
                .get(&spec.name)
                .is_some_and(|(schema, _)| *schema == spec.parameters);
            if !fresh {
                let validator = jsonschema::validator_for(&spec.parameters)
                    .ok()
                    .map(Arc::new);
                schemas.insert(spec.name.clone(), (spec.parameters.clone(), validator));
            }
            if let Some((_, Some(validator))) = schemas.get(&spec.name) {
                tools.push((tool.clone(), validator.clone()));
            }
        }
        // Forget the schemas of tools that are gone, so the cache stays the size of the list.
        schemas.retain(|name, _| seen.contains(name));
        tools
    }

    /// True when `name` is a registered interactive tool.
    pub fn is_interactive(&self, name: &str) -> bool {
        self.get(name).is_some_and(|t| t.spec().interactive)
    }

    /// Number of tools, the sources' included.
    pub fn len(&self) -> usize {
        self.entries.len() + self.source_tools().len()
    }

    /// True when there are no tools.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks a call: the tool exists, its arguments are a JSON object and fit the schema. The
    /// error is a message for the model, saying what to fix.
    pub fn prepare(&self, call: &ToolCall) -> Result<PreparedCall, String> {
        let Some((tool, validator)) = self.lookup(&call.name) else {
            let known: Vec<String> = self.specs().into_iter().map(|spec| spec.name).collect();
            return Err(format!(
                "Error: unknown tool `{}`. Available tools: {}.",
                call.name,
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ));
        };
        let raw = call.arguments.trim();
        let args: serde_json::Value = if raw.is_empty() {
            serde_json::Value::Object(Default::default())
        } else {
            serde_json::from_str(raw).map_err(|e| {
                format!(
                    "Error: the arguments for `{}` are not valid JSON ({e}). Send a JSON object \
                     matching the tool's schema. You sent: {}",
                    call.name,
                    preview(raw, 200)
                )
            })?
        };
        if let Err(problems) = check(&validator, &args) {
            return Err(format!(
                "Error: invalid arguments for `{}`: {problems}. Expected schema: {}",
                call.name,
                tool.spec().parameters
            ));
        }
        Ok(PreparedCall { tool, args })
    }

    /// Checks `args` against the schema of the tool `name`; the error lists what is wrong, or says
    /// the tool is unknown. (Used again on arguments a hook rewrote.)
    pub fn check_arguments(&self, name: &str, args: &serde_json::Value) -> Result<(), String> {
        match self.lookup(name) {
            Some((_, validator)) => check(&validator, args),
            None => Err(format!("unknown tool `{name}`")),
        }
    }
}

/// What is wrong with `args` by `validator`, each problem with its path, `; `-separated.
fn check(validator: &jsonschema::Validator, args: &serde_json::Value) -> Result<(), String> {
    let problems: Vec<String> = validator
        .iter_errors(args)
        .map(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() {
                e.to_string()
            } else {
                format!("{path}: {e}")
            }
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// The first `max` characters of `text`, with an ellipsis when cut.
fn preview(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;
    use serde_json::json;

    use super::*;
    use crate::tool::{ToolContext, ToolError, ToolOutput};

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

    fn registry() -> ToolRegistry {
        let mut registry = ToolRegistry::new();
        let schema = json!({
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
            "additionalProperties": false
        });
        registry
            .register(Arc::new(Echo(ToolSpec::new("echo", "echoes", schema))))
            .unwrap();
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
    fn unknown_tool_names_the_available_ones() {
        let err = registry().prepare(&call("ecko", "{}")).err().unwrap();
        assert!(
            err.contains("unknown tool `ecko`") && err.contains("echo"),
            "{err}"
        );
    }

    #[test]
    fn arguments_that_are_not_json_are_quoted_back() {
        let err = registry()
            .prepare(&call("echo", "{path: oops"))
            .err()
            .unwrap();
        assert!(
            err.contains("not valid JSON") && err.contains("{path: oops"),
            "{err}"
        );
    }

    #[test]
    fn arguments_that_break_the_schema_say_what_is_wrong() {
        let err = registry()
            .prepare(&call("echo", r#"{"path": 3}"#))
            .err()
            .unwrap();
        assert!(err.contains("/path") && err.contains("string"), "{err}");
        let err = registry().prepare(&call("echo", "{}")).err().unwrap();
        assert!(err.contains("path") && err.contains("required"), "{err}");
    }

    #[test]
    fn valid_arguments_pass() {
        let prepared = registry()
            .prepare(&call("echo", r#"{"path":"a.txt"}"#))
            .ok()
            .unwrap();
        assert_eq!(prepared.args, json!({"path": "a.txt"}));
    }

    #[test]
    fn duplicate_names_are_refused() {
        let mut registry = registry();
        let again = Arc::new(Echo(ToolSpec::new(
            "echo",
            "again",
            json!({"type": "object"}),
        )));
        assert!(matches!(
            registry.register(again),
            Err(RegistryError::Duplicate(_))
        ));
    }
}
