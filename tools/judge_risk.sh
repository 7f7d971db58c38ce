#!/usr/bin/env bash
# Does planning against mean + r·sd of the ensemble (`--risk r`) make the search's plans faster when measured?
#
# Usage: tools/judge_risk.sh CELL_DIR OUT_DIR R [R ...]
#
# CELL_DIR is one cell of a measured bench (`bench-plans/d4_dim32`, written by `shardplan bench
# --measure-with` with an ensemble profile). For each of its measured tasks, `neuroshard+refine` replans the
# same task with `--risk R` for every R given, and the task's `torchrec` and `neuroshard+refine` plans are
# measured again together with those risk plans, interleaved in the same rounds (`measure-plan`), so the
# comparison is made within one measurement. Then it prints each variant's measured mean and the paired gain
# of every risk plan over the plain one. Needs target/release/{shardplan,shardplan-collect}.
# Environment: COST_MODEL (cpu-xeon-2t), BATCH (4096), ROUNDS (2), REPS (6).
set -euo pipefail
if [ $# -lt 3 ]; then
  sed -n '4,12p' "$0" >&2
  exit 2
fi
cell=$1 out=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
plan_bin=$root/target/release/shardplan collect_bin=$root/target/release/shardplan-collect
for b in "$plan_bin" "$collect_bin"; do
  [ -x "$b" ] || { echo "missing $b: cargo build --release -p shardplan-cli -p collector-native" >&2; exit 1; }
done
model=${COST_MODEL:-cpu-xeon-2t} batch=${BATCH:-4096} rounds=${ROUNDS:-2} reps=${REPS:-6}
mkdir -p "$out"
shopt -s nullglob
measured=("$cell"/task*.measured.json)
[ ${#measured[@]} -gt 0 ] || { echo "no task*.measured.json in $cell" >&2; exit 1; }
for m in "${measured[@]}"; do
  task=$(basename "$m" .measured.json)
  base=$cell/${task}_torchrec.plan.json plain=$cell/${task}_neuroshard-refine.plan.json
  [ -f "$base" ] && [ -f "$plain" ] || { echo "skipping $task: no torchrec or neuroshard+refine plan" >&2; continue; }
  # The task's tables, devices and seed, read back from the bench's own files.
  read -r devices mem seed < <(python3 - "$base" "$m" "$out/$task.tables.json" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
json.dump(doc["task"]["tables"], open(sys.argv[3], "w"))
caps = doc["task"]["devices"]["mem_cap_bytes"]
print(len(caps), ",".join(str(c) for c in caps), json.load(open(sys.argv[2]))["seed"])
EOF
  )
  plans=("$base" "$plain")
  for r in "$@"; do
    p=$out/${task}_neuroshard-refine-risk$r.plan.json
    if [ ! -f "$p" ]; then
      "$plan_bin" plan --tables "$out/$task.tables.json" --devices "$devices" --mem "$mem" --memory-rule torchrec \
        --cost-model "$model" --algo neuroshard+refine --risk "$r" --out "$p" >/dev/null
    fi
    plans+=("$p")
  done
  if [ ! -f "$out/$task.measured.json" ]; then
    echo "measuring $task (${#plans[@]} plans)" >&2
    "$collect_bin" --backend cpu --quiet measure-plan "${plans[@]}" --batch-size "$batch" --reps "$reps" \
      --rounds "$rounds" --seed "$seed" --out "$out/$task.measured.json"
  fi
done
python3 - "$out" <<'EOF'
import json, math, statistics, sys
from pathlib import Path
costs = {}
for m in sorted(Path(sys.argv[1]).glob("task*.measured.json")):
    for p in json.loads(m.read_text())["plans"]:
        name = Path(p["plan"]).name.split("_", 1)[1].removesuffix(".plan.json")
        costs.setdefault(name, {})[m.name] = p["measured"]["cost_ms"]
tasks = sorted(set.intersection(*(set(v) for v in costs.values())))
print(f"{len(tasks)} tasks; measured mean ms:")
for name, v in costs.items():
    print(f"  {name:34s} {statistics.mean(v[t] for t in tasks):8.3f}")
plain = costs.get("neuroshard-refine", {})
for name, v in costs.items():
    if not name.startswith("neuroshard-refine-risk"):
        continue
    gains = [100 * (plain[t] - v[t]) / plain[t] for t in tasks]
    se = statistics.stdev(gains) / math.sqrt(len(gains)) if len(gains) > 1 else float("nan")
    print(f"  {name} vs neuroshard-refine: {statistics.mean(gains):+.1f}% ± {se:.1f} (s.e.), "
          f"not slower on {sum(g >= 0 for g in gains)}/{len(gains)} tasks")
EOF
