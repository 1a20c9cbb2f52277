//! Reading the write-ahead log left by a process that did not close the store, to refuse a
//! damaged one instead of losing data silently.
//!
//! SQLite reads a WAL up to its first frame that fails its checksum and ignores every frame
//! after it, committed or not: a damaged frame in the middle silently drops every transaction
//! committed after it. Frames past the end can be there for innocent reasons (a transaction that
//! never committed, pages spilled by one that rolled back, frames of the log's previous use, which
//! carry other salts), but none of those is a *commit* frame of the log's current use: a commit
//! frame with the header's salts after the frames SQLite reads is a transaction it would drop.
//!
//! The format is SQLite's "WAL file format" (<https://www.sqlite.org/fileformat2.html#walformat>):
//! a 32-byte header, then frames of a 24-byte header and one page each.

/// Bytes of the WAL header and of a frame header.
const HEADER: usize = 32;
const FRAME_HEADER: usize = 24;

/// The WAL magic numbers: the low bit says whether checksums read words big-endian.
const MAGIC_LITTLE: u32 = 0x377f_0682;
const MAGIC_BIG: u32 = 0x377f_0683;

/// Checks the log `wal` (the `-wal` file's bytes): `Err` says, in words, why SQLite would drop
/// committed transactions of it. An empty log, or one of only a header, is fine.
pub(crate) fn check(wal: &[u8]) -> Result<(), String> {
    if wal.len() <= HEADER {
        return Ok(());
    }
    let header = &wal[..HEADER];
    let magic = be(header, 0);
    let big_endian = match magic {
        MAGIC_LITTLE => false,
        MAGIC_BIG => true,
        _ => return Err("its header is damaged (unknown magic number)".into()),
    };
    let page_size = be(header, 8) as usize;
    if !(512..=65536).contains(&page_size) || !page_size.is_power_of_two() {
        return Err(format!("its header is damaged (page size {page_size})"));
    }
    let mut sum = checksum((0, 0), &header[..24], big_endian);
    if sum != (be(header, 24), be(header, 28)) {
        return Err("its header fails its checksum".into());
    }
    let salts = (be(header, 16), be(header, 20));
    let frame_size = FRAME_HEADER + page_size;
    let frames = wal[HEADER..].chunks_exact(frame_size);
    let mut readable = true;
    for (index, frame) in frames.enumerate() {
        let is_current = (be(frame, 8), be(frame, 12)) == salts;
        let is_commit = be(frame, 4) != 0;
        if readable {
            sum = checksum(sum, &frame[..8], big_endian);
            sum = checksum(sum, &frame[FRAME_HEADER..], big_endian);
            readable = is_current && sum == (be(frame, 16), be(frame, 20));
            if readable {
                continue;
            }
        }
        if is_current && is_commit {
            return Err(format!(
                "frame {} of it, a committed transaction, comes after a frame that fails its \
                 checksum; SQLite would skip it and every transaction after it",
                index + 1
            ));
        }
    }
    Ok(())
}

/// The big-endian 32-bit word at `at`.
fn be(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// SQLite's WAL checksum of `data` (a multiple of 8 bytes), continuing from `sum`.
fn checksum(sum: (u32, u32), data: &[u8], big_endian: bool) -> (u32, u32) {
    let word = |bytes: &[u8]| {
        let bytes = [bytes[0], bytes[1], bytes[2], bytes[3]];
        if big_endian {
            u32::from_be_bytes(bytes)
        } else {
            u32::from_le_bytes(bytes)
        }
    };
    let (mut s0, mut s1) = sum;
    for pair in data.chunks_exact(8) {
        s0 = s0.wrapping_add(word(&pair[..4])).wrapping_add(s1);
        s1 = s1.wrapping_add(word(&pair[4..])).wrapping_add(s0);
    }
    (s0, s1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    /// The bytes of the log of a database with three committed transactions, as a process that
    /// crashed leaves it (copied while the connection is open), and the page size.
    fn crashed_log() -> (Vec<u8>, usize) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;
             CREATE TABLE t (id INTEGER PRIMARY KEY, text TEXT);
             INSERT INTO t VALUES (1, 'one');
             INSERT INTO t VALUES (2, 'two');",
        )
        .unwrap();
        let log = std::fs::read(dir.path().join("t.db-wal")).unwrap();
        let page_size: i64 = conn
            .query_row("PRAGMA page_size", [], |row| row.get(0))
            .unwrap();
        (log, usize::try_from(page_size).unwrap())
    }

    #[test]
    fn a_whole_log_and_an_empty_one_pass() {
        let (log, _) = crashed_log();
        assert!(log.len() > HEADER, "the rows are in the log");
        assert_eq!(check(&log), Ok(()));
        assert_eq!(check(&[]), Ok(()));
    }

    #[test]
    fn a_damaged_frame_before_a_commit_is_refused() {
        let (mut log, page_size) = crashed_log();
        // A byte in the page of the first frame: every later transaction would be dropped.
        log[HEADER + FRAME_HEADER + page_size / 2] ^= 0x40;
        let err = check(&log).unwrap_err();
        assert!(err.contains("fails its checksum"), "{err}");
    }

    #[test]
    fn an_unfinished_tail_is_not_damage() {
        let (mut log, page_size) = crashed_log();
        let frame = FRAME_HEADER + page_size;
        let frames = (log.len() - HEADER) / frame;
        // The last frame commits; damaging it loses only that transaction, like a torn last
        // write, so cut it off instead and append a frame that never committed.
        log.truncate(HEADER + (frames - 1) * frame);
        let mut uncommitted = log[HEADER..HEADER + frame].to_vec();
        uncommitted[4..8].copy_from_slice(&[0; 4]);
        uncommitted[FRAME_HEADER] ^= 1;
        log.extend(uncommitted);
        assert_eq!(check(&log), Ok(()));
    }

    #[test]
    fn a_damaged_header_is_refused() {
        let (mut log, _) = crashed_log();
        log[20] ^= 1;
        assert!(check(&log).unwrap_err().contains("header"));
    }
}
