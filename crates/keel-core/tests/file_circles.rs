//! The kernel's files do not import each other in circles (issue 32): a file that names
//! `crate::a::b` or `super::x` depends on that module's file, and no set of files depending on
//! each other in a circle may be bigger than a handful. A parent module declaring its children
//! is structure, not a dependency; test code does not count.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The most files one circle may hold.
const MOST_IN_A_CIRCLE: usize = 5;

type Module = Vec<String>;

/// Every non-test source file of keel-core, by module path (`run::step`; `lib` is `[]`).
fn modules() -> BTreeMap<Module, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = BTreeMap::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("src is readable") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if !name.ends_with(".rs") || name == "tests.rs" || name.ends_with("_tests.rs") {
                continue;
            }
            let relative = path.strip_prefix(&root).unwrap().with_extension("");
            let mut module: Module = relative
                .iter()
                .map(|part| part.to_string_lossy().to_string())
                .collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                module.pop();
            }
            let text = std::fs::read_to_string(&path).expect("a source file is readable");
            found.insert(module, without_tests(&text));
        }
    }
    found
}

/// `text` without its `#[cfg(test)]` items, `#[cfg(doc)]` imports and line comments.
fn without_tests(text: &str) -> String {
    let mut kept = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        if trimmed == "#[cfg(test)]" || trimmed == "#[cfg(doc)]" {
            let mut depth = 0i32;
            let mut opened = false;
            for item in lines.by_ref() {
                depth += item.matches('{').count() as i32 - item.matches('}').count() as i32;
                opened |= item.contains('{');
                if (opened && depth <= 0) || (!opened && item.trim_end().ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        let code = line.split("//").next().unwrap_or("");
        kept.push_str(code);
        kept.push('\n');
    }
    kept
}

/// The path segments after each `prefix` in `text`, group imports `a::{b, c::d}` expanded.
fn paths_after(text: &str, prefix: &str) -> Vec<Module> {
    let mut paths = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().last();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let mut base = Vec::new();
        let mut tail = rest;
        while let Some(after) = tail.strip_prefix("::") {
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if name.is_empty() {
                if let Some(group) = after.strip_prefix('{') {
                    let group = &group[..group.find('}').unwrap_or(group.len())];
                    for part in group.split(',') {
                        let mut path = base.clone();
                        path.extend(part.trim().split("::").map(|s| s.trim().to_string()));
                        paths.push(path);
                    }
                }
                break;
            }
            tail = &after[name.len()..];
            base.push(name);
        }
        paths.push(base);
    }
    paths
}

/// The module of `path`: its longest prefix that is a file.
fn file_of<'a>(path: &[String], modules: &'a BTreeMap<Module, String>) -> Option<&'a Module> {
    (1..=path.len())
        .rev()
        .find_map(|len| modules.get_key_value(&path[..len]).map(|(key, _)| key))
}

/// Each file's dependencies on other files.
fn dependencies(modules: &BTreeMap<Module, String>) -> BTreeMap<Module, BTreeSet<Module>> {
    modules
        .iter()
        .map(|(module, text)| {
            let parent = &module[..module.len().saturating_sub(1)];
            let named = paths_after(text, "crate").into_iter().chain(
                paths_after(text, "super").into_iter().map(|path| {
                    let mut full = parent.to_vec();
                    full.extend(path);
                    full
                }),
            );
            let deps = named
                .filter_map(|path| file_of(&path, modules).cloned())
                .filter(|dep| dep != module)
                .collect();
            (module.clone(), deps)
        })
        .collect()
}

/// The files of the biggest circle (strongly connected set).
fn biggest_circle(deps: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Module> {
    let reaches = |from: &Module| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(next) = todo.pop() {
            for dep in &deps[&next] {
                if seen.insert(dep.clone()) {
                    todo.push(dep.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&Module, BTreeSet<Module>> = deps
        .keys()
        .map(|module| (module, reaches(module)))
        .collect();
    deps.keys()
        .map(|module| {
            deps.keys()
                .filter(|other| {
                    *other == module
                        || (reach[module].contains(*other) && reach[other].contains(module))
                })
                .cloned()
                .collect::<Vec<_>>()
        })
        .max_by_key(Vec::len)
        .unwrap_or_default()
}

#[test]
fn no_circle_of_files_is_more_than_a_handful() {
    let modules = modules();
    assert!(modules.len() > 40, "the kernel's files were found");
    let circle = biggest_circle(&dependencies(&modules));
    let names: Vec<String> = circle.iter().map(|m| m.join("/")).collect();
    assert!(
        circle.len() <= MOST_IN_A_CIRCLE,
        "{} files import each other in one circle: {names:?}",
        circle.len()
    );
}

#[test]
fn the_scanner_sees_imports_and_groups() {
    let paths = paths_after("use crate::a::{b, c::d};\nlet x = crate::e::f(1);", "crate");
    assert!(paths.contains(&vec!["a".to_string(), "b".to_string()]));
    assert!(paths.contains(&vec!["a".to_string(), "c".to_string(), "d".to_string()]));
    assert!(paths.contains(&vec!["e".to_string(), "f".to_string()]));
    let text = without_tests("use crate::a;\n#[cfg(test)]\nmod tests {\n use crate::b;\n}\n");
    assert!(text.contains("crate::a") && !text.contains("crate::b"));
}

#[test]
fn a_circle_is_found_whole() {
    let module = |name: &str| vec![name.to_string()];
    let deps: BTreeMap<Module, BTreeSet<Module>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a", "d"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(from, to)| (module(from), to.into_iter().map(module).collect()))
    .collect();
    assert_eq!(
        biggest_circle(&deps),
        vec![module("a"), module("b"), module("c")]
    );
}
