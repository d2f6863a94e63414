//! Primitive jute encoding: the building blocks every ZooKeeper record is made of.
//!
//! Layout (all integers big-endian, two's complement):
//! `int` 4 bytes, `long` 8 bytes, `boolean` 1 byte (any non-zero byte reads as true),
//! `ustring` and `buffer` an `int` length then the bytes (length -1 = null),
//! `vector<T>` an `int` count (-1 = null) then the elements. Records are their fields in
//! declaration order, with no tags and no padding.
//!
//! Nulls: a null buffer, string or vector decodes as empty. ZooKeeper's server treats a
//! null path, data or ACL list the same way as an empty one for every check it makes.

use thiserror::Error;

/// Why a byte sequence is not a valid record.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// The input ended before the record did.
    #[error("record truncated: needed {needed} more bytes")]
    Truncated { needed: usize },
    /// A length or count below -1.
    #[error("negative length {0}")]
    NegativeLength(i32),
    /// A string that is not UTF-8.
    #[error("string is not valid UTF-8")]
    InvalidUtf8,
    /// A value outside the range its field allows (an unknown enum number, say).
    #[error("invalid value {value} for {field}")]
    InvalidValue { field: &'static str, value: i64 },
}

/// A cursor over one frame's bytes.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The unread bytes.
    pub fn rest(&self) -> &'a [u8] {
        self.buf
    }

    /// Drops the unread bytes.
    pub fn skip_rest(&mut self) {
        self.buf = &[];
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Truncated {
                needed: n - self.buf.len(),
            });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub fn read_i32(&mut self) -> Result<i32, DecodeError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn read_i64(&mut self) -> Result<i64, DecodeError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }

    pub fn read_u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    pub fn read_bool(&mut self) -> Result<bool, DecodeError> {
        Ok(self.take(1)?[0] != 0)
    }

    fn read_len(&mut self) -> Result<Option<usize>, DecodeError> {
        match self.read_i32()? {
            -1 => Ok(None),
            n if n < 0 => Err(DecodeError::NegativeLength(n)),
            n => Ok(Some(n as usize)),
        }
    }

    /// A jute `buffer`; null reads as empty.
    pub fn read_buffer(&mut self) -> Result<Vec<u8>, DecodeError> {
        match self.read_len()? {
            None => Ok(Vec::new()),
            Some(n) => Ok(self.take(n)?.to_vec()),
        }
    }

    /// A jute `buffer`, keeping null apart from empty.
    pub fn read_opt_buffer(&mut self) -> Result<Option<Vec<u8>>, DecodeError> {
        match self.read_len()? {
            None => Ok(None),
            Some(n) => Ok(Some(self.take(n)?.to_vec())),
        }
    }

    /// A jute `ustring`; null reads as empty.
    pub fn read_string(&mut self) -> Result<String, DecodeError> {
        match self.read_len()? {
            None => Ok(String::new()),
            Some(n) => {
                let b = self.take(n)?;
                String::from_utf8(b.to_vec()).map_err(|_| DecodeError::InvalidUtf8)
            }
        }
    }

    /// A jute `vector`; null reads as empty. Each element must use at least one byte, so
    /// a huge count in a short frame fails fast instead of allocating.
    pub fn read_vec<T>(
        &mut self,
        mut elem: impl FnMut(&mut Self) -> Result<T, DecodeError>,
    ) -> Result<Vec<T>, DecodeError> {
        match self.read_len()? {
            None => Ok(Vec::new()),
            Some(n) => {
                if n > self.buf.len() {
                    return Err(DecodeError::Truncated {
                        needed: n - self.buf.len(),
                    });
                }
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(elem(self)?);
                }
                Ok(v)
            }
        }
    }
}

/// Writers for the primitives, on a plain `Vec<u8>`.
pub trait Writer {
    fn write_i32(&mut self, v: i32);
    fn write_i64(&mut self, v: i64);
    fn write_bool(&mut self, v: bool);
    fn write_buffer(&mut self, v: &[u8]);
    fn write_opt_buffer(&mut self, v: Option<&[u8]>);
    fn write_string(&mut self, v: &str);
    fn write_len(&mut self, n: usize);
}

impl Writer for Vec<u8> {
    fn write_i32(&mut self, v: i32) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn write_i64(&mut self, v: i64) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn write_bool(&mut self, v: bool) {
        self.push(u8::from(v));
    }
    fn write_buffer(&mut self, v: &[u8]) {
        self.write_len(v.len());
        self.extend_from_slice(v);
    }
    fn write_opt_buffer(&mut self, v: Option<&[u8]>) {
        match v {
            Some(v) => self.write_buffer(v),
            None => self.write_i32(-1),
        }
    }
    fn write_string(&mut self, v: &str) {
        self.write_buffer(v.as_bytes());
    }
    fn write_len(&mut self, n: usize) {
        // Frames are capped far below i32::MAX, so a longer field cannot be framed anyway.
        self.write_i32(i32::try_from(n).unwrap_or(i32::MAX));
    }
}

/// A jute record: encodes to and decodes from its fields in order.
pub trait Record: Sized {
    fn encode(&self, out: &mut Vec<u8>);
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError>;

    /// Encodes into a fresh buffer.
    fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode(&mut v);
        v
    }
}

/// A field type inside a record.
pub trait Field: Sized {
    fn put(&self, out: &mut Vec<u8>);
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError>;
}

impl Field for i32 {
    fn put(&self, out: &mut Vec<u8>) {
        out.write_i32(*self)
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.read_i32()
    }
}
impl Field for i64 {
    fn put(&self, out: &mut Vec<u8>) {
        out.write_i64(*self)
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.read_i64()
    }
}
impl Field for bool {
    fn put(&self, out: &mut Vec<u8>) {
        out.write_bool(*self)
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.read_bool()
    }
}
impl Field for String {
    fn put(&self, out: &mut Vec<u8>) {
        out.write_string(self)
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.read_string()
    }
}
/// `Vec<u8>` is a jute `buffer`.
impl Field for Vec<u8> {
    fn put(&self, out: &mut Vec<u8>) {
        out.write_buffer(self)
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.read_buffer()
    }
}
impl Field for Option<Vec<u8>> {
    fn put(&self, out: &mut Vec<u8>) {
        out.write_opt_buffer(self.as_deref())
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.read_opt_buffer()
    }
}
/// A `ustring` that may be null (`reconfig`'s fields, where null and empty differ on
/// ZooKeeper: a null `newMembers` means an incremental change).
impl Field for Option<String> {
    fn put(&self, out: &mut Vec<u8>) {
        out.write_opt_buffer(self.as_deref().map(str::as_bytes))
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.read_opt_buffer()?
            .map(|b| String::from_utf8(b).map_err(|_| DecodeError::InvalidUtf8))
            .transpose()
    }
}
impl Field for Vec<String> {
    fn put(&self, out: &mut Vec<u8>) {
        out.write_len(self.len());
        for s in self {
            out.write_string(s);
        }
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.read_vec(|r| r.read_string())
    }
}

/// Declares a record struct whose fields are encoded in declaration order.
#[macro_export]
macro_rules! record {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $f:ident : $t:ty),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
        pub struct $name { $($(#[$fm])* pub $f: $t),* }
        impl $crate::jute::Record for $name {
            fn encode(&self, out: &mut Vec<u8>) {
                let _ = &out;
                $($crate::jute::Field::put(&self.$f, out);)*
            }
            fn decode(r: &mut $crate::jute::Reader<'_>) -> Result<Self, $crate::jute::DecodeError> {
                let _ = &r;
                Ok($name { $($f: $crate::jute::Field::get(r)?),* })
            }
        }
        impl $crate::jute::Field for $name {
            fn put(&self, out: &mut Vec<u8>) { $crate::jute::Record::encode(self, out) }
            fn get(r: &mut $crate::jute::Reader<'_>) -> Result<Self, $crate::jute::DecodeError> {
                <$name as $crate::jute::Record>::decode(r)
            }
        }
        impl $crate::jute::Field for Vec<$name> {
            fn put(&self, out: &mut Vec<u8>) {
                $crate::jute::Writer::write_len(out, self.len());
                for e in self { $crate::jute::Record::encode(e, out); }
            }
            fn get(r: &mut $crate::jute::Reader<'_>) -> Result<Self, $crate::jute::DecodeError> {
                r.read_vec(|r| <$name as $crate::jute::Record>::decode(r))
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitives_round_trip() {
        let mut v = Vec::new();
        v.write_i32(-5);
        v.write_i64(1 << 40);
        v.write_bool(true);
        v.write_string("héllo");
        v.write_opt_buffer(None);
        let mut r = Reader::new(&v);
        assert_eq!(r.read_i32().unwrap(), -5);
        assert_eq!(r.read_i64().unwrap(), 1 << 40);
        assert!(r.read_bool().unwrap());
        assert_eq!(r.read_string().unwrap(), "héllo");
        assert_eq!(r.read_opt_buffer().unwrap(), None);
        assert!(r.is_empty());
    }

    #[test]
    fn truncated_and_negative_lengths_are_errors() {
        let mut r = Reader::new(&[0, 0, 0, 9, b'a']);
        assert_eq!(r.read_buffer(), Err(DecodeError::Truncated { needed: 8 }));
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xfe]);
        assert_eq!(r.read_string(), Err(DecodeError::NegativeLength(-2)));
        // A vector claiming 2^31-1 elements in a 4-byte frame fails without allocating.
        let mut r = Reader::new(&[0x7f, 0xff, 0xff, 0xff]);
        assert!(r.read_vec(|r| r.read_i32()).is_err());
    }
}
