//! Tool parameter schemas generated from argument structs, and parsing arguments into them.

use keel_core::ToolError;
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The JSON Schema of `T` as a plain object schema for a `ToolSpec`: no `$schema`, `title` or
/// `format` annotations and no top-level description (models and providers only need types,
/// property descriptions and bounds), and `additionalProperties: false` so unknown arguments are
/// rejected.
pub(crate) fn parameters_for<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|settings| settings.meta_schema = None)
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    strip_annotations(&mut schema);
    if let Value::Object(root) = &mut schema {
        // The tool's own description says what the arguments are for.
        root.remove("description");
        root.insert("type".into(), "object".into());
        root.entry("properties")
            .or_insert_with(|| Value::Object(Default::default()));
        root.insert("additionalProperties".into(), false.into());
    }
    schema
}

/// Parses a tool's arguments; the registry has checked the schema already, so a failure here
/// means a caller bypassed it.
pub(crate) fn parse_args<T: DeserializeOwned>(tool: &str, mut args: Value) -> Result<T, ToolError> {
    keel_core::tool::strip_injected(&mut args);
    serde_json::from_value(args)
        .map_err(|e| ToolError::invalid_arguments(format!("invalid arguments for `{tool}`: {e}")))
}

/// Removes `$schema`, `title` and `format` from a schema and every subschema. Property names
/// are left alone, so an argument called `title` would survive.
fn strip_annotations(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            for key in ["$schema", "title", "format"] {
                map.remove(key);
            }
            for (key, value) in map.iter_mut() {
                if key == "properties" {
                    if let Value::Object(properties) = value {
                        properties.values_mut().for_each(strip_annotations);
                    }
                } else {
                    strip_annotations(value);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip_annotations),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    /// Arguments used to check the generated schema.
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Example {
        /// Where to look.
        title: String,
        /// How many.
        #[schemars(range(min = 1))]
        count: Option<u32>,
    }

    #[test]
    fn schema_is_a_plain_closed_object() {
        let schema = parameters_for::<Example>();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["additionalProperties"], false);
        assert_eq!(schema["required"], json!(["title"]));
        assert!(schema.get("$schema").is_none() && schema.get("title").is_none());
        assert!(schema.get("description").is_none());
        assert_eq!(
            schema["properties"]["title"]["description"],
            "Where to look."
        );
        assert_eq!(schema["properties"]["count"]["minimum"], 1);
        assert!(schema["properties"]["count"].get("format").is_none());
    }
}
