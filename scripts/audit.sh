#!/usr/bin/env bash
# Checks every Cargo.lock of the project (the workspace and fuzz/libfuzzer) against the RustSec advisory
# database with cargo-audit (docs/AUDIT.md).
#
#   scripts/audit.sh [ADVISORY_DB_DIR]
#
# With a directory (a git clone of github.com/rustsec/advisory-db, e.g. carried in from a machine with
# internet), it runs offline against it; without one, cargo-audit fetches the database itself. Exits non-zero
# on a vulnerability; unmaintained and yanked crates are reported as warnings.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if ! cargo audit --version >/dev/null 2>&1; then
    echo "installing cargo-audit (cargo install cargo-audit --locked)"
    cargo install cargo-audit --locked
fi
db_args=()
if [ $# -ge 1 ]; then
    db_args=(--db "$(cd "$1" && pwd)" --no-fetch --stale)
    echo "advisory database: $1 at $(git -C "$1" log -1 --format='%h %cs' 2>/dev/null || echo 'unknown commit')"
fi
for dir in "$root" "$root/fuzz/libfuzzer"; do
    if [ -f "$dir/Cargo.lock" ]; then
        rel="${dir#"$root"}"
        echo "== ${rel:-.}"
        (cd "$dir" && cargo audit "${db_args[@]}" </dev/null)
    fi
done
