//! Which tools a hook sees: a tool name, or a pattern where `*` stands for any run of
//! characters (`write_*`, `*_file`, `*`).

/// A tool-name pattern. Every character but `*` matches itself; `*` matches any run of
/// characters, including none. There is no other wildcard and no escape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolMatcher {
    pattern: String,
}

impl ToolMatcher {
    /// A matcher for `pattern`.
    pub fn new(pattern: impl Into<String>) -> Self {
        ToolMatcher {
            pattern: pattern.into(),
        }
    }

    /// The pattern as written.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// True when `tool` fits the pattern.
    pub fn matches(&self, tool: &str) -> bool {
        glob(self.pattern.as_bytes(), tool.as_bytes())
    }
}

/// Wildcard matching in linear space: on a mismatch, the last `*` takes one more byte. Working
/// on bytes is exact for UTF-8, since `*` never occurs inside a multi-byte character.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // The position of the last `*` seen, and where in `text` it currently stops.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if pattern.get(p) == Some(&b'*') {
            star = Some((p, t));
            p += 1;
        } else if pattern.get(p) == Some(&text[t]) {
            p += 1;
            t += 1;
        } else if let Some((star_p, star_t)) = star {
            p = star_p + 1;
            t = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, tool: &str) -> bool {
        ToolMatcher::new(pattern).matches(tool)
    }

    #[test]
    fn an_exact_name_matches_only_itself() {
        assert!(matches("write_file", "write_file"));
        assert!(!matches("write_file", "write_files"));
        assert!(!matches("write_file", "xwrite_file"));
        assert!(!matches("write_file", ""));
    }

    #[test]
    fn a_star_matches_any_run_of_characters() {
        assert!(matches("*", "anything"));
        assert!(matches("*", ""));
        assert!(matches("write_*", "write_file"));
        assert!(matches("write_*", "write_"));
        assert!(!matches("write_*", "read_file"));
        assert!(matches("*_file", "append_file"));
        assert!(matches("a*b*c", "aXXbYYc"));
        assert!(!matches("a*b*c", "aXXbYY"));
        assert!(matches("**", "x"));
        assert!(matches("mcp__*__read", "mcp__git__read"));
    }

    #[test]
    fn characters_other_than_star_are_literal() {
        assert!(!matches("write?file", "write_file"));
        assert!(!matches("write.file", "write_file"));
        assert!(matches("wrïte_*", "wrïte_fïle"));
    }

    #[test]
    fn a_hostile_pattern_is_quadratic_at_worst_not_exponential() {
        let pattern = "*a".repeat(50) + "b";
        let text = "a".repeat(10_000);
        assert!(!matches(&pattern, &text));
    }
}
