//! The settings a last-good fallback must never change: those that bound what a run may do
//! (the workspace, iteration caps, budgets, time limits, tool policy such as the `http_get`
//! hosts). A broken `keel.toml` may stand in for by its last good copy only when both say the
//! same about every one of them.
//!
//! The broken file may not be TOML at all, so both texts are read leniently, line by line:
//! each `key = value` (with multi-line arrays and inline tables joined) under its `[table]`,
//! whitespace and comments dropped. A line in a guarded table that is not an assignment counts
//! as a setting of its own, so a mangled line there also refuses the fallback. Any difference
//! in the guarded settings, even one of spelling only, refuses it: the check errs on the side of
//! stopping.

use std::collections::{BTreeMap, BTreeSet};

/// Top-level keys and tables whose settings a fallback must not change.
const GUARDED: [&str; 8] = [
    "workspace",
    "max_iterations",
    "tool_result_max_chars",
    "max_tokens",
    "budgets",
    "limits",
    "tools",
    "guardrails",
];

/// Settings inside the guarded tables that do not bound what a run may do.
const UNGUARDED: [&str; 1] = ["tools.retry_delays_ms"];

/// The first guarded setting (`tools.http_allowed_hosts`) on which `broken` and `lastgood`
/// differ, or `None` when they agree on all of them.
pub fn first_difference(broken: &str, lastgood: &str) -> Option<String> {
    let broken = guarded_entries(broken);
    let lastgood = guarded_entries(lastgood);
    let keys: BTreeSet<&String> = broken.keys().chain(lastgood.keys()).collect();
    keys.into_iter()
        .find(|key| broken.get(*key) != lastgood.get(*key))
        .cloned()
}

/// The guarded settings of `text`: dotted key path to its value, normalized.
fn guarded_entries(text: &str) -> BTreeMap<String, String> {
    let mut entries = BTreeMap::new();
    let mut table = String::new();
    // The key whose value is still open (a multi-line array or inline table), and its depth.
    let mut open: Option<(String, i32)> = None;
    for raw in text.lines() {
        let line = Normalized::of(raw);
        if line.text.is_empty() {
            continue;
        }
        if let Some((key, depth)) = open.take() {
            let value: &mut String = entries.entry(key.clone()).or_default();
            value.push_str(&line.text);
            let depth = depth + line.depth;
            if depth > 0 {
                open = Some((key, depth));
            }
            continue;
        }
        if line.text.starts_with('[') && line.text.ends_with(']') && !line.has_assignment {
            table = line.text.trim_matches(['[', ']']).replace(['"', '\''], "");
            continue;
        }
        let (key, value) = match line.text.split_once('=') {
            Some((key, value)) if line.has_assignment => (key.replace(['"', '\''], ""), value),
            // Not an assignment: kept as a setting of its own, so it too must match.
            _ => (format!("{}?", line.text), ""),
        };
        let path = if table.is_empty() {
            key
        } else {
            format!("{table}.{key}")
        };
        if line.depth > 0 {
            open = Some((path.clone(), line.depth));
        }
        entries.insert(path, value.to_string());
    }
    entries.retain(|path, _| {
        let first = path.split(['.', '?']).next().unwrap_or_default();
        GUARDED.contains(&first) && !UNGUARDED.contains(&path.as_str())
    });
    entries
}

/// One line with its comment and the whitespace outside strings removed.
struct Normalized {
    text: String,
    /// Brackets and braces opened minus closed, outside strings.
    depth: i32,
    /// Whether an `=` appears outside strings.
    has_assignment: bool,
}

impl Normalized {
    fn of(raw: &str) -> Self {
        let mut text = String::new();
        let mut depth = 0;
        let mut has_assignment = false;
        let mut quote: Option<char> = None;
        let mut escaped = false;
        for c in raw.chars() {
            match quote {
                Some(q) => {
                    text.push(c);
                    if escaped {
                        escaped = false;
                    } else if c == '\\' && q == '"' {
                        escaped = true;
                    } else if c == q {
                        quote = None;
                    }
                }
                None => match c {
                    '#' => break,
                    '"' | '\'' => {
                        quote = Some(c);
                        text.push(c);
                    }
                    '[' | '{' => {
                        depth += 1;
                        text.push(c);
                    }
                    ']' | '}' => {
                        depth -= 1;
                        text.push(c);
                    }
                    '=' => {
                        has_assignment = true;
                        text.push(c);
                    }
                    c if c.is_whitespace() => {}
                    c => text.push(c),
                },
            }
        }
        Normalized {
            text,
            depth,
            has_assignment,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOOSE: &str = "provider = \"mock\"\nmodel = \"m\"\n\n[tools]\nretry_delays_ms = [9]\n";

    #[test]
    fn a_tightened_host_list_with_a_typo_elsewhere_differs() {
        let broken = "provider = \"mock\"\nmodel = \n\n[tools]\nretry_delays_ms = [1]\n\
                      http_allowed_hosts = [\"docs.rs\"]\n";
        assert_eq!(
            first_difference(broken, LOOSE).as_deref(),
            Some("tools.http_allowed_hosts")
        );
    }

    #[test]
    fn unguarded_changes_and_formatting_do_not_count() {
        let broken = "provider = \"other\"   # a comment\nmodel = \n[ tools ]\n\
                      retry_delays_ms = [ 1 ]  # same\n";
        assert_eq!(first_difference(broken, LOOSE), None);
    }

    #[test]
    fn multi_line_values_are_compared_whole() {
        let good = "[tools]\nhttp_allowed_hosts = [\n  \"a\",\n  \"b\",\n]\n";
        let same = "[tools]\nhttp_allowed_hosts = [\"a\", \"b\",]\nbroken = \n";
        let other = "[tools]\nhttp_allowed_hosts = [\n  \"a\",\n]\n";
        assert_eq!(first_difference(same, good), Some("tools.broken".into()));
        assert_eq!(
            first_difference(other, good).as_deref(),
            Some("tools.http_allowed_hosts")
        );
        let after = "[tools]\nhttp_allowed_hosts = [\n\"a\",\n\"b\",\n]\n[retry]\nx = \n";
        assert_eq!(first_difference(after, good), None);
    }

    #[test]
    fn a_mangled_line_in_a_guarded_table_refuses() {
        let broken = "[budgets]\ntoken_budget 1000\n";
        assert_eq!(
            first_difference(broken, "[budgets]\n").as_deref(),
            Some("budgets.token_budget1000?")
        );
        let elsewhere = "[retry]\nmax_retries 3\n";
        assert_eq!(first_difference(elsewhere, ""), None);
    }

    #[test]
    fn each_guarded_area_counts() {
        for (broken, key) in [
            ("workspace = \"/\"\nx =", "workspace"),
            ("max_iterations = 99\nx =", "max_iterations"),
            ("[budgets]\ncost_limit = 9.0\nx =", "budgets.cost_limit"),
            (
                "[limits]\nhard_timeout_secs = 1\nx =",
                "limits.hard_timeout_secs",
            ),
            (
                "[guardrails]\niteration_cap = 9\nx =",
                "guardrails.iteration_cap",
            ),
            (
                "tools.http_allow_private = true\nx =",
                "tools.http_allow_private",
            ),
        ] {
            assert_eq!(
                first_difference(broken, "").as_deref(),
                Some(key),
                "{broken}"
            );
        }
    }
}
