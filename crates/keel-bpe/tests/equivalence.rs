//! keel-bpe counts what tiktoken-rs counts (`count_ordinary`), text for text, and splits texts
//! into the pieces its encodings' regular expressions find (cl100k_base's pre-tokenizer is
//! written by hand): on this repository's own files, on hostile shapes (long runs, whitespace
//! mixes, scripts, emoji, special-token text) and on generated strings.

use std::sync::OnceLock;

use keel_bpe::Bpe;
use proptest::prelude::*;
use tiktoken_rs::CoreBPE;

fn encodings() -> [(&'static Bpe, &'static CoreBPE, &'static str); 2] {
    [
        (
            Bpe::cl100k_base(),
            tiktoken_rs::cl100k_base_singleton(),
            "cl100k_base",
        ),
        (
            Bpe::o200k_base(),
            tiktoken_rs::o200k_base_singleton(),
            "o200k_base",
        ),
    ]
}

/// Each encoding's regular expression, compiled once.
fn expressions() -> &'static [fancy_regex::Regex; 2] {
    static COMPILED: OnceLock<[fancy_regex::Regex; 2]> = OnceLock::new();
    COMPILED.get_or_init(|| {
        encodings().map(|(ours, ..)| fancy_regex::Regex::new(ours.pattern()).unwrap())
    })
}

/// The pieces of `text`: keel-bpe's, and its encoding's expression's.
fn both_pieces(
    ours: &Bpe,
    expression: &fancy_regex::Regex,
    text: &str,
) -> (Vec<String>, Vec<String>) {
    let mut split = Vec::new();
    ours.split(text, |piece| split.push(piece.to_string()));
    let found = expression
        .find_iter(text)
        .map(|found| found.unwrap().as_str().to_string())
        .collect();
    (split, found)
}

fn assert_same(text: &str, what: &str) {
    for ((ours, theirs, name), expression) in encodings().into_iter().zip(expressions()) {
        let (split, found) = both_pieces(ours, expression, text);
        if split != found {
            let at = split
                .iter()
                .zip(&found)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            panic!(
                "{name}: {what}: pieces differ at {at}: ours {:?}, the expression's {:?}",
                &split[at..(at + 3).min(split.len())],
                &found[at..(at + 3).min(found.len())]
            );
        }
        assert_eq!(
            ours.count(text),
            theirs.count_ordinary(text),
            "{name}: {what}"
        );
    }
}

/// Every text file under `dir` (sources, docs, fixtures), skipping build output and git.
fn text_files(dir: &std::path::Path, found: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name == ".git" || name == ".venv" {
            continue;
        }
        if path.is_dir() {
            text_files(&path, found);
        } else {
            found.push(path);
        }
    }
}

#[test]
fn the_repositorys_files_count_the_same() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    text_files(&root, &mut files);
    let mut bytes = 0;
    for path in &files {
        if let Ok(text) = std::fs::read_to_string(path) {
            bytes += text.len();
            assert_same(&text, &path.display().to_string());
        }
    }
    assert!(bytes > 1_000_000, "only {bytes} bytes of text found");
}

#[test]
fn hostile_shapes_count_the_same() {
    let shapes = [
        String::new(),
        "a".into(),
        "a".repeat(10_000),
        "ab".repeat(3_000),
        "zqxjkvbw".repeat(500),
        "\u{1F600}".repeat(300),
        "日本語のテキストと漢字".repeat(200),
        "e\u{0301}".repeat(500),
        "٩(-̮̮̃-̃)۶ עברית العربية".repeat(50),
        " ".repeat(5_000),
        " \t\r\n\u{a0}\u{2003}\u{3000}".repeat(400),
        "\n\n\n  x  \r\n\r\n y\t\tz   ".repeat(300),
        "1234567890".repeat(500),
        "<|endoftext|><|fim_prefix|><|endofprompt|>".repeat(20),
        "don't WE'LL you'RE I'd they've it's".repeat(100),
        "fn main() { let x = vec![1, 2, 3]; println!(\"{x:?}\"); }\n".repeat(100),
        "{\"key\": \"value\", \"n\": [1.5e10, -2, null, true]}".repeat(100),
        "Ÿ̶̢̧̛̗̘̙̜̝̞̟̠̤̥̦̩̪̫̬̭̮̯̰̱̲̳̹̺̻̼ͅ͏͓͔͕͖͙͚̀́̂̃̄̅̆̇̈̉̊̋̌̍̎̏̐̑̒̓̔̽̾̿".repeat(50),
        "aGVsbG8gd29ybGQ=".repeat(800),
        "/usr/local/bin/../lib/x86_64-linux-gnu/".repeat(100),
        "\u{feff}\u{200b}\u{200d}\u{2060}".repeat(100),
        // o200k_base's capital and small classes overlap (modifier letters, other letters,
        // marks): long capital runs that give characters back, marks alone, title case.
        format!("\u{2b0}{}!", "A".repeat(20_000)),
        "A\u{2b0}".repeat(5_000),
        format!("A\u{2b0}{}", "A".repeat(20_000)),
        "\u{301}".repeat(5_000),
        "\u{1c5}\u{1c5}a ".repeat(2_000),
        "'S'LL 'Ve'ſ'ﬅ".repeat(300),
    ];
    for shape in shapes {
        assert_same(
            &shape,
            &format!("{:?}", shape.chars().take(30).collect::<String>()),
        );
    }
}

/// Every character after an apostrophe, alone and before itself and an `e`, beside spaces,
/// numbers, line breaks, slashes and capital and small letters: the contractions fold case as
/// Unicode does (`'ſ` is `'s`), and every class of character meets each branch of both
/// expressions, a few thousand characters to a text.
#[test]
fn every_character_splits_the_same() {
    let characters: Vec<char> = (0..=0x10_FFFF).filter_map(char::from_u32).collect();
    for ((ours, ..), expression) in encodings().into_iter().zip(expressions()) {
        for chunk in characters.chunks(4096) {
            let mut text = String::new();
            for &c in chunk {
                text.extend([
                    '\'', c, ' ', '\'', c, c, 'e', c, '1', c, '\n', c, 'A', c, 'a', c, '/', ' ',
                ]);
            }
            let (split, found) = both_pieces(ours, expression, &text);
            assert!(split == found, "near {:?}", chunk[0]);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn generated_strings_count_the_same(
        text in "[a-zA-Z0-9 \\n\\r\\t'.,!?/_\\-+=(){}\"éßøŸſ日本語😀\u{0301}\u{a0}\u{2028}\u{3000}½٣]{0,300}"
    ) {
        for ((ours, theirs, _), expression) in encodings().into_iter().zip(expressions()) {
            let (split, found) = both_pieces(ours, expression, &text);
            prop_assert_eq!(split, found);
            prop_assert_eq!(ours.count(&text), theirs.count_ordinary(&text));
        }
    }

    #[test]
    fn any_unicode_counts_the_same(text in "\\PC{0,200}") {
        for ((ours, theirs, _), expression) in encodings().into_iter().zip(expressions()) {
            let (split, found) = both_pieces(ours, expression, &text);
            prop_assert_eq!(split, found);
            prop_assert_eq!(ours.count(&text), theirs.count_ordinary(&text));
        }
    }
}
