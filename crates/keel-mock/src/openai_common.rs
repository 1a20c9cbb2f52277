//! What OpenAI's two APIs (chat completions and Responses) share: the `{"error": {...}}`
//! envelope, and the wording of request checks (`Missing required parameter: 'x'.`,
//! `Invalid type for 'x': expected ..., but got ... instead.`).

use keel_core::ProviderErrorKind;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::wire::{Invalid, to_json};

/// An OpenAI error body.
pub(crate) fn error_json(
    message: &str,
    error_type: &str,
    param: Option<&str>,
    code: Option<&str>,
) -> String {
    to_json(&ErrorEnvelope {
        error: ErrorObject {
            message,
            kind: error_type,
            param,
            code,
        },
    })
}

/// The `type` and `code` OpenAI gives an error of `kind`.
pub(crate) fn error_type_and_code(kind: ProviderErrorKind) -> (&'static str, Option<&'static str>) {
    match kind {
        ProviderErrorKind::Auth => ("invalid_request_error", Some("invalid_api_key")),
        ProviderErrorKind::Billing => ("insufficient_quota", Some("insufficient_quota")),
        ProviderErrorKind::RateLimit => ("requests", Some("rate_limit_exceeded")),
        ProviderErrorKind::ModelNotFound => ("invalid_request_error", Some("model_not_found")),
        ProviderErrorKind::ContextOverflow => {
            ("invalid_request_error", Some("context_length_exceeded"))
        }
        ProviderErrorKind::InvalidRequest => ("invalid_request_error", None),
        ProviderErrorKind::Overloaded | ProviderErrorKind::Server => ("server_error", None),
        ProviderErrorKind::Timeout => ("timeout", None),
        ProviderErrorKind::Network
        | ProviderErrorKind::MalformedResponse
        | ProviderErrorKind::Unknown => ("api_error", None),
    }
}

#[derive(Serialize)]
struct ErrorEnvelope<'a> {
    error: ErrorObject<'a>,
}

#[derive(Serialize)]
struct ErrorObject<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: Option<&'a str>,
}

/// Parses a request body, rejecting what is not JSON as OpenAI does.
pub(crate) fn parse_body(body: &[u8]) -> Result<Value, Invalid> {
    serde_json::from_slice(body).map_err(|e| {
        Invalid::new(
            format!(
                "We could not parse the JSON body of your request ({e}). \
                 The OpenAI API expects a JSON payload."
            ),
            None,
        )
    })
}

/// The request as an object, or the rejection of anything else.
pub(crate) fn request_object(value: &Value) -> Result<&Map<String, Value>, Invalid> {
    value.as_object().ok_or_else(|| {
        Invalid::new(
            format!(
                "The request body must be a JSON object, but got {} instead.",
                type_name(value)
            ),
            None,
        )
    })
}

/// The `model` parameter: a non-empty string.
pub(crate) fn required_model(request: &Map<String, Value>) -> Result<String, Invalid> {
    match request.get("model") {
        Some(Value::String(model)) if !model.is_empty() => Ok(model.clone()),
        None | Some(Value::Null) | Some(Value::String(_)) => Err(Invalid::new(
            "you must provide a model parameter",
            Some("model"),
        )),
        Some(other) => Err(wrong_type("model", "a string", other)),
    }
}

/// An optional integer parameter of at least `minimum`.
pub(crate) fn check_min_integer(
    request: &Map<String, Value>,
    name: &str,
    minimum: i64,
) -> Result<(), Invalid> {
    match request.get(name) {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(v) if v >= minimum => Ok(()),
            Some(v) => Err(Invalid::new(
                format!(
                    "Invalid '{name}': integer below minimum value. \
                     Expected a value >= {minimum}, but got {v} instead."
                ),
                Some(name),
            )),
            None => Err(wrong_type(name, "an integer", &Value::Number(n.clone()))),
        },
        Some(other) => Err(wrong_type(name, "an integer", other)),
    }
}

/// `value` as an object, or a type error naming `path`.
pub(crate) fn object<'a>(value: &'a Value, path: &str) -> Result<&'a Map<String, Value>, Invalid> {
    value
        .as_object()
        .ok_or_else(|| wrong_type(path, "an object", value))
}

/// A required object member. (Its path is written out only for an error: a request names
/// hundreds of members.)
pub(crate) fn required_object<'a>(
    parent: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<&'a Map<String, Value>, Invalid> {
    match parent.get(key) {
        None | Some(Value::Null) => Err(missing(&join(path, key))),
        Some(value) => value
            .as_object()
            .ok_or_else(|| wrong_type(&join(path, key), "an object", value)),
    }
}

/// A required string member; only `arguments` may be empty. (Its path is written out only for
/// an error.)
pub(crate) fn required_string<'a>(
    parent: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<&'a str, Invalid> {
    match parent.get(key) {
        None | Some(Value::Null) => Err(missing(&join(path, key))),
        Some(Value::String(s)) if s.is_empty() && key != "arguments" => {
            let full = join(path, key);
            Err(Invalid::new(
                format!("Invalid '{full}': empty string. Expected a non-empty string."),
                Some(&full),
            ))
        }
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(wrong_type(&join(path, key), "a string", other)),
    }
}

/// An optional boolean member.
pub(crate) fn optional_bool(
    parent: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<bool>, Invalid> {
    match parent.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(wrong_type(path, "a boolean", other)),
    }
}

/// Requires `type: "function"`.
pub(crate) fn expect_function_type(value: &Map<String, Value>, path: &str) -> Result<(), Invalid> {
    match required_string(value, "type", path)? {
        "function" => Ok(()),
        other => Err(Invalid::new(
            format!("Invalid value: '{other}'. Supported values are: 'function'."),
            Some(&join(path, "type")),
        )),
    }
}

/// A required parameter is missing.
pub(crate) fn missing(path: &str) -> Invalid {
    Invalid::new(format!("Missing required parameter: '{path}'."), Some(path))
}

/// A parameter has the wrong JSON type.
pub(crate) fn wrong_type(path: &str, expected: &str, got: &Value) -> Invalid {
    Invalid::new(
        format!(
            "Invalid type for '{path}': expected {expected}, but got {} instead.",
            type_name(got)
        ),
        Some(path),
    )
}

/// A parameter is an empty array where at least one element is needed.
pub(crate) fn empty_array(path: &str) -> Invalid {
    Invalid::new(
        format!(
            "Invalid '{path}': empty array. Expected an array with minimum length 1, but got an \
             empty array instead."
        ),
        Some(path),
    )
}

/// The JSON type of a value, as OpenAI's messages name it.
pub(crate) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `list[index]`, written into `buffer` (emptied first). Every element of a request's lists
/// is checked with its path, which only an error reads: a buffer the caller reuses, and no
/// `format!`, keep that from costing an allocation and a formatting pass per element.
pub(crate) fn element_path<'a>(buffer: &'a mut String, list: &str, index: usize) -> &'a str {
    buffer.clear();
    buffer.push_str(list);
    buffer.push('[');
    buffer.push_str(itoa::Buffer::new().format(index));
    buffer.push(']');
    buffer
}

/// `path.key`, written into `buffer` (emptied first), for the same reason as [`element_path`].
pub(crate) fn member_path<'a>(buffer: &'a mut String, path: &str, key: &str) -> &'a str {
    buffer.clear();
    buffer.push_str(path);
    buffer.push('.');
    buffer.push_str(key);
    buffer
}

/// `path.key`, or `key` at the top level.
pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_buffer_holds_each_path_alone() {
        let (mut element, mut member) = (String::new(), String::new());
        assert_eq!(element_path(&mut element, "messages", 12), "messages[12]");
        let path = element_path(&mut element, "messages", 3);
        assert_eq!(path, "messages[3]");
        assert_eq!(
            member_path(&mut member, path, "function"),
            "messages[3].function"
        );
        assert_eq!(
            member_path(&mut member, "tools[0]", "name"),
            "tools[0].name"
        );
    }
}
