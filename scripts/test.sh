#!/usr/bin/env bash
# zlock's test command (what CI runs through .ci/run).
#
#   scripts/test.sh
#
# 1. setup: apt packages (zookeeper, netcat-openbsd, libcurator-recipes-java and
#    default-jdk-headless for javac: crates/zlock/tests/curator_interop.rs compiles
#    compat/curator/CuratorLockCheck.java; iproute2 for the network namespaces of the
#    partition test, which also needs root; chromium and nodejs (>= 20) for the lock
#    dashboard's browser test, crates/zlock-server/tests/dashboard_browser.rs) if
#    missing, a Python venv at .venv/ with kazoo[test]==2.11.0 + pytest-timeout, and
#    compat/dashboard's npm packages (playwright-core, `npm ci` from the npm registry;
#    no browser is downloaded: the test drives Debian's chromium)
# 2. cargo fmt --check, clippy (-D warnings), release build of zlock-cli, cargo test
# 3. compat/run_all.sh zlock  (zkCli session + kazoo's own test suite)
#
# Env:
#   ZLOCK_SKIP_COMPAT=1   skip setup and compat (quick local run: only the cargo steps)
#   ZLOCK_VENV            venv location (default: .venv)
# Exits non-zero on the first failing step.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

APT_PACKAGES=(zookeeper netcat-openbsd libcurator-recipes-java default-jdk-headless iproute2 chromium nodejs)
export ZLOCK_VENV="${ZLOCK_VENV:-$ROOT/.venv}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

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
    if [[ $rc -eq 0 ]]; then
        printf 'scripts/test.sh: ALL PASSED in %ss\n' "$((SECONDS - T_START))"
    else
        printf 'scripts/test.sh: FAILED (exit %s) in step "%s" after %ss\n' \
            "$rc" "${failed:-?}" "$((SECONDS - T_START))"
    fi
}
trap on_exit EXIT

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

section "cargo test"
cargo test --workspace

if [[ "${ZLOCK_SKIP_COMPAT:-0}" == 1 ]]; then
    section "compat (skipped: ZLOCK_SKIP_COMPAT=1)"
else
    section "compat: zkCli + kazoo suite against zlock"
    "$ROOT/compat/run_all.sh" zlock
fi
finish_section
