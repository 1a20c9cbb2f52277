//! The loop guard: notices a model going in circles and escalates (DESIGN.md section 5).
//!
//! Four detectors run after every tool batch and every answer:
//! - identical thrash: the same tool with the same arguments at least `identical_calls` times
//!   in the last `window` calls;
//! - pattern thrash: the same tool at least `pattern_calls` times in the last `window` calls
//!   with differing arguments *and nothing new learned* — each of those results was an error,
//!   empty, or a repeat of an earlier result. Reading ten different files is progress;
//! - repeated batch: the same batch (names and arguments, values cut at 200 characters) in
//!   `repeated_batches` consecutive turns;
//! - repeated text: the same assistant text `repeated_texts` times in a row.
//!
//! Each detection climbs one rung of the ladder: a soft nudge, then a hard directive (the next
//! call may not use tools), then `ask_human` where a human can answer, else the run stops as
//! `error: stuck`.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashSet, VecDeque};
use std::hash::{Hash, Hasher};

use serde::{Deserialize, Serialize};

use crate::message::ToolCall;
use crate::tool::ToolResult;

/// Thresholds of the loop guard (`[guardrails]` in keel.toml).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GuardConfig {
    /// How many recent calls the thrash detectors look at.
    pub window: usize,
    /// Identical calls within the window that count as thrash.
    pub identical_calls: usize,
    /// Same-tool calls within the window, learning nothing, that count as thrash.
    pub pattern_calls: usize,
    /// Consecutive identical batches that count as thrash.
    pub repeated_batches: usize,
    /// Consecutive identical assistant texts that count as thrash.
    pub repeated_texts: usize,
}

impl Default for GuardConfig {
    fn default() -> Self {
        GuardConfig {
            window: 6,
            identical_calls: 3,
            pattern_calls: 4,
            repeated_batches: 3,
            repeated_texts: 3,
        }
    }
}

/// What the guard noticed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "tier")]
pub enum Detection {
    /// The same call again and again.
    IdenticalThrash {
        /// The tool.
        tool: String,
        /// How many times in the window.
        count: usize,
    },
    /// Variations of one call that learn nothing.
    PatternThrash {
        /// The tool.
        tool: String,
        /// How many times in the window.
        count: usize,
    },
    /// The same batch turn after turn.
    RepeatedBatch {
        /// How many turns in a row.
        count: usize,
    },
    /// The same answer text again and again.
    RepeatedText {
        /// How many times in a row.
        count: usize,
    },
}

impl Detection {
    /// The detector's name, for events.
    pub fn tier(&self) -> &'static str {
        match self {
            Detection::IdenticalThrash { .. } => "identical_thrash",
            Detection::PatternThrash { .. } => "pattern_thrash",
            Detection::RepeatedBatch { .. } => "repeated_batch",
            Detection::RepeatedText { .. } => "repeated_text",
        }
    }

    /// The tool involved, when one is.
    pub fn tool(&self) -> Option<&str> {
        match self {
            Detection::IdenticalThrash { tool, .. } | Detection::PatternThrash { tool, .. } => {
                Some(tool)
            }
            _ => None,
        }
    }

    fn describe(&self) -> String {
        match self {
            Detection::IdenticalThrash { tool, count } => format!(
                "You have called `{tool}` with the same arguments {count} times recently and got \
                 the same outcome."
            ),
            Detection::PatternThrash { tool, count } => format!(
                "You have called `{tool}` {count} times recently with different arguments, and \
                 none of those calls returned anything new."
            ),
            Detection::RepeatedBatch { count } => {
                format!("You have made the same set of tool calls {count} turns in a row.")
            }
            Detection::RepeatedText { count } => {
                format!("You have given the same reply {count} times in a row.")
            }
        }
    }
}

/// What the loop must do about a detection: one rung of the ladder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Escalation {
    /// Level 1: tell the model to try something else.
    Nudge(String),
    /// Level 2: order the model to stop calling tools and answer with what it has; the next
    /// call is made without tools.
    Directive(String),
    /// Level 3 with a human reachable: make the model ask them.
    AskHuman(String),
    /// Level 3 without one: stop the run as `error: stuck`.
    Stuck(String),
}

impl Escalation {
    /// The rung, 1–3.
    pub fn level(&self) -> u8 {
        match self {
            Escalation::Nudge(_) => 1,
            Escalation::Directive(_) => 2,
            Escalation::AskHuman(_) | Escalation::Stuck(_) => 3,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct CallRecord {
    name: String,
    signature: u64,
    learned: bool,
}

/// The guard's state for one turn; serializable with the run, without its thresholds (they are
/// the run's settings, stored in its frame: see [`LoopGuard::set_config`]) and without what is
/// empty or zero.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LoopGuard {
    #[serde(skip_serializing)]
    config: GuardConfig,
    #[serde(skip_serializing_if = "VecDeque::is_empty")]
    recent: VecDeque<CallRecord>,
    /// Hashes of the results seen so far. Not in checkpoints, which would grow with every
    /// result: a restored run gives them back ([`LoopGuard::learns`]); checkpoints written
    /// before 2026-11-27 listed them, which a restore still reads.
    #[serde(skip_serializing)]
    seen_results: HashSet<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_batch: Option<u64>,
    #[serde(skip_serializing_if = "crate::checkpoint::is_default")]
    same_batches: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_text: Option<u64>,
    #[serde(skip_serializing_if = "crate::checkpoint::is_default")]
    same_texts: usize,
    #[serde(skip_serializing_if = "crate::checkpoint::is_default")]
    level: u8,
}

impl LoopGuard {
    /// A guard with these thresholds.
    pub fn new(config: GuardConfig) -> Self {
        LoopGuard {
            config,
            ..Self::default()
        }
    }

    /// Gives a restored guard its thresholds back (a checkpoint does not repeat them).
    pub fn set_config(&mut self, config: GuardConfig) {
        self.config = config;
    }

    /// The current rung (0 before any detection).
    pub fn level(&self) -> u8 {
        self.level
    }

    /// Remembers a result; true when it is new: a successful, non-empty result not seen before
    /// in this run. A restored run calls it for each of its results, in order.
    pub fn learns(&mut self, ok: bool, content: &str) -> bool {
        ok && !content.trim().is_empty() && self.seen_results.insert(hash(content))
    }

    /// Observes a finished tool batch; returns what it shows, if anything.
    pub fn observe_batch(
        &mut self,
        calls: &[ToolCall],
        results: &[ToolResult],
    ) -> Option<Detection> {
        let mut batch = DefaultHasher::new();
        for call in calls {
            let signature = signature(call);
            signature.hash(&mut batch);
            let result = results.iter().find(|r| r.call_id == call.id);
            let learned = result.is_some_and(|r| self.learns(r.ok, &r.content));
            self.recent.push_back(CallRecord {
                name: call.name.clone(),
                signature,
                learned,
            });
            while self.recent.len() > self.config.window {
                self.recent.pop_front();
            }
        }
        let batch = batch.finish();
        if self.last_batch == Some(batch) {
            self.same_batches += 1;
        } else {
            self.last_batch = Some(batch);
            self.same_batches = 1;
        }
        self.identical_thrash()
            .or_else(|| self.pattern_thrash())
            .or_else(|| {
                (self.same_batches >= self.config.repeated_batches).then_some(
                    Detection::RepeatedBatch {
                        count: self.same_batches,
                    },
                )
            })
    }

    /// Observes an assistant text; returns a detection when it repeats.
    pub fn observe_text(&mut self, text: &str) -> Option<Detection> {
        let text = text.trim();
        if text.is_empty() {
            return None;
        }
        let digest = hash(text);
        if self.last_text == Some(digest) {
            self.same_texts += 1;
        } else {
            self.last_text = Some(digest);
            self.same_texts = 1;
        }
        (self.same_texts >= self.config.repeated_texts).then_some(Detection::RepeatedText {
            count: self.same_texts,
        })
    }

    /// Climbs one rung for `detection`. `human_reachable`: someone can answer `ask_human`.
    pub fn escalate(&mut self, detection: &Detection, human_reachable: bool) -> Escalation {
        self.level = (self.level + 1).min(3);
        let what = detection.describe();
        match self.level {
            1 => Escalation::Nudge(format!(
                "{what} That is not making progress. Try a different approach or a different \
                 tool, or answer with what you already know."
            )),
            2 => Escalation::Directive(format!(
                "{what} Stop calling tools now. Answer with what you have found so far, say \
                 what is still missing, and what you would try next."
            )),
            _ if human_reachable => Escalation::AskHuman(format!(
                "I seem to be going in circles: {what} Should I keep going, change direction, or \
                 stop?"
            )),
            _ => Escalation::Stuck(format!(
                "Stopped: the model kept going in circles after a nudge and a directive. {what}"
            )),
        }
    }

    fn identical_thrash(&self) -> Option<Detection> {
        let last = self.recent.back()?;
        let count = self
            .recent
            .iter()
            .filter(|c| c.signature == last.signature)
            .count();
        (count >= self.config.identical_calls).then(|| Detection::IdenticalThrash {
            tool: last.name.clone(),
            count,
        })
    }

    fn pattern_thrash(&self) -> Option<Detection> {
        let last = self.recent.back()?;
        let same_tool: Vec<&CallRecord> =
            self.recent.iter().filter(|c| c.name == last.name).collect();
        let nothing_learned = same_tool.iter().all(|c| !c.learned);
        (same_tool.len() >= self.config.pattern_calls && nothing_learned).then(|| {
            Detection::PatternThrash {
                tool: last.name.clone(),
                count: same_tool.len(),
            }
        })
    }
}

/// The call's name and arguments, values cut at 200 characters, as a hash. Arguments that are
/// JSON are compared by value, so key order and spacing do not matter.
fn signature(call: &ToolCall) -> u64 {
    let args = match serde_json::from_str::<serde_json::Value>(&call.arguments) {
        Ok(value) => cut_values(value).to_string(),
        Err(_) => call.arguments.chars().take(200).collect(),
    };
    hash(&(call.name.as_str(), args))
}

fn cut_values(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(s) if s.chars().count() > 200 => Value::String(s.chars().take(200).collect()),
        Value::Array(items) => Value::Array(items.into_iter().map(cut_values).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, cut_values(v))).collect())
        }
        other => other,
    }
}

fn hash<T: Hash + ?Sized>(value: &T) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
#[path = "loop_guard_tests.rs"]
mod tests;
