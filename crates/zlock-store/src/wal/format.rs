//! Byte-level encoding of WAL segment headers and records. The layout itself is
//! documented in the parent module; this file is the only code that knows it.

use crate::le::{u32_at, u64_at};

/// First 8 bytes of every segment file. Fixed forever; the format version follows it.
pub(crate) const MAGIC: [u8; 8] = *b"ZLOCKWAL";

/// Segment header: magic (8) + version (4) + first index (8) + header CRC (4).
pub(crate) const HEADER_LEN: usize = 24;

/// Record header: payload length (4) + CRC (4) + index (8).
pub(crate) const RECORD_HEADER_LEN: usize = 16;

/// The largest payload a record's `u32` length field can describe.
pub(crate) const MAX_PAYLOAD: usize = u32::MAX as usize;

/// Offset of the version field, for error messages.
pub(crate) const VERSION_OFFSET: u64 = 8;

/// Offset of the first-index field, for error messages.
pub(crate) const FIRST_INDEX_OFFSET: u64 = 12;

/// The WAL format versions, one comment each. Bump on any change to the bytes on disk
/// and keep reading every older version for as long as it can still be found on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum WalVersion {
    /// zlock 0.1: 24-byte segment header with its own CRC32C; records are
    /// `len u32 | crc32c(index ++ payload) u32 | index u64 | payload`, little-endian.
    /// The last segment may end in zeros after its last record (preallocated space,
    /// added later without a bump: a build that predates it reads the zeros as a torn
    /// tail and cuts them, which loses nothing).
    V1 = 1,
}

impl WalVersion {
    /// The version this build writes.
    pub const CURRENT: WalVersion = WalVersion::V1;

    fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(WalVersion::V1),
            _ => None,
        }
    }
}

/// Why the first bytes of a segment are not a usable header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HeaderProblem {
    /// Fewer than [`HEADER_LEN`] bytes: the file was cut while its header was written.
    Short(usize),
    /// Wrong magic or header CRC: damaged, zero-filled or not a WAL segment at all.
    Damaged(&'static str),
    /// Intact header of a version this build cannot read.
    Version(u32),
}

pub(crate) fn encode_header(first_index: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&(WalVersion::CURRENT as u32).to_le_bytes());
    h[12..20].copy_from_slice(&first_index.to_le_bytes());
    let crc = crc32c::crc32c(&h[0..20]);
    h[20..24].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Validates a segment header and returns the first index it declares.
pub(crate) fn decode_header(bytes: &[u8]) -> Result<u64, HeaderProblem> {
    if bytes.len() < HEADER_LEN {
        return Err(HeaderProblem::Short(bytes.len()));
    }
    if bytes[0..8] != MAGIC {
        return Err(HeaderProblem::Damaged("bad magic"));
    }
    if crc32c::crc32c(&bytes[0..20]) != u32_at(&bytes[20..24]) {
        return Err(HeaderProblem::Damaged("header checksum mismatch"));
    }
    let version = u32_at(&bytes[8..12]);
    if WalVersion::from_u32(version).is_none() {
        return Err(HeaderProblem::Version(version));
    }
    Ok(u64_at(&bytes[12..20]))
}

/// The CRC a record carries: it covers the index bytes and the payload, so a record
/// moved to another position, or with a flipped index, fails the check too.
fn record_crc(index: u64, payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&index.to_le_bytes()), payload)
}

/// Appends one encoded record to `buf`. The caller has checked `payload.len()` against
/// [`MAX_PAYLOAD`].
pub(crate) fn encode_record(buf: &mut Vec<u8>, index: u64, payload: &[u8]) {
    let len = payload.len() as u32;
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(&record_crc(index, payload).to_le_bytes());
    buf.extend_from_slice(&index.to_le_bytes());
    buf.extend_from_slice(payload);
}

/// One record that passed its CRC.
#[derive(Debug)]
pub(crate) struct Record<'a> {
    pub index: u64,
    pub payload: &'a [u8],
    /// Offset just past this record.
    pub end: usize,
}

/// Reads the record starting at `off` in `data`. The error is a human-readable reason;
/// whether it is a torn tail or corruption is for the caller to decide.
pub(crate) fn parse_record(data: &[u8], off: usize) -> Result<Record<'_>, String> {
    let rest = &data[off..];
    if rest.len() < RECORD_HEADER_LEN {
        return Err(format!(
            "record header cut short: {} of {RECORD_HEADER_LEN} bytes present",
            rest.len()
        ));
    }
    let len = u32_at(&rest[0..4]) as usize;
    let crc = u32_at(&rest[4..8]);
    let index = u64_at(&rest[8..16]);
    let available = rest.len() - RECORD_HEADER_LEN;
    if len > available {
        return Err(format!(
            "record claims a {len}-byte payload but only {available} bytes follow"
        ));
    }
    let payload = &rest[RECORD_HEADER_LEN..RECORD_HEADER_LEN + len];
    if record_crc(index, payload) != crc {
        return Err(format!("record checksum mismatch ({len}-byte payload)"));
    }
    Ok(Record {
        index,
        payload,
        end: off + RECORD_HEADER_LEN + len,
    })
}

/// The length of `data` without its trailing zero bytes. In the last segment, a record
/// boundary at or past this offset is the end of the records (see "End of the records"
/// in the parent module). Tests whole blocks first, with a loop that has no early exit
/// and so compiles to wide vector instructions: megabytes of preallocated space cost well
/// under a millisecond.
pub(crate) fn zero_tail_start(data: &[u8]) -> usize {
    const BLOCK: usize = 4096;
    let mut end = data.len();
    while end >= BLOCK && data[end - BLOCK..end].iter().fold(0, |acc, &b| acc | b) == 0 {
        end -= BLOCK;
    }
    data[..end]
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |p| p + 1)
}

/// Looks for any intact record starting after `from` whose index is plausible (at least
/// `min_index`, and no further ahead than the remaining bytes could hold). Used to tell a
/// torn tail (nothing valid follows the damage) from corruption in the middle (something
/// does). The search tries every byte offset because a damaged length field says nothing
/// about where the next record begins. It only runs after damage was found, and it stops
/// before trailing zeros (a record's index is never 0, so no record starts where its index
/// field would be all zeros), so its cost is one pass over the non-zero rest of the
/// segment, with a CRC only for plausible candidates.
pub(crate) fn find_valid_record(data: &[u8], from: usize, min_index: u64) -> Option<(usize, u64)> {
    if data.len() < RECORD_HEADER_LEN {
        return None;
    }
    let max_records = (data.len().saturating_sub(from) / RECORD_HEADER_LEN) as u64;
    let max_index = min_index.saturating_add(max_records);
    // A record at `p` has a non-zero byte in its index field, p+8..p+16.
    let last_start = (data.len() - RECORD_HEADER_LEN).min(zero_tail_start(data).saturating_sub(9));
    (from..=last_start).find_map(|p| {
        let index = u64_at(&data[p + 8..p + 16]);
        if index < min_index || index > max_index {
            return None;
        }
        parse_record(data, p).ok().map(|r| (p, r.index))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_damage() {
        let h = encode_header(42);
        assert_eq!(decode_header(&h), Ok(42));
        assert_eq!(decode_header(&h[..10]), Err(HeaderProblem::Short(10)));
        assert!(matches!(
            decode_header(&[0u8; HEADER_LEN]),
            Err(HeaderProblem::Damaged(_))
        ));
        let mut bad = h;
        bad[14] ^= 1;
        assert!(matches!(
            decode_header(&bad),
            Err(HeaderProblem::Damaged(_))
        ));
        let mut future = h;
        future[8..12].copy_from_slice(&7u32.to_le_bytes());
        let crc = crc32c::crc32c(&future[0..20]);
        future[20..24].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(decode_header(&future), Err(HeaderProblem::Version(7)));
    }

    #[test]
    fn record_layout_is_as_documented() {
        let mut buf = Vec::new();
        encode_record(&mut buf, 0x0102_0304_0506_0708, b"abc");
        assert_eq!(buf.len(), RECORD_HEADER_LEN + 3);
        assert_eq!(&buf[0..4], &3u32.to_le_bytes());
        assert_eq!(&buf[8..16], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(&buf[16..], b"abc");
        let expected_crc = crc32c::crc32c(&[&buf[8..16], b"abc".as_slice()].concat());
        assert_eq!(&buf[4..8], &expected_crc.to_le_bytes());
        let r = parse_record(&buf, 0).unwrap();
        assert_eq!(
            (r.index, r.payload, r.end),
            (0x0102_0304_0506_0708, &b"abc"[..], buf.len())
        );
    }

    #[test]
    fn finds_a_valid_record_after_damage() {
        let mut buf = vec![0xAA; 5];
        encode_record(&mut buf, 9, b"xyz");
        assert_eq!(find_valid_record(&buf, 0, 9), Some((5, 9)));
        assert_eq!(find_valid_record(&buf, 0, 10), None);
        assert_eq!(find_valid_record(&buf, 6, 9), None);
        assert_eq!(find_valid_record(&[0u8; 64], 0, 1), None);

        // Trailing zeros do not hide a record whose payload runs into them.
        let mut padded = vec![0xAA; 5];
        encode_record(&mut padded, 9, b"xy\0\0\0");
        padded.resize(padded.len() + 10_000, 0);
        assert_eq!(find_valid_record(&padded, 0, 9), Some((5, 9)));
        assert_eq!(find_valid_record(&padded, 6, 9), None);
    }

    #[test]
    fn zero_tail_start_is_just_past_the_last_non_zero_byte() {
        assert_eq!(zero_tail_start(&[]), 0);
        assert_eq!(zero_tail_start(&[0; 10_000]), 0);
        let mut data = vec![0u8; 10_000];
        for at in [0, 4095, 4096, 5903, 5904, 9_999] {
            data.fill(0);
            data[at] = 7;
            assert_eq!(zero_tail_start(&data), at + 1, "non-zero byte at {at}");
        }
    }
}
