#!/usr/bin/env bash
# Make sure the PostgreSQL server binaries (initdb, pg_ctl) and openssl are present for
# standins/postgres.py (the throwaway cluster behind tests/tasks/data/sources/test_wrds.py).
# Idempotent: does nothing when they are already installed; otherwise installs the Debian/Ubuntu
# `postgresql` package with apt-get (as root, or through passwordless sudo). Exit 1 with a
# one-line error when that is impossible.
set -euo pipefail

have_server() {
    local dir candidates=()
    [[ -n "${PG_BINDIR:-}" ]] && candidates+=("$PG_BINDIR")
    if command -v pg_config >/dev/null 2>&1; then
        candidates+=("$(pg_config --bindir 2>/dev/null || true)")
    fi
    for dir in /usr/lib/postgresql/*/bin; do candidates+=("$dir"); done
    if command -v initdb >/dev/null 2>&1; then candidates+=("$(dirname "$(command -v initdb)")"); fi
    for dir in "${candidates[@]}"; do
        [[ -x "$dir/initdb" && -x "$dir/pg_ctl" ]] && return 0
    done
    return 1
}

ready() { have_server && command -v openssl >/dev/null 2>&1; }

fail() { echo "ensure_postgres: error: $*" >&2; exit 1; }

ready && exit 0

if [[ "$(id -u)" -eq 0 ]]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
else
    fail "PostgreSQL server binaries missing and not root (no passwordless sudo): install the 'postgresql' package"
fi
command -v apt-get >/dev/null 2>&1 \
    || fail "PostgreSQL server binaries missing and apt-get not available: install PostgreSQL (initdb, pg_ctl) and openssl"

echo "ensure_postgres: installing postgresql and openssl with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq >/dev/null || fail "apt-get update failed"
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends postgresql openssl >/dev/null \
    || fail "apt-get install postgresql openssl failed"
ready || fail "postgresql installed but initdb/pg_ctl still not found (try PG_BINDIR=/path/to/bin)"
echo "ensure_postgres: PostgreSQL server binaries installed" >&2
