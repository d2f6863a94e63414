//! Integration tests of the zlock client and its lock recipes: one test binary
//! (`tests/it`), one module per topic, so `cargo test` links the client, the testkit
//! and the server once for all of them rather than once per file. Run one topic with
//! its module path, e.g. `cargo test -p zlock --test it ensemble_faults::`.
//!
//! The modules' tests share one process and run two at a time (the harness's default
//! here), whichever module they come from: nothing in them may rely on being alone in
//! the process (ports come from the testkit or a bind to port 0, network namespaces and
//! scratch directories are named per process and per use, and no test sets an
//! environment variable).

// Helpers outside `#[test]` functions panic on purpose too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod proxy;
mod target;

mod client;
mod curator_interop;
mod ensemble_faults;
mod lock_suite;
mod metrics_export;
mod native;
mod pipelining;
mod recipes;
mod recipes_more;
mod tls;
