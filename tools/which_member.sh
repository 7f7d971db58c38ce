#!/usr/bin/env bash
# Which member of a portfolio planner made each plan? Replans every task of a variant run
# (tools/judge_variants.sh) with each member alone, under the same task, memory rule, cost model and
# seed, and names the members whose plan is, piece for piece, the variant's plan.
#
# Usage: tools/which_member.sh CELL_DIR OUT_DIR LABEL MEMBER [MEMBER ...]
#   e.g. tools/which_member.sh bench-epyc-fresh-plans/d8_dim32 out/auto2/d8_dim32 auto2 \
#          size-lookup neuroshard-fast torchrec+refine
# CELL_DIR is the bench cell the variant run read, OUT_DIR the run's output (its TASK.tables.json and
# TASK_LABEL.plan.json). Prints one line per task: the task and the matching members ("?" if none).
# Environment: COST_MODEL (cpu-epyc-2t). Members' plans are kept in OUT_DIR as TASK_member_ALGO.json.
set -euo pipefail
if [ $# -lt 4 ]; then
  sed -n '2,12p' "$0" >&2
  exit 2
fi
cell=$1 out=$2 label=$3
shift 3
root=$(cd "$(dirname "$0")/.." && pwd)
plan_bin=$root/target/release/shardplan
[ -x "$plan_bin" ] || { echo "missing $plan_bin: cargo build --release -p shardplan-cli" >&2; exit 1; }
model=${COST_MODEL:-cpu-epyc-2t}
shopt -s nullglob
found=("$out"/task*_"$label".plan.json)
[ ${#found[@]} -gt 0 ] || { echo "no task*_$label.plan.json in $out" >&2; exit 1; }
for p in "${found[@]}"; do
  task=$(basename "$p" "_$label.plan.json")
  # The task's devices, caps and seed, as the variant run read them from the bench's plan document.
  bench=("$cell/${task}"_*.plan.json)
  [ ${#bench[@]} -gt 0 ] || { echo "no bench plan of $task in $cell" >&2; exit 1; }
  task_line=$("$root/tools/plan_task.py" "${bench[0]}")
  read -r devices mem seed <<<"$task_line"
  [ -f "$out/$task.tables.json" ] || { echo "no $out/$task.tables.json: run tools/judge_variants.sh first" >&2; exit 1; }
  members=()
  for algo in "$@"; do
    m=$out/${task}_member_$algo.json
    if [ ! -f "$m" ]; then
      "$plan_bin" plan --tables "$out/$task.tables.json" --devices "$devices" --mem "$mem" --memory-rule torchrec \
        --cost-model "$model" --algo "$algo" --seed "$seed" --out "$m.tmp" >/dev/null 2>"$m.err" || {
        # A member may refuse the task (no plan within memory); say so and compare the others.
        echo "$task: $algo returned no plan: $(tail -1 "$m.err")" >&2
        rm -f "$m.tmp" "$m.err"
        continue
      }
      rm -f "$m.err"
      mv "$m.tmp" "$m"
    fi
    members+=("$algo=$m")
  done
  python3 - "$task" "$p" "${members[@]}" <<'PY'
import json, sys
def pieces(path):
    return sorted(json.dumps(p, sort_keys=True) for p in json.load(open(path))["pieces"])
task, plan = sys.argv[1], pieces(sys.argv[2])
same = [m.split("=", 1)[0] for m in sys.argv[3:] if pieces(m.split("=", 1)[1]) == plan]
print(task, ",".join(same) or "?")
PY
done
