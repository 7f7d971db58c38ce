#!/usr/bin/env python3
"""Where a strategy's window-to-window step sd comes from, from a `shardplan dynamic --per-window --out` report.

The replay's step sd (`window_fanout_step_sd`) is sqrt(sum of squared steps / (2 * steps)) over the mean fanouts
of consecutive scored windows. On a stream with transients (the first updates after the hash start, an abrupt
shift of the request pattern) a few large steps can decide it: a strategy that recovers slowly from a shift
spreads its recovery over more, smaller steps. This script prints, per shard count and strategy, the step sd of
every seed's windows as the replay computes it and the same statistic with the steps into the given windows
left out (`--skip 2,12-17`: the step into window 2 and the steps into windows 12 to 17), each averaged over
seeds, and every other strategy's difference to `--against` paired by seed (mean +- standard error, and the
seeds in which it is lower).

Usage: tools/alis_step_sd.py REPORT.json [REPORT.json ...] --skip 2,12-17 [--against alis-base]

Several reports (for example one run with `--polish` beside one without) are read as one when their seeds and
shard counts match; a strategy name that occurs in more than one report gets the report's file name appended.
"""

import argparse
import json
import math
import os
import statistics
import sys


def parse_skip(text):
    """'2,12-17' -> {2, 12, 13, ..., 17}; anything else exits naming --skip and the part."""
    out = set()
    for part in filter(None, text.split(",")):
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if lo > hi or lo < 0:
                    raise ValueError
                out.update(range(lo, hi + 1))
            else:
                out.add(int(part))
        except ValueError:
            sys.exit(f"--skip {text!r}: {part!r} is not a window or a range lo-hi of windows (e.g. 2,12-17)")
    return out


def step_sd(series, skip):
    """The replay's step sd of (window, fanout) pairs, leaving out steps into a window in `skip`."""
    steps = [b[1] - a[1] for a, b in zip(series, series[1:]) if b[0] not in skip]
    if not steps:
        return float("nan")
    return math.sqrt(sum(s * s for s in steps) / (2 * len(steps)))


def load(paths):
    """{(shards, strategy): {seed: [(window, mean fanout), ...]}} over all reports."""
    cells, seen = {}, {}
    for path in paths:
        try:
            with open(path) as f:
                report = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            sys.exit(f"{path}: not a readable shardplan dynamic report ({e})")
        for cell in report.get("cells", []):
            windows = cell.get("windows")
            if not windows:
                sys.exit(f"{path}: no per-window results (run shardplan dynamic with --per-window --out)")
            name = cell["strategy"]
            key = (cell["shards"], name)
            if key in seen and seen[key] != path:
                name = f"{name} ({os.path.basename(path)})"
                key = (cell["shards"], name)
            seen[key] = path
            runs = cell["runs"]
            cells[key] = {
                run["seed"]: [(w["window"], w["mean_fanout"]) for w in series if w["window"] > 0]
                for run, series in zip(runs, windows)
            }
    return cells


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reports", nargs="+")
    ap.add_argument("--skip", default="", help="windows whose incoming step is left out, e.g. 2,12-17")
    ap.add_argument("--against", default="alis-base", help="the strategy the others are paired with")
    a = ap.parse_args()
    skip = parse_skip(a.skip)
    cells = load(a.reports)
    print(f"| S | strategy | step sd, all windows | step sd, without steps into {a.skip or '-'} | "
          f"difference to {a.against} (all) | difference (without) |")
    print("|---|---|---|---|---|---|")
    for shards in sorted({s for s, _ in cells}):
        ref = cells.get((shards, a.against))
        for (s, name), seeds in sorted(cells.items()):
            if s != shards:
                continue
            full = {k: step_sd(v, set()) for k, v in seeds.items()}
            calm = {k: step_sd(v, skip) for k, v in seeds.items()}
            row = f"| {shards} | {name} | {statistics.mean(full.values()):.4f} | {statistics.mean(calm.values()):.4f} |"
            for mine in (full, calm):
                if ref is None or name == a.against:
                    row += " |"
                    continue
                theirs = {k: step_sd(v, set() if mine is full else skip) for k, v in ref.items()}
                d = [mine[k] - theirs[k] for k in mine if k in theirs]
                if not d:
                    row += " no common seeds |"
                    continue
                se = statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else 0.0
                lower = sum(x < 0 for x in d)
                row += f" {statistics.mean(d):+.4f} ± {se:.4f} ({lower}/{len(d)}) |"
            print(row)


if __name__ == "__main__":
    main()
