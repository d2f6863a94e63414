//! Reading ZooKeeper's transaction log files (`FileTxnLog`).
//!
//! ```text
//! int magic "ZKLG" | int version (2) | long dbid            the file header, 16 bytes
//! ( long Adler-32 of the entry | int length N | N bytes entry | byte 'B' )*
//! zeros                                                     preallocated space
//! entry = TxnHeader | txn record | [TxnDigest]              see super::txn
//! ```
//!
//! Where a file ends is decided as ZooKeeper's `FileTxnIterator.next` decides it: a
//! length of 0 (the preallocated zeros), an entry cut short by the end of the file, or
//! an entry not followed by 'B' (a write torn by a crash) ends the file, and reading
//! goes on with the next file. A whole entry whose checksum fails is damage ZooKeeper
//! refuses to start on: an error naming the file and the entry's offset.

use std::path::Path;

use zlock_proto::jute::Reader;

use super::error::ImportError;
use super::txn::{self, Header, ZkTxn};

/// "ZKLG".
const LOG_MAGIC: i32 = 0x5a4b_4c47;
const HEADER_LEN: usize = 16;
/// ZooKeeper's end-of-record byte.
const END_OF_RECORD: u8 = b'B';

/// How a file's entries ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// At the end of the file or at the preallocated zeros.
    Clean,
    /// At a torn entry starting at this offset (bytes after it are ignored).
    Torn { offset: u64 },
}

/// Calls `each` with every entry of the log in `bytes` (read from `path`), in order,
/// with its offset. Returns how the entries ended.
pub(crate) fn entries(
    path: &Path,
    bytes: &[u8],
    each: &mut dyn FnMut(u64, Header, ZkTxn) -> Result<(), ImportError>,
) -> Result<End, ImportError> {
    let corrupt = |offset: usize, what: String| ImportError::Corrupt {
        path: path.to_owned(),
        offset: offset as u64,
        what,
    };
    if bytes.len() < HEADER_LEN {
        // A log whose header was never completely written holds no entry.
        return Ok(if bytes.iter().all(|b| *b == 0) {
            End::Clean
        } else {
            End::Torn { offset: 0 }
        });
    }
    let magic = i32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    if magic != LOG_MAGIC {
        return Err(corrupt(
            0,
            format!("not a ZooKeeper transaction log (magic {magic:#x})"),
        ));
    }
    let mut at = HEADER_LEN;
    loop {
        let start = at;
        let Some(head) = bytes.get(at..at + 12) else {
            return Ok(end_at(bytes, start));
        };
        let crc = i64::from_be_bytes(head[..8].try_into().unwrap_or_default());
        let len = i32::from_be_bytes(head[8..12].try_into().unwrap_or_default());
        if len == 0 {
            return Ok(end_at(bytes, start));
        }
        let Ok(len) = usize::try_from(len) else {
            return Err(corrupt(start, format!("entry length {len}")));
        };
        let body_at = at + 12;
        let Some(body) = bytes.get(body_at..body_at + len) else {
            return Ok(End::Torn {
                offset: start as u64,
            });
        };
        if bytes.get(body_at + len) != Some(&END_OF_RECORD) {
            return Ok(End::Torn {
                offset: start as u64,
            });
        }
        let computed = adler2::adler32_slice(body);
        if crc != i64::from(computed) {
            return Err(corrupt(
                start,
                format!(
                    "entry checksum mismatch (stored {crc:#x}, computed {computed:#x}); \
                     ZooKeeper would not start on this log either"
                ),
            ));
        }
        let mut r = Reader::new(body);
        let decoded = Header::decode(&mut r)
            .and_then(|h| txn::decode(h.kind, h.client_id, &mut r).map(|t| (h, t)));
        match decoded {
            Ok((h, Some(t))) => each(start as u64, h, t)?,
            Ok((h, None)) => {
                return Err(corrupt(
                    start,
                    format!("transaction of unknown type {}", h.kind),
                ))
            }
            Err(e) => return Err(corrupt(start, format!("entry does not decode: {e}"))),
        }
        at = body_at + len + 1;
    }
}

/// The entries stopped at `offset` short of a whole entry head: clean if only zeros
/// follow.
fn end_at(bytes: &[u8], offset: usize) -> End {
    match bytes[offset.min(bytes.len())..].iter().all(|b| *b == 0) {
        true => End::Clean,
        false => End::Torn {
            offset: offset as u64,
        },
    }
}
