//! Writing the adapters' wire bodies as JSON: the bytes sent, the tree the tests read, and each
//! tool list's JSON written once per list. Every call of a run sends the same
//! `Arc<[ToolSpec]>`, and its tools array (each tool's schema included) comes out the same each
//! time, so an adapter keeps the last few lists' JSON ([`ToolsJsonCache`]) and reuses it.
//!
//! A list is recognised by its `Arc`'s address only. The cache holds a clone of each `Arc` it
//! keeps, so that address cannot be freed and reused by another list while its JSON is cached:
//! a different list can never be given this one's JSON, even with equal content.

use std::sync::{Arc, Mutex, PoisonError};

use keel_core::ToolSpec;
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// How many tool lists one adapter remembers (concurrent runs each have their own list).
const SLOTS: usize = 8;

/// One remembered list and its JSON.
struct Slot {
    tools: Arc<[ToolSpec]>,
    json: Arc<RawValue>,
}

/// The last few tool lists an adapter sent, with their JSON. The lock is held only to compare
/// addresses and clone an `Arc` out; JSON is written outside it.
#[derive(Default)]
pub(crate) struct ToolsJsonCache {
    slots: Mutex<Slots>,
}

#[derive(Default)]
struct Slots {
    entries: Vec<Slot>,
    /// The entry to replace next once all slots are taken.
    next: usize,
}

impl ToolsJsonCache {
    /// The JSON of `tools`: the cached one when this very list was seen, else `write(tools)`,
    /// remembered for the next call. `write` must depend on the list only (an adapter's
    /// settings that change the JSON are fixed for its cache's lifetime).
    pub(crate) fn get_or_write(
        &self,
        tools: &Arc<[ToolSpec]>,
        write: impl FnOnce(&[ToolSpec]) -> Box<RawValue>,
    ) -> Arc<RawValue> {
        if let Some(json) = self.lock().find(tools) {
            return json;
        }
        let json: Arc<RawValue> = Arc::from(write(tools));
        let evicted = self.lock().insert(tools, &json);
        // The evicted list (maybe its last reference) is dropped here, outside the lock.
        drop(evicted);
        json
    }

    /// The JSON of the tools a request offers, through [`ToolsJsonCache::get_or_write`];
    /// `None` when it offers none (no API gets a `tools` key then).
    pub(crate) fn offered(
        &self,
        tools: &Arc<[ToolSpec]>,
        write: impl FnOnce(&[ToolSpec]) -> Box<RawValue>,
    ) -> Option<Arc<RawValue>> {
        (!tools.is_empty()).then(|| self.get_or_write(tools, write))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        // The slots are consistent after every statement: a panic elsewhere cannot break them.
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Slots {
    fn find(&self, tools: &Arc<[ToolSpec]>) -> Option<Arc<RawValue>> {
        self.entries
            .iter()
            .find(|slot| Arc::ptr_eq(&slot.tools, tools))
            .map(|slot| Arc::clone(&slot.json))
    }

    /// Remembers `json` for `tools` (unless another call just did), returning the slot it
    /// replaced.
    fn insert(&mut self, tools: &Arc<[ToolSpec]>, json: &Arc<RawValue>) -> Option<Slot> {
        if self.find(tools).is_some() {
            return None;
        }
        let slot = Slot {
            tools: Arc::clone(tools),
            json: Arc::clone(json),
        };
        if self.entries.len() < SLOTS {
            self.entries.push(slot);
            return None;
        }
        let at = self.next % SLOTS;
        self.next = (at + 1) % SLOTS;
        Some(std::mem::replace(&mut self.entries[at], slot))
    }
}

impl std::fmt::Debug for ToolsJsonCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolsJsonCache")
            .field("lists", &self.lock().entries.len())
            .finish()
    }
}

/// A wire body as JSON bytes.
pub(crate) fn json_bytes(body: &impl Serialize) -> Vec<u8> {
    // Cannot fail: writing into a Vec does no I/O, every map of a wire body has string keys,
    // and serde_json writes a non-finite float as `null` instead of failing.
    serde_json::to_vec(body).expect("a request body always serializes")
}

/// A wire body as a JSON tree.
pub(crate) fn to_value(body: &impl Serialize) -> Value {
    // Cannot fail, as for `json_bytes`; raw JSON in it (a tools array) was written by serde_json.
    serde_json::to_value(body).expect("a request body always converts")
}

/// `value` as raw JSON.
pub(crate) fn raw_json(value: &impl Serialize) -> Box<RawValue> {
    // Cannot fail: tool definitions are strings and JSON values (string-keyed maps only).
    serde_json::value::to_raw_value(value).expect("a tools array always serializes")
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;

    use super::*;

    fn list(description: &str) -> Arc<[ToolSpec]> {
        vec![ToolSpec::new(
            "echo",
            description,
            json!({"type": "object"}),
        )]
        .into()
    }

    /// The JSON of each list through the cache, counting the writes.
    fn json_of(cache: &ToolsJsonCache, tools: &Arc<[ToolSpec]>, writes: &AtomicUsize) -> String {
        let json = cache.get_or_write(tools, |tools| {
            writes.fetch_add(1, Ordering::Relaxed);
            raw_json(&tools.iter().map(|t| &t.description).collect::<Vec<_>>())
        });
        json.get().to_string()
    }

    #[test]
    fn each_list_gets_its_own_json_and_is_written_once() {
        let cache = ToolsJsonCache::default();
        let writes = AtomicUsize::new(0);
        let a = list("first");
        let same_content = list("first");
        let b = list("second");
        for _ in 0..3 {
            assert_eq!(json_of(&cache, &a, &writes), r#"["first"]"#);
            assert_eq!(json_of(&cache, &b, &writes), r#"["second"]"#);
            assert_eq!(json_of(&cache, &same_content, &writes), r#"["first"]"#);
            // A clone of the Arc is the same list.
            assert_eq!(json_of(&cache, &Arc::clone(&b), &writes), r#"["second"]"#);
        }
        assert_eq!(writes.load(Ordering::Relaxed), 3, "one write per list");
    }

    #[test]
    fn a_list_made_after_another_is_dropped_gets_its_own_json() {
        let cache = ToolsJsonCache::default();
        let writes = AtomicUsize::new(0);
        for round in 0..(3 * SLOTS) {
            // Each list is dropped by the caller right after use: only the cache keeps it, so
            // a new list can never sit at a cached list's address.
            let description = format!("list {round}");
            let tools = list(&description);
            assert_eq!(
                json_of(&cache, &tools, &writes),
                format!(r#"["{description}"]"#)
            );
        }
        assert_eq!(writes.load(Ordering::Relaxed), 3 * SLOTS);
    }

    #[test]
    fn more_lists_than_slots_still_answer_right() {
        let cache = ToolsJsonCache::default();
        let writes = AtomicUsize::new(0);
        let lists: Vec<_> = (0..SLOTS + 3).map(|i| list(&format!("l{i}"))).collect();
        for _ in 0..3 {
            for (i, tools) in lists.iter().enumerate() {
                assert_eq!(json_of(&cache, tools, &writes), format!(r#"["l{i}"]"#));
            }
        }
        assert!(cache.lock().entries.len() <= SLOTS);
    }

    #[test]
    fn concurrent_callers_with_different_lists_each_get_their_own() {
        let cache = ToolsJsonCache::default();
        let writes = AtomicUsize::new(0);
        // More lists than slots, so the threads also evict each other's.
        let lists: Vec<_> = (0..SLOTS + 4).map(|i| list(&format!("l{i}"))).collect();
        std::thread::scope(|scope| {
            for thread in 0..4 {
                let (cache, writes, lists) = (&cache, &writes, &lists);
                scope.spawn(move || {
                    for round in 0..200 {
                        let i = (round * 7 + thread) % lists.len();
                        assert_eq!(json_of(cache, &lists[i], writes), format!(r#"["l{i}"]"#));
                    }
                });
            }
        });
    }
}
