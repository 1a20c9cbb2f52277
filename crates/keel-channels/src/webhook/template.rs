//! A webhook's template: its text with `{{ path.to.field }}` replaced by that field of the
//! payload (a string as it is, any other value as JSON, a missing one as nothing) and
//! `{{ payload }}` by the whole payload, pretty-printed. Nothing else is special: no
//! conditions, no loops, no escapes.

use serde_json::Value;

/// `template` with its placeholders filled from `payload`.
pub fn render(template: &str, payload: &Value) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        let Some(close) = rest[open + 2..].find("}}") else {
            break;
        };
        out.push_str(&rest[..open]);
        let path = rest[open + 2..open + 2 + close].trim();
        out.push_str(&field(path, payload));
        rest = &rest[open + 2 + close + 2..];
    }
    out.push_str(rest);
    out
}

/// The text of the field `path` (dot-separated keys; array items by index) of `payload`.
fn field(path: &str, payload: &Value) -> String {
    if path == "payload" {
        return serde_json::to_string_pretty(payload).unwrap_or_default();
    }
    let mut value = payload;
    for key in path.split('.') {
        let next = match value {
            Value::Object(map) => map.get(key),
            Value::Array(items) => key.parse::<usize>().ok().and_then(|n| items.get(n)),
            _ => None,
        };
        match next {
            Some(next) => value = next,
            None => return String::new(),
        }
    }
    match value {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_strings_as_is_others_as_json_missing_empty() {
        let payload = json!({
            "repo": {"name": "keel", "stars": 3, "topics": ["a", "b"]},
            "ok": true,
            "commits": [{"id": "c1"}],
        });
        let text = render(
            "{{repo.name}} {{ repo.stars }} {{ repo.topics }} {{ok}} {{ commits.0.id }} \
             [{{ nope.deeper }}] [{{ repo.name.x }}]",
            &payload,
        );
        assert_eq!(text, "keel 3 [\"a\",\"b\"] true c1 [] []");
    }

    #[test]
    fn the_whole_payload_and_unclosed_braces() {
        let payload = json!({"a": 1});
        assert_eq!(
            render("got {{ payload }}", &payload),
            "got {\n  \"a\": 1\n}"
        );
        assert_eq!(render("x {{ a } y", &payload), "x {{ a } y");
        assert_eq!(render("no fields", &payload), "no fields");
    }

    #[test]
    fn a_value_holding_braces_is_not_rendered_again() {
        let payload = json!({"a": "{{ b }}", "b": "secret"});
        assert_eq!(render("{{ a }}", &payload), "{{ b }}");
    }
}
