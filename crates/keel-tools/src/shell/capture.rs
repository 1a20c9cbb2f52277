//! Capturing a command's output within a bounded amount of memory, and showing it within a
//! character budget: the head and the tail, with a marker saying how much was cut between.

use std::collections::VecDeque;

/// One output stream as it arrives: the first `keep` bytes, the last `keep` bytes, and counts.
#[derive(Debug)]
pub(crate) struct Capture {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    keep: usize,
    total_bytes: u64,
    total_chars: u64,
}

impl Capture {
    /// A capture keeping at most `keep` bytes at each end.
    pub fn new(keep: usize) -> Self {
        Capture {
            head: Vec::new(),
            tail: VecDeque::new(),
            keep,
            total_bytes: 0,
            total_chars: 0,
        }
    }

    /// Takes more output.
    pub fn push(&mut self, bytes: &[u8]) {
        self.total_bytes += bytes.len() as u64;
        // Every byte that is not a UTF-8 continuation byte starts a character.
        self.total_chars += bytes.iter().filter(|b| (**b & 0xC0) != 0x80).count() as u64;
        let room = self.keep.saturating_sub(self.head.len()).min(bytes.len());
        self.head.extend_from_slice(&bytes[..room]);
        self.tail.extend(&bytes[room..]);
        if self.tail.len() > self.keep {
            let excess = self.tail.len() - self.keep;
            self.tail.drain(..excess);
        }
    }

    /// The characters seen in total (invalid UTF-8 counted about byte for byte).
    pub fn chars(&self) -> u64 {
        self.total_chars
    }

    /// The output as text within `budget` characters: all of it when it fits, else its first
    /// and last characters around a marker saying how many were cut. Invalid UTF-8 is replaced
    /// with U+FFFD.
    pub fn render(&self, budget: usize) -> String {
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        let dropped = self.total_bytes > (self.head.len() + tail.len()) as u64;
        let (head, tail) = if dropped {
            // The tail may start in the middle of a character: skip its continuation bytes.
            let start = tail
                .iter()
                .take(3)
                .take_while(|b| (**b & 0xC0) == 0x80)
                .count();
            (
                String::from_utf8_lossy(&self.head).into_owned(),
                String::from_utf8_lossy(&tail[start..]).into_owned(),
            )
        } else {
            let mut all = self.head.clone();
            all.extend_from_slice(&tail);
            let text = String::from_utf8_lossy(&all).into_owned();
            if text.chars().count() <= budget {
                return text;
            }
            (text.clone(), text)
        };
        let head_budget = budget / 2;
        let tail_budget = budget - head_budget;
        let shown_head: String = head.chars().take(head_budget).collect();
        let tail_chars = tail.chars().count();
        let shown_tail: String = tail
            .chars()
            .skip(tail_chars.saturating_sub(tail_budget))
            .collect();
        let shown = (shown_head.chars().count() + shown_tail.chars().count()) as u64;
        let total = if dropped {
            self.total_chars
        } else {
            head.chars().count() as u64
        };
        let cut = total.saturating_sub(shown);
        format!("{shown_head}\n[… {cut} characters cut …]\n{shown_tail}")
    }
}

/// Splits `max` characters between standard output and standard error: each keeps all it has
/// when both fit; otherwise the smaller keeps up to half and the larger takes the rest.
pub(crate) fn split_budget(stdout_chars: u64, stderr_chars: u64, max: usize) -> (usize, usize) {
    let clamp = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    let (out, err) = (clamp(stdout_chars), clamp(stderr_chars));
    if out.saturating_add(err) <= max {
        return (out, err);
    }
    let out_budget = out.min(max - err.min(max / 2));
    (out_budget, max - out_budget)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn captured(text: &[u8], keep: usize) -> Capture {
        let mut capture = Capture::new(keep);
        for chunk in text.chunks(7) {
            capture.push(chunk);
        }
        capture
    }

    #[test]
    fn short_output_is_shown_whole() {
        assert_eq!(captured(b"hello\n", 100).render(100), "hello\n");
    }

    #[test]
    fn long_output_keeps_head_and_tail_with_a_marker() {
        let text: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        let shown = captured(text.as_bytes(), 64).render(40);
        assert!(shown.starts_with("line 0\nline 1\n"), "{shown}");
        assert!(shown.ends_with("line 999\n"), "{shown}");
        let cut = text.chars().count() - 40;
        assert!(
            shown.contains(&format!("[… {cut} characters cut …]")),
            "{shown}"
        );
    }

    #[test]
    fn output_over_the_budget_but_within_memory_is_cut_too() {
        let shown = captured("é".repeat(100).as_bytes(), 1000).render(10);
        assert_eq!(
            shown,
            format!(
                "{}\n[… 90 characters cut …]\n{}",
                "é".repeat(5),
                "é".repeat(5)
            )
        );
    }

    #[test]
    fn multibyte_characters_cut_in_memory_are_not_garbled() {
        let shown = captured("é".repeat(1000).as_bytes(), 101).render(20);
        assert!(!shown.contains('\u{FFFD}'), "{shown}");
        assert!(shown.contains("[… 980 characters cut …]"), "{shown}");
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        assert_eq!(captured(b"a\xffb", 100).render(100), "a\u{FFFD}b");
    }

    #[test]
    fn budgets_are_shared() {
        assert_eq!(split_budget(10, 20, 100), (10, 20));
        assert_eq!(split_budget(1000, 10, 100), (90, 10));
        assert_eq!(split_budget(10, 1000, 100), (10, 90));
        assert_eq!(split_budget(1000, 1000, 100), (50, 50));
    }
}
