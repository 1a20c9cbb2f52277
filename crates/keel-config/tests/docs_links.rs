//! Every relative link in the README, BENCHMARKS.md and the pages of `docs/` leads somewhere: to
//! a file or directory of the repository, and, with a `#fragment`, to a heading of the page it
//! names (GitHub's anchors: the heading in lower case, spaces as hyphens, punctuation dropped).
//! A page moved or a heading renamed breaks a link; this test says which, where.
//!
//! It lives here rather than in the binary's tests so that checking the docs needs no build of
//! the program. Plain string scanning, no Markdown crate: keel's pages use inline links only.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The repository's root (this crate is `crates/keel-config`).
fn root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// The Markdown files whose links are checked: the README, BENCHMARKS.md and `docs/*.md`.
fn checked_pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = vec![root.join("README.md"), root.join("BENCHMARKS.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|entry| entry.expect("a docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// A link found in a page: its target as written and the line it is on.
#[derive(Debug, PartialEq)]
struct Link {
    target: String,
    line: usize,
}

/// The lines of `text` outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut lines = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(open), Some(m)) if open == m => fence = None,
            (None, None) => lines.push((index + 1, line)),
            _ => {}
        }
    }
    lines
}

/// `line` without its inline code spans (a link inside backticks is text, not a link).
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|c| *c == '`').count();
        let after = &rest[start + ticks..];
        let closing = "`".repeat(ticks);
        match after.find(&closing) {
            Some(end) => rest = &after[end + ticks..],
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// The inline links (`[text](target)`, images too) of a page, outside code.
fn links(text: &str) -> Vec<Link> {
    let mut found = Vec::new();
    for (line_number, line) in prose_lines(text) {
        let line = without_code_spans(line);
        let mut rest = line.as_str();
        while let Some(open) = rest.find("](") {
            let after = &rest[open + 2..];
            let Some(close) = after.find(')') else { break };
            let raw = after[..close].trim();
            // An optional title: `(target "title")`.
            let target = raw.split_whitespace().next().unwrap_or("");
            let target = target.trim_start_matches('<').trim_end_matches('>');
            found.push(Link {
                target: target.to_string(),
                line: line_number,
            });
            rest = &after[close + 1..];
        }
    }
    found
}

/// GitHub's anchor for a heading's text: inline code marks, emphasis and link targets dropped,
/// lower case, spaces as hyphens, every other character that is not a letter, a digit, `-` or
/// `_` removed.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // `[text](url)` reads as `text`.
    while let Some(open) = rest.find("](") {
        let Some(close) = rest[open..].find(')') else {
            break;
        };
        text.push_str(&rest[..open]);
        rest = &rest[open + close + 1..];
    }
    text.push_str(rest);
    text.chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

/// The anchors of a page's headings, numbered like GitHub's when two headings share one
/// (`name`, `name-1`, …).
fn anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut anchors = Vec::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(line[hashes..].trim().trim_end_matches('#').trim());
        let count = seen.entry(base.clone()).or_insert(0);
        anchors.push(match *count {
            0 => base.clone(),
            n => format!("{base}-{n}"),
        });
        *count += 1;
    }
    anchors
}

/// A path as shown in a failure: relative to the repository when it is inside it.
fn shown(path: &Path) -> String {
    let root = root();
    path.strip_prefix(&root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// What is wrong with each relative link of the page at `page` (text `text`): a file that does
/// not exist, or a fragment that names no heading.
fn broken_links(page: &Path, text: &str) -> Vec<String> {
    let dir = page.parent().unwrap_or(Path::new("."));
    let mut broken = Vec::new();
    for link in links(text) {
        let target = link.target.as_str();
        let external = target.contains("://") || target.starts_with("mailto:");
        if external || target.is_empty() {
            continue;
        }
        let (path, fragment) = match target.split_once('#') {
            Some((path, fragment)) => (path, Some(fragment)),
            None => (target, None),
        };
        let file = if path.is_empty() {
            page.to_path_buf()
        } else {
            dir.join(path)
        };
        let place = format!("{}:{}: `{target}`", shown(page), link.line);
        if !file.exists() {
            broken.push(format!("{place}: {} does not exist", shown(&file)));
            continue;
        }
        let Some(fragment) = fragment else { continue };
        if file.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let linked = if file == page {
            text.to_string()
        } else {
            std::fs::read_to_string(&file).unwrap_or_default()
        };
        if !anchors(&linked).iter().any(|a| a == fragment) {
            broken.push(format!(
                "{place}: {} has no heading with the anchor #{fragment}",
                shown(&file)
            ));
        }
    }
    broken
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = root();
    let pages = checked_pages(&root);
    assert!(
        pages.len() > 3,
        "expected README.md, BENCHMARKS.md and the pages of docs/"
    );
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", page.display()));
        checked += links(&text).len();
        broken.extend(broken_links(page, &text));
    }
    assert!(checked > 0, "no links found: the scanner is broken");
    assert!(
        broken.is_empty(),
        "{} broken link(s):\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn every_docs_page_is_linked_from_the_readme_or_the_docs_index() {
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let index = std::fs::read_to_string(root.join("docs/README.md")).expect("docs/README.md");
    let linked: Vec<String> = links(&readme)
        .into_iter()
        .chain(links(&index))
        .map(|l| l.target.split('#').next().unwrap_or("").to_string())
        .collect();
    for page in checked_pages(&root) {
        let Some(name) = page.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if page.parent().and_then(Path::file_name) != Some("docs".as_ref()) || name == "README.md" {
            continue;
        }
        assert!(
            linked.iter().any(|t| t.ends_with(name)),
            "docs/{name} is linked from neither README.md nor docs/README.md"
        );
    }
}

#[test]
fn a_broken_link_or_anchor_is_reported() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let page = dir.path().join("page.md");
    std::fs::write(
        dir.path().join("other.md"),
        "# Other page\n\n## A `code` heading: yes\n",
    )
    .expect("write other.md");
    let text = "# Page\n\n## Twice\n\n## Twice\n\n\
        [fine](other.md#a-code-heading-yes) [fine too](#twice-1) [external](https://example.com)\n\
        [missing file](nowhere.md) [missing anchor](other.md#nope)\n\
        `[in code](nowhere.md)`\n\n```\n[in a fence](nowhere.md)\n```\n";
    std::fs::write(&page, text).expect("write page.md");
    let broken = broken_links(&page, text);
    assert_eq!(broken.len(), 2, "{broken:#?}");
    assert!(broken[0].contains("`nowhere.md`") && broken[0].contains(":8:"));
    assert!(broken[1].contains("#nope"));
}

#[test]
fn anchors_follow_github() {
    assert_eq!(
        slug("The daemon's API: `keel serve`"),
        "the-daemons-api-keel-serve"
    );
    assert_eq!(
        slug("When keel.toml is broken: the last good copy"),
        "when-keeltoml-is-broken-the-last-good-copy"
    );
    assert_eq!(slug("Run, chat — and serve"), "run-chat--and-serve");
    assert_eq!(
        slug("`shell` and the command policy"),
        "shell-and-the-command-policy"
    );
}
