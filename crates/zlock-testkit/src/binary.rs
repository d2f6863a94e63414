//! [`zlock_bin`]: the `zlock` binary that process-level tests start, current with the
//! source under test.
//!
//! `cargo test` builds the test's crate and its dependencies, but not the binary of
//! another crate (`zlock-cli`), so a `target/*/zlock` left by an earlier build may be
//! older than the code being tested. Here the binary is built (or found up to date) by
//! cargo itself, once per test process.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

use anyhow::{anyhow, bail, Context};

/// The zlock binary to start: `$ZLOCK_BIN` if set, else this workspace's, built now.
///
/// - `ZLOCK_BIN=<path>`: that file (it must exist); whoever sets it answers for it being
///   current. `scripts/test.sh` sets it to the release build it has just made before
///   `cargo test`, so CI builds nothing twice.
/// - Otherwise, the first call in a test process runs `cargo build -p zlock-cli` (`$CARGO`,
///   which `cargo test` sets, else `cargo` on `PATH`; `--quiet`) in the profile and target
///   directory the test itself was built in, read from the test executable's path
///   (`<target>[/<triple>]/<profile>/deps/<test>`), and returns
///   `<target>[/<triple>]/<profile>/zlock`; later calls return the same (a failed build is
///   failed for every later call too, without building again).
///
/// Up to date, that build is a no-op of well under a second. Otherwise it compiles
/// zlock-cli and what of its dependencies the test build did not (clap, or a dependency
/// with other features), which takes a while once: a test bounded in time should call
/// this before its clock starts. Nested cargo: `cargo test` builds every test binary
/// first and releases the target directory's lock before it runs them, so this build
/// does not deadlock or wait on the `cargo test` that started it (checked with cargo
/// 1.95); it waits, as any cargo does, while another cargo builds in the same target
/// directory. Settings given to the outer cargo on its command line (`--config`,
/// `--features`) are not passed on; those in the environment and in config files are.
///
/// # Errors
/// `ZLOCK_BIN` names no file; the test executable is not in a cargo target directory;
/// the build fails (its errors are in the message).
pub fn zlock_bin() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("ZLOCK_BIN") {
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!("ZLOCK_BIN={} is not a file", p.display());
        }
        return Ok(p);
    }
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| build().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow!(e))
}

/// Where and how the test executable was built: cargo's arguments for the same profile
/// and target, and the directory the binary lands in.
struct Layout {
    args: Vec<String>,
    out_dir: PathBuf,
}

/// The layout of the test executable `exe`.
fn layout(exe: &Path) -> anyhow::Result<Layout> {
    let not_cargo = || {
        anyhow!(
            "{} is not in a cargo target directory (<target>/<profile>/deps/): set ZLOCK_BIN",
            exe.display()
        )
    };
    let deps = exe.parent().ok_or_else(not_cargo)?;
    if deps.file_name() != Some(std::ffi::OsStr::new("deps")) {
        return Err(not_cargo());
    }
    let out_dir = deps.parent().ok_or_else(not_cargo)?;
    let profile_dir = out_dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(not_cargo)?;
    let above = out_dir.parent().ok_or_else(not_cargo)?;
    // Cargo marks its target directory's root with CACHEDIR.TAG; one level further up,
    // the level between is a target triple (`--target`).
    let (target_dir, triple) = if above.join("CACHEDIR.TAG").is_file() {
        (above, None)
    } else {
        let root = above.parent().ok_or_else(not_cargo)?;
        if !root.join("CACHEDIR.TAG").is_file() {
            return Err(not_cargo());
        }
        (root, above.file_name().and_then(|n| n.to_str()))
    };
    let mut args = vec!["--target-dir".to_owned(), target_dir.display().to_string()];
    // `dev` and `test` build into `debug`, `release` and `bench` into `release`, a
    // custom profile into its own name.
    match profile_dir {
        "debug" => {}
        "release" => args.push("--release".into()),
        other => args.extend(["--profile".into(), other.into()]),
    }
    if let Some(t) = triple {
        args.extend(["--target".into(), t.into()]);
    }
    Ok(Layout {
        args,
        out_dir: out_dir.to_owned(),
    })
}

fn build() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("the test executable's path")?;
    let layout = layout(&exe)?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = crate::peers::repo_root().join("Cargo.toml");
    let started = Instant::now();
    let out = Command::new(&cargo)
        .args(["build", "--quiet", "-p", "zlock-cli", "--manifest-path"])
        .arg(&manifest)
        .args(&layout.args)
        .output()
        .with_context(|| format!("running {}", Path::new(&cargo).display()))?;
    if !out.status.success() {
        bail!(
            "building zlock for the tests failed (cargo build -p zlock-cli {}: {}):\n{}",
            layout.args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let bin = layout.out_dir.join("zlock");
    if !bin.is_file() {
        bail!(
            "cargo build -p zlock-cli succeeded but left no {}",
            bin.display()
        );
    }
    // Captured like any test output: shown with a failing test, or with --nocapture.
    eprintln!(
        "testkit: cargo build -p zlock-cli {} ({} ms): {}",
        layout.args.join(" "),
        started.elapsed().as_millis(),
        bin.display()
    );
    Ok(bin)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `<root>/<dirs>/deps/t-0123`, with cargo's CACHEDIR.TAG at `<root>`.
    fn exe_in(root: &Path, dirs: &str) -> PathBuf {
        std::fs::write(
            root.join("CACHEDIR.TAG"),
            "Signature: 8a477f597d28d172789f06886806bc55",
        )
        .unwrap();
        let deps = root.join(dirs).join("deps");
        std::fs::create_dir_all(&deps).unwrap();
        deps.join("t-0123")
    }

    #[test]
    fn builds_in_the_tests_own_profile_and_target() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().display().to_string();
        let cases: [(&str, &[&str]); 4] = [
            ("debug", &[]),
            ("release", &["--release"]),
            ("ci-fast", &["--profile", "ci-fast"]),
            (
                "x86_64-unknown-linux-gnu/debug",
                &["--target", "x86_64-unknown-linux-gnu"],
            ),
        ];
        for (dirs, extra) in cases {
            let l = layout(&exe_in(dir.path(), dirs)).unwrap();
            let mut want = vec!["--target-dir".to_owned(), t.clone()];
            want.extend(extra.iter().map(|s| s.to_string()));
            assert_eq!(l.args, want, "{dirs}");
            assert_eq!(l.out_dir, dir.path().join(dirs), "{dirs}");
        }
    }

    #[test]
    fn outside_a_target_directory_it_says_to_set_zlock_bin() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("debug/deps/t-0123");
        let e = layout(&exe).err().unwrap().to_string();
        assert!(e.contains("set ZLOCK_BIN"), "{e}");
        let e = layout(&dir.path().join("debug/t-0123")).err().unwrap();
        assert!(
            e.to_string().contains("not in a cargo target directory"),
            "{e}"
        );
    }
}
