//! A small Markdown reader shared by the converters: fenced code blocks, `**bold**`,
//! `*italic*`/`_italic_`, `` `code` ``, `[links](url)` and backslash escapes; everything else is
//! text. Spans do not cross lines, and a marker without its closing half is plain text, so every
//! converted chunk is balanced on its own.

/// A target markup: how text, spans and code blocks are written.
pub(super) trait Dialect {
    /// Writes plain text, escaped.
    fn text(&self, out: &mut String, text: &str);
    /// Writes a bold span around already converted `inner`.
    fn bold(&self, out: &mut String, inner: &str);
    /// Writes an italic span around already converted `inner`.
    fn italic(&self, out: &mut String, inner: &str);
    /// Writes an inline code span of raw `code`.
    fn code(&self, out: &mut String, code: &str);
    /// Writes a link to `url` around already converted `inner`; only called when
    /// [`Dialect::link_allowed`] said yes.
    fn link(&self, out: &mut String, inner: &str, url: &str);
    /// Whether `url` may become a link (else the markup stays text).
    fn link_allowed(&self, url: &str) -> bool;
    /// Writes a fenced code block of raw `code` with its language tag (maybe "").
    fn code_block(&self, out: &mut String, lang: &str, code: &str);
}

/// Converts Markdown to a dialect: fenced blocks line by line (an unclosed block is closed at
/// the end), every other line through the inline reader.
pub(super) fn convert(markdown: &str, dialect: &dyn Dialect) -> String {
    let mut out = String::with_capacity(markdown.len() + markdown.len() / 8);
    let mut block: Option<(String, Vec<&str>)> = None;
    let mut first = true;
    let mut newline = |out: &mut String| {
        if !first {
            out.push('\n');
        }
        first = false;
    };
    for line in markdown.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let fence = line.trim_start().strip_prefix("```");
        match (&mut block, fence) {
            (None, Some(rest)) => {
                let lang = rest.split_whitespace().next().unwrap_or("");
                block = Some((lang.to_string(), Vec::new()));
            }
            (Some(_), Some(_)) => {
                // This arm matched `block` as `Some`: the take cannot find it empty.
                let (lang, lines) = block.take().expect("a block is open");
                newline(&mut out);
                dialect.code_block(&mut out, &lang, &lines.join("\n"));
            }
            (Some((_, lines)), None) => lines.push(line),
            (None, None) => {
                newline(&mut out);
                let chars: Vec<char> = line.chars().collect();
                inline(&chars, dialect, &mut out);
            }
        }
    }
    if let Some((lang, lines)) = block {
        newline(&mut out);
        dialect.code_block(&mut out, &lang, &lines.join("\n"));
    }
    out
}

/// Converts one line's spans.
fn inline(chars: &[char], d: &dyn Dialect, out: &mut String) {
    let mut plain = String::new();
    let mut i = 0;
    let n = chars.len();
    let flush = |plain: &mut String, out: &mut String| {
        if !plain.is_empty() {
            d.text(out, plain);
            plain.clear();
        }
    };
    while i < n {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            '\\' if next.is_some_and(|p| p.is_ascii_punctuation()) => {
                plain.push(next.unwrap_or_default());
                i += 2;
            }
            '`' => match find(chars, i + 1, |j| chars[j] == '`') {
                Some(j) if j > i + 1 => {
                    flush(&mut plain, out);
                    let code: String = chars[i + 1..j].iter().collect();
                    d.code(out, &code);
                    i = j + 1;
                }
                _ => {
                    plain.push(c);
                    i += 1;
                }
            },
            '*' | '_' if next == Some(c) => {
                let close = opens(chars, i + 2).then(|| {
                    find(chars, i + 3, |j| {
                        chars[j] == c
                            && chars.get(j + 1) == Some(&c)
                            && !chars[j - 1].is_whitespace()
                    })
                });
                match close.flatten() {
                    Some(j) if c == '*' || boundary_after(chars, j + 2) => {
                        flush(&mut plain, out);
                        let mut inner = String::new();
                        inline(&chars[i + 2..j], d, &mut inner);
                        d.bold(out, &inner);
                        i = j + 2;
                    }
                    _ => {
                        plain.push(c);
                        plain.push(c);
                        i += 2;
                    }
                }
            }
            '*' | '_' => {
                let left_ok = c == '*' || i == 0 || !chars[i - 1].is_alphanumeric();
                let close = (left_ok && opens(chars, i + 1)).then(|| {
                    find(chars, i + 2, |j| {
                        chars[j] == c
                            && !chars[j - 1].is_whitespace()
                            && chars.get(j + 1) != Some(&c)
                            && (c == '*' || boundary_after(chars, j + 1))
                    })
                });
                match close.flatten() {
                    Some(j) => {
                        flush(&mut plain, out);
                        let mut inner = String::new();
                        inline(&chars[i + 1..j], d, &mut inner);
                        d.italic(out, &inner);
                        i = j + 1;
                    }
                    None => {
                        plain.push(c);
                        i += 1;
                    }
                }
            }
            '[' => match link_at(chars, i) {
                Some((text_end, url, end)) if d.link_allowed(&url) => {
                    flush(&mut plain, out);
                    let mut inner = String::new();
                    inline(&chars[i + 1..text_end], d, &mut inner);
                    d.link(out, &inner, &url);
                    i = end;
                }
                _ => {
                    plain.push(c);
                    i += 1;
                }
            },
            _ => {
                plain.push(c);
                i += 1;
            }
        }
    }
    flush(&mut plain, out);
}

/// The first index from `from` where `hit` holds.
fn find(chars: &[char], from: usize, hit: impl Fn(usize) -> bool) -> Option<usize> {
    (from..chars.len()).find(|&j| hit(j))
}

/// Whether a span may open before `at`: it starts with a visible character.
fn opens(chars: &[char], at: usize) -> bool {
    chars.get(at).is_some_and(|c| !c.is_whitespace())
}

/// Whether `at` is the end of a word (for underscores, which may sit inside snake_case).
fn boundary_after(chars: &[char], at: usize) -> bool {
    chars.get(at).is_none_or(|c| !c.is_alphanumeric())
}

/// A `[text](url)` at `i`: the index of `]`, the url, and the index after `)`.
fn link_at(chars: &[char], i: usize) -> Option<(usize, String, usize)> {
    let close = find(chars, i + 1, |j| chars[j] == ']')?;
    if close == i + 1 || chars.get(close + 1) != Some(&'(') {
        return None;
    }
    let end = find(chars, close + 2, |j| {
        chars[j] == ')' || chars[j].is_whitespace()
    })?;
    if chars[end] != ')' || end == close + 2 {
        return None;
    }
    Some((close, chars[close + 2..end].iter().collect(), end + 1))
}
