//! One module per subcommand family.

pub mod bench;
pub mod data;
pub mod demo;
pub mod ensemble;
pub mod import;
pub mod lock;
pub mod snapshot;
pub mod tls;
pub mod zk;
