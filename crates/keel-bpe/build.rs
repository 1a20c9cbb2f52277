//! Lays out each encoding's ranks as three flat files in `OUT_DIR`, which the crate includes
//! as bytes: every token's bytes in rank order (`.bytes`), where each token ends (`.ends`, a
//! little-endian u32 per rank) and an open-addressing hash table from bytes to rank (`.slots`,
//! a little-endian u32 per slot: rank + 1, or 0 for an empty slot). Building them here means a
//! process never decodes, hashes or sorts 300,000 tokens at start.
//!
//! Also writes `classes.rs`: the Unicode classes the pre-tokenizers ask about (see
//! `src/classes.rs`), as runs of code points, taken from regex-syntax, whose tables the
//! encodings' regular expressions use.

use std::path::Path;

#[path = "src/hash.rs"]
mod hash;

// A build script fails the build by panicking, with its message: each `expect` below states
// what cargo or the pinned tiktoken-rs guarantee (OUT_DIR is set; the encodings and the
// constant classes build; ~200,000 ranks and ~2 MB of token bytes fit a u32).
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/hash.rs");
    let out = std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR for build scripts");
    let out = Path::new(&out);
    let cl100k = tiktoken_rs::cl100k_base().expect("tiktoken-rs builds cl100k_base");
    write_table(out, "cl100k_base", &tokens_of(&cl100k), 100_256);
    let o200k = tiktoken_rs::o200k_base().expect("tiktoken-rs builds o200k_base");
    write_table(out, "o200k_base", &tokens_of(&o200k), 199_998);
    write_classes(out);
}

/// The classes, one bit each, in the order of `src/classes.rs`'s constants.
const CLASSES: [&str; 5] = [
    r"\p{L}",
    r"\p{N}",
    r"\s",
    r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]",
    r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]",
];

/// Writes `classes.rs`: `ASCII`, the classes of each ASCII character, and `STARTS` and
/// `RUNS`, where each run of code points of the same classes starts and its classes.
fn write_classes(out: &Path) {
    let mut classes = vec![0u8; 0x11_0000];
    for (bit, pattern) in CLASSES.iter().enumerate() {
        let hir = regex_syntax::parse(pattern).expect("the class parses");
        let regex_syntax::hir::HirKind::Class(regex_syntax::hir::Class::Unicode(class)) =
            hir.kind()
        else {
            panic!("{pattern} is not a Unicode class");
        };
        for range in class.ranges() {
            for c in u32::from(range.start())..=u32::from(range.end()) {
                classes[c as usize] |= 1 << bit;
            }
        }
    }
    let mut starts = Vec::new();
    let mut runs = Vec::new();
    for (c, class) in classes.iter().enumerate().skip(128) {
        if runs.last() != Some(class) {
            starts.push(c as u32);
            runs.push(*class);
        }
    }
    let source = format!(
        "/// The classes of each ASCII character.\n\
         pub(crate) static ASCII: [u8; 128] = {:?};\n\
         /// The first code point of each run, from 128 on, ascending.\n\
         pub(crate) static STARTS: [u32; {}] = {:?};\n\
         /// The classes of each run.\n\
         pub(crate) static RUNS: [u8; {}] = {:?};\n",
        &classes[..128],
        starts.len(),
        starts,
        runs.len(),
        runs
    );
    let path = out.join("classes.rs");
    std::fs::write(&path, source).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// The ordinary tokens' bytes, in rank order: ranks 0, 1, … up to the first one without
/// ordinary bytes (the special tokens come after a gap).
fn tokens_of(bpe: &tiktoken_rs::CoreBPE) -> Vec<Vec<u8>> {
    let mut tokens = Vec::new();
    while let Ok(bytes) = bpe.decode_bytes(&[u32::try_from(tokens.len()).expect("fits")]) {
        tokens.push(bytes);
    }
    tokens
}

fn write_table(out: &Path, name: &str, tokens: &[Vec<u8>], expected: usize) {
    assert_eq!(tokens.len(), expected, "{name}: ordinary tokens");
    let mut bytes = Vec::new();
    let mut ends = Vec::with_capacity(tokens.len() * 4);
    for token in tokens {
        bytes.extend_from_slice(token);
        let end = u32::try_from(bytes.len()).expect("under 4 GiB");
        ends.extend_from_slice(&end.to_le_bytes());
    }
    // At most ~40 % full, so a lookup of a missing piece meets an empty slot within a few probes.
    let capacity = (tokens.len() * 2).next_power_of_two();
    let mask = capacity - 1;
    let mut slots = vec![0u32; capacity];
    for (rank, token) in tokens.iter().enumerate() {
        let mut slot = hash::hash(token) as usize & mask;
        while slots[slot] != 0 {
            slot = (slot + 1) & mask;
        }
        slots[slot] = u32::try_from(rank + 1).expect("fits");
    }
    let slots: Vec<u8> = slots.iter().flat_map(|slot| slot.to_le_bytes()).collect();
    for (extension, data) in [("bytes", &bytes), ("ends", &ends), ("slots", &slots)] {
        let path = out.join(format!("{name}.{extension}"));
        std::fs::write(&path, data).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }
}
