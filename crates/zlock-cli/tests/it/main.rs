//! Integration tests of the `zlock` binary: one test binary (`tests/it`), one module per
//! topic, so `cargo test` links the CLI and its dependencies once for all of them rather
//! than once per file. The binary under test is `env!("CARGO_BIN_EXE_zlock")`, which
//! cargo builds before the tests of this crate. Run one topic with its module path, e.g.
//! `cargo test -p zlock-cli --test it lock_cli::`.

// Helpers outside `#[test]` functions panic on purpose too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod config_node;
mod data_dump;
mod lock_cli;
mod lock_demo;
mod server_config;
mod snapshot_cli;
mod tls_cli;
mod zk_cmds;
mod zk_import;
