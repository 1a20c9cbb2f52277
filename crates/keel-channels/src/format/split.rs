//! Splitting a reply into chunks a platform accepts, without breaking code blocks.

/// The smallest limit at which a cut code block is closed and reopened; below it (a limit too
/// small to hold the fences) the text is cut plainly.
const FENCE_REPAIR_MIN: usize = 16;

/// The closing fence added at the end of a chunk that cuts a code block.
const CLOSE: &str = "\n```";

/// Splits `text` into chunks of at most `limit` characters (chars, not bytes).
///
/// A chunk is cut preferably at a paragraph break, then at a line break, then at a space (each
/// only if it keeps the chunk at least a third full; else the last one anywhere), else inside a
/// word, never inside a character. A fenced code block (```` ``` ```` with an optional language)
/// that is cut is closed at the end of its chunk and reopened with the same language at the start
/// of the next; the limit counts those added fences. Chunks are never empty or blank: blank text
/// gives no chunks. Separators at a cut are dropped, as are blank lines at a chunk's start and
/// whitespace at its end (outside code blocks: inside them, leading blank lines are kept).
///
/// # Panics
/// Never; a `limit` of 0 is treated as 1.
pub fn split(text: &str, limit: usize) -> Vec<String> {
    let limit = limit.max(1);
    let chars: Vec<char> = text.chars().collect();
    let fences = Fences::scan(&chars);
    let n = chars.len();
    let mut out = Vec::new();
    let mut pos = 0;
    loop {
        if fences.open_at(pos).is_none() {
            while pos < n && matches!(chars[pos], '\n' | '\r') {
                pos += 1;
            }
        }
        if pos >= n {
            break;
        }
        let reopen = reopening(fences.open_at(pos), limit);
        let budget = limit - reopen.chars().count();
        let repair = limit >= FENCE_REPAIR_MIN;
        let (cut, next, close) = if n - pos <= budget {
            (n, n, false)
        } else {
            let (cut, next) = find_cut(&chars, pos, pos + budget, &fences);
            if repair && fences.open_at(cut).is_some() {
                let (cut, next) = find_cut(&chars, pos, pos + budget - CLOSE.len(), &fences);
                (cut, next, fences.open_at(cut).is_some())
            } else {
                (cut, next, false)
            }
        };
        let body: String = chars[pos..cut].iter().collect();
        let body = body.trim_end();
        if !body.trim().is_empty() {
            let mut chunk = String::with_capacity(reopen.len() + body.len() + CLOSE.len());
            chunk.push_str(&reopen);
            chunk.push_str(body);
            if close {
                chunk.push_str(CLOSE);
            }
            out.push(chunk);
        }
        pos = next;
    }
    out
}

/// The fence that reopens a cut code block at a chunk's start ("" outside a block).
fn reopening(open: Option<&str>, limit: usize) -> String {
    let Some(lang) = open else {
        return String::new();
    };
    if limit < FENCE_REPAIR_MIN {
        return String::new();
    }
    let with_lang = format!("```{lang}\n");
    // Keep at least half the chunk for content: a very long language tag is dropped.
    if with_lang.chars().count() + CLOSE.len() <= limit / 2 {
        with_lang
    } else {
        "```\n".to_string()
    }
}

/// Where to cut the text between `pos` and `end` (exclusive, `end` < text length): returns the
/// chunk's end and where the next chunk starts (after the dropped separator).
fn find_cut(chars: &[char], pos: usize, end: usize, fences: &Fences) -> (usize, usize) {
    let end = end.max(pos + 1);
    let min = pos + (end - pos) / 3;
    let para = |j: usize| chars[j] == '\n' && chars.get(j + 1) == Some(&'\n');
    let line = |j: usize| chars[j] == '\n';
    let space = |j: usize| chars[j] == ' ' || chars[j] == '\t';
    let levels: [(&dyn Fn(usize) -> bool, usize); 3] = [(&para, 2), (&line, 1), (&space, 1)];
    for floor in [min, pos] {
        for (is_sep, width) in levels {
            if let Some(j) = (floor.max(pos + 1)..=end).rev().find(|&j| is_sep(j)) {
                // Inside a code block a paragraph break drops only one newline: the blank line
                // stays, at the start of the reopened block.
                let width = if width == 2 && fences.open_at(j).is_some() {
                    1
                } else {
                    width
                };
                return (j, j + width);
            }
        }
    }
    (end, end)
}

/// The fenced code blocks of a text: which one (if any) is open at each position.
struct Fences {
    /// For each char index, 0 if no block is open there, else 1 + the index of its language.
    state: Vec<u32>,
    /// The language tags of the blocks, in order.
    langs: Vec<String>,
}

impl Fences {
    /// Scans a text's lines for fences: a line starting (after indentation) with ```` ``` ````
    /// opens a block (the rest of the line's first word is its language) or closes the open one.
    /// A position is inside a block when the opening line ends at or before it and the closing
    /// line does not.
    fn scan(chars: &[char]) -> Fences {
        let mut state = vec![0u32; chars.len() + 1];
        let mut langs = Vec::new();
        let mut current = 0u32;
        let mut start = 0;
        while start <= chars.len() {
            let end = chars[start..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(chars.len(), |i| start + i);
            for s in state.iter_mut().take(end).skip(start) {
                *s = current;
            }
            let line: String = chars[start..end].iter().collect();
            let trimmed = line.trim_start();
            if let Some(rest) = trimmed.strip_prefix("```") {
                if current == 0 {
                    let lang = rest.split_whitespace().next().unwrap_or("");
                    let lang: String = lang.chars().filter(|c| *c != '`').collect();
                    langs.push(lang);
                    current = langs.len() as u32;
                } else {
                    current = 0;
                }
            }
            if end < state.len() {
                state[end] = current;
            }
            start = end + 1;
        }
        Fences { state, langs }
    }

    /// The language of the block open at `pos` ("" for none given), or `None` outside blocks.
    fn open_at(&self, pos: usize) -> Option<&str> {
        match self.state.get(pos).copied().unwrap_or(0) {
            0 => None,
            k => Some(self.langs[k as usize - 1].as_str()),
        }
    }
}

#[cfg(test)]
#[path = "split_tests.rs"]
mod tests;
