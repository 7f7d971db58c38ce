#!/usr/bin/env python3
"""Task-by-task comparison of planners across `shardplan eval --format json` results.

Usage: tools/paired_eval.py A.json:PLANNER B.json:PLANNER [...]

The first argument is the reference. For each other planner it prints, over the tasks both
planners solved, the mean relative cost difference (reference cheaper by, %) with its standard
error, and how many tasks the reference was not dearer on. The runs must be of the same suite
(same --devices, --max-dim, --count, --seed and rules); the files may come from different builds,
which is how a change is compared with the build before it.
"""
import json
import math
import sys


def mean_se(values):
    """Mean and standard error of the mean of `values` (`None` for the error of fewer than two)."""
    n = len(values)
    mean = sum(values) / n
    se = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n) if n > 1 else None
    return mean, se


def costs(spec):
    path, planner = spec.rsplit(":", 1)
    with open(path) as f:
        doc = json.load(f)
    for row in doc["per_task"]:
        if row["planner"] == planner:
            return [o["cost_ms"] for o in row["outcomes"]]
    sys.exit(f"{path}: no planner `{planner}` (has: {', '.join(r['planner'] for r in doc['per_task'])})")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    ref_spec, others = sys.argv[1], sys.argv[2:]
    ref = costs(ref_spec)
    for spec in others:
        other = costs(spec)
        if len(other) != len(ref):
            sys.exit(f"{spec}: {len(other)} tasks, the reference has {len(ref)}: not the same suite")
        gains = [100.0 * (o - r) / o for r, o in zip(ref, other) if r is not None and o is not None and o > 0]
        n = len(gains)
        if n == 0:
            print(f"{ref_spec} vs {spec}: no task both solved")
            continue
        mean, se = mean_se(gains)
        se = 0.0 if se is None else se
        not_dearer = sum(1 for r, o in zip(ref, other) if r is not None and o is not None and r <= o)
        print(f"{ref_spec} cheaper than {spec} by {mean:+.2f}% ± {se:.2f} (s.e.), not dearer on {not_dearer}/{n} tasks")


if __name__ == "__main__":
    main()
