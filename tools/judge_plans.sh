#!/usr/bin/env bash
# The measured judge: every planner's plans for NeuroShard-protocol tasks, timed on real hardware.
#
#   tools/judge_plans.sh plans   PLAN_DIR [TASKS=10] [COST_MODEL=h100]   (anywhere; needs target/release/shardplan)
#   tools/judge_plans.sh measure PLAN_DIR OUT_DIR COLLECT_BIN            (on the GPU machine)
#   tools/judge_plans.sh report  OUT_DIR                                 (anywhere; python3)
#
# `measure` times each device's tables on the one GPU in turn (`measure-plan --comm-from-plan`): compute is
# measured, comm is the plan's cost model's (there is one GPU, so no all-to-all can be measured).
set -u
stage=$1
shift
case "$stage" in
plans)
    dir=$1 tasks=${2:-10} model=${3:-h100}
    mkdir -p "$dir"
    algos=$(target/release/shardplan list | awk '/^planners:/{p=1;next} /^cost models:/{p=0} p{print $1}')
    for seed in $(seq 0 $((tasks - 1))); do
        for a in $algos; do
            target/release/shardplan plan --devices 4 --mem 4GiB --max-dim 128 --seed "$seed" --algo "$a" \
                --cost-model "$model" --out "$dir/task${seed}_$a.json" > /dev/null 2> "$dir/task${seed}_$a.err" \
                && rm "$dir/task${seed}_$a.err"
        done
    done
    ls "$dir" | grep -c '\.json$'
    ;;
measure)
    dir=$1 out=$2 bin=$3
    mkdir -p "$out/measured"
    for f in "$dir"/*.json; do
        "$bin" --backend cuda --quiet measure-plan --comm-from-plan "$f" --out "$out/measured/$(basename "$f")" 2> /dev/null \
            || echo "failed: $f"
    done
    tar czf "$out/measured.tar.gz" -C "$out" measured && rm -rf "$out/measured"
    ;;
report)
    python3 - "$1" <<'PY'
import glob, json, os, statistics, sys, tarfile
out = sys.argv[1]
rows = {}
with tarfile.open(os.path.join(out, "measured.tar.gz")) as t:
    for m in t.getmembers():
        if not m.name.endswith(".json"):
            continue
        d = json.load(t.extractfile(m))
        task, algo = os.path.basename(m.name)[: -len(".json")].split("_", 1)
        rows.setdefault(algo, {})[task] = (d["predicted"]["cost_ms"], d["measured"]["cost_ms"])
tasks = sorted(set.intersection(*(set(v) for v in rows.values())))
print(f"tasks every planner solved: {len(tasks)}; comm modelled, compute measured")
print("| planner | solved | mean measured cost, common tasks (ms) | mean predicted (ms) | mean abs. prediction error |")
print("|---|---|---|---|---|")
for algo, v in sorted(rows.items(), key=lambda kv: statistics.mean(kv[1][t][1] for t in tasks) if tasks else 0):
    meas = [v[t][1] for t in tasks]
    pred = [v[t][0] for t in tasks]
    err = [abs(p - m) / m for p, m in (v[t] for t in v)]
    print(f"| {algo} | {len(v)} | {statistics.mean(meas):.3f} | {statistics.mean(pred):.3f} | {100 * statistics.mean(err):.1f}% |")
PY
    ;;
*)
    echo "unknown stage $stage" >&2
    exit 2
    ;;
esac
