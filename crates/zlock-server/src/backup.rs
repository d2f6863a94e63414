//! A backup file: one member's state at one zxid, self-checking, taken while it serves
//! (the AdminServer's `snapshot` command, `zlock snapshot save`) and read back by
//! `zlock snapshot status` (and, to come, `restore`).
//!
//! # Format (version 1)
//!
//! All integers little-endian:
//!
//! ```text
//! offset  size  field
//! ------  ----  -----------------------------------------------------------------
//!      0     8  magic, the ASCII bytes "ZLOCKBAK" (never changes)
//!      8     4  u32 format version (1)
//!     12     8  i64 last zxid: every change up to it is in, none after
//!     20     8  u64 the member's applied log position (its Raft log index, or its
//!               write-ahead log's record number standalone)
//!     28     8  i64 the state's time, ms since the epoch (the last change's Txn time)
//!     36     8  u64 znodes
//!     44     8  u64 sessions
//!     52     4  u32 length S of the source
//!     56     S  the source, UTF-8: which server and ensemble the state comes from
//!   56+S     8  u64 payload length N
//!   64+S     4  u32 CRC32C (Castagnoli) of bytes 0..64+S
//!   68+S     N  payload: the state in the snapshot encoding of `zlock_core::snapshot`
//! 68+S+N     4  u32 CRC32C of the payload
//! ```
//!
//! The file is exactly `72 + S + N` bytes; anything else is damage. The header has its
//! own checksum so that a damaged header is told apart from a damaged payload, and so
//! that `status` can say what a file holds before it reads the payload.

use thiserror::Error;
use zlock_core::snapshot::{Image, SnapshotError};

/// The first bytes of every backup file.
pub const MAGIC: [u8; 8] = *b"ZLOCKBAK";
/// The format this build writes and reads.
pub const VERSION: u32 = 1;
/// The longest source field read (a source is a line of text).
const MAX_SOURCE: u32 = 64 * 1024;

/// What a backup file's header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Every change up to this zxid is in the state, none after it.
    pub zxid: i64,
    /// The member's applied log position when the state was taken.
    pub applied: u64,
    /// The state's time (its last change's), ms since the epoch.
    pub time_ms: i64,
    pub nodes: u64,
    pub sessions: u64,
    /// Which server and ensemble the state comes from, e.g. `member 2 of
    /// 1=127.0.0.1:2888,2=127.0.0.1:2889,3=127.0.0.1:2890` or `standalone`.
    pub source: String,
}

/// Why a file is not a whole backup.
#[derive(Debug, Error)]
pub enum BackupError {
    #[error("not a zlock backup file (it does not start with ZLOCKBAK)")]
    Magic,
    #[error("backup format version {0}: this zlock reads version {VERSION}")]
    Version(u32),
    #[error("the file ends at byte {len}, inside the {part} (truncated)")]
    Truncated { part: &'static str, len: usize },
    #[error("the header's checksum does not match (the header is damaged)")]
    HeaderChecksum,
    #[error("the header says the payload is {said} bytes; the file holds {held} after the header")]
    Length { said: u64, held: u64 },
    #[error("the payload's checksum does not match (the state is damaged)")]
    PayloadChecksum,
    #[error("the source field is {0} bytes, more than any zlock writes (damaged)")]
    Source(u32),
    #[error("the payload's checksum matches, but the state does not decode: {0}")]
    State(#[from] SnapshotError),
}

/// A backup of `image` taken from `source`, in one buffer: its header, and its bytes.
/// The state is encoded straight into the buffer after a header whose payload length
/// and checksum are filled in once it is there (one copy of a large state, not two).
pub fn to_vec(image: &Image, source: &str) -> (Header, Vec<u8>) {
    let header = Header {
        zxid: image.zxid.0,
        applied: image.applied.0,
        time_ms: image.time_ms,
        nodes: image.nodes.len() as u64,
        sessions: image.sessions.len() as u64,
        source: source.to_owned(),
    };
    let mut out = Vec::with_capacity(72 + source.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&header.zxid.to_le_bytes());
    out.extend_from_slice(&header.applied.to_le_bytes());
    out.extend_from_slice(&header.time_ms.to_le_bytes());
    out.extend_from_slice(&header.nodes.to_le_bytes());
    out.extend_from_slice(&header.sessions.to_le_bytes());
    out.extend_from_slice(&(source.len() as u32).to_le_bytes());
    out.extend_from_slice(source.as_bytes());
    let length_at = out.len();
    out.extend_from_slice(&[0; 12]); // payload length, header CRC: filled in below
    let payload_at = out.len();
    // Writing into a Vec cannot fail.
    let _ = zlock_core::snapshot::write_image(image, &mut out);
    let payload_len = (out.len() - payload_at) as u64;
    out[length_at..length_at + 8].copy_from_slice(&payload_len.to_le_bytes());
    let header_crc = crc32c::crc32c(&out[..length_at + 8]);
    out[length_at + 8..payload_at].copy_from_slice(&header_crc.to_le_bytes());
    let payload_crc = crc32c::crc32c(&out[payload_at..]);
    out.extend_from_slice(&payload_crc.to_le_bytes());
    (header, out)
}

/// Reads the header of `bytes` and checks both checksums and the length; the header
/// and the payload (not decoded: see [`decode`]).
pub fn read(bytes: &[u8]) -> Result<(Header, &[u8]), BackupError> {
    // A file that does not start as a backup does is not one, however short.
    let start = &bytes[..bytes.len().min(MAGIC.len())];
    if !MAGIC.starts_with(start) {
        return Err(BackupError::Magic);
    }
    let mut c = Cursor { bytes, at: 0 };
    c.take(MAGIC.len(), "header")?;
    let version = c.u32("header")?;
    if version != VERSION {
        return Err(BackupError::Version(version));
    }
    let zxid = c.u64("header")? as i64;
    let applied = c.u64("header")?;
    let time_ms = c.u64("header")? as i64;
    let nodes = c.u64("header")?;
    let sessions = c.u64("header")?;
    let source_len = c.u32("header")?;
    if source_len > MAX_SOURCE {
        return Err(BackupError::Source(source_len));
    }
    let source = String::from_utf8_lossy(c.take(source_len as usize, "header")?).into_owned();
    let said = c.u64("header")?;
    let head_len = c.at;
    if crc32c::crc32c(&bytes[..head_len]) != c.u32("header")? {
        return Err(BackupError::HeaderChecksum);
    }
    let held = (bytes.len() - c.at) as u64;
    if held != said.saturating_add(4) {
        return Err(BackupError::Length {
            said,
            held: held.saturating_sub(4),
        });
    }
    let payload = c.take(said as usize, "payload")?;
    if crc32c::crc32c(payload) != c.u32("payload checksum")? {
        return Err(BackupError::PayloadChecksum);
    }
    let header = Header {
        zxid,
        applied,
        time_ms,
        nodes,
        sessions,
        source,
    };
    Ok((header, payload))
}

/// Reads a file front to back; running out is [`BackupError::Truncated`] in `part`.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, part: &'static str) -> Result<&'a [u8], BackupError> {
        let len = self.bytes.len();
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= len)
            .ok_or(BackupError::Truncated { part, len })?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u32(&mut self, part: &'static str) -> Result<u32, BackupError> {
        let b = self.take(4, part)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, part: &'static str) -> Result<u64, BackupError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8, part)?);
        Ok(u64::from_le_bytes(a))
    }
}

/// Reads and checks `bytes` and decodes the state, checking that it holds what the
/// header says.
pub fn decode(
    bytes: &[u8],
    config: zlock_core::Config,
) -> Result<(Header, zlock_core::State), BackupError> {
    let (header, payload) = read(bytes)?;
    let state = zlock_core::snapshot::decode(payload, config)?;
    Ok((header, state))
}

#[cfg(test)]
mod tests {
    use super::*;
    use zlock_core::{Config, State};

    fn sample() -> Image {
        let st = State::new(Config::default());
        Image::of(&st)
    }

    #[test]
    fn a_backup_reads_back_and_every_damage_is_named() {
        let (h, bytes) = to_vec(&sample(), "standalone");
        let (read_h, _) = read(&bytes).unwrap();
        assert_eq!(read_h, h);
        let (_, st) = decode(&bytes, Config::default()).unwrap();
        assert_eq!(st.tree.len() as u64, h.nodes);

        assert!(matches!(
            read(&bytes[..5]),
            Err(BackupError::Truncated { .. })
        ));
        assert!(matches!(
            read(&bytes[..bytes.len() - 1]),
            Err(BackupError::Length { .. })
        ));
        let mut b = bytes.clone();
        b[0] = b'X';
        assert!(matches!(read(&b), Err(BackupError::Magic)));
        let mut b = bytes.clone();
        b[8] = 9;
        assert!(matches!(read(&b), Err(BackupError::Version(9))));
        let mut b = bytes.clone();
        b[13] ^= 1;
        assert!(matches!(read(&b), Err(BackupError::HeaderChecksum)));
        let mut b = bytes.clone();
        let n = b.len();
        b[n - 6] ^= 1;
        assert!(matches!(read(&b), Err(BackupError::PayloadChecksum)));
        let mut b = bytes.clone();
        b.push(0);
        assert!(matches!(read(&b), Err(BackupError::Length { .. })));
    }
}
