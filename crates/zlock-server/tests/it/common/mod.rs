//! Helpers shared by the robustness test modules (each uses a different part).

pub mod http;
pub mod rawclient;

/// A Txn but for its time, which a Raft leader stamps again
/// (`commit::raft::peer::write_as_leader`): what proposals and applied Txns are compared by.
pub fn but_time(t: &zlock_core::Txn) -> (zlock_core::Origin, zlock_core::TxnBody) {
    (t.origin, t.body.clone())
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
