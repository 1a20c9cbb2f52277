//! Whether a broken `keel.toml` may stand in for by its last good copy: only when the copy
//! cannot let a run do more than the file asks for.
//!
//! The rule covers the whole file by construction: every setting is guarded except the few
//! in [`BENIGN`], which say how keel keeps going (the model, streaming, retries, the context,
//! heartbeats), never what a run may do, reach, spend or who sees it. A setting added to keel
//! later is guarded until someone decides otherwise. The fallback is refused when the two files
//! differ in any guarded setting, in a table header, in a line that cannot be read as either,
//! or in a benign setting whose broken line might hide another setting.
//!
//! The broken file may not be TOML at all, so both texts are read leniently: statement by
//! statement (a line, or several while a bracket or a multi-line string is open), comments
//! dropped, each `key = value` under its `[table]` (the n-th `[[array]]` table as `array[n]`).
//! Keys and values that TOML can read are compared as TOML reads them (`'a'` equals `"a"`,
//! `1_000` equals `1000`); anything TOML cannot read never equals anything, so a guarded line
//! that is broken refuses the fallback: the check errs on the side of stopping.

use std::collections::{BTreeMap, BTreeSet};

/// The settings a fallback may change, as paths (`table.*`: the table and any key in it):
/// how keel keeps going, never what a run may do. Running with the last good value of one of
/// these gives a run no more tools, reach, budget, time or audience than the file asks for.
/// Everything else — the provider and its URL, the system prompt, limits, budgets, prices,
/// tools, hooks, `[serve]`, `[mcp]`, `[delegation]`, `[memory]`, `[skills]`, `[routing]`,
/// fallback models, and any key keel does not know — is guarded.
pub const BENIGN: [&str; 20] = [
    "model",
    "stream",
    "retry",
    "retry.max_retries",
    "retry.base_delay_ms",
    "retry.max_delay_ms",
    "retry.retry_after_cap_ms",
    "runs",
    "runs.heartbeat_secs",
    "runs.stale_after_secs",
    "runs.cancel_timeout_secs",
    "context",
    "context.strategy",
    "context.compact_threshold",
    "context.keep_last",
    "context.deep_keep",
    "context.max_recoveries",
    "context.summary_max_tokens",
    "context.windows.*",
    "tools.retry_delays_ms",
];

/// The first setting (`tools.http_allowed_hosts`, `hooks[0].command`) in which `broken` and
/// `lastgood` differ in a way a fallback must not accept, or `None` when running with
/// `lastgood` cannot loosen anything `broken` asks for.
pub fn first_difference(broken: &str, lastgood: &str) -> Option<String> {
    let broken = read(broken);
    let lastgood = read(lastgood);
    let paths: BTreeSet<&String> = broken.keys().chain(lastgood.keys()).collect();
    let refused: Vec<&String> = paths
        .into_iter()
        .filter(|path| {
            let asked = broken.get(*path);
            if same(asked, lastgood.get(*path)) {
                return false;
            }
            let contained = asked.is_none_or(|entries| entries.iter().all(Entry::is_contained));
            !(is_benign(path) && contained)
        })
        .collect();
    // A table named by a setting in it that differs too: the setting says more.
    let inside = |table: &String| {
        let prefix = format!("{table}.");
        refused.iter().any(|path| path.starts_with(&prefix))
    };
    refused
        .iter()
        .find(|path| !inside(path))
        .map(|path| path.to_string())
}

fn is_benign(path: &str) -> bool {
    BENIGN
        .iter()
        .any(|pattern| match pattern.strip_suffix('*') {
            Some(table) => path.starts_with(table) || Some(path) == table.strip_suffix('.'),
            None => path == *pattern,
        })
}

/// What one statement of a file says at its path.
#[derive(Debug)]
enum Entry {
    /// A `[table]` or `[[array]]` header.
    Table,
    /// An assignment whose value TOML reads.
    Value(toml::Value),
    /// An assignment whose value TOML cannot read; `contained` when it is one line with one
    /// `=`, so it cannot hide another setting.
    Unreadable { contained: bool },
    /// Neither a header nor an assignment with a key TOML reads.
    Mangled,
}

impl Entry {
    fn same(&self, other: &Entry) -> bool {
        match (self, other) {
            (Entry::Table, Entry::Table) => true,
            (Entry::Value(a), Entry::Value(b)) => a == b,
            _ => false,
        }
    }

    fn is_contained(&self) -> bool {
        match self {
            Entry::Table | Entry::Value(_) => true,
            Entry::Unreadable { contained } => *contained,
            Entry::Mangled => false,
        }
    }
}

fn same(a: Option<&Vec<Entry>>, b: Option<&Vec<Entry>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same(y)),
        _ => false,
    }
}

/// Every statement of `text` by path, in file order (a path said twice has two entries).
fn read(text: &str) -> BTreeMap<String, Vec<Entry>> {
    let mut entries: BTreeMap<String, Vec<Entry>> = BTreeMap::new();
    // The current table's path, or `Err` with its header when the header cannot be read.
    let mut table: Result<String, String> = Ok(String::new());
    // How many `[[array]]` tables each array has had so far.
    let mut arrays: BTreeMap<Vec<String>, usize> = BTreeMap::new();
    for statement in statements(text) {
        let whole = statement.text.trim();
        let (path, entry) = match statement.eq {
            None if whole.starts_with('[') => {
                let header = (!statement.multiline && !statement.unterminated)
                    .then(|| header_keys(whole))
                    .flatten();
                match header {
                    Some((keys, is_array)) => {
                        if is_array {
                            *arrays.entry(keys.clone()).or_default() += 1;
                        }
                        let path = table_path(&keys, &arrays);
                        table = Ok(path.clone());
                        (path, Entry::Table)
                    }
                    None => {
                        table = Err(whole.to_string());
                        (whole.to_string(), Entry::Mangled)
                    }
                }
            }
            None => (under(&table, whole), Entry::Mangled),
            Some(eq) => {
                let (key, value) = (statement.text[..eq].trim(), &statement.text[eq + 1..]);
                match (assignment_keys(key), &table) {
                    (Some(keys), Ok(_)) => {
                        let key = keys.iter().map(|k| render(k)).collect::<Vec<_>>().join(".");
                        let entry = match value_of(value) {
                            Some(value) => Entry::Value(value),
                            None => Entry::Unreadable {
                                contained: !statement.multiline
                                    && !statement.unterminated
                                    && statement.assignments == 1,
                            },
                        };
                        (under(&table, &key), entry)
                    }
                    _ => (under(&table, whole), Entry::Mangled),
                }
            }
        };
        entries.entry(path).or_default().push(entry);
    }
    entries
}

/// `key` under the current table.
fn under(table: &Result<String, String>, key: &str) -> String {
    match table {
        Ok(table) if table.is_empty() => key.to_string(),
        Ok(table) => format!("{table}.{key}"),
        Err(header) => format!("{header} {key}"),
    }
}

/// A header's path with the index of each array table it passes through: `hooks[1]`.
fn table_path(keys: &[String], arrays: &BTreeMap<Vec<String>, usize>) -> String {
    let mut path = String::new();
    for end in 1..=keys.len() {
        if end > 1 {
            path.push('.');
        }
        path.push_str(&render(&keys[end - 1]));
        if let Some(count) = arrays.get(&keys[..end]) {
            path.push_str(&format!("[{}]", count - 1));
        }
    }
    path
}

/// A key as a path shows it: bare when TOML allows, else quoted.
fn render(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        key.to_string()
    } else {
        format!("{key:?}")
    }
}

/// The keys of a header (`[a."b.c"]`), and whether it is an array table (`[[a]]`), as TOML
/// reads them.
fn header_keys(header: &str) -> Option<(Vec<String>, bool)> {
    let document: toml::Table = toml::from_str(header).ok()?;
    let keys = key_chain(&toml::Value::Table(document))?;
    Some((keys, header.starts_with("[[")))
}

/// The keys of the left side of an assignment (`a."b.c"`), as TOML reads them.
fn assignment_keys(key: &str) -> Option<Vec<String>> {
    if key.is_empty() || key.contains('\n') {
        return None;
    }
    let document: toml::Table = toml::from_str(&format!("{key} = 0")).ok()?;
    key_chain(&toml::Value::Table(document))
}

/// The keys of a document that holds one chain of single-key tables (through an array's one
/// element for an array table) down to its leaf.
fn key_chain(mut value: &toml::Value) -> Option<Vec<String>> {
    let mut keys = Vec::new();
    loop {
        match value {
            toml::Value::Table(table) if table.is_empty() => break,
            toml::Value::Table(table) if table.len() == 1 => {
                let (key, inner) = table.iter().next()?;
                keys.push(key.clone());
                value = inner;
            }
            toml::Value::Array(items) if items.len() == 1 => value = &items[0],
            toml::Value::Table(_) | toml::Value::Array(_) => return None,
            _ => break,
        }
    }
    (!keys.is_empty()).then_some(keys)
}

/// The right side of an assignment as TOML reads it, when it does.
fn value_of(value: &str) -> Option<toml::Value> {
    let mut document: toml::Table = toml::from_str(&format!("v = {value}")).ok()?;
    match document.len() {
        1 => document.remove("v"),
        _ => None,
    }
}

/// One statement: its text without comments (whitespace kept), where its first `=` outside
/// strings and brackets is, and what it spans.
#[derive(Debug, Default)]
struct Statement {
    text: String,
    eq: Option<usize>,
    assignments: usize,
    /// It went on past its first line (an open bracket or multi-line string).
    multiline: bool,
    /// It ran to the end of the file with a bracket or a multi-line string still open.
    unterminated: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum Quote {
    Basic,
    Literal,
    MultiBasic,
    MultiLiteral,
}

impl Quote {
    fn delimiter(self) -> &'static str {
        match self {
            Quote::Basic => "\"",
            Quote::Literal => "'",
            Quote::MultiBasic => "\"\"\"",
            Quote::MultiLiteral => "'''",
        }
    }
}

/// The statements of `text`: a statement ends at a line break outside strings and brackets.
/// A one-line string left open ends with its line, as TOML allows no line break in it.
fn statements(text: &str) -> Vec<Statement> {
    let chars: Vec<char> = text.chars().collect();
    let starts_with = |i: usize, s: &str| {
        s.chars()
            .enumerate()
            .all(|(k, c)| chars.get(i + k) == Some(&c))
    };
    let mut done = Vec::new();
    let mut current = Statement::default();
    let mut quote: Option<Quote> = None;
    let mut escaped = false;
    let mut depth = 0i32;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if let Some(q) = quote {
            if c == '\n' && matches!(q, Quote::Basic | Quote::Literal) {
                quote = None;
                escaped = false;
                continue;
            }
            if escaped {
                escaped = false;
            } else if c == '\\' && matches!(q, Quote::Basic | Quote::MultiBasic) {
                escaped = true;
            } else if starts_with(i, q.delimiter()) {
                current.text.push_str(q.delimiter());
                i += q.delimiter().len();
                quote = None;
                continue;
            }
            current.multiline |= c == '\n';
            current.text.push(c);
            i += 1;
            continue;
        }
        match c {
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            '"' | '\'' => {
                let q = match (c, starts_with(i, if c == '"' { "\"\"\"" } else { "'''" })) {
                    ('"', true) => Quote::MultiBasic,
                    ('"', false) => Quote::Basic,
                    (_, true) => Quote::MultiLiteral,
                    (_, false) => Quote::Literal,
                };
                current.text.push_str(q.delimiter());
                i += q.delimiter().len();
                quote = Some(q);
                continue;
            }
            '[' | '{' => depth += 1,
            ']' | '}' => depth -= 1,
            '=' if depth <= 0 => {
                current.assignments += 1;
                current.eq.get_or_insert(current.text.len());
            }
            '\n' if depth <= 0 => {
                done.push(std::mem::take(&mut current));
                depth = 0;
                i += 1;
                continue;
            }
            '\n' => current.multiline = true,
            '\r' => {
                i += 1;
                continue;
            }
            _ => {}
        }
        current.text.push(c);
        i += 1;
    }
    current.unterminated = quote.is_some() || depth > 0;
    done.push(current);
    done.retain(|statement| !statement.text.trim().is_empty());
    done
}

#[cfg(test)]
#[path = "guarded_settings_tests.rs"]
mod tests;
