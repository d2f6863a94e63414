//! Every jute record of the client protocol, one file per message family.

mod acl;
mod connect;
mod header;
mod lock;
mod multi;
mod ops;
mod stat;
mod watches;

pub use acl::*;
pub use connect::*;
pub use header::*;
pub use lock::*;
pub use multi::*;
pub use ops::*;
pub use stat::*;
pub use watches::*;
