#!/usr/bin/env bash
# Builds the planner's WebAssembly module into web-demo/pkg/ (git-ignored).
# Needs the wasm32 target and wasm-bindgen-cli of the pinned version (0.2.130; see README).
set -euo pipefail
cd "$(dirname "$0")/.."
want=$(sed -n 's/^wasm-bindgen = "=\(.*\)".*/\1/p' Cargo.toml)
have=$(wasm-bindgen --version 2>/dev/null | awk '{print $2}' || true)
if [ "$have" != "$want" ]; then
  echo "wasm-bindgen-cli $want is needed (found: ${have:-none}): cargo install wasm-bindgen-cli --version $want" >&2
  exit 1
fi
# simd128 lets the compiler vectorise the searches' and evaluators' loops; every current browser and
# Node >= 16 has it.
source scripts/cargo-step.sh
cargo_step env CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS='-C target-feature=+simd128' \
  cargo build --profile wasm-release --target wasm32-unknown-unknown -p planner-wasm
rm -rf web-demo/pkg
wasm-bindgen --target web --remove-name-section --out-dir web-demo/pkg \
  "${CARGO_TARGET_DIR:-target}/wasm32-unknown-unknown/wasm-release/planner_wasm.wasm"
wasm=web-demo/pkg/planner_wasm_bg.wasm
echo "built $wasm: $(stat -c %s "$wasm") bytes, $(gzip -9c "$wasm" | wc -c) gzipped"
