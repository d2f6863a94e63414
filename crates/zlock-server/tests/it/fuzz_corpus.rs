//! Replays the cargo-fuzz corpus (`fuzz/corpus/`) on every `cargo test`:
//! (a) through the decoders, with the very harness the fuzz targets run
//!     (`fuzz/src/lib.rs`), and
//! (b) through a live in-process server: after a valid handshake the corpus bytes go
//!     down the socket; the server may answer or close that connection, but must keep
//!     running: a fresh session can still connect and read.
//!
//! The seed files are made by `fuzz/src/lib.rs` (`seed_frames`, `seed_txns`); rewrite
//! them with `cargo test -p zlock-server --test it -- --ignored fuzz_corpus::write_seed_corpus`.
//! Files the fuzzer adds (or crash reproducers copied in) are replayed the same way;
//! `ZLOCK_FUZZ_CORPUS=<dir>` replays `<dir>/frame_decode` and `<dir>/txn_decode` instead.

#[path = "../../../../fuzz/src/lib.rs"]
mod harness;

use std::path::{Path, PathBuf};

use crate::common::rawclient::{expect_closed, finish_sending, handshake, send_bytes, RawClient};
use zlock_testkit::TestServer;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

/// The corpus files of `target`: the committed ones, or those under
/// `$ZLOCK_FUZZ_CORPUS/<target>/` (say, a fuzzer's working corpus) when that is set.
fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = match std::env::var_os("ZLOCK_FUZZ_CORPUS") {
        Some(d) => PathBuf::from(d).join(target),
        None => corpus_dir(target),
    };
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    files.sort();
    files
}

#[test]
fn frame_corpus_through_decoders() {
    let files = corpus("frame_decode");
    assert!(
        files.len() >= 12,
        "seed corpus present ({} files)",
        files.len()
    );
    for (path, bytes) in &files {
        let r = std::panic::catch_unwind(|| harness::frame_decode(bytes));
        assert!(r.is_ok(), "frame_decode panicked on {}", path.display());
    }
    // Every prefix of every seed too: the decoders see partial input all the time.
    for (path, bytes) in &files {
        for cut in 0..bytes.len().min(256) {
            let r = std::panic::catch_unwind(|| harness::frame_decode(&bytes[..cut]));
            assert!(
                r.is_ok(),
                "frame_decode panicked on {} cut at {cut}",
                path.display()
            );
        }
    }
}

#[test]
fn txn_corpus_through_decoder() {
    let files = corpus("txn_decode");
    assert!(!files.is_empty(), "txn seed corpus present");
    for (path, bytes) in &files {
        for cut in 0..=bytes.len() {
            let r = std::panic::catch_unwind(|| harness::txn_decode(&bytes[..cut]));
            assert!(
                r.is_ok(),
                "txn_decode panicked on {} cut at {cut}",
                path.display()
            );
        }
    }
}

/// The committed seed files are what the generator makes (so a codec change that
/// alters them is noticed, and the corpus stays meaningful).
#[test]
fn seed_files_match_the_generator() {
    for (target, seeds) in [
        ("frame_decode", harness::seed_frames()),
        ("txn_decode", harness::seed_txns()),
    ] {
        for (name, bytes) in seeds {
            let p = corpus_dir(target).join(format!("seed_{name}"));
            let on_disk = std::fs::read(&p).unwrap_or_else(|e| {
                panic!(
                    "{}: {e}; run the ignored write_seed_corpus test",
                    p.display()
                )
            });
            assert_eq!(
                on_disk,
                bytes,
                "{} is stale; run write_seed_corpus",
                p.display()
            );
        }
    }
}

#[test]
#[ignore = "writes the seed corpus into fuzz/corpus/; run by hand"]
fn write_seed_corpus() {
    for (target, seeds) in [
        ("frame_decode", harness::seed_frames()),
        ("txn_decode", harness::seed_txns()),
    ] {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in seeds {
            std::fs::write(dir.join(format!("seed_{name}")), bytes).unwrap();
        }
    }
}

#[tokio::test]
async fn frame_corpus_through_a_live_server() {
    let server = TestServer::start().await.expect("server starts");
    for (path, bytes) in corpus("frame_decode") {
        let (mut s, _) = handshake(server.addr).await.unwrap();
        // The server may close early (a bad frame); a failed write is fine then.
        let _ = send_bytes(&mut s, &bytes).await;
        let _ = finish_sending(&mut s).await;
        expect_closed(&mut s, &format!("{}", path.display())).await;

        let c = RawClient::connect(server.addr)
            .await
            .unwrap_or_else(|e| panic!("after {}: no fresh session: {e}", path.display()));
        let root = c.get_children("/").await.unwrap();
        assert!(
            root.as_ref()
                .is_ok_and(|r| r.contains(&"zookeeper".to_owned())),
            "after {}: getChildren(/) = {root:?}",
            path.display()
        );
        assert!(c.get_data("/").await.unwrap().is_ok());
        c.close_session().await.unwrap();
    }
    server.stop().await.unwrap();
}
