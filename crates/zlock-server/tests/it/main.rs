//! Integration tests of zlock-server: one test binary (`tests/it`), one module per
//! topic, so `cargo test` links the server and its dependencies once for all of them
//! rather than once per file. Run one topic with its module path, e.g.
//! `cargo test -p zlock-server --test it crash::`.
//!
//! The modules' tests share one process and run two at a time (the harness's default
//! here), whichever module they come from: nothing in them may rely on being alone in
//! the process (ports come from the testkit or a bind to port 0, scratch directories are
//! fresh temp dirs, and no test sets an environment variable).
//!
//! The deterministic simulation stays a binary of its own (`tests/raft_sim`): it is
//! driven by environment variables and runs on a paused tokio clock.

// Helpers outside `#[test]` functions panic on purpose too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod admin_auth;
mod admin_http;
mod admin_https;
mod admin_locks;
mod admin_snapshot;
mod commit_conformance;
mod crash;
mod dashboard_browser;
mod differential;
mod ensemble;
mod fuzz_corpus;
mod malformed;
mod metrics;
mod pipelined;
mod raft_ensemble;
mod server;
mod tls;
mod zkclient;
