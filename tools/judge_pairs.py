#!/usr/bin/env python3
"""Task-by-task measured comparison of two planners in a measured bench.

Usage: tools/judge_pairs.py [--compute-only] BENCH_PLANS OURS:THEIRS [OURS:THEIRS ...]
  e.g. tools/judge_pairs.py bench-h100 neuroshard:torchrec neuroshard+refine:neuroshard

BENCH_PLANS is a `bench-plans` folder written by `shardplan bench --measure-with` (one sub-folder per cell,
`taskN.measured.json` in each). For every cell and pair, over the tasks where both planners' plans were
measured: the gain (theirs − ours) / theirs of the measured plan cost, mean ± standard error over the tasks,
and on how many tasks ours was not slower; with more than one cell, then every pair over all the cells'
tasks together (`all`). Single planners, unlike the bench's own "best of `neuroshard` /
`neuroshard+refine`" column (the best of two noisy measurements favours itself). A plan is named by
its planner or by its file's label (`taskN_LABEL.plan.json`, the variants of `tools/judge_variants.sh`).
With `--compute-only` a plan's cost is its slowest device's measured compute alone, leaving out comm
(which a bench measured with `--measure-comm-from-plan` took from the plan's prediction). Nothing is
measured. Standard library and `paired_eval.py` (beside it) only.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from paired_eval import mean_se  # noqa: E402  (the same mean ± standard error as the eval comparison)


def plan_cost(measured, compute_only):
    """A measured plan report's cost: the plan's cost, or its slowest device's compute alone."""
    if compute_only:
        return max(d["compute_ms"] for d in measured["devices"])
    return measured["cost_ms"]


def measured_costs(cell, compute_only):
    """{task: {name: measured plan cost ms}} of one cell folder. A plan is named by its file
    (`taskN_LABEL.plan.json`: LABEL, as `tools/judge_variants.sh` names its variants) and, where no other
    plan of the task has the same planner, by its planner too (`neuroshard+refine`)."""
    out = {}
    for f in sorted(cell.glob("task*.measured.json")):
        doc = json.loads(f.read_text())
        task = f.name.split(".")[0]
        planners = [p["planner"] for p in doc["plans"]]
        costs = {}
        for p in doc["plans"]:
            cost = plan_cost(p["measured"], compute_only)
            name = Path(p["plan"]).name
            if name.startswith(task + "_") and name.endswith(".plan.json"):
                costs[name[len(task) + 1 : -len(".plan.json")]] = cost
            if planners.count(p["planner"]) == 1:
                costs[p["planner"]] = cost
        out[task] = costs
    return out


def main():
    args = sys.argv[1:]
    compute_only = "--compute-only" in args
    args = [a for a in args if a != "--compute-only"]
    if len(args) < 2 or any(":" not in a for a in args[1:]):
        sys.exit(__doc__)
    root = Path(args[0])
    cells = sorted(d for d in root.iterdir() if d.is_dir())
    if not cells:
        sys.exit(f"{root}: no cell folders")
    print("| cell | ours vs theirs | tasks | gain, mean ± s.e. | ours not slower |")
    print("|---|---|---|---|---|")
    pooled = {pair: [] for pair in args[1:]}
    for cell in cells:
        tasks = measured_costs(cell, compute_only)
        for pair in args[1:]:
            ours, theirs = pair.split(":", 1)
            gains = [
                (c[theirs] - c[ours]) / c[theirs]
                for c in tasks.values()
                if ours in c and theirs in c and c[theirs] > 0
            ]
            pooled[pair] += gains
            print_row(cell.name, ours, theirs, gains)
    if len(cells) > 1:
        for pair, gains in pooled.items():
            print_row("all", *pair.split(":", 1), gains)


def print_row(where, ours, theirs, gains):
    """One row: the gains' count, mean ± standard error, and how many are not negative."""
    if not gains:
        print(f"| {where} | {ours} vs {theirs} | 0 | - | - |")
        return
    n = len(gains)
    mean, se = mean_se(gains)
    se = float("nan") if se is None else se
    wins = sum(g >= 0 for g in gains)
    print(f"| {where} | {ours} vs {theirs} | {n} | {100 * mean:+.1f}% ± {100 * se:.1f} | {wins}/{n} |")

if __name__ == "__main__":
    main()
