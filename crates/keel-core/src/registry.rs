//! The tool registry: the tools a run may use, and the checks every call passes before a tool
//! sees it (known name, arguments that are JSON, arguments that fit the schema).

use std::collections::HashMap;
use std::sync::Arc;

use crate::message::ToolCall;
use crate::tool::{Tool, ToolSpec};

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
    validator: jsonschema::Validator,
}

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
        self.entries.push(Entry { tool, validator });
        Ok(())
    }

    /// The specs of every tool, in registration order.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.entries.iter().map(|e| e.tool.spec().clone()).collect()
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.by_name.get(name).map(|&i| &self.entries[i].tool)
    }

    /// True when `name` is a registered interactive tool.
    pub fn is_interactive(&self, name: &str) -> bool {
        self.get(name).is_some_and(|t| t.spec().interactive)
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no tools.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Checks a call: the tool exists, its arguments are a JSON object and fit the schema. The
    /// error is a message for the model, saying what to fix.
    pub fn prepare(&self, call: &ToolCall) -> Result<PreparedCall, String> {
        let Some(&index) = self.by_name.get(&call.name) else {
            let known: Vec<&str> = self
                .entries
                .iter()
                .map(|e| e.tool.spec().name.as_str())
                .collect();
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
        let entry = &self.entries[index];
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
        if let Err(problems) = check(&entry.validator, &args) {
            return Err(format!(
                "Error: invalid arguments for `{}`: {problems}. Expected schema: {}",
                call.name,
                entry.tool.spec().parameters
            ));
        }
        Ok(PreparedCall {
            tool: entry.tool.clone(),
            args,
        })
    }

    /// Checks `args` against the schema of the tool `name`; the error lists what is wrong, or says
    /// the tool is unknown. (Used again on arguments a hook rewrote.)
    pub fn check_arguments(&self, name: &str, args: &serde_json::Value) -> Result<(), String> {
        match self.by_name.get(name) {
            Some(&index) => check(&self.entries[index].validator, args),
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
