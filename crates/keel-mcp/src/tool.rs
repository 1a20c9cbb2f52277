//! One MCP tool as a keel [`Tool`]: its spec (namespaced name, schema, flags from its
//! annotations) and its results turned into keel's.

use std::sync::{Arc, Weak};

use async_trait::async_trait;
use keel_core::{Permission, Reach, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use rmcp::model::CallToolResult;
use serde_json::Value;

use crate::server::ServerShared;

/// The longest tool name providers accept.
const MAX_NAME_CHARS: usize = 64;
/// Characters kept of a tool's description.
const MAX_DESCRIPTION_CHARS: usize = 4_000;

/// An MCP server's tool, called through its server's current session.
pub(crate) struct McpTool {
    spec: ToolSpec,
    /// The name the server knows the tool by.
    remote_name: String,
    /// Weak: the server's state holds its tools.
    server: Weak<ServerShared>,
}

impl McpTool {
    /// The keel tool for `tool` of server `server_name`, or `None` when its name cannot be
    /// offered to a model (too long once namespaced).
    pub(crate) fn new(
        server_name: &str,
        tool: &rmcp::model::Tool,
        server: Weak<ServerShared>,
    ) -> Option<McpTool> {
        Some(McpTool {
            spec: spec_for(server_name, tool)?,
            remote_name: tool.name.to_string(),
            server,
        })
    }
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let Some(server) = self.server.upgrade() else {
            return Err(ToolError::failed(format!(
                "`{}` was not run: its MCP server has been shut down",
                self.spec.name
            )));
        };
        let mut args = args;
        // The server knows nothing of keel's own keys; a strict server would refuse them.
        keel_core::tool::strip_injected(&mut args);
        let result = server.call(&self.remote_name, args, &ctx.cancel).await?;
        output(result)
    }
}

/// `remote` with every character a provider would refuse in a tool name replaced by `_`.
fn clean(remote: &str) -> String {
    remote
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The name a model calls `remote` of `server` by: `server__remote`, with every character a
/// provider would refuse replaced by `_`; `None` when longer than providers accept.
pub(crate) fn namespaced(server: &str, remote: &str) -> Option<String> {
    let name = format!("{server}__{}", clean(remote));
    (!remote.is_empty() && name.len() <= MAX_NAME_CHARS).then_some(name)
}

/// The name of `remote` of `server` when its made-safe name clashes with another tool's
/// (`a.b` and `a_b` both make `a_b`): the made-safe name cut to fit, then `_` and six hex
/// digits of a hash of `remote` itself, so each clashing name keeps a name of its own, the
/// same on every listing.
fn disambiguated(server: &str, remote: &str) -> String {
    // FNV-1a: stable across processes and versions, unlike std's hasher.
    let hash = remote.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    }) & 0x00ff_ffff;
    let suffix = format!("_{hash:06x}");
    let room = MAX_NAME_CHARS.saturating_sub(server.len() + 2 + suffix.len());
    let clean: String = clean(remote).chars().take(room).collect();
    format!("{server}__{clean}{suffix}")
}

/// keel's spec of an MCP tool. Read-only tools are idempotent; so are tools that say they
/// are idempotent and not destructive (MCP's default for a tool that is not read-only is
/// destructive). Every other tool is side-effecting. Module `mcp:SERVER`, permission `user`.
/// Its reach is always [`Reach::Egress`]: the server is another program that may keep or send
/// on what it is given, and its annotations are its own word, so in an untrusted session every
/// call asks, read-only or not.
pub(crate) fn spec_for(server: &str, tool: &rmcp::model::Tool) -> Option<ToolSpec> {
    let name = namespaced(server, &tool.name)?;
    let description = tool
        .description
        .as_deref()
        .or(tool.title.as_deref())
        .unwrap_or_default();
    let description: String = description.chars().take(MAX_DESCRIPTION_CHARS).collect();
    let mut spec = ToolSpec::new(
        name,
        description,
        Value::Object((*tool.input_schema).clone()),
    );
    let hints = serde_json::to_value(&tool.annotations).unwrap_or(Value::Null);
    let hint = |key: &str| hints.get(key).and_then(Value::as_bool);
    let read_only = hint("readOnlyHint") == Some(true);
    let harmless_repeat =
        hint("idempotentHint") == Some(true) && hint("destructiveHint") == Some(false);
    spec.idempotent = read_only || harmless_repeat;
    spec.required_permission = Permission::User;
    spec.module = Some(format!("mcp:{server}"));
    spec.reach = Reach::Egress;
    Some(spec)
}

/// A tool result as keel's: its content as text, or a tool error when the server flagged it.
pub(crate) fn output(result: CallToolResult) -> Result<ToolOutput, ToolError> {
    let mut parts: Vec<String> = result
        .content
        .iter()
        .filter_map(|block| serde_json::to_value(block).ok())
        .map(|block| content_text(&block))
        .collect();
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    let text = parts.join("\n");
    if result.is_error == Some(true) {
        let text = if text.is_empty() {
            "the tool reported an error without saying what".to_string()
        } else {
            text
        };
        return Err(ToolError::failed(format!("Error: {text}")));
    }
    Ok(ToolOutput::text(text))
}

/// One MCP content block as text: text as it is, a short note for anything else.
fn content_text(block: &Value) -> String {
    let field =
        |value: &Value, key: &str| value.get(key).and_then(Value::as_str).map(str::to_string);
    let size = |value: &Value| {
        field(value, "data")
            .or_else(|| field(value, "blob"))
            .map_or(0, |data| data.len() / 4 * 3)
    };
    let kind = field(block, "type").unwrap_or_default();
    match kind.as_str() {
        "text" => field(block, "text").unwrap_or_default(),
        "image" | "audio" => format!(
            "[{kind}: {}, about {} bytes, not shown]",
            field(block, "mimeType").unwrap_or_else(|| "unknown type".into()),
            size(block)
        ),
        "resource" => {
            let resource = block.get("resource").cloned().unwrap_or(Value::Null);
            let uri = field(&resource, "uri").unwrap_or_default();
            match field(&resource, "text") {
                Some(text) => format!("[resource {uri}]\n{text}"),
                None => format!(
                    "[resource {uri}: {}, about {} bytes, not shown]",
                    field(&resource, "mimeType").unwrap_or_else(|| "binary".into()),
                    size(&resource)
                ),
            }
        }
        "resource_link" => format!(
            "[resource link: {}]",
            field(block, "uri").unwrap_or_default()
        ),
        other => format!("[{other} content, not shown]"),
    }
}

/// The tools of a server as keel tools, at most `max` of them, each callable by a name of its
/// own. When names clash once made safe (`a.b` and `a_b` both make `a_b`), a tool whose name
/// needed no change keeps it and each of the others gets a suffix of its own
/// ([`disambiguated`]); a name the server lists twice is offered once (the first).
pub(crate) fn tools_of(
    server_name: &str,
    tools: &[rmcp::model::Tool],
    server: &Weak<ServerShared>,
    max: usize,
) -> Vec<Arc<dyn Tool>> {
    let mut made = std::collections::HashMap::<String, usize>::new();
    for tool in tools {
        if let Some(name) = namespaced(server_name, &tool.name) {
            *made.entry(name).or_default() += 1;
        }
    }
    let mut seen = std::collections::HashSet::new();
    tools
        .iter()
        .filter_map(|tool| {
            let mut mcp = McpTool::new(server_name, tool, server.clone())?;
            let changed = clean(&tool.name) != *tool.name;
            if changed && made.get(&mcp.spec.name).is_some_and(|&n| n > 1) {
                mcp.spec.name = disambiguated(server_name, &tool.name);
            }
            Some(mcp)
        })
        .filter(|tool| seen.insert(tool.spec.name.clone()))
        .take(max)
        .map(|tool| Arc::new(tool) as Arc<dyn Tool>)
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool(value: Value) -> rmcp::model::Tool {
        serde_json::from_value(value).unwrap()
    }

    fn result(value: Value) -> CallToolResult {
        serde_json::from_value(value).unwrap()
    }

    fn flags(annotations: Value) -> bool {
        let t = tool(json!({
            "name": "t", "inputSchema": {"type": "object"}, "annotations": annotations
        }));
        spec_for("s", &t).unwrap().idempotent
    }

    #[test]
    fn annotations_map_to_idempotent_or_side_effecting() {
        assert!(flags(json!({"readOnlyHint": true})));
        assert!(flags(
            json!({"idempotentHint": true, "destructiveHint": false})
        ));
        // Not read-only and destructive by MCP's default: side-effecting.
        assert!(!flags(json!({"idempotentHint": true})));
        assert!(!flags(
            json!({"idempotentHint": true, "destructiveHint": true})
        ));
        assert!(!flags(json!({"destructiveHint": false})));
        assert!(!flags(json!({})));
        assert!(!flags(Value::Null));
    }

    #[test]
    fn the_spec_is_namespaced_with_schema_module_and_permission() {
        let t = tool(json!({
            "name": "get weather",
            "description": "Weather by city",
            "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}}
        }));
        let spec = spec_for("wx", &t).unwrap();
        assert_eq!(spec.name, "wx__get_weather");
        assert_eq!(spec.description, "Weather by city");
        assert_eq!(spec.parameters["properties"]["city"]["type"], "string");
        assert_eq!(spec.module.as_deref(), Some("mcp:wx"));
        assert_eq!(spec.required_permission, Permission::User);
        assert!(spec.side_effecting());
    }

    #[test]
    fn every_mcp_tool_reaches_outside_and_asks_in_an_untrusted_session_whatever_it_claims() {
        for annotations in [
            json!({"readOnlyHint": true}),
            json!({"idempotentHint": true, "destructiveHint": false}),
            json!({}),
        ] {
            let t = tool(json!({
                "name": "t", "inputSchema": {"type": "object"}, "annotations": annotations
            }));
            let spec = spec_for("s", &t).unwrap();
            assert_eq!(spec.reach, Reach::Egress);
            assert!(
                keel_core::reach::untrusted_need(&spec).is_some(),
                "{annotations}"
            );
        }
    }

    #[test]
    fn hostile_names_and_descriptions_are_tamed() {
        assert_eq!(namespaced("s", "a/b.c\n"), Some("s__a_b_c_".into()));
        assert_eq!(namespaced("s", ""), None);
        assert_eq!(namespaced("s", &"x".repeat(62)), None);
        assert!(namespaced("s", &"x".repeat(61)).is_some());
        let t = tool(json!({
            "name": "t", "description": "d".repeat(100_000), "inputSchema": {"type": "object"}
        }));
        assert_eq!(
            spec_for("s", &t).unwrap().description.len(),
            MAX_DESCRIPTION_CHARS
        );
    }

    fn names_of(list: &[&str], max: usize) -> Vec<String> {
        let list: Vec<_> = list
            .iter()
            .map(|name| tool(json!({"name": name, "inputSchema": {"type": "object"}})))
            .collect();
        tools_of("s", &list, &Weak::new(), max)
            .iter()
            .map(|t| t.spec().name.clone())
            .collect()
    }

    #[test]
    fn clashing_names_each_get_a_name_of_their_own() {
        let listed = ["a.b", "a_b", "a/b", "c", "c", "d"];
        let names = names_of(&listed, 10);
        // `a_b` needed no change and keeps its name; the others get stable suffixes.
        assert_eq!(names.len(), 5, "{names:?}");
        assert_eq!(names[1], "s__a_b");
        assert_ne!(names[0], names[2]);
        for name in [&names[0], &names[2]] {
            assert!(
                name.starts_with("s__a_b_") && name.len() == "s__a_b_".len() + 6,
                "{name}"
            );
        }
        assert_eq!(
            names[3..],
            ["s__c", "s__d"],
            "a name listed twice is offered once"
        );
        assert_eq!(names, names_of(&listed, 10), "the same on every listing");
        // No clash, no suffix; the count is capped.
        assert_eq!(names_of(&["a.b"], 10), ["s__a_b"]);
        assert_eq!(names_of(&["a.b", "c", "d"], 2).len(), 2);
        // A long clashing name is cut to fit.
        let long = format!("{}.x", "y".repeat(59));
        let also = format!("{}_x", "y".repeat(59));
        let names = names_of(&[long.as_str(), also.as_str()], 10);
        assert_eq!(names.len(), 2);
        assert!(
            names.iter().all(|name| name.len() <= MAX_NAME_CHARS),
            "{names:?}"
        );
    }

    #[test]
    fn content_becomes_text_with_notes_for_the_rest() {
        let out = output(result(json!({"content": [
            {"type": "text", "text": "hello"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "inside"}},
            {"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "AAAAAAAA"}},
            {"type": "resource_link", "uri": "file:///c", "name": "c"}
        ]})))
        .unwrap();
        assert_eq!(
            out.content,
            "hello\n[image: image/png, about 3 bytes, not shown]\n[resource file:///a.txt]\ninside\n\
             [resource file:///b.bin: binary, about 6 bytes, not shown]\n[resource link: file:///c]"
        );
    }

    #[test]
    fn structured_content_stands_in_for_missing_content() {
        let out = output(result(
            json!({"content": [], "structuredContent": {"t": 21}}),
        ))
        .unwrap();
        assert_eq!(out.content, r#"{"t":21}"#);
    }

    #[test]
    fn is_error_becomes_a_tool_error_the_model_sees() {
        let err = output(result(json!({
            "content": [{"type": "text", "text": "no such city"}], "isError": true
        })))
        .unwrap_err();
        assert_eq!(err.kind, keel_core::ToolErrorKind::Failed);
        assert_eq!(err.message, "Error: no such city");
        let err = output(result(json!({"content": [], "isError": true}))).unwrap_err();
        assert!(
            err.message.contains("without saying what"),
            "{}",
            err.message
        );
    }
}
