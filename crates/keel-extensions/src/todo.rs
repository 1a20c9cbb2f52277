//! The run's task list (issue 16): items the model plans and ticks off through the loop-handled
//! `todo` tool. It is kept with the session's journal (so it survives restarts and every turn)
//! and shown again before the live messages once a compaction dropped older ones, so a summary
//! never loses it.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use keel_core::extension::{Extension, LoopAnswer, LoopTurn};
use keel_core::journal::Journal;
use keel_core::message::ToolCall;
use keel_core::run_settings::RunSettings;
use keel_core::tool::ToolSpec;

/// The name of the task-list tool.
pub const TODO: &str = "todo";

/// The most items a list may hold.
pub const MAX_ITEMS: usize = 50;

/// The longest an item's text may be, in characters.
pub const MAX_TEXT_CHARS: usize = 300;

/// The longest an item's id may be, in characters.
pub const MAX_ID_CHARS: usize = 40;

/// The statuses an item may have.
pub const STATUSES: [&str; 4] = ["pending", "in_progress", "done", "cancelled"];

/// One task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TodoItem {
    /// Short id, unique in the list (`1`, `2`, ... when the model gives none).
    pub id: String,
    /// What to do.
    pub text: String,
    /// One of [`STATUSES`].
    pub status: String,
}

/// The task list of one conversation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TodoList {
    items: Vec<TodoItem>,
}

/// The spec the model sees for `todo`.
pub fn todo_spec() -> ToolSpec {
    ToolSpec::new(
        TODO,
        "Your task list, kept across turns and shown again after a summary. `add` items \
         ({text, id?, status?}), `update` one by `id` (status and/or text), `list`, `clear`.",
        json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["add", "update", "list", "clear"]},
                "items": {"type": "array", "items": {"type": "object"}},
                "id": {"type": "string"},
                "status": {"type": "string", "enum": STATUSES},
                "text": {"type": "string"}
            },
            "required": ["action"]
        }),
    )
}

impl TodoList {
    /// True when the list has no items.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The items, in order.
    pub fn items(&self) -> &[TodoItem] {
        &self.items
    }

    /// Answers one `todo` call: the text for the model, and whether the list changed. A call
    /// with anything wrong changes nothing.
    pub fn apply(&mut self, args: &Value) -> Result<(String, bool), String> {
        match args["action"].as_str() {
            Some("list") => Ok((self.render(), false)),
            Some("clear") => {
                let had = self.items.len();
                self.items.clear();
                Ok((format!("Task list cleared ({had} items removed)."), had > 0))
            }
            Some("add") => self.add(&args["items"]).map(|answer| (answer, true)),
            Some("update") => self.update(args).map(|answer| (answer, true)),
            Some(other) => Err(format!(
                "unknown action `{other}`: use add, update, list or clear"
            )),
            None => Err("give an `action`: add, update, list or clear".into()),
        }
    }

    fn add(&mut self, items: &Value) -> Result<String, String> {
        let Some(items) = items.as_array().filter(|items| !items.is_empty()) else {
            return Err("`add` needs `items`: a non-empty list of {text, id?, status?}".into());
        };
        if self.items.len() + items.len() > MAX_ITEMS {
            return Err(format!(
                "the task list holds at most {MAX_ITEMS} items; it has {} and {} more were \
                 given. Clear done items or merge tasks",
                self.items.len(),
                items.len()
            ));
        }
        let mut added = Vec::with_capacity(items.len());
        for item in items {
            let text = checked_text(&item["text"])?;
            let status = checked_status(&item["status"])?.unwrap_or("pending");
            let id = match item["id"].as_str() {
                Some(id) => checked_id(id)?,
                None if !item["id"].is_null() => {
                    return Err("an item's `id` must be a string".into());
                }
                None => self.free_id(&added),
            };
            if self.find(&id).is_some() || added.iter().any(|a: &TodoItem| a.id == id) {
                return Err(format!("an item with id `{id}` is already in the list"));
            }
            added.push(TodoItem {
                id,
                text,
                status: status.to_string(),
            });
        }
        let n = added.len();
        self.items.extend(added);
        Ok(format!("Added {n} item(s).\n{}", self.render()))
    }

    fn update(&mut self, args: &Value) -> Result<String, String> {
        let id = args["id"]
            .as_str()
            .ok_or("`update` needs the item's `id`")?;
        let status = checked_status(&args["status"])?;
        let text = match &args["text"] {
            Value::Null => None,
            text => Some(checked_text(text)?),
        };
        if status.is_none() && text.is_none() {
            return Err("`update` needs a new `status` or `text`".into());
        }
        let index = self
            .find(id)
            .ok_or_else(|| format!("no item with id `{id}` (see `list`)"))?;
        let item = &mut self.items[index];
        if let Some(status) = status {
            item.status = status.to_string();
        }
        if let Some(text) = text {
            item.text = text;
        }
        Ok(format!("Updated `{id}`.\n{}", self.render()))
    }

    fn find(&self, id: &str) -> Option<usize> {
        self.items.iter().position(|item| item.id == id)
    }

    /// The smallest number not yet used as an id.
    fn free_id(&self, added: &[TodoItem]) -> String {
        (1..)
            .map(|n: usize| n.to_string())
            .find(|id| self.find(id).is_none() && added.iter().all(|a| a.id != *id))
            .unwrap_or_default()
    }

    /// The list as the model reads it: one line per item.
    pub fn render(&self) -> String {
        if self.items.is_empty() {
            return "The task list is empty.".into();
        }
        let mut out = String::from("Task list:");
        for item in &self.items {
            let mark = match item.status.as_str() {
                "done" => "[x]",
                "in_progress" => "[~]",
                "cancelled" => "[-]",
                _ => "[ ]",
            };
            out.push_str(&format!(
                "\n{mark} {}: {} ({})",
                item.id, item.text, item.status
            ));
        }
        out
    }
}

fn checked_text(text: &Value) -> Result<String, String> {
    let text = text.as_str().ok_or("an item needs a `text` string")?.trim();
    if text.is_empty() {
        return Err("an item's `text` is empty".into());
    }
    let chars = text.chars().count();
    if chars > MAX_TEXT_CHARS {
        return Err(format!(
            "an item's text is {chars} characters; at most {MAX_TEXT_CHARS} are allowed"
        ));
    }
    Ok(text.to_string())
}

fn checked_status(status: &Value) -> Result<Option<&str>, String> {
    match status {
        Value::Null => Ok(None),
        Value::String(s) if STATUSES.contains(&s.as_str()) => Ok(Some(s.as_str())),
        other => Err(format!(
            "unknown status {other}: use pending, in_progress, done or cancelled"
        )),
    }
}

fn checked_id(id: &str) -> Result<String, String> {
    let id = id.trim();
    if id.is_empty() || id.chars().count() > MAX_ID_CHARS || id.chars().any(char::is_control) {
        return Err(format!(
            "an item's `id` must be 1 to {MAX_ID_CHARS} printable characters"
        ));
    }
    Ok(id.to_string())
}

/// The key the task list is kept under in the session's journal.
pub const JOURNAL_KEY: &str = "todos";

/// The `todo` tool, answered by the loop; its list is kept in the session's journal and shown
/// again in the turn context once a compaction dropped older messages.
#[derive(Clone, Copy, Debug, Default)]
pub struct Todo;

impl TodoList {
    /// The list kept in `journal` (empty when there is none).
    pub fn of(journal: &Journal) -> TodoList {
        journal.extension(JOURNAL_KEY).unwrap_or_default()
    }

    /// Keeps the list in `journal` (removing the key when the list is empty).
    pub fn keep_in(&self, journal: &mut Journal) {
        journal.set_extension(JOURNAL_KEY, (!self.is_empty()).then_some(self));
    }
}

impl Extension for Todo {
    fn name(&self) -> &'static str {
        TODO
    }

    fn loop_tools(&self, _: &RunSettings) -> Vec<ToolSpec> {
        vec![todo_spec()]
    }

    fn answer(&self, _: &ToolCall, args: &Value, turn: &mut LoopTurn<'_>) -> LoopAnswer {
        let mut list = TodoList::of(turn.journal);
        match list.apply(args) {
            Ok((answer, changed)) => {
                if changed {
                    list.keep_in(turn.journal);
                    turn.journal_changed = true;
                }
                LoopAnswer::Ok(answer)
            }
            Err(why) => LoopAnswer::Err(format!("Error: {why}; the task list is unchanged.")),
        }
    }

    fn notes(&self, journal: &Journal, compacted: bool) -> Option<String> {
        let list = TodoList::of(journal);
        (compacted && !list.is_empty()).then(|| {
            format!(
                "Your task list (kept through the summary):\n{}",
                list.render()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_update_list_and_clear() {
        let mut list = TodoList::default();
        let (answer, changed) = list
            .apply(&json!({"action": "add", "items": [{"text": "read the code"}, {"text": "fix it", "id": "fix"}]}))
            .unwrap();
        assert!(
            changed && answer.contains("[ ] 1: read the code") && answer.contains("fix: fix it")
        );
        let (answer, _) = list
            .apply(&json!({"action": "update", "id": "1", "status": "done"}))
            .unwrap();
        assert!(answer.contains("[x] 1: read the code (done)"), "{answer}");
        let (_, _) = list
            .apply(&json!({"action": "add", "items": [{"text": "test"}]}))
            .unwrap();
        assert_eq!(list.items()[2].id, "2");
        assert!(!list.apply(&json!({"action": "list"})).unwrap().1);
        assert!(list.apply(&json!({"action": "clear"})).unwrap().1);
        assert!(list.is_empty());
    }

    #[test]
    fn bad_calls_are_clear_errors_and_change_nothing() {
        let mut list = TodoList::default();
        list.apply(&json!({"action": "add", "items": [{"text": "a", "id": "a"}]}))
            .unwrap();
        let before = list.clone();
        for (args, needle) in [
            (json!({"action": "explode"}), "unknown action `explode`"),
            (json!({}), "give an `action`"),
            (json!({"action": "add"}), "needs `items`"),
            (
                json!({"action": "add", "items": [{"text": "b"}, {"text": ""}]}),
                "empty",
            ),
            (
                json!({"action": "add", "items": [{"text": "b", "id": "a"}]}),
                "already",
            ),
            (
                json!({"action": "add", "items": [{"text": "b", "status": "maybe"}]}),
                "unknown status",
            ),
            (
                json!({"action": "add", "items": [{"text": "x".repeat(301)}]}),
                "301 characters",
            ),
            (
                json!({"action": "add", "items": [{"text": "b", "id": "x".repeat(41)}]}),
                "`id` must be",
            ),
            (
                json!({"action": "add", "items": [{"text": "b", "id": 7}]}),
                "must be a string",
            ),
            (
                json!({"action": "update", "id": "zz", "status": "done"}),
                "no item with id `zz`",
            ),
            (
                json!({"action": "update", "id": "a"}),
                "needs a new `status` or `text`",
            ),
        ] {
            let error = list.apply(&args).unwrap_err();
            assert!(error.contains(needle), "{args}: {error}");
            assert_eq!(list, before, "{args} changed the list");
        }
    }

    #[test]
    fn ten_thousand_items_are_refused_whole() {
        let mut list = TodoList::default();
        let items: Vec<Value> = (0..10_000)
            .map(|i| json!({"text": format!("t{i}")}))
            .collect();
        let error = list
            .apply(&json!({"action": "add", "items": items}))
            .unwrap_err();
        assert!(error.contains("at most 50 items"), "{error}");
        assert!(list.is_empty());
        let items: Vec<Value> = (0..MAX_ITEMS)
            .map(|i| json!({"text": format!("t{i}")}))
            .collect();
        list.apply(&json!({"action": "add", "items": items}))
            .unwrap();
        let error = list
            .apply(&json!({"action": "add", "items": [{"text": "one more"}]}))
            .unwrap_err();
        assert!(error.contains("it has 50"), "{error}");
    }
}
