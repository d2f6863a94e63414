//! Helpers shared by the robustness test binaries (each binary uses a different part).
#![allow(dead_code)]

pub mod rawclient;

/// Copies a directory tree: what a `kill -9` leaves on disk, taken while the writer is
/// still running.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// A test applier's snapshot: its applied (position, Txn) list, each as
/// `u64 position | u32 length | Txn encoding`.
pub fn write_history(
    h: &[(zlock_core::LogIndex, zlock_core::Txn)],
    w: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    for (i, t) in h {
        let mut b = Vec::new();
        t.encode(&mut b);
        w.write_all(&i.0.to_le_bytes())?;
        w.write_all(&(b.len() as u32).to_le_bytes())?;
        w.write_all(&b)?;
    }
    Ok(())
}

/// Reads what [`write_history`] wrote.
pub fn read_history(mut p: &[u8]) -> Result<Vec<(zlock_core::LogIndex, zlock_core::Txn)>, String> {
    let mut h = Vec::new();
    while p.len() >= 12 {
        let i = u64::from_le_bytes(p[..8].try_into().unwrap());
        let n = u32::from_le_bytes(p[8..12].try_into().unwrap()) as usize;
        let t = zlock_core::Txn::decode(&p[12..12 + n]).map_err(|e| e.to_string())?;
        h.push((zlock_core::LogIndex(i), t));
        p = &p[12 + n..];
    }
    Ok(h)
}
