//! Byte-pair merging, counted: how many tokens a pre-tokenized piece becomes. The rule is
//! tiktoken's: start from single bytes and merge, again and again, the adjacent pair whose
//! joined bytes are the token of lowest rank (the leftmost of equals), until no adjacent pair
//! joins into a token.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::table::{Rank, Table};

/// Pieces shorter than this are merged by scanning a small array on the stack; longer ones
/// with a heap, so a hostile 1 MB run of letters costs n log n lookups, not n².
const LONG: usize = 128;

/// No pair here joins into a token.
const NONE: Rank = Rank::MAX;

/// How many tokens `piece` (at least two bytes, not itself a token) merges into.
pub fn count(table: &Table, piece: &[u8]) -> usize {
    if piece.len() < LONG {
        count_short(table, piece)
    } else {
        count_long(table, piece)
    }
}

/// The scan: `parts[i]` is where part `i` starts and the rank of joining it with part `i + 1`.
fn count_short(table: &Table, piece: &[u8]) -> usize {
    let mut parts = [(0usize, NONE); LONG + 1];
    let mut len = piece.len() + 1; // one part per byte, and the end
    for (i, part) in parts.iter_mut().enumerate().take(len) {
        part.0 = i;
    }
    // The rank of joining part `i` with part `i + 1`: their bytes run to where part `i + 2` starts.
    let joined = |parts: &[(usize, Rank)], i: usize| match parts.get(i + 2) {
        Some(&(end, _)) => table.rank(&piece[parts[i].0..end]).unwrap_or(NONE),
        None => NONE,
    };
    for i in 0..len - 1 {
        parts[i].1 = joined(&parts[..len], i);
    }
    loop {
        let mut best = (NONE, 0);
        for (i, &(_, rank)) in parts[..len - 1].iter().enumerate() {
            if rank < best.0 {
                best = (rank, i);
            }
        }
        if best.0 == NONE {
            return len - 1;
        }
        let i = best.1;
        parts.copy_within(i + 2..len, i + 1);
        len -= 1;
        parts[i].1 = joined(&parts[..len], i);
        if i > 0 {
            parts[i - 1].1 = joined(&parts[..len], i - 1);
        }
    }
}

/// The heap: live parts form a linked list by start; each candidate join is in the heap as
/// (rank, start of its left part), and one found stale when popped (a part of it was merged
/// away since) is skipped. A pair's rank names its bytes, so an entry whose left part is alive
/// and still joins its right neighbour into a token of that rank is current.
fn count_long(table: &Table, piece: &[u8]) -> usize {
    let n = piece.len();
    // next[i]: where the part after the one starting at i starts (n at the end).
    let mut next: Vec<usize> = (1..=n).collect();
    // prev[i]: where the part before the one starting at i starts (none for the first).
    let mut prev: Vec<Option<usize>> = (0..n).map(|i| i.checked_sub(1)).collect();
    let mut alive = vec![true; n];
    let joined = |next: &[usize], start: usize| -> Option<Rank> {
        let middle = next[start];
        if middle == n {
            return None;
        }
        table.rank(&piece[start..next[middle]])
    };
    let mut heap: BinaryHeap<Reverse<(Rank, usize)>> = (0..n - 1)
        .filter_map(|i| Some(Reverse((table.rank(&piece[i..i + 2])?, i))))
        .collect();
    let mut parts = n;
    while let Some(Reverse((rank, start))) = heap.pop() {
        if !alive[start] || joined(&next, start) != Some(rank) {
            continue;
        }
        let middle = next[start];
        alive[middle] = false;
        next[start] = next[middle];
        if next[start] < n {
            prev[next[start]] = Some(start);
        }
        parts -= 1;
        if let Some(rank) = joined(&next, start) {
            heap.push(Reverse((rank, start)));
        }
        if let Some(before) = prev[start]
            && let Some(rank) = joined(&next, before)
        {
            heap.push(Reverse((rank, before)));
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Bpe;

    #[test]
    fn the_scan_and_the_heap_agree() {
        let table = Bpe::cl100k_base().table();
        let texts: [&[u8]; 5] = [
            b"zqxjzqxjzqxj",
            b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            b"supercalifragilisticexpialidocious",
            "\u{1F600}\u{1F600}\u{00e9}t\u{00e9}".as_bytes(),
            b"0123456789abcdefABCDEF++--==",
        ];
        for text in texts {
            assert_eq!(
                count_short(table, text),
                count_long(table, text),
                "{text:?}"
            );
        }
    }
}
