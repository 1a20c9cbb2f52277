//! One encoding's ranks as laid out by the build script: flat little-endian arrays read in
//! place from the binary, so a lookup touches a few cache lines and nothing is built at start.

use crate::hash::hash;

/// A token's rank: its id in the encoding, and its merge priority (lower merges first).
pub type Rank = u32;

/// An encoding's ordinary tokens: their bytes, and a hash table from bytes to rank.
pub struct Table {
    /// Every token's bytes, concatenated in rank order.
    bytes: &'static [u8],
    /// Where each token's bytes end in `bytes`, a little-endian u32 per rank.
    ends: &'static [u8],
    /// Open addressing, linear probing: a little-endian u32 per slot, rank + 1 or 0 (empty).
    slots: &'static [u8],
    /// Slots − 1 (their number is a power of two).
    mask: usize,
}

/// The `index`th little-endian u32 of `words`.
fn word(words: &[u8], index: usize) -> u32 {
    let at = index * 4;
    u32::from_le_bytes([words[at], words[at + 1], words[at + 2], words[at + 3]])
}

impl Table {
    /// A table over the build script's three arrays.
    pub const fn new(bytes: &'static [u8], ends: &'static [u8], slots: &'static [u8]) -> Table {
        Table {
            bytes,
            ends,
            slots,
            mask: slots.len() / 4 - 1,
        }
    }

    /// How many ordinary tokens the encoding has.
    pub fn len(&self) -> usize {
        self.ends.len() / 4
    }

    /// Whether the table holds no token (never, for a built encoding).
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The bytes of the token of `rank`.
    pub fn token(&self, rank: Rank) -> &'static [u8] {
        let rank = rank as usize;
        let start = if rank == 0 {
            0
        } else {
            word(self.ends, rank - 1) as usize
        };
        &self.bytes[start..word(self.ends, rank) as usize]
    }

    /// The rank of the token whose bytes are `piece`, if there is one.
    pub fn rank(&self, piece: &[u8]) -> Option<Rank> {
        let mut slot = hash(piece) as usize & self.mask;
        loop {
            let entry = word(self.slots, slot);
            if entry == 0 {
                return None;
            }
            let rank = entry - 1;
            if self.token(rank) == piece {
                return Some(rank);
            }
            slot = (slot + 1) & self.mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::Bpe;

    #[test]
    fn every_token_is_found_under_its_own_rank() {
        for bpe in [Bpe::cl100k_base(), Bpe::o200k_base()] {
            let table = bpe.table();
            assert!(!table.is_empty());
            for rank in 0..u32::try_from(table.len()).unwrap() {
                assert_eq!(table.rank(table.token(rank)), Some(rank));
            }
        }
    }

    #[test]
    fn every_single_byte_is_a_token_and_unknown_pieces_are_none() {
        for bpe in [Bpe::cl100k_base(), Bpe::o200k_base()] {
            for byte in 0..=255u8 {
                assert!(bpe.table().rank(&[byte]).is_some(), "{byte}");
            }
            assert_eq!(bpe.table().rank(b"zqxj zqxj zqxj zqxj"), None);
            assert_eq!(bpe.table().rank(b""), None);
        }
    }
}
