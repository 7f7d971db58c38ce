#!/usr/bin/env python3
"""Two settings of the serving loop set against each other: `shardplan-serve bench --out` reports in two arms.

Usage: tools/serve_arms.py A_LABEL A.json [A.json ...] -- B_LABEL B.json [B.json ...]

Each arm is one or more JSON reports of `shardplan-serve bench` (run alternately, A then B, so that the
host's drift falls on both). Per shard count and strategy: the runs of each arm, the median and range of
p50, p95 and p99 latency, throughput, fanout, epoch lag and update time, and for each figure in how many of
the cross-arm pairs of runs arm B's is the lower (of a × b pairs; half of them where the arms do not
differ). A strategy the setting cannot affect (`hash`, whose update is empty) is the control: its count
shows how far the host's drift between the arms' runs moves a figure by itself. Then every correctness
counter summed over all runs. Standard library only; nothing is measured.
"""

import itertools
import json
import statistics
import sys
from collections import defaultdict

FIGURES = (
    ("p50_us", "p50 µs", "{:.0f}"),
    ("p95_us", "p95 µs", "{:.0f}"),
    ("p99_us", "p99 µs", "{:.0f}"),
    ("throughput_rps", "req/s", "{:.0f}"),
    ("mean_fanout", "fanout", "{:.3f}"),
    ("mean_epoch_lag", "epoch lag", "{:.2f}"),
    ("update_ms", "update ms", "{:.1f}"),
)
COUNTERS = ("misses", "wrong_values", "failed_requests", "stale_lookups", "stale_copies", "lost_rows", "wrong_at_rest", "stray_rows")


def spread(values, fmt):
    """`median [min–max]` of a figure over runs."""
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}–{fmt.format(max(values))}]"


def load(files):
    """(shards, strategy) → the runs of these reports."""
    runs = defaultdict(list)
    for f in files:
        try:
            doc = json.load(open(f))
        except (OSError, ValueError) as e:
            sys.exit(f"{f}: {e}")
        if "cells" not in doc:
            sys.exit(f"{f}: not a shardplan-serve bench report (no cells)")
        for c in doc["cells"]:
            runs[(c["shards"], c["strategy"])].append(c)
    return runs


def main():
    args = sys.argv[1:]
    if "--" not in args:
        sys.exit(__doc__.split("\n\n")[1])
    i = args.index("--")
    a, b = args[:i], args[i + 1 :]
    if len(a) < 2 or len(b) < 2:
        sys.exit(__doc__.split("\n\n")[1])
    (la, ra), (lb, rb) = (a[0], load(a[1:])), (b[0], load(b[1:]))
    head = " | ".join(f"{name}: {la} → {lb} ({lb} lower)" for _, name, _ in FIGURES)
    print(f"| S | strategy | runs | {head} |")
    print("|---|---|---|" + "---|" * len(FIGURES))
    for key in sorted(set(ra) & set(rb)):
        xa, xb = ra[key], rb[key]
        cols = []
        for fig, _, fmt in FIGURES:
            va, vb = [c[fig] for c in xa], [c[fig] for c in xb]
            lower = sum(y < x for x, y in itertools.product(va, vb))
            cols.append(f"{spread(va, fmt)} → {spread(vb, fmt)} ({lower}/{len(va) * len(vb)})")
        print(f"| {key[0]} | {key[1]} | {len(xa)} + {len(xb)} | " + " | ".join(cols) + " |")
    every = [c for r in (ra, rb) for runs in r.values() for c in runs]
    print(f"\n{len(every)} runs, {sum(c.get('checks', 0) for c in every)} inventory checks: "
          + ", ".join(f"{k} {sum(c.get(k, 0) for c in every)}" for k in COUNTERS))


if __name__ == "__main__":
    main()
