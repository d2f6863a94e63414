//! The session handshake. Both records may carry one trailing `readOnly` byte outside
//! jute; a server answers with the byte only when the client sent it (ZooKeeper 3.8).
//! After that byte zlock adds its feature words (`int magic, int features`, see
//! [`HANDSHAKE_MAGIC`]): a zlock client offers them, a zlock server answers with what
//! it supports; Apache ZooKeeper ignores them and answers without.

use super::HANDSHAKE_MAGIC;
use crate::jute::{DecodeError, Reader, Record, Writer};

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnectRequest {
    pub protocol_version: i32,
    pub last_zxid_seen: i64,
    /// Requested session timeout, ms.
    pub time_out: i32,
    /// 0 for a new session.
    pub session_id: i64,
    pub passwd: Vec<u8>,
    /// `Some` when the client sent the trailing readOnly byte.
    pub read_only: Option<bool>,
    /// zlock feature bits the client understands (sent only with `read_only`).
    pub features: Option<i32>,
}

/// Writes the zlock feature words, if any (only after a readOnly byte).
fn write_features(out: &mut Vec<u8>, read_only: Option<bool>, features: Option<i32>) {
    if let (Some(_), Some(f)) = (read_only, features) {
        out.write_i32(HANDSHAKE_MAGIC);
        out.write_i32(f);
    }
}

/// Reads the zlock feature words if the rest of the record is exactly them; anything
/// else after the readOnly byte is ignored, as ZooKeeper does.
fn read_features(r: &mut Reader<'_>) -> Result<Option<i32>, DecodeError> {
    if r.remaining() != 8 {
        return Ok(None);
    }
    if r.read_i32()? != HANDSHAKE_MAGIC {
        r.skip_rest();
        return Ok(None);
    }
    Ok(Some(r.read_i32()?))
}

impl Record for ConnectRequest {
    fn encode(&self, out: &mut Vec<u8>) {
        out.write_i32(self.protocol_version);
        out.write_i64(self.last_zxid_seen);
        out.write_i32(self.time_out);
        out.write_i64(self.session_id);
        out.write_buffer(&self.passwd);
        if let Some(ro) = self.read_only {
            out.write_bool(ro);
        }
        write_features(out, self.read_only, self.features);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mut c = ConnectRequest {
            protocol_version: r.read_i32()?,
            last_zxid_seen: r.read_i64()?,
            time_out: r.read_i32()?,
            session_id: r.read_i64()?,
            passwd: r.read_buffer()?,
            read_only: None,
            features: None,
        };
        if !r.is_empty() {
            c.read_only = Some(r.read_bool()?);
            c.features = read_features(r)?;
        }
        Ok(c)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnectResponse {
    pub protocol_version: i32,
    /// Negotiated timeout, ms; 0 means the session is expired or unknown.
    pub time_out: i32,
    pub session_id: i64,
    pub passwd: Vec<u8>,
    pub read_only: Option<bool>,
    /// zlock feature bits the server offers (only to a client that sent its own).
    pub features: Option<i32>,
}

impl Record for ConnectResponse {
    fn encode(&self, out: &mut Vec<u8>) {
        out.write_i32(self.protocol_version);
        out.write_i32(self.time_out);
        out.write_i64(self.session_id);
        out.write_buffer(&self.passwd);
        if let Some(ro) = self.read_only {
            out.write_bool(ro);
        }
        write_features(out, self.read_only, self.features);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mut c = ConnectResponse {
            protocol_version: r.read_i32()?,
            time_out: r.read_i32()?,
            session_id: r.read_i64()?,
            passwd: r.read_buffer()?,
            read_only: None,
            features: None,
        };
        if !r.is_empty() {
            c.read_only = Some(r.read_bool()?);
            c.features = read_features(r)?;
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_request_with_and_without_read_only_byte() {
        let mut c = ConnectRequest {
            time_out: 30000,
            passwd: vec![0; 16],
            ..Default::default()
        };
        assert_eq!(c.to_bytes().len(), 44);
        c.read_only = Some(false);
        let b = c.to_bytes();
        assert_eq!(b.len(), 45);
        assert_eq!(ConnectRequest::decode(&mut Reader::new(&b)).unwrap(), c);
        c.features = Some(1);
        let b = c.to_bytes();
        assert_eq!(b.len(), 53);
        assert_eq!(ConnectRequest::decode(&mut Reader::new(&b)).unwrap(), c);
    }

    #[test]
    fn foreign_trailing_bytes_are_not_features() {
        let mut b = ConnectResponse {
            read_only: Some(false),
            ..Default::default()
        }
        .to_bytes();
        b.extend_from_slice(&[0, 0, 0, 7, 0, 0, 0, 1]);
        let c = ConnectResponse::decode(&mut Reader::new(&b)).unwrap();
        assert_eq!(c.features, None);
    }
}
