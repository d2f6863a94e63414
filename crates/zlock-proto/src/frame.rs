//! Length-prefixed framing: a 4-byte big-endian signed length, then that many bytes.
//!
//! A partial frame is not an error ([`FrameError`] never means "read more"): [`parse`]
//! returns `Ok(None)` until the whole frame is buffered. A negative length or one over
//! the packet limit (ZooKeeper's `jute.maxbuffer`) is [`FrameError::TooLarge`] /
//! [`FrameError::NegativeLength`] and the connection must be closed.

use thiserror::Error;

/// ZooKeeper's default `jute.maxbuffer` (0xfffff bytes).
pub const DEFAULT_MAX_PACKET: usize = 0xfffff;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FrameError {
    #[error("frame length {len} exceeds the packet limit {max}")]
    TooLarge { len: usize, max: usize },
    #[error("negative frame length {0}")]
    NegativeLength(i32),
}

/// Looks for one whole frame at the start of `buf`.
///
/// Returns `Ok(Some((total, body)))` where `total` is how many bytes of `buf` the frame
/// uses (header included) and `body` its payload, or `Ok(None)` if more bytes are needed.
pub fn parse(buf: &[u8], max: usize) -> Result<Option<(usize, &[u8])>, FrameError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if len < 0 {
        return Err(FrameError::NegativeLength(len));
    }
    let len = len as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    if buf.len() < 4 + len {
        return Ok(None);
    }
    Ok(Some((4 + len, &buf[4..4 + len])))
}

/// Wraps `body` in a frame.
pub fn encode(body: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(body.len() as i32).to_be_bytes());
    out.extend_from_slice(body);
}

/// Starts a frame in `out` and returns the offset of its length field, to be fixed by
/// [`finish`] once the body is written. Avoids a copy on the reply path.
pub fn begin(out: &mut Vec<u8>) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0, 0, 0, 0]);
    at
}

/// Writes the length of the frame started at `at`.
pub fn finish(out: &mut [u8], at: usize) {
    let len = (out.len() - at - 4) as i32;
    out[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_then_whole() {
        let mut f = Vec::new();
        encode(b"hello", &mut f);
        for cut in 0..f.len() {
            assert_eq!(parse(&f[..cut], 100), Ok(None));
        }
        assert_eq!(parse(&f, 100), Ok(Some((9, &b"hello"[..]))));
    }

    #[test]
    fn bad_lengths() {
        assert_eq!(
            parse(&[0xff, 0xff, 0xff, 0xff], 10),
            Err(FrameError::NegativeLength(-1))
        );
        assert_eq!(
            parse(&[0, 0, 1, 0], 10),
            Err(FrameError::TooLarge { len: 256, max: 10 })
        );
    }

    #[test]
    fn begin_finish() {
        let mut out = vec![9];
        let at = begin(&mut out);
        out.extend_from_slice(b"abc");
        finish(&mut out, at);
        assert_eq!(out, vec![9, 0, 0, 0, 3, b'a', b'b', b'c']);
    }
}
