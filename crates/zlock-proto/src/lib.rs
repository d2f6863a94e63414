//! The ZooKeeper client wire protocol, shared by the zlock server and client.
//!
//! No I/O happens here: only bytes in, records out, and back.
//!
//! # Layout
//! - [`jute`]: primitive encoding and the [`jute::Record`] trait.
//! - [`frame`]: 4-byte length framing with a packet-size limit.
//! - [`op_code`], [`error_code`]: the exact ZooKeeper numbers.
//! - [`records`]: every record, one file per message family.
//! - [`request`]: a whole request body decoded by opcode.
//! - [`lock_order`]: the queue order of a lock path's contenders, shared by the
//!   server's native lock and the client's recipes.

pub mod error_code;
pub mod frame;
pub mod jute;
pub mod lock_order;
pub mod op_code;
pub mod records;
pub mod request;

pub use error_code::ErrorCode;
pub use jute::{DecodeError, Reader, Record};
pub use op_code::OpCode;
pub use request::{Decoded, Request};
