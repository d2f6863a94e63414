//! The session handshake. Both records may carry one trailing `readOnly` byte outside
//! jute; a server answers with the byte only when the client sent it (ZooKeeper 3.8).

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
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mut c = ConnectRequest {
            protocol_version: r.read_i32()?,
            last_zxid_seen: r.read_i64()?,
            time_out: r.read_i32()?,
            session_id: r.read_i64()?,
            passwd: r.read_buffer()?,
            read_only: None,
        };
        if !r.is_empty() {
            c.read_only = Some(r.read_bool()?);
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
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mut c = ConnectResponse {
            protocol_version: r.read_i32()?,
            time_out: r.read_i32()?,
            session_id: r.read_i64()?,
            passwd: r.read_buffer()?,
            read_only: None,
        };
        if !r.is_empty() {
            c.read_only = Some(r.read_bool()?);
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
    }
}
