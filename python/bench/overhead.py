"""What a Python call costs over the native CLI's planning time, on the same tasks.

    python python/bench/overhead.py --cli target/release/shardplan [--tasks 30] [--reps 5] [--planner auto]

with the release wheel installed (`maturin build --release`, docs/PYTHON.md). Tasks: the NeuroShard
protocol's first `--tasks` tasks at 4 devices, max dim 128 (`shardplan tasks --devices 4 --max-dim 128
--seed 0`). Native: `shardplan eval` on those tasks, `--reps` times, each task's median planning time (the
planner call alone, as the CLI times it). Python: the whole `shardplan.plan(...)` call on the same tables
and caps (building the cost model, planning, pricing the plan, JSON both ways), `--reps` times, each
task's median. Both on a model that has not seen the task. Prints the per-task overhead's median and the
ratio of the summed medians; only tasks that fit are counted. Run it on an idle machine.
"""

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import shardplan


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--tasks", type=int, default=30)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--planner", default="auto")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        suite = Path(tmp) / "tasks.jsonl"
        subprocess.run([args.cli, "tasks", "--devices", "4", "--max-dim", "128", "--seed", "0", "--count",
                        str(args.tasks), "--out", str(suite)], check=True, capture_output=True)
        tasks = [json.loads(line) for line in suite.read_text().splitlines() if line.strip()]
        native: list[list[float]] = [[] for _ in tasks]
        for _ in range(args.reps):
            out = Path(tmp) / "eval.json"
            subprocess.run([args.cli, "eval", "--tasks", str(suite), "--algos", args.planner, "--format", "json",
                            "--out", str(out)], check=True, capture_output=True)
            [row] = json.loads(out.read_text())["per_task"]
            for k, o in enumerate(row["outcomes"]):
                if o["cost_ms"] is not None:
                    native[k].append(o["plan_time_ms"])
    python: list[list[float]] = [[] for _ in tasks]
    for _ in range(args.reps):
        for k, t in enumerate(tasks):
            start = time.perf_counter()
            try:
                shardplan.plan(t["tables"], devices=t["devices"]["mem_cap_bytes"], planner=args.planner, seed=0)
            except shardplan.ShardplanError:
                continue
            python[k].append((time.perf_counter() - start) * 1e3)
    pairs = [(statistics.median(n), statistics.median(p)) for n, p in zip(native, python) if n and p]
    over = [p / n - 1 for n, p in pairs]
    total_n, total_p = sum(n for n, _ in pairs), sum(p for _, p in pairs)
    print(f"{len(pairs)} tasks that fit of {len(tasks)}, {args.reps} runs each, planner {args.planner}")
    print(f"native planning p50 {statistics.median(n for n, _ in pairs):.3f} ms; "
          f"Python call p50 {statistics.median(p for _, p in pairs):.3f} ms")
    print(f"overhead per task: median {100 * statistics.median(over):+.1f}%, "
          f"min {100 * min(over):+.1f}%, max {100 * max(over):+.1f}%; "
          f"summed: {100 * (total_p / total_n - 1):+.1f}%")


if __name__ == "__main__":
    main()
