//! Whole-state snapshots: one self-checking file per snapshot, written atomically.
//!
//! # On-disk format (version 1)
//!
//! A snapshot directory holds files named `snapshot.<index>`, where `<index>` is the log
//! index the snapshot includes (every record up to and including it is applied) as 20
//! zero-padded decimal digits, so name order is age order. A snapshot being written is
//! `snapshot.<index>.tmp` until it is complete. Other files are ignored. All integers
//! are **little-endian**:
//!
//! ```text
//! offset  size  field
//! ------  ----  -----------------------------------------------------------------
//!      0     8  magic, the ASCII bytes "ZLOCKSNP" (never changes)
//!      8     4  u32 format version (1; see SnapshotVersion)
//!     12     8  u64 index: equals the name
//!     20     8  u64 payload length N
//!     28     4  u32 CRC32C (Castagnoli) of bytes 0..28
//!     32     N  payload: opaque to this crate (the server's serialized state)
//!   32+N     4  u32 CRC32C of the payload
//! ```
//!
//! The file is exactly `36 + N` bytes; anything else is damage.
//!
//! # Invariants
//!
//! - A file named `snapshot.<index>` is complete: it is written under the temp name,
//!   fsynced, renamed, and the directory fsynced. A crash leaves at worst a `.tmp` file,
//!   which readers ignore and the next [`write()`] deletes.
//! - The newest `keep` snapshots (by index) are kept; older ones are deleted after a new
//!   one is durable. Keeping more than one lets [`load_latest`] fall back when the newest
//!   turns out damaged; the WAL must then still hold the records after the older one, so
//!   purge the WAL only through the *oldest* kept snapshot (see [`list`]).
//! - Single writer: one [`write()`] per directory at a time (it deletes stray temp files).
//!   Readers may run at any time.

mod read;
#[cfg(test)]
mod tests;

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use tracing::warn;

pub use read::{check_file, load_latest, open_latest, SnapshotReader};

use crate::error::{Result, StoreError};
use crate::fsutil::{ensure_dir, fsync_dir, indexed_name, list_indexed, remove_file};

const PREFIX: &str = "snapshot.";
const TEMP_SUFFIX: &str = ".tmp";
const MAGIC: [u8; 8] = *b"ZLOCKSNP";
const HEADER_LEN: usize = 32;
const TRAILER_LEN: usize = 4;
const VERSION_OFFSET: u64 = 8;
/// Writes reach the file in chunks of this size; the payload of a large tree is
/// produced by many small writes.
const WRITE_BUFFER: usize = 1 << 20;

/// The snapshot format versions, one comment each. Bump on any change to the bytes on
/// disk (the envelope; the payload's own format is the server's business).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum SnapshotVersion {
    /// zlock 0.1: 32-byte header with its own CRC32C, payload, CRC32C trailer.
    V1 = 1,
}

impl SnapshotVersion {
    /// The version this build writes.
    pub const CURRENT: SnapshotVersion = SnapshotVersion::V1;
}

/// Writes the snapshot of `index` atomically and keeps only the newest `keep` snapshots
/// (at least this one, whatever `keep` says). Returns the path of the new file. Writing
/// the same index again replaces that snapshot.
///
/// # Errors
///
/// [`StoreError::Io`] if the temp file cannot be written, fsynced or renamed; no
/// `snapshot.<index>` file is created or changed then. Failing to delete an old snapshot
/// is only logged: the new one is durable by then and an old file costs only space.
pub fn write(dir: &Path, index: u64, payload: &[u8], keep: usize) -> Result<PathBuf> {
    write_with(dir, index, keep, |w| w.write_all(payload))
}

/// Like [`write()`], but the payload is produced by `fill` writing into the snapshot, so a
/// large state never has to exist as one buffer. Writes are buffered; `fill` may make
/// many small ones. An error from `fill` (wrap your own with `io::Error::other`) abandons
/// the snapshot.
pub fn write_with(
    dir: &Path,
    index: u64,
    keep: usize,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<PathBuf> {
    ensure_dir(dir)?;
    remove_stale_temps(dir)?;
    let name = indexed_name(PREFIX, index);
    let final_path = dir.join(&name);
    let temp_path = dir.join(format!("{name}{TEMP_SUFFIX}"));

    if let Err(e) = write_temp(&temp_path, index, fill) {
        // Best effort: a temp file left here is harmless and deleted by the next write.
        let _ = fs::remove_file(&temp_path);
        return Err(e);
    }
    fs::rename(&temp_path, &final_path).map_err(|e| StoreError::io(&final_path, e))?;
    fsync_dir(dir)?;
    retain_newest(dir, keep.max(1), index)?;
    Ok(final_path)
}

/// Indexes and paths of the snapshot files in `dir`, oldest first, without validating
/// them. A missing directory has none.
pub fn list(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    list_indexed(dir, PREFIX)
}

fn write_temp(
    path: &Path,
    index: u64,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<()> {
    let io_err = |e| StoreError::io(path, e);
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(io_err)?;
    // The length is not known before `fill` has run: reserve the header and fill it in
    // at the end. The file is invisible under its temp name until then anyway.
    file.write_all(&[0u8; HEADER_LEN]).map_err(io_err)?;
    let mut writer = CrcWriter {
        inner: BufWriter::with_capacity(WRITE_BUFFER, file),
        crc: 0,
        len: 0,
    };
    fill(&mut writer).map_err(io_err)?;
    let CrcWriter { inner, crc, len } = writer;
    let mut file = inner.into_inner().map_err(|e| io_err(e.into_error()))?;
    file.write_all(&crc.to_le_bytes()).map_err(io_err)?;
    file.seek(SeekFrom::Start(0)).map_err(io_err)?;
    file.write_all(&encode_header(index, len)).map_err(io_err)?;
    file.sync_all().map_err(io_err)
}

/// Counts and checksums the payload on its way to the file.
struct CrcWriter {
    inner: BufWriter<File>,
    crc: u32,
    len: u64,
}

impl Write for CrcWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc = crc32c::crc32c_append(self.crc, &buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn encode_header(index: u64, payload_len: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&(SnapshotVersion::CURRENT as u32).to_le_bytes());
    h[12..20].copy_from_slice(&index.to_le_bytes());
    h[20..28].copy_from_slice(&payload_len.to_le_bytes());
    let crc = crc32c::crc32c(&h[0..28]);
    h[28..32].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Deletes `snapshot.*.tmp` files: the remains of writes a crash interrupted.
fn remove_stale_temps(dir: &Path) -> Result<()> {
    let entries = fs::read_dir(dir).map_err(|e| StoreError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| StoreError::io(dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with(PREFIX) && name.ends_with(TEMP_SUFFIX) {
            let path = entry.path();
            warn!(file = %path.display(), "deleting snapshot temp file left by an interrupted write");
            if let Err(e) = remove_file(&path) {
                warn!(error = %e, "could not delete stale snapshot temp file");
            }
        }
    }
    Ok(())
}

/// Deletes all snapshots but the `keep` newest, never the one just written.
fn retain_newest(dir: &Path, keep: usize, just_written: u64) -> Result<()> {
    let all = list_indexed(dir, PREFIX)?;
    let excess = all.len().saturating_sub(keep);
    let mut removed = false;
    for (index, path) in all.into_iter().take(excess) {
        if index == just_written {
            continue;
        }
        match remove_file(&path) {
            Ok(()) => removed = true,
            Err(e) => warn!(error = %e, "could not delete old snapshot; it is retried next time"),
        }
    }
    if removed {
        fsync_dir(dir)?;
    }
    Ok(())
}
