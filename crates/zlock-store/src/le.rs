//! Little-endian integer reads from byte slices whose length the caller has checked.

/// The first 4 bytes of `b` as a little-endian `u32`.
pub(crate) fn u32_at(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}

/// The first 8 bytes of `b` as a little-endian `u64`.
pub(crate) fn u64_at(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}
