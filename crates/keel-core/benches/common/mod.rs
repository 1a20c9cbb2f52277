//! Generated text and conversations shared by the keel-core benches: a deterministic generator
//! over a vocabulary of prose, code, paths and numbers, and conversations of user turns, tool
//! calls with results of a few hundred words, and final answers.

// Each bench uses its own part of these.
#![allow(dead_code)]

use std::sync::LazyLock;

use keel_core::{Message, ToolCall};
use serde_json::json;

/// Words the generated text is drawn from: prose, code, paths and numbers, so the BPE sees
/// varied text rather than one repeated token.
const VOCABULARY: &str = "\
the config loader returns an error when file is missing and retry policy backoff seconds \
src/main.rs crates/keel-core/src/run/mod.rs fn parse_args() Result<Config, Error> \
timeout = 30 request failed with status 503 Service Unavailable user_id session 0x7f3a \
tokens window compaction summary let mut count += 1; assert_eq! warning: unused variable \
`x` line 42 column 17 database migration applied 2024-05-17T10:32:11Z INFO DEBUG handler \
GET /api/v1/runs 200 OK latency_ms=183 cache miss hit ratio 0.93 über naïve résumé → \
TODO: refactor this module before release { } [ ] \"id\": \"name\": null true false because \
however which means that we should check whether test passes on CI linux-x86_64 panicked \
at 'index out of bounds' thread main exited code 101 SELECT * FROM messages WHERE seq > \
? ORDER BY LIMIT 100 Ωmega 日本語";

static WORDS: LazyLock<Vec<&str>> = LazyLock::new(|| VOCABULARY.split_whitespace().collect());

/// A small deterministic generator (xorshift), so every run builds the same texts.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn between(&mut self, low: usize, high: usize) -> usize {
        low + self.below(high - low + 1)
    }

    pub fn word(&mut self) -> &'static str {
        WORDS[self.below(WORDS.len())]
    }

    /// `words` words of text, broken into lines now and then.
    pub fn text(&mut self, words: usize) -> String {
        let mut out = String::with_capacity(words * 7);
        for i in 0..words {
            if i > 0 {
                out.push(if self.below(12) == 0 { '\n' } else { ' ' });
            }
            out.push_str(self.word());
        }
        out
    }

    /// Text of exactly `bytes` bytes (cut at a character boundary, padded with spaces).
    pub fn text_of(&mut self, bytes: usize) -> String {
        let mut out = String::with_capacity(bytes + 16);
        while out.len() < bytes {
            out.push_str(self.word());
            out.push(if self.below(12) == 0 { '\n' } else { ' ' });
        }
        let mut end = bytes;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        while out.len() < bytes {
            out.push(' ');
        }
        out
    }
}

/// Generates a conversation: turns of a user message, tool calls (one, or two in parallel)
/// with results of a few hundred tokens, and usually a final answer.
pub struct Conversation {
    pub rng: Rng,
    pub calls: usize,
}

impl Conversation {
    pub fn new() -> Self {
        Conversation {
            rng: Rng(0x2545_F491_4F6C_DD1D),
            calls: 0,
        }
    }

    pub fn call(&mut self) -> (ToolCall, Message) {
        self.calls += 1;
        let id = format!("call_{:06}", self.calls);
        let (name, arguments) = match self.rng.below(3) {
            0 => (
                "read_file",
                json!({"path": format!("src/module_{}.rs", self.rng.below(400))}),
            ),
            1 => (
                "grep",
                json!({"pattern": self.rng.text(2), "path": "crates/"}),
            ),
            _ => ("run_command", json!({"command": "cargo test -p keel-core"})),
        };
        let words = self.rng.between(150, 400);
        let result = Message::tool_result(id.clone(), self.rng.text(words));
        let call = ToolCall {
            id,
            name: name.into(),
            arguments: arguments.to_string(),
        };
        (call, result)
    }

    /// One turn of exactly `size` messages (at least 1), never ending between a tool call and
    /// its results.
    pub fn turn(&mut self, size: usize) -> Vec<Message> {
        let words = self.rng.between(15, 60);
        let mut out = vec![Message::user(self.rng.text(words))];
        while out.len() < size {
            let left = size - out.len();
            if left >= 3 && self.rng.below(4) == 0 {
                let (first, first_result) = self.call();
                let (second, second_result) = self.call();
                let words = self.rng.between(5, 20);
                out.push(Message::assistant_with_calls(
                    self.rng.text(words),
                    vec![first, second],
                ));
                out.extend([first_result, second_result]);
            } else if left >= 2 {
                let (call, result) = self.call();
                let words = self.rng.between(0, 20);
                out.push(Message::assistant_with_calls(
                    self.rng.text(words),
                    vec![call],
                ));
                out.push(result);
            } else {
                let words = self.rng.between(40, 150);
                out.push(Message::assistant(self.rng.text(words)));
            }
        }
        out
    }

    pub fn messages(&mut self, count: usize) -> Vec<Message> {
        let mut out = Vec::with_capacity(count);
        while out.len() < count {
            let size = self.rng.between(4, 12).min(count - out.len());
            out.extend(self.turn(size));
        }
        out
    }
}
