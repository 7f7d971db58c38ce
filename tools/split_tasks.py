#!/usr/bin/env python3
"""Splits a measured bench's tasks into two halves, for training on one and judging on the other.

Usage: tools/split_tasks.py BENCH_PLANS OUT_A OUT_B

BENCH_PLANS is a `bench-plans` folder written by `shardplan bench --measure-with` (one sub-folder per cell,
`taskN.measured.json` and its `taskN_PLANNER.plan.json` files in each). Per cell, the measured tasks in
order of N go alternately to OUT_A (the first, third, ...) and OUT_B, each with its plan files, under the
same cell folder. Both halves are then bench folders too: `shardplan-train profile --data
OUT_A/*/task*.measured.json ...` trains on one, and `tools/judge_reprice.py OUT_B --cost-model PROFILE`
judges the profile on the other's measured plans. Standard library only.
"""

import re
import shutil
import sys
from pathlib import Path


def task_number(path):
    return int(re.match(r"task(\d+)\.measured\.json$", path.name).group(1))


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    bench, out_a, out_b = (Path(a) for a in sys.argv[1:])
    if not bench.is_dir():
        sys.exit(f"not a folder: {bench}")
    cells = sorted(c for c in bench.iterdir() if c.is_dir() and any(c.glob("task*.measured.json")))
    if not cells:
        sys.exit(f"{bench} holds no cell folder with taskN.measured.json")
    for cell in cells:
        tasks = sorted(cell.glob("task*.measured.json"), key=task_number)
        for k, measured in enumerate(tasks):
            dest = (out_a if k % 2 == 0 else out_b) / cell.name
            dest.mkdir(parents=True, exist_ok=True)
            stem = f"task{task_number(measured)}"
            shutil.copy2(measured, dest)
            for plan in cell.glob(f"{stem}_*.plan.json"):
                shutil.copy2(plan, dest)
        print(f"{cell.name}: {len(tasks[0::2])} tasks to {out_a}, {len(tasks[1::2])} to {out_b}")


if __name__ == "__main__":
    main()
