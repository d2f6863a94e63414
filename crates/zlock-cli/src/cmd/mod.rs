//! One module per subcommand family.

pub mod bench;
pub mod demo;
pub mod ensemble;
pub mod lock;
pub mod tls;
pub mod zk;
