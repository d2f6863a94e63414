//! Small state files: one opaque payload each, replaced atomically, for state that must
//! survive a restart exactly as last stored and is too small for the log, such as Raft's
//! vote (which must be durable before the node answers a vote request: forgetting it
//! could let the node vote twice in one term) and its committed index.
//!
//! # On-disk format (version 1)
//!
//! A meta file is `<dir>/<name>`, where the caller picks the name (`vote`, `committed`);
//! while a new payload is being written it is `<dir>/<name>.tmp`. All integers are
//! **little-endian**:
//!
//! ```text
//! offset  size  field
//! ------  ----  -----------------------------------------------------------------
//!      0     8  magic, the ASCII bytes "ZLOCKMET" (never changes)
//!      8     4  u32 format version (1; see MetaVersion)
//!     12     4  u32 payload length N
//!     16     N  payload: opaque to this crate (the server's serialized vote, say)
//!   16+N     4  u32 CRC32C (Castagnoli) of bytes 0..16+N
//! ```
//!
//! The file is exactly `20 + N` bytes; anything else is damage.
//!
//! # Invariants
//!
//! - A file named `<name>` is complete: [`MetaFile::store`] writes the temp file,
//!   `fdatasync`s it, renames it over `<name>` and fsyncs the directory, so a crash
//!   leaves either the old payload or the new one, never a mix. A `<name>.tmp` is the
//!   remains of a store a crash interrupted (whose caller never saw `Ok`): it is ignored,
//!   and deleted by [`MetaFile::open`].
//! - Damage is never read as "nothing stored". A file that is cut short, has the wrong
//!   length, or fails its CRC is [`StoreError::Corrupt`], naming the file: reading a
//!   damaged vote as no vote could let the node vote twice in one term. Only a missing
//!   file means "nothing stored yet".
//! - Single writer: one `MetaFile` per file at a time.

#[cfg(test)]
mod tests;

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use tracing::warn;

use crate::error::{Result, StoreError};
use crate::fsutil::{ensure_dir, fsync_dir, remove_file};
use crate::le::u32_at;

const MAGIC: [u8; 8] = *b"ZLOCKMET";
const TEMP_SUFFIX: &str = ".tmp";
/// Magic (8) + version (4) + payload length (4).
const HEADER_LEN: usize = 16;
/// The CRC after the payload.
const TRAILER_LEN: usize = 4;
const VERSION_OFFSET: u64 = 8;
const LENGTH_OFFSET: u64 = 12;
/// The largest payload the `u32` length field can describe.
const MAX_PAYLOAD: usize = u32::MAX as usize;

/// The meta file format versions, one comment each. Bump on any change to the bytes on
/// disk (the envelope; the payload's own format is the caller's business).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum MetaVersion {
    /// zlock 0.1: 16-byte header (magic, version, length), payload, CRC32C of both.
    V1 = 1,
}

impl MetaVersion {
    /// The version this build writes.
    pub const CURRENT: MetaVersion = MetaVersion::V1;

    fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(MetaVersion::V1),
            _ => None,
        }
    }
}

/// One small state file, replaced atomically by each [`MetaFile::store`].
#[derive(Debug)]
pub struct MetaFile {
    dir: PathBuf,
    path: PathBuf,
    temp: PathBuf,
}

impl MetaFile {
    /// Opens the meta file `name` in `dir`, creating the directory if needed, and deletes
    /// a `<name>.tmp` left by a store a crash interrupted. Reads nothing: see
    /// [`MetaFile::load`].
    ///
    /// # Errors
    ///
    /// [`StoreError::Io`] if `name` is not a plain file name (empty, `.`, `..`, or with a
    /// `/` in it; the error has kind `InvalidInput`), or if the directory cannot be
    /// created or the temp file not deleted.
    pub fn open(dir: &Path, name: &str) -> Result<MetaFile> {
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            return Err(StoreError::io(
                dir.join(name),
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a meta file name must be a plain file name",
                ),
            ));
        }
        ensure_dir(dir)?;
        let path = dir.join(name);
        let temp = dir.join(format!("{name}{TEMP_SUFFIX}"));
        if temp.exists() {
            warn!(file = %temp.display(), "deleting meta temp file left by an interrupted write");
            // Not fsynced: if the deletion is lost in a crash, the next open repeats it.
            remove_file(&temp)?;
        }
        Ok(MetaFile {
            dir: dir.to_path_buf(),
            path,
            temp,
        })
    }

    /// The payload last stored, or `None` if none was ever stored (the file does not
    /// exist).
    ///
    /// # Errors
    ///
    /// - [`StoreError::Corrupt`], naming the file and offset, if the file is cut short,
    ///   has the wrong length or fails its CRC. Never read as `None`: startup must stop.
    /// - [`StoreError::UnsupportedVersion`] for a file of a newer format.
    /// - [`StoreError::Io`] if the file exists but cannot be read.
    pub fn load(&self) -> Result<Option<Vec<u8>>> {
        let data = match fs::read(&self.path) {
            Ok(data) => data,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io(&self.path, e)),
        };
        decode(&self.path, &data).map(Some)
    }

    /// Replaces the stored payload with `payload`, durably: when this returns `Ok`, a
    /// crash and [`MetaFile::load`] give `payload`. A crash before then leaves the old
    /// payload or the new one.
    ///
    /// # Errors
    ///
    /// [`StoreError::PayloadTooLarge`] above `u32::MAX` bytes (nothing is written).
    /// [`StoreError::Io`] if the temp file cannot be written, synced or renamed (the old
    /// payload stays), or the directory cannot be fsynced (either payload may be found
    /// after a crash; treat it as fatal, like any storage error).
    pub fn store(&mut self, payload: &[u8]) -> Result<()> {
        if payload.len() > MAX_PAYLOAD {
            return Err(StoreError::PayloadTooLarge {
                len: payload.len(),
                max: MAX_PAYLOAD,
            });
        }
        if let Err(e) = self.write_temp(&encode(payload)) {
            // Best effort: a temp file left here is ignored, and deleted by the next open.
            let _ = fs::remove_file(&self.temp);
            return Err(e);
        }
        fs::rename(&self.temp, &self.path).map_err(|e| StoreError::io(&self.path, e))?;
        fsync_dir(&self.dir)
    }

    /// The path of the file holding the payload.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn write_temp(&self, bytes: &[u8]) -> Result<()> {
        let io_err = |e| StoreError::io(&self.temp, e);
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&self.temp)
            .map_err(io_err)?;
        file.write_all(bytes).map_err(io_err)?;
        file.sync_data().map_err(io_err)
    }
}

/// The whole file for `payload`, whose length the caller has checked.
fn encode(payload: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER_LEN + payload.len() + TRAILER_LEN);
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&(MetaVersion::CURRENT as u32).to_le_bytes());
    bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    bytes.extend_from_slice(payload);
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

/// Checks a whole meta file and returns its payload. The version is checked before the
/// length and the CRC, because a newer version may lay those out differently.
fn decode(path: &Path, data: &[u8]) -> Result<Vec<u8>> {
    if data.len() < VERSION_OFFSET as usize + 4 {
        return Err(StoreError::corrupt(
            path,
            0,
            format!(
                "meta file cut short: {} bytes, fewer than its {HEADER_LEN}-byte header",
                data.len()
            ),
        ));
    }
    if data[0..8] != MAGIC {
        return Err(StoreError::corrupt(
            path,
            0,
            "bad magic: not a zlock meta file",
        ));
    }
    let version = u32_at(&data[8..12]);
    if MetaVersion::from_u32(version).is_none() {
        return Err(StoreError::UnsupportedVersion {
            file: path.to_path_buf(),
            offset: VERSION_OFFSET,
            version,
            supported: MetaVersion::CURRENT as u32,
        });
    }
    if data.len() < HEADER_LEN + TRAILER_LEN {
        return Err(StoreError::corrupt(
            path,
            0,
            format!(
                "meta file cut short: {} bytes, fewer than the {} of an empty payload",
                data.len(),
                HEADER_LEN + TRAILER_LEN
            ),
        ));
    }
    let len = u32_at(&data[12..16]) as usize;
    let expected = (HEADER_LEN + TRAILER_LEN) as u64 + len as u64;
    if data.len() as u64 != expected {
        return Err(StoreError::corrupt(
            path,
            LENGTH_OFFSET,
            format!(
                "length field says a {len}-byte payload, so {expected} bytes, but the file \
                 has {} (cut short or damaged)",
                data.len()
            ),
        ));
    }
    let crc_at = HEADER_LEN + len;
    if crc32c::crc32c(&data[..crc_at]) != u32_at(&data[crc_at..]) {
        return Err(StoreError::corrupt(
            path,
            crc_at as u64,
            "meta file checksum mismatch",
        ));
    }
    Ok(data[HEADER_LEN..crc_at].to_vec())
}
