#!/usr/bin/env bash
# Planning-time benchmark: the `torchrec` port versus TorchRec 1.9.2 itself, on the same tasks:
# 40 tables / 4 ranks (4 GiB, max dim 128), 100 / 8 and 200 / 16 (max dim 64, 8 GiB caps: at the
# protocol's 4 GiB TorchRec finds no plan for these), all `shardplan tasks --seed 1` draws from the pool.
#
#   bash tools/torchrec_reference/bench.sh [REPEATS]      # needs tools/torchrec_reference/install.sh first
#
# Port: `shardplan eval --algos torchrec` over a suite holding the task REPEATS times (p50 and p95 of the
# wall time of Planner::plan). TorchRec: reference.py, wall time of EmbeddingShardingPlanner.plan() with
# its stats printout off, REPEATS runs. Both single-threaded on the same machine.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
venv=${TORCHREC_VENV:-$(dirname "$repo")/.venv-torchrec}
repeats=${1:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$repo"
cargo build --release -q -p shardplan-cli
sp=target/release/shardplan
$sp tasks --devices 4 --max-dim 128 --table-range 40..41 --count 1 --seed 1 --out "$work/t40x4.jsonl" >/dev/null
$sp tasks --devices 8 --max-dim 64 --table-range 100..101 --count 1 --seed 1 --out "$work/t100x8.jsonl" >/dev/null
$sp tasks --devices 16 --max-dim 64 --table-range 200..201 --count 1 --seed 1 --out "$work/t200x16.jsonl" >/dev/null
for t in t100x8 t200x16; do sed -i 's/4294967296/8589934592/g' "$work/$t.jsonl"; done
printf '| tables / ranks | port p50 ms | port p95 ms | TorchRec runs (s) |\n|---|---|---|---|\n'
for t in t40x4 t100x8 t200x16; do
  for _ in $(seq "$repeats"); do cat "$work/$t.jsonl"; done >"$work/$t.rep.jsonl"
  port=$($sp eval --tasks "$work/$t.rep.jsonl" --algos torchrec --format json |
    python3 -c 'import json,sys; s=json.load(sys.stdin)["summary"][0]; print("%.2f | %.2f" % (s["plan_time_p50_ms"], s["plan_time_p95_ms"]))')
  ref=""
  for _ in $(seq "$repeats"); do
    "$venv/bin/python" tools/torchrec_reference/reference.py --tasks "$work/$t.jsonl" --out "$work/ref.json" 2>/dev/null
    ref="$ref $(python3 -c 'import json,sys; print("%.2f" % json.load(open(sys.argv[1]))["planning_time_s"])' "$work/ref.json")"
  done
  n=${t#t}
  printf '| %s | %s |%s |\n' "${n/x/ \/ }" "$port" "$ref"
done
