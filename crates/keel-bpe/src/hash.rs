//! The hash of a token's bytes that places it in the rank table. Shared by the build script,
//! which lays the table out, and the lookup, which must land on the same slot.

/// A 64-bit hash of `bytes`: FNV-1a, then a final mix so the low bits (the slot) depend on
/// every byte.
pub fn hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^ (h >> 31)
}
