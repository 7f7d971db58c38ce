#!/usr/bin/env bash
# Does a planning option make the plans faster when measured? Replans a measured bench cell's tasks with
# each variant and times the variants beside the bench's own plans, interleaved in the same rounds.
#
# Usage: tools/judge_variants.sh CELL_DIR OUT_DIR [LABEL=ALGO[:FLAGS] ...]
#   e.g. tools/judge_variants.sh bench-epyc-plans/d8_dim32 out/emax/d8_dim32 \
#          'refine-emax=neuroshard+refine:--expected-max' 'risk1=neuroshard+refine:--risk 1'
#
# CELL_DIR is one cell of a measured bench (`bench-plans/d4_dim32`, written by `shardplan bench
# --measure-with`), or of a bench that only wrote its plans (`--plans-only`). For each of its tasks, every
# variant replans the same task (its tables, devices, caps and seed, read back from the bench's plan
# documents) with `shardplan plan --algo ALGO FLAGS`, under the TorchRec memory rule and the cost model
# COST_MODEL. The task's bench plans named in BASE and the variants' plans are then measured together by
# `measure-plan`, interleaved in the same rounds, so every comparison is made within one measurement. Prints each plan's measured mean and every variant's
# paired gain over each bench plan (mean ± standard error over tasks, tasks where it was not slower).
# With no variant, the bench's plans named in BASE are measured again: a second sitting (e.g. ROUNDS=4).
# Needs target/release/{shardplan,shardplan-collect}. Reruns reuse the plans and measurements on disk.
# Environment: COST_MODEL (cpu-epyc-2t), BASE ("torchrec neuroshard neuroshard-refine"), BATCH (4096),
# ROUNDS (2), REPS (6), QUIET_REF_MS (none: the machine's quiet reference-kernel time, e.g. its profile
# card's compute.reference_ms; the guard then re-takes samples, and waits before a task, while the machine
# reads over 1.15x it), GUARD_RETRIES (the collector's 12: how many paused tries, 30 s apart at most, a
# sample gets before the run stops on a busy machine; up to 100).
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,23p' "$0" >&2
  exit 2
fi
cell=$1 out=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
plan_bin=$root/target/release/shardplan collect_bin=$root/target/release/shardplan-collect
for b in "$plan_bin" "$collect_bin"; do
  [ -x "$b" ] || { echo "missing $b: cargo build --release -p shardplan-cli -p collector-native" >&2; exit 1; }
done
model=${COST_MODEL:-cpu-epyc-2t} batch=${BATCH:-4096} rounds=${ROUNDS:-2} reps=${REPS:-6}
read -r -a base_names <<<"${BASE:-torchrec neuroshard neuroshard-refine}"
for v in "$@"; do
  [[ $v =~ ^[A-Za-z0-9._+-]+=[A-Za-z0-9._+-]+(:.*)?$ ]] || { echo "bad variant '$v': LABEL=ALGO[:FLAGS]" >&2; exit 2; }
done
mkdir -p "$out"
shopt -s nullglob
# The cell's tasks: those it measured, or, in a cell written by `shardplan bench --plans-only`, those with
# a plan of the first BASE planner.
tasks=()
for m in "$cell"/task*.measured.json; do tasks+=("$(basename "$m" .measured.json)"); done
if [ ${#tasks[@]} -eq 0 ]; then
  for p in "$cell"/task*_"${base_names[0]}".plan.json; do tasks+=("$(basename "$p" "_${base_names[0]}.plan.json")"); done
fi
[ ${#tasks[@]} -gt 0 ] || { echo "no task*.measured.json nor task*_${base_names[0]}.plan.json in $cell" >&2; exit 1; }
for task in "${tasks[@]}"; do
  plans=()
  for b in "${base_names[@]}"; do
    p=$cell/${task}_$b.plan.json
    [ -f "$p" ] || { echo "skipping $task: no $b plan" >&2; continue 2; }
    plans+=("$p")
  done
  # The task's tables, devices, caps and seed, read back from the bench's first plan document.
  task_line=$("$root/tools/plan_task.py" "${plans[0]}" "$out/$task.tables.json")
  read -r devices mem seed <<<"$task_line"
  for v in "$@"; do
    label=${v%%=*} spec=${v#*=}
    algo=${spec%%:*} flags=""
    [[ $spec == *:* ]] && flags=${spec#*:}
    p=$out/${task}_$label.plan.json
    if [ ! -f "$p" ]; then
      # shellcheck disable=SC2086 # FLAGS are words for the command line
      "$plan_bin" plan --tables "$out/$task.tables.json" --devices "$devices" --mem "$mem" --memory-rule torchrec \
        --cost-model "$model" --algo "$algo" --seed "$seed" $flags --out "$p.tmp" >/dev/null
      mv "$p.tmp" "$p"
    fi
    plans+=("$p")
  done
  if [ ! -f "$out/$task.measured.json" ]; then
    # The bench's measurement seed (its plan documents carry the same task seed).
    seed_m=$seed
    [ -f "$cell/$task.measured.json" ] &&
      seed_m=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["seed"])' "$cell/$task.measured.json")
    echo "measuring $task (${#plans[@]} plans)" >&2
    quiet=()
    [ -n "${QUIET_REF_MS:-}" ] && quiet=(--guard-quiet-reference-ms "$QUIET_REF_MS")
    [ -n "${GUARD_RETRIES:-}" ] && quiet+=(--guard-retries "$GUARD_RETRIES")
    "$collect_bin" --backend cpu --quiet "${quiet[@]}" measure-plan "${plans[@]}" --batch-size "$batch" --reps "$reps" \
      --rounds "$rounds" --seed "$seed_m" --out "$out/$task.measured.json"
  fi
done
python3 - "$out" "${base_names[@]}" -- "$@" <<'EOF'
import json, math, statistics, sys
from pathlib import Path
args = sys.argv[2:]
bases, variants = args[: args.index("--")], [v.split("=", 1)[0] for v in args[args.index("--") + 1 :]]
costs = {}
for m in sorted(Path(sys.argv[1]).glob("task*.measured.json")):
    for p in json.loads(m.read_text())["plans"]:
        name = Path(p["plan"]).name.split("_", 1)[1].removesuffix(".plan.json")
        costs.setdefault(name, {})[m.name] = p["measured"]["cost_ms"]
if not costs:
    sys.exit("no measurements")
tasks = sorted(set.intersection(*(set(v) for v in costs.values())))
print(f"{len(tasks)} tasks; measured mean ms:")
for name, v in costs.items():
    print(f"  {name:34s} {statistics.mean(v[t] for t in tasks):8.3f}")
for var in variants:
    for base in bases:
        if var not in costs or base not in costs:
            continue
        gains = [100 * (costs[base][t] - costs[var][t]) / costs[base][t] for t in tasks]
        se = statistics.stdev(gains) / math.sqrt(len(gains)) if len(gains) > 1 else float("nan")
        print(f"  {var} vs {base}: {statistics.mean(gains):+.1f}% ± {se:.1f} (s.e.), "
              f"not slower on {sum(g >= 0 for g in gains)}/{len(gains)} tasks")
EOF
