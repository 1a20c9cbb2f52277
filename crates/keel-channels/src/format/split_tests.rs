use super::*;
use proptest::prelude::*;

fn lens(chunks: &[String]) -> Vec<usize> {
    chunks.iter().map(|c| c.chars().count()).collect()
}

#[test]
fn short_text_is_one_chunk_and_blank_text_none() {
    assert_eq!(split("hello", 10), vec!["hello"]);
    assert!(split("", 10).is_empty());
    assert!(split("  \n\n \n", 10).is_empty());
    assert_eq!(split("\n\nhello\n\n", 10), vec!["hello"]);
}

#[test]
fn cuts_at_a_paragraph_break_first() {
    let text = "aaaa bbbb\ncccc\n\ndddd eeee";
    assert_eq!(split(text, 20), vec!["aaaa bbbb\ncccc", "dddd eeee"]);
}

#[test]
fn then_at_a_line_break_then_at_a_space() {
    assert_eq!(
        split("aaaa bbbb\ncccc dddd", 12),
        vec!["aaaa bbbb", "cccc dddd"]
    );
    assert_eq!(split("aaaa bbbb cccc", 10), vec!["aaaa bbbb", "cccc"]);
}

#[test]
fn a_break_too_early_is_passed_over_for_a_later_one() {
    // The paragraph break leaves a 2-char chunk: a later space is preferred.
    let text = "ab\n\ncccc dddd eeee ffff";
    assert_eq!(split(text, 15), vec!["ab\n\ncccc dddd", "eeee ffff"]);
}

#[test]
fn a_word_longer_than_the_limit_is_cut_inside() {
    assert_eq!(split("abcdefghij", 4), vec!["abcd", "efgh", "ij"]);
}

#[test]
fn counts_chars_not_bytes() {
    let text = "é".repeat(10);
    let chunks = split(&text, 4);
    assert_eq!(lens(&chunks), vec![4, 4, 2]);
    assert_eq!(chunks.concat(), text);
    let emoji = "🦀🦀🦀 🦀🦀";
    assert_eq!(split(emoji, 4), vec!["🦀🦀🦀", "🦀🦀"]);
}

#[test]
fn a_cut_code_block_is_closed_and_reopened_with_its_language() {
    let code: String = (0..12).map(|i| format!("let x{i} = {i};\n")).collect();
    let text = format!("Here:\n\n```rust\n{code}```\nDone.");
    let chunks = split(&text, 80);
    assert!(chunks.len() >= 3, "{chunks:#?}");
    for c in &chunks {
        assert!(c.chars().count() <= 80, "{c:?}");
        let fences = c
            .lines()
            .filter(|l| l.trim_start().starts_with("```"))
            .count();
        assert_eq!(fences % 2, 0, "unbalanced: {c:?}");
    }
    // Every chunk after the first that holds code starts by reopening the block.
    for c in &chunks[1..] {
        if c.contains("let x") {
            assert!(c.starts_with("```rust\n"), "{c:?}");
        }
    }
    // No line of code is lost or changed.
    let all = chunks.join("\n");
    for i in 0..12 {
        assert!(all.contains(&format!("let x{i} = {i};")), "line {i} lost");
    }
    assert!(chunks.last().is_some_and(|c| c.ends_with("Done.")));
}

#[test]
fn a_block_without_language_reopens_plain() {
    let text = format!("```\n{}```", "line\n".repeat(20));
    let chunks = split(&text, 30);
    assert!(chunks.len() > 1);
    for c in &chunks {
        assert!(c.starts_with("```\n") && c.ends_with("\n```"), "{c:?}");
        assert!(c.chars().count() <= 30);
    }
}

#[test]
fn blank_lines_inside_code_survive_a_cut() {
    let text = "```\naaaaaaaaaa\n\nbbbbbbbbbb\n```";
    let chunks = split(text, 22);
    let body: Vec<String> = chunks
        .iter()
        .flat_map(|c| {
            c.lines()
                .filter(|l| !l.starts_with("```"))
                .map(String::from)
        })
        .collect();
    assert_eq!(body, vec!["aaaaaaaaaa", "", "bbbbbbbbbb"], "{chunks:?}");
}

#[test]
fn a_tiny_limit_still_makes_progress() {
    let chunks = split("```rust\nfn main() {}\n```", 3);
    assert!(
        chunks
            .iter()
            .all(|c| c.chars().count() <= 3 && !c.trim().is_empty())
    );
    assert_eq!(split("abc", 0), vec!["a", "b", "c"]);
}

proptest! {
    #[test]
    fn chunks_fit_and_keep_every_visible_char(
        text in "[a-zé🦀 \n.]{0,400}",
        limit in 1usize..60,
    ) {
        let chunks = split(&text, limit);
        for c in &chunks {
            prop_assert!(c.chars().count() <= limit);
            prop_assert!(!c.trim().is_empty());
        }
        let visible = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
        prop_assert_eq!(visible(&chunks.concat()), visible(&text));
    }

    #[test]
    fn fences_stay_balanced_in_every_chunk(
        parts in proptest::collection::vec(("[a-z ]{0,30}", any::<bool>()), 0..12),
        limit in 16usize..80,
    ) {
        let mut text = String::new();
        for (p, fence) in &parts {
            text.push_str(p);
            text.push('\n');
            if *fence {
                text.push_str("```py\n");
            }
        }
        let opened = text.matches("```").count();
        if opened % 2 == 1 {
            text.push_str("```\n");
        }
        for c in split(&text, limit) {
            prop_assert!(c.chars().count() <= limit, "{:?}", c);
            let fences = c.lines().filter(|l| l.trim_start().starts_with("```")).count();
            prop_assert_eq!(fences % 2, 0, "{:?}", c);
        }
    }
}
