#!/usr/bin/env bash
# zlock's test command (what CI runs through .ci/run).
#
#   scripts/test.sh
#
# 1. setup: apt packages (zookeeper, netcat-openbsd, libcurator-recipes-java and
#    default-jdk-headless for javac: crates/zlock/tests/it/curator_interop.rs compiles
#    compat/curator/CuratorLockCheck.java; iproute2 for the network namespaces of the
#    partition test, which also needs root; chromium and nodejs (>= 20) for the lock
#    dashboard's browser test, crates/zlock-server/tests/it/dashboard_browser.rs;
#    libfaketime to skew a member's clock, crates/zlock/tests/it/ensemble_faults/clock.rs) if
#    missing, a Python venv at .venv/ with kazoo[test]==2.11.0 + pytest-timeout, and
#    compat/dashboard's npm packages (playwright-core, `npm ci` from the npm registry;
#    no browser is downloaded: the test drives Debian's chromium)
# 2. cargo fmt --check, clippy (-D warnings), release build of zlock-cli, cargo test
# 3. compat/run_all.sh zlock  (zkCli session + kazoo's own test suite)
#
# Env:
#   ZLOCK_SKIP_COMPAT=1   skip setup and compat (quick local run: only the cargo steps;
#                         the Rust tests still need the peers set up in step 1)
#   ZLOCK_VENV            venv location (default: .venv)
#   CARGO_INCREMENTAL     default 0 here (a clean CI build gains nothing from the caches)
#   ZLOCK_TEST_ALLOW_MISSING=1
#                         never set here, and never in CI: a test whose peer (Apache
#                         ZooKeeper, Curator, the JDK, kazoo's venv, chromium/node, root)
#                         is missing fails; with this set by the caller (a quick local run
#                         on a machine without them), it passes without that part, and
#                         the summary lists every such part as NOT RUN
# Set here:
#   ZLOCK_BIN             the release zlock built in step 2, for every test that starts
#                         a zlock process (zlock_testkit::zlock_bin would otherwise build
#                         a debug one) and for compat
#   ZLOCK_TEST_MISSING_LOG  a temporary file where tests list what they did not run
# Exits non-zero on the first failing step.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

APT_PACKAGES=(zookeeper netcat-openbsd libcurator-recipes-java default-jdk-headless iproute2 chromium nodejs libfaketime)
export ZLOCK_VENV="${ZLOCK_VENV:-$ROOT/.venv}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

# Where the tests note what they did not run for want of a peer (only with
# ZLOCK_TEST_ALLOW_MISSING=1); printed in the summary.
ZLOCK_TEST_MISSING_LOG="$(mktemp)"
export ZLOCK_TEST_MISSING_LOG

T_START=$SECONDS
TIMINGS=()
CURRENT=""
SECTION_START=$SECONDS

section() {
    finish_section
    CURRENT="$1"
    SECTION_START=$SECONDS
    printf '\n==================== %s ====================\n' "$CURRENT"
}
finish_section() {
    if [[ -n "$CURRENT" ]]; then
        TIMINGS+=("$(printf '%-40s %4ss' "$CURRENT" "$((SECONDS - SECTION_START))")")
    fi
    CURRENT=""
}
on_exit() {
    local rc=$?
    local failed="$CURRENT"
    finish_section
    printf '\n==================== summary ====================\n'
    local t
    for t in "${TIMINGS[@]}"; do printf '  %s\n' "$t"; done
    if [[ -s "$ZLOCK_TEST_MISSING_LOG" ]]; then
        printf '\n!!!! NOT RUN: %s test parts whose peer is missing (ZLOCK_TEST_ALLOW_MISSING=1):\n' \
            "$(wc -l <"$ZLOCK_TEST_MISSING_LOG")"
        sed 's/^/  /' "$ZLOCK_TEST_MISSING_LOG"
    fi
    rm -f "$ZLOCK_TEST_MISSING_LOG"
    if [[ -n "${ZLOCK_TEST_ALLOW_MISSING:-}" && "${ZLOCK_TEST_ALLOW_MISSING}" != 0 ]]; then
        printf '!!!! ZLOCK_TEST_ALLOW_MISSING is set: a pass here is not a CI result\n'
    fi
    if [[ $rc -eq 0 ]]; then
        printf 'scripts/test.sh: ALL PASSED in %ss\n' "$((SECONDS - T_START))"
    else
        printf 'scripts/test.sh: FAILED (exit %s) in step "%s" after %ss\n' \
            "$rc" "${failed:-?}" "$((SECONDS - T_START))"
    fi
}
trap on_exit EXIT

# A clean run builds everything once; incremental caches would only double target/'s size.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# The disk this run builds on: a full one shows up later as a linker's bus error.
printf 'disk: %s\n' "$(df -h . | tail -1)"

as_root() {
    if [[ $(id -u) -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null; then
        sudo "$@"
    else
        echo "need root (or sudo) to run: $*" >&2
        return 1
    fi
}

if [[ "${ZLOCK_SKIP_COMPAT:-0}" != 1 ]]; then
    section "setup: system packages"
    missing=()
    for p in "${APT_PACKAGES[@]}"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if [[ ${#missing[@]} -gt 0 ]]; then
        echo "installing: ${missing[*]}"
        as_root apt-get update
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
    else
        echo "already installed: ${APT_PACKAGES[*]}"
    fi

    section "setup: python venv ($ZLOCK_VENV)"
    # shellcheck source=../compat/lib/server.sh
    source "$ROOT/compat/lib/server.sh"
    PY="$(compat_ensure_venv)"
    "$PY" -c 'import kazoo.version, pytest; print("kazoo", kazoo.version.__version__, "pytest", pytest.__version__)'

    section "setup: dashboard browser test (npm ci in compat/dashboard)"
    node_major="$(node -p 'process.versions.node.split(".")[0]')"
    if [[ "$node_major" -lt 20 ]]; then
        echo "node $(node --version): playwright-core needs node >= 20" >&2
        exit 1
    fi
    command -v npm >/dev/null || as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y npm
    (cd "$ROOT/compat/dashboard" && npm ci --no-audit --no-fund)
    chromium --version
fi

if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    section "setup: rustfmt + clippy"
    rustup component add rustfmt clippy
fi

section "cargo fmt --check"
cargo fmt --all --check

section "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

section "cargo build --release -p zlock-cli"
cargo build --release -p zlock-cli
# The binary just built, for the tests and compat: current, and not built again.
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
[[ "$TARGET_DIR" == /* ]] || TARGET_DIR="$ROOT/$TARGET_DIR"
export ZLOCK_BIN="$TARGET_DIR/release/zlock"

section "cargo test"
cargo test --workspace

if [[ "${ZLOCK_SKIP_COMPAT:-0}" == 1 ]]; then
    section "compat (skipped: ZLOCK_SKIP_COMPAT=1)"
else
    section "compat: zkCli + kazoo suite against zlock"
    "$ROOT/compat/run_all.sh" zlock
fi
finish_section
