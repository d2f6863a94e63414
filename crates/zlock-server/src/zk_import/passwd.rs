//! The password ZooKeeper gives a session, which its clients present to resume it.
//!
//! ZooKeeper keeps no password in its files: it derives it from the session id
//! (`ZooKeeperServer.generatePasswd`: 16 bytes of `java.util.Random` seeded with
//! `id ^ 0xB3415C00`). zlock stores a session's password, so the import computes the
//! same bytes; a ZooKeeper client that reconnects to zlock with its session id and
//! password then resumes its session (and keeps its ephemeral nodes).

/// ZooKeeper's `superSecret`.
const SUPER_SECRET: i64 = 0xB341_5C00;
/// `java.util.Random`'s multiplier, addend and 48-bit state.
const MULTIPLIER: u64 = 0x5_DEEC_E66D;
const ADDEND: u64 = 0xB;
const MASK: u64 = (1 << 48) - 1;

/// The 16-byte password ZooKeeper gave session `id`.
pub(crate) fn session_passwd(id: i64) -> Vec<u8> {
    let mut seed = ((id ^ SUPER_SECRET) as u64 ^ MULTIPLIER) & MASK;
    let mut out = Vec::with_capacity(16);
    while out.len() < 16 {
        // Random.nextInt(): the top 32 of the 48 bits, after one step.
        seed = (seed.wrapping_mul(MULTIPLIER).wrapping_add(ADDEND)) & MASK;
        let mut rnd = (seed >> 16) as u32;
        // Random.nextBytes: each int gives up to four bytes, low byte first.
        for _ in 0..4.min(16 - out.len()) {
            out.push(rnd as u8);
            rnd >>= 8;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `new java.util.Random(42).nextBytes(new byte[16])`, as Java 17 prints it; the
    /// seed 42 is the id `42 ^ 0xB3415C00`.
    #[test]
    fn matches_java_random() {
        let id = 42 ^ SUPER_SECRET;
        let expected: [i8; 16] = [
            53, -99, 65, -70, -9, -118, -2, 13, -31, -69, -25, -82, 40, -64, 69, 12,
        ];
        let expected: Vec<u8> = expected.iter().map(|b| *b as u8).collect();
        assert_eq!(session_passwd(id), expected);
    }
}
