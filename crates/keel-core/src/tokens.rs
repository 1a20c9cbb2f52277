//! Token accounting with a real BPE (cl100k_base, o200k_base; `keel-bpe`, whose counts are
//! tiktoken's), counted once per message and cached in its metadata, so preparing a turn costs
//! work proportional to what is new.
//!
//! Counts drive thresholds (compaction at 70 % of the window), so they need to be close, not
//! exact: messages get a small fixed overhead for the wire format, and models whose tokenizer is
//! not public (Claude, local models) are counted with cl100k_base, as seed 001 does.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::{LazyLock, Mutex};

use serde::{Deserialize, Serialize};

use crate::message::{Message, TokenCount};
use crate::tool::ToolSpec;

/// Tokens every message costs beyond its text (role, separators).
pub const MESSAGE_OVERHEAD: u32 = 4;
/// Tokens every tool call costs beyond its name and arguments.
pub const TOOL_CALL_OVERHEAD: u32 = 3;

/// A BPE encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    /// GPT-4, GPT-3.5; the proxy for every model without a public tokenizer.
    Cl100kBase,
    /// GPT-4o, GPT-4.1, GPT-5 and the o-series.
    O200kBase,
}

impl Encoding {
    /// The encoding to count `model`'s tokens with.
    pub fn for_model(model: &str) -> Encoding {
        let model = model.to_ascii_lowercase();
        let o200k = [
            "gpt-4o",
            "gpt-4.1",
            "gpt-4.5",
            "gpt-5",
            "chatgpt-4o",
            "o1",
            "o3",
            "o4",
        ];
        if o200k.iter().any(|prefix| model.starts_with(prefix)) {
            Encoding::O200kBase
        } else {
            Encoding::Cl100kBase
        }
    }

    /// Tokens in `text`.
    pub fn count(self, text: &str) -> u32 {
        if text.is_empty() {
            return 0;
        }
        u32::try_from(self.bpe().count(text)).unwrap_or(u32::MAX)
    }

    fn bpe(self) -> &'static keel_bpe::Bpe {
        match self {
            Encoding::Cl100kBase => keel_bpe::Bpe::cl100k_base(),
            Encoding::O200kBase => keel_bpe::Bpe::o200k_base(),
        }
    }
}

/// How many counts [`Encoding::count_repeated`] remembers before starting over.
const MEMO_CAPACITY: usize = 1024;

/// Texts up to this many bytes are remembered by [`count_text`]: short texts repeat (tool names,
/// small arguments, brief results), and for them the tokenizer's fixed cost per call (~30,000
/// instructions for a few characters) is what counting costs.
const SHORT_TEXT: usize = 256;

/// The count remembered under `key`, or `count()` remembered now.
fn remembered(key: (Encoding, u64), count: impl FnOnce() -> u32) -> u32 {
    static MEMO: LazyLock<Mutex<HashMap<(Encoding, u64), u32>>> =
        LazyLock::new(|| Mutex::new(HashMap::new()));
    if let Some(count) = MEMO.lock().ok().and_then(|memo| memo.get(&key).copied()) {
        return count;
    }
    let count = count();
    if let Ok(mut memo) = MEMO.lock() {
        if memo.len() >= MEMO_CAPACITY {
            memo.clear();
        }
        memo.insert(key, count);
    }
    count
}

fn hash_of<T: Hash + ?Sized>(value: &T) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

impl Encoding {
    /// Tokens in `text`, remembered for the life of the process: for the texts sent with every
    /// call (system prompts, tool definitions), so a turn does not count them again.
    pub fn count_repeated(self, text: &str) -> u32 {
        remembered((self, hash_of(text)), || self.count(text))
    }
}

/// Tokens in `text`: remembered when it is short, counted afresh when it is long (a long text
/// rarely repeats, and the tokenizer's cost per call is small next to its cost per byte).
fn count_text(encoding: Encoding, text: &str) -> u32 {
    if text.len() <= SHORT_TEXT {
        encoding.count_repeated(text)
    } else {
        encoding.count(text)
    }
}

/// Tokens `message` costs in a request: its cached count when it was counted with `encoding`,
/// else counted now.
pub fn message_tokens(encoding: Encoding, message: &Message) -> u32 {
    match message.meta.tokens {
        Some(cached) if cached.encoding == encoding => cached.count,
        _ => count_message(encoding, message),
    }
}

/// Counts `message` and caches the count in its metadata.
pub fn cache_tokens(encoding: Encoding, message: &mut Message) -> u32 {
    let count = message_tokens(encoding, message);
    message.meta.tokens = Some(TokenCount { encoding, count });
    count
}

fn count_message(encoding: Encoding, message: &Message) -> u32 {
    let mut total = MESSAGE_OVERHEAD + count_text(encoding, &message.content);
    for call in &message.tool_calls {
        total += TOOL_CALL_OVERHEAD
            + count_text(encoding, &call.name)
            + count_text(encoding, &call.arguments);
    }
    if let Some(reasoning) = &message.reasoning {
        total += count_text(encoding, &reasoning.text);
    }
    total
}

/// Tokens the tool definitions cost in every request.
pub fn tools_tokens(encoding: Encoding, tools: &[ToolSpec]) -> u32 {
    tools
        .iter()
        .map(|tool| {
            TOOL_CALL_OVERHEAD
                + encoding.count_repeated(&tool.name)
                + encoding.count_repeated(&tool.description)
                // Keyed by the schema's value, so it is written out only when first counted.
                + remembered((encoding, hash_of(&tool.parameters)), || {
                    encoding.count(&tool.parameters.to_string())
                })
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolCall;

    #[test]
    fn models_get_their_encoding() {
        assert_eq!(
            Encoding::for_model("gpt-4o-mini-2024-07-18"),
            Encoding::O200kBase
        );
        assert_eq!(Encoding::for_model("o3"), Encoding::O200kBase);
        assert_eq!(Encoding::for_model("gpt-4-turbo"), Encoding::Cl100kBase);
        assert_eq!(
            Encoding::for_model("claude-sonnet-4-5"),
            Encoding::Cl100kBase
        );
    }

    #[test]
    fn counts_are_real_bpe_counts() {
        // "hello world" is two tokens in both encodings.
        assert_eq!(Encoding::Cl100kBase.count("hello world"), 2);
        assert_eq!(Encoding::O200kBase.count("hello world"), 2);
        assert_eq!(Encoding::Cl100kBase.count(""), 0);
        let long = "The quick brown fox jumps over the lazy dog. ".repeat(100);
        let n = Encoding::Cl100kBase.count(&long);
        assert!((900..=1100).contains(&n), "{n}");
    }

    #[test]
    fn repeated_texts_are_counted_once_with_the_same_result() {
        let prompt = "You are a careful agent. ".repeat(50);
        let first = Encoding::Cl100kBase.count_repeated(&prompt);
        assert_eq!(first, Encoding::Cl100kBase.count(&prompt));
        assert_eq!(Encoding::Cl100kBase.count_repeated(&prompt), first);
        assert_eq!(
            Encoding::O200kBase.count_repeated(&prompt),
            Encoding::O200kBase.count(&prompt),
            "each encoding has its own entry"
        );
    }

    #[test]
    fn remembered_counts_are_the_tokenizers_counts() {
        let short = Message::assistant_with_calls(
            "ok",
            vec![ToolCall {
                id: "c".into(),
                name: "lookup".into(),
                arguments: r#"{"item":"bolts"}"#.into(),
            }],
        );
        let long = Message::assistant("The quick brown fox jumps over the lazy dog. ".repeat(20));
        for encoding in [Encoding::Cl100kBase, Encoding::O200kBase] {
            let fresh = |m: &Message| {
                MESSAGE_OVERHEAD
                    + encoding.count(&m.content)
                    + m.tool_calls
                        .iter()
                        .map(|c| {
                            TOOL_CALL_OVERHEAD
                                + encoding.count(&c.name)
                                + encoding.count(&c.arguments)
                        })
                        .sum::<u32>()
            };
            for message in [&short, &long] {
                // Twice: counted, then remembered.
                assert_eq!(message_tokens(encoding, message), fresh(message));
                assert_eq!(message_tokens(encoding, message), fresh(message));
            }
            let tools = [ToolSpec::new(
                "lookup",
                "Looks an item up.",
                serde_json::json!({"type": "object", "properties": {"item": {"type": "string"}}}),
            )];
            let expected = TOOL_CALL_OVERHEAD
                + encoding.count("lookup")
                + encoding.count("Looks an item up.")
                + encoding.count(&tools[0].parameters.to_string());
            assert_eq!(tools_tokens(encoding, &tools), expected);
            assert_eq!(tools_tokens(encoding, &tools), expected);
        }
    }

    #[test]
    fn a_message_is_counted_once_and_the_count_is_cached() {
        let mut message = Message::assistant_with_calls(
            "let me look",
            vec![ToolCall {
                id: "c".into(),
                name: "read_file".into(),
                arguments: r#"{"path":"a.txt"}"#.into(),
            }],
        );
        let counted = cache_tokens(Encoding::Cl100kBase, &mut message);
        assert!(counted > MESSAGE_OVERHEAD + TOOL_CALL_OVERHEAD);
        // The cache answers even after the text changes: it is never recounted.
        message.content = "x".repeat(10_000);
        assert_eq!(message_tokens(Encoding::Cl100kBase, &message), counted);
        // A different encoding counts afresh.
        assert!(message_tokens(Encoding::O200kBase, &message) > 1000);
    }
}
