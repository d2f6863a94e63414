//! A peer message on the wire: `u32 length (big-endian) | postcard`.

use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::MAX_FRAME;

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("frame of {0} bytes is larger than the {MAX_FRAME} allowed")]
    TooLarge(usize),
    #[error("frame does not decode: {0}")]
    Decode(#[from] postcard::Error),
    #[error("refused by the peer: {0}")]
    Refused(String),
    #[error("unexpected reply")]
    Unexpected,
    /// Sent (or being sent), no reply within the call's time: the member may be slow
    /// rather than gone.
    #[error("no reply from member {target} within {ttl:?}")]
    Timeout { target: u64, ttl: Duration },
    /// The request was never sent (no connection, or the hello was refused): safe to
    /// send elsewhere.
    #[error("not sent: {0}")]
    NotSent(Box<FrameError>),
}

impl From<super::LinkError> for FrameError {
    /// An I/O error as it is (whether a member is gone is told by its kind, see
    /// [`super::Knock`]); anything else as an I/O error of its own.
    fn from(e: super::LinkError) -> Self {
        match e {
            super::LinkError::Io(io) => FrameError::Io(io),
            other => FrameError::Io(std::io::Error::other(other)),
        }
    }
}

/// `msg` as one frame: its encoding's length (u32, big-endian), then its postcard
/// encoding. The golden files (`golden_tests.rs`) pin these bytes for every message.
pub fn encode_frame<T: Serialize>(msg: &T) -> Result<Vec<u8>, FrameError> {
    let body = postcard::to_allocvec(msg)?;
    if body.len() > MAX_FRAME {
        return Err(FrameError::TooLarge(body.len()));
    }
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
    buf.extend_from_slice(&body);
    Ok(buf)
}

/// A frame's body (what follows its length) decoded.
pub fn decode_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, FrameError> {
    Ok(postcard::from_bytes(body)?)
}

pub async fn write_frame<T: Serialize>(
    s: &mut (impl tokio::io::AsyncWrite + Unpin),
    msg: &T,
) -> Result<(), FrameError> {
    s.write_all(&encode_frame(msg)?).await?;
    // A no-op on a plain link; on a TLS one, what rustls still holds goes out.
    s.flush().await?;
    Ok(())
}

pub async fn read_frame<T: serde::de::DeserializeOwned>(
    s: &mut (impl tokio::io::AsyncRead + Unpin),
) -> Result<T, FrameError> {
    decode_body(&read_body(s).await?)
}

/// The next frame's body.
pub(super) async fn read_body<R: tokio::io::AsyncRead + Unpin>(
    s: &mut R,
) -> Result<Vec<u8>, FrameError> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await?;
    let n = u32::from_be_bytes(len) as usize;
    if n > MAX_FRAME {
        return Err(FrameError::TooLarge(n));
    }
    let mut body = vec![0u8; n];
    s.read_exact(&mut body).await?;
    Ok(body)
}

// ---- the receiving side ------------------------------------------------------------------
