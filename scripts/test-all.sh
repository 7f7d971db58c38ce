#!/usr/bin/env bash
# Every test of the workspace: the Rust tests, the Python package's tests (its wheel installed into a fresh
# virtual environment), the browser module's binding tests under Node, and the web demo's end-to-end test
# in headless Chromium. The README's test command and CI both run this script.
#
# Needs Rust (rustup), Python >= 3.9 with venv (`$PYTHON`, default python3), Node.js >= 20 with npm, and
# Chromium (Debian: `apt-get install chromium`; or set CHROMIUM to a Chromium/Chrome binary). It adds what rustup and cargo can install itself: the
# wasm32-unknown-unknown target of the pinned toolchain and wasm-bindgen-cli of the pinned version.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
step() { printf '\n== %s (%ss)\n' "$1" "$(( $(date +%s) - started ))"; }
source scripts/cargo-step.sh

step "toolchain: the wasm32 target"
toolchain=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)
rustup target add --toolchain "$toolchain" wasm32-unknown-unknown

step "Rust tests"
cargo_step cargo test --workspace

step "Python package: the wheel, installed into a fresh virtual environment, and its tests"
# maturin and pytest come from PyPI into virtual environments under target/ (nothing system-wide). The
# wheel is built with the dev profile (the suite plans small tasks; a release wheel is `maturin build
# --release`, docs/PYTHON.md) and tested against the CLI the Rust tests just built.
python=${PYTHON:-python3}
tools=target/python-tools
if [ ! -x "$tools/bin/maturin" ]; then
  "$python" -m venv "$tools"
  "$tools/bin/pip" install --quiet "maturin>=1.9,<2"
fi
rm -rf target/python-wheel target/python-test
(cd python && "../$tools/bin/maturin" build --quiet --out ../target/python-wheel)
"$python" -m venv target/python-test
target/python-test/bin/pip install --quiet target/python-wheel/shardplan-*.whl pytest
SHARDPLAN_CLI="$PWD/target/debug/shardplan" target/python-test/bin/pytest -q -p no:cacheprovider python/tests

step "wasm-bindgen-cli"
want=$(sed -n 's/^wasm-bindgen = "=\(.*\)".*/\1/p' Cargo.toml)
have=$(wasm-bindgen --version 2>/dev/null | awk '{print $2}' || true)
if [ "$have" != "$want" ]; then
  echo "installing wasm-bindgen-cli $want (found: ${have:-none})"
  # No --locked: the CLI's lock file names a version missing from the index (docs/WEB.md).
  cargo install wasm-bindgen-cli --version "$want"
fi
wasm-bindgen --version

step "web demo: build the wasm bundle"
web-demo/build.sh

step "the bundle's binding under Node (the module the page ships)"
(cd web-demo && node --test tests/binding.mjs)

step "web demo: end-to-end test in headless Chromium"
chromium=${CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$chromium" ]; then
  echo "Chromium not found at $chromium: install it (Debian: apt-get install chromium) or set CHROMIUM" >&2
  exit 1
fi
(cd web-demo && npm ci --no-audit --no-fund --loglevel=error && CHROMIUM="$chromium" node tests/e2e.mjs)

step "all tests passed in $(( $(date +%s) - started ))s"
