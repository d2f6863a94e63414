//! zlock's on-disk formats: the write-ahead log and snapshots, and their recovery.
//!
//! The store is payload-agnostic: a WAL record and a snapshot carry opaque bytes (the
//! server puts its serialized Txn, or its serialized state, there). What the store owns
//! is durability: every file is self-describing (magic, version), every record and every
//! snapshot is CRC32C-checked, writes are fsynced before they count, and recovery tells
//! a torn tail left by a crash (cut away with a warning) from corruption (startup stops,
//! naming file and offset).
//!
//! Recovery is: [`snapshot::load_latest`] (or [`snapshot::open_latest`]) gives the newest
//! valid snapshot and its index N (0 without one); [`Wal::open`] with `after_index = N`
//! replays every record after it and positions the log for the next append.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use zlock_store::{snapshot, Wal, WalOptions};
//! # let tmp = tempfile::tempdir()?;
//! # let data_dir = tmp.path();
//! let wal_dir = data_dir.join("wal");
//! let snap_dir = data_dir.join("snapshots");
//!
//! // Recovery: the newest valid snapshot, then the log after it.
//! let (snap_index, mut state) = snapshot::load_latest(&snap_dir)?.unwrap_or((0, Vec::new()));
//! let mut wal = Wal::open(&wal_dir, WalOptions::default(), snap_index, |_index, txn| {
//!     state.extend_from_slice(txn); // apply the Txn
//!     Ok(())
//! })?;
//!
//! // Group commit: append everything that queued up, sync once, then apply and reply.
//! let batch = [b"create /a".as_slice(), b"set /a"];
//! for txn in batch {
//!     wal.append(wal.last_index() + 1, txn)?;
//! }
//! wal.sync()?;
//! for txn in batch {
//!     state.extend_from_slice(txn);
//! }
//!
//! // Now and then: snapshot the applied state, then drop the log the oldest kept
//! // snapshot covers.
//! snapshot::write(&snap_dir, wal.last_index(), &state, 2)?;
//! if let Some((oldest, _)) = snapshot::list(&snap_dir)?.first() {
//!     wal.purge_through(*oldest)?;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//!
//! - [`wal`]: segmented write-ahead log: [`Wal`], [`WalOptions`]; byte layout in its
//!   module doc. Besides appending, syncing and purging it can cut its end off
//!   ([`Wal::truncate_from`]), as a Raft log store must. [`wal::read_only::scan`] reads
//!   a log without changing it (for inspection tools), by the same rules as recovery.
//! - [`meta`]: small state files replaced atomically, such as Raft's vote:
//!   [`MetaFile`]; byte layout in its module doc.
//! - [`snapshot`]: atomic whole-state snapshots: [`snapshot::write`],
//!   [`snapshot::write_with`], [`snapshot::load_latest`], [`snapshot::open_latest`];
//!   byte layout in its module doc.
//! - [`error`]: [`StoreError`], the one error type.
//!
//! # Data directory layout
//!
//! The server keeps ZooKeeper's two settings, `dataDir` and `dataLogDir` (which defaults
//! to `dataDir`; the two may be the same directory). Separating them lets the log, which
//! is fsynced on every commit, sit on its own device:
//!
//! ```text
//! <dataLogDir>/wal/log.00000000000000000001         WAL segments, named by first index
//! <dataLogDir>/wal/log.00000000000000123457
//! <dataDir>/snapshots/snapshot.00000000000000123456 snapshots, named by the last index
//! <dataDir>/snapshots/snapshot.00000000000000200000 they include
//! <dataDir>/snapshots/snapshot.00000000000000250000.tmp   a snapshot being written
//! <dataLogDir>/raft/vote                             replicated mode (proposed): MetaFiles
//! <dataLogDir>/raft/committed                        for the vote and committed index
//! ```
//!
//! Every function takes the directory itself (`.../wal`, `.../snapshots`, `.../raft`); the
//! subdirectory names are the server's convention, listed here so there is one place to
//! look them up.
//! Index 0 is never used: a log starts at 1, and "no snapshot" means index 0.
//!
//! # Retention
//!
//! After writing a snapshot at index N while keeping the newest K, the server may call
//! [`Wal::purge_through`] with the index of the *oldest* snapshot kept, so that falling
//! back from a damaged newest snapshot still finds every record it needs.

pub mod error;
mod fsutil;
mod le;
pub mod meta;
pub mod snapshot;
pub mod wal;

pub use error::{Result, StoreError};
pub use meta::{MetaFile, MetaVersion};
pub use snapshot::{SnapshotReader, SnapshotVersion};
pub use wal::{Wal, WalOptions, WalVersion};
