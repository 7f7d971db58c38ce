#!/usr/bin/env bash
# Validates and measures the CUDA path on a GPU machine that has no Rust, from binaries built elsewhere
# (xz-compressed in BIN_DIR: shardplan-collect, shardplan-collect-before (optional, an older build to
# compare kernels with), collect-tests (the collector's unit-test binary)).
#
#   tools/h100_session.sh validate BIN_DIR OUT_DIR           GPU tests, probe, bench (+before), torch
#   tools/h100_session.sh collect  BIN_DIR OUT_DIR NAME SECONDS [collect options...]
#   tools/h100_session.sh check    BIN_DIR OUT_DIR           nvidia-smi, GPU tests, a guarded 3-set canary
#   tools/h100_session.sh loop     BIN_DIR OUT_DIR LOOP_DIR SECONDS [calibrate options...]
#   tools/h100_session.sh bench    BIN_DIR OUT_DIR NAME SECONDS [bench options...]
#
# `collect` resumes OUT_DIR/NAME.jsonl(.gz) if present, runs `compute` for at most SECONDS (then stops
# cleanly with Ctrl-C semantics, exit 130) and writes OUT_DIR/NAME.jsonl.gz back.
# `loop` runs `shardplan-train calibrate --backend cuda --only measure` on LOOP_DIR (resumed when it
# exists) for at most SECONDS and packs LOOP_DIR into OUT_DIR/loop.tar.gz: its training stages run on
# another machine (`--only train`, same options), then `loop` again measures the next round.
# `bench` runs `shardplan bench` measuring on the GPU (compute timed, comm from the plan: one GPU) for at
# most SECONDS, plans and measurements in bench-NAME/ (a task measured before is kept), and packs them
# with NAME.json/.md into OUT_DIR/bench-NAME.tar.gz.
set -u
stage=$1 bins=$2 out=$3
shift 3
work=/tmp/shardplan-bin
mkdir -p "$work" "$out"
for f in "$bins"/*.xz; do xz -dc "$f" > "$work/$(basename "$f" .xz)"; chmod +x "$work/$(basename "$f" .xz)"; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
backend=${BACKEND:-cuda}
collect="$work/shardplan-collect --backend $backend"
case "$stage" in
validate)
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$out/nvidia-smi.txt"
    SHARDPLAN_GPU_TESTS=1 "$work/collect-tests" gpu 2>&1 | tee "$out/gpu-tests.log" | tail -5
    $collect probe > "$out/probe.json"
    rm -rf /tmp/dump
    $collect bench --compute-samples 40 --comm-samples 0 --seed 3 --dump /tmp/dump > "$out/bench_after.json"
    if [ -x "$work/shardplan-collect-before" ]; then
        "$work/shardplan-collect-before" --backend cuda bench --compute-samples 40 --comm-samples 0 --seed 3 > "$out/bench_before.json"
        $collect bench --compute-samples 40 --comm-samples 0 --seed 3 > "$out/bench_after_repeat.json"
    fi
    PYTHONUNBUFFERED=1 python3 "$(dirname "$0")/torch_embedding_bag_bench.py" --dump /tmp/dump --ours "$out/bench_after.json" --out "$out/torch.json"
    for f in "$out"/bench_*.json; do
        python3 -c "import json,sys;c=json.load(open(sys.argv[1]))['compute'];print(sys.argv[1].split('/')[-1],round(c['samples_per_s'],2),'samples/s fwd',round(c['fwd_effective_gb_per_s']),'GB/s bwd',round(c['bwd_effective_gb_per_s']),'GB/s')" "$f"
    done
    ;;
collect)
    name=$1 seconds=$2
    shift 2
    file="$out/$name.jsonl"
    [ -f "$file.gz" ] && gunzip -f "$file.gz"
    start=$(date +%s)
    timeout -s INT "$seconds" $collect --quiet compute --resume --out "$file" "$@"
    echo "exit $? after $(( $(date +%s) - start )) s: $(wc -l < "$file") samples in $file"
    gzip -f "$file"
    ;;
check)
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$out/nvidia-smi.txt"
    SHARDPLAN_GPU_TESTS=1 timeout 60 "$work/collect-tests" gpu 2>&1 | tee "$out/gpu-tests.log" | tail -3
    rm -f /tmp/canary.jsonl
    if timeout 60 $collect compute --samples 3 --batch-size 65536 --out /tmp/canary.jsonl > "$out/canary.log" 2>&1; then
        echo "guard: ok"
    else
        echo "guard: the guarded canary failed (measure with --no-guard)"; tail -3 "$out/canary.log"
    fi
    ;;
loop)
    dir=$1 seconds=$2
    shift 2
    start=$(date +%s)
    timeout -s INT "$seconds" "$work/shardplan-train" calibrate --collector "$work/shardplan-collect" --backend "$backend" \
        --only measure --out "$dir" "$@" 2>&1 | tee "$out/loop.log" | grep -v "^  " | tail -40
    pkill -INT -f "$work/shardplan-collect" && sleep 2
    echo "loop: stopped after $(( $(date +%s) - start )) s"
    tar czf "$out/loop.tar.gz" "$dir"
    ;;
bench)
    name=$1 seconds=$2
    shift 2
    start=$(date +%s)
    timeout -s INT "$seconds" "$work/shardplan" bench --measure-with "$work/shardplan-collect" --measure-backend "$backend" \
        --measure-comm-from-plan --plans-dir "bench-$name" --out "$name.json" --md "$name.md" "$@" > "$out/bench-$name.log" 2>&1
    rc=$?
    pkill -INT -f "$work/shardplan-collect" && sleep 2
    echo "bench $name: exit $rc after $(( $(date +%s) - start )) s, $(find "bench-$name" -name "*.measured.json" 2>/dev/null | wc -l) tasks measured"
    tail -3 "$out/bench-$name.log"
    tar czf "$out/bench-$name.tar.gz" "bench-$name" $(ls "$name.json" "$name.md" 2>/dev/null)
    ;;
*)
    echo "unknown stage $stage" >&2
    exit 2
    ;;
esac
