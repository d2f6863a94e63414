//! Finding and reading the newest valid snapshot.
//!
//! Damage (bad magic or CRC, wrong length, an index that disagrees with the name) makes
//! a snapshot invalid, and readers fall back to the next older one with a warning. Two
//! things stop the search with an error instead: an I/O error (the disk is failing, and
//! an operator must look before the server silently starts from older state) and an
//! intact header of an unknown version (written by a newer zlock; falling back would
//! quietly undo a downgrade's consequences instead of reporting them).

use std::fs::{self, File};
use std::io::{self, BufReader, ErrorKind, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use tracing::{error, warn};

use super::{list, SnapshotVersion, HEADER_LEN, MAGIC, TRAILER_LEN, VERSION_OFFSET};
use crate::error::{Result, StoreError};
use crate::le::{u32_at, u64_at};

/// Chunk size of the validation pass of [`open_latest`].
const READ_CHUNK: usize = 1 << 20;

/// Loads the newest snapshot that validates, as `(index, payload)`. A damaged newer one
/// is skipped with `tracing::warn`. `Ok(None)` when there is no valid snapshot (or no
/// directory); if the log was purged past index 1, opening the WAL with `after_index` 0
/// then fails with a gap, so a lost snapshot cannot go unnoticed.
///
/// # Errors
///
/// [`StoreError::Io`] or [`StoreError::UnsupportedVersion`]; see the module doc.
pub fn load_latest(dir: &Path) -> Result<Option<(u64, Vec<u8>)>> {
    let candidates = list(dir)?;
    for (name_index, path) in candidates.iter().rev() {
        let mut data = match fs::read(path) {
            Ok(data) => data,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(StoreError::io(path, e)),
        };
        let checked = check_header(path, *name_index, &data, data.len() as u64).and_then(|len| {
            let payload = &data[HEADER_LEN..HEADER_LEN + len as usize];
            let trailer = u32_at(&data[HEADER_LEN + len as usize..]);
            check_payload_crc(path, len, crc32c::crc32c(payload), trailer).map(|()| len)
        });
        match checked {
            Ok(len) => {
                data.truncate(HEADER_LEN + len as usize);
                data.drain(..HEADER_LEN);
                return Ok(Some((*name_index, data)));
            }
            Err(e) => skip_or_fail(e)?,
        }
    }
    report_none(&candidates);
    Ok(None)
}

/// Checks a whole snapshot file held in memory (for example one received from another
/// member, stored at `path`) and returns its index and payload.
///
/// # Errors
///
/// [`StoreError::Corrupt`] for any damage, [`StoreError::UnsupportedVersion`] for a newer
/// format.
pub fn check_file<'a>(path: &Path, data: &'a [u8]) -> Result<(u64, &'a [u8])> {
    if data.len() < HEADER_LEN {
        return Err(StoreError::corrupt(path, 0, "snapshot header cut short"));
    }
    let index = u64_at(&data[12..20]);
    let len = check_header(path, index, data, data.len() as u64)?;
    let payload = &data[HEADER_LEN..HEADER_LEN + len as usize];
    let trailer = u32_at(&data[HEADER_LEN + len as usize..]);
    check_payload_crc(path, len, crc32c::crc32c(payload), trailer)?;
    Ok((index, payload))
}

/// Like [`load_latest`], but returns a reader positioned at the payload instead of the
/// payload itself, for states too large to hold twice. The chosen file is checked in full
/// (one streaming CRC pass) before it is returned, so a damaged snapshot is still skipped;
/// the reader checks the CRC again as it goes and fails its last `read` with
/// `ErrorKind::InvalidData` if the file changed in between.
pub fn open_latest(dir: &Path) -> Result<Option<SnapshotReader>> {
    let candidates = list(dir)?;
    for (name_index, path) in candidates.iter().rev() {
        match open_checked(path, *name_index) {
            Ok(Some(reader)) => return Ok(Some(reader)),
            Ok(None) => continue,
            Err(e) => skip_or_fail(e)?,
        }
    }
    report_none(&candidates);
    Ok(None)
}

/// The payload of one validated snapshot, read as a stream.
#[derive(Debug)]
pub struct SnapshotReader {
    index: u64,
    payload_len: u64,
    path: PathBuf,
    inner: BufReader<File>,
    remaining: u64,
    crc: u32,
    /// Set once the trailer has been read and compared.
    verified: bool,
}

impl SnapshotReader {
    /// The log index the snapshot includes.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Length of the whole payload in bytes.
    pub fn payload_len(&self) -> u64 {
        self.payload_len
    }

    /// The snapshot file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn verify_trailer(&mut self) -> io::Result<()> {
        if self.verified {
            return Ok(());
        }
        let mut trailer = [0u8; TRAILER_LEN];
        self.inner.read_exact(&mut trailer)?;
        self.verified = true;
        if u32::from_le_bytes(trailer) != self.crc {
            return Err(io::Error::new(
                ErrorKind::InvalidData,
                format!(
                    "snapshot {} changed while being read: payload checksum mismatch at offset {}",
                    self.path.display(),
                    HEADER_LEN as u64 + self.payload_len
                ),
            ));
        }
        Ok(())
    }
}

impl Read for SnapshotReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.remaining == 0 {
            self.verify_trailer()?;
            return Ok(0);
        }
        let max = buf
            .len()
            .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..max])?;
        if n == 0 && max > 0 {
            return Err(io::Error::new(
                ErrorKind::UnexpectedEof,
                format!("snapshot {} shrank while being read", self.path.display()),
            ));
        }
        self.crc = crc32c::crc32c_append(self.crc, &buf[..n]);
        self.remaining -= n as u64;
        if self.remaining == 0 {
            self.verify_trailer()?;
        }
        Ok(n)
    }
}

/// Validates one snapshot by streaming it and returns a reader at its payload. `None` if
/// the file vanished meanwhile.
fn open_checked(path: &Path, name_index: u64) -> Result<Option<SnapshotReader>> {
    let io_err = |e| StoreError::io(path, e);
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(e)),
    };
    let file_len = file.metadata().map_err(io_err)?.len();
    let mut header = [0u8; HEADER_LEN];
    let got = read_up_to(&mut file, &mut header).map_err(io_err)?;
    let len = check_header(path, name_index, &header[..got], file_len)?;

    let mut crc = 0;
    let mut remaining = len;
    let mut chunk = vec![0u8; READ_CHUNK];
    while remaining > 0 {
        let want = chunk
            .len()
            .min(usize::try_from(remaining).unwrap_or(usize::MAX));
        file.read_exact(&mut chunk[..want]).map_err(io_err)?;
        crc = crc32c::crc32c_append(crc, &chunk[..want]);
        remaining -= want as u64;
    }
    let mut trailer = [0u8; TRAILER_LEN];
    file.read_exact(&mut trailer).map_err(io_err)?;
    check_payload_crc(path, len, crc, u32::from_le_bytes(trailer))?;

    file.seek(SeekFrom::Start(HEADER_LEN as u64))
        .map_err(io_err)?;
    Ok(Some(SnapshotReader {
        index: name_index,
        payload_len: len,
        path: path.to_path_buf(),
        inner: BufReader::with_capacity(READ_CHUNK, file),
        remaining: len,
        crc: 0,
        verified: false,
    }))
}

/// Checks the header bytes of a `file_len`-byte snapshot named for `name_index`, and
/// returns its payload length.
pub(super) fn check_header(
    path: &Path,
    name_index: u64,
    header: &[u8],
    file_len: u64,
) -> Result<u64> {
    let corrupt = |offset, reason: String| Err(StoreError::corrupt(path, offset, reason));
    if header.len() < HEADER_LEN {
        return corrupt(
            0,
            format!(
                "snapshot header cut short: {} of {HEADER_LEN} bytes",
                header.len()
            ),
        );
    }
    if header[0..8] != MAGIC {
        return corrupt(0, "bad magic".to_owned());
    }
    if crc32c::crc32c(&header[0..28]) != u32_at(&header[28..32]) {
        return corrupt(0, "snapshot header checksum mismatch".to_owned());
    }
    let version = u32_at(&header[8..12]);
    if version != SnapshotVersion::V1 as u32 {
        return Err(StoreError::UnsupportedVersion {
            file: path.to_path_buf(),
            offset: VERSION_OFFSET,
            version,
            supported: SnapshotVersion::CURRENT as u32,
        });
    }
    let index = u64_at(&header[12..20]);
    if index != name_index {
        return corrupt(
            12,
            format!("header says index {index} but the file name says {name_index}"),
        );
    }
    let len = u64_at(&header[20..28]);
    let expected = len.checked_add((HEADER_LEN + TRAILER_LEN) as u64);
    if expected != Some(file_len) {
        return corrupt(
            file_len.min((HEADER_LEN as u64).saturating_add(len)),
            format!("file is {file_len} bytes but its header describes a {len}-byte payload"),
        );
    }
    Ok(len)
}

pub(super) fn check_payload_crc(path: &Path, len: u64, computed: u32, stored: u32) -> Result<()> {
    if computed != stored {
        return Err(StoreError::corrupt(
            path,
            HEADER_LEN as u64 + len,
            "payload checksum mismatch",
        ));
    }
    Ok(())
}

/// Damage means "try the next older snapshot"; anything else ends the search.
fn skip_or_fail(e: StoreError) -> Result<()> {
    match e {
        StoreError::Corrupt { .. } => {
            warn!(error = %e, "skipping damaged snapshot; falling back to an older one");
            Ok(())
        }
        other => Err(other),
    }
}

fn report_none(candidates: &[(u64, PathBuf)]) {
    if !candidates.is_empty() {
        error!(
            count = candidates.len(),
            "no snapshot file validates; recovering from the log alone"
        );
    }
}

/// Reads until `buf` is full or the file ends, returning how much was read.
fn read_up_to(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
