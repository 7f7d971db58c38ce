#!/usr/bin/env python3
"""Copies compute datasets with every sample's timings scaled by one more moment's error.

Every compute record of IN (JSON Lines, gzip or plain) gets a factor exp(N(0, sigma)) drawn from
--seed, applied to all its repetitions and medians (forward, backward, total), so the record stays
valid (`shardplan-collect check`) and its median moves as if it had been timed at another moment;
other records are copied unchanged. With --sigma 0.107, one moment's error of a set on the 2-vCPU EPYC
host (docs/COLLECTOR.md, "One moment's timing of a set"), a profile trained on the copies sees twice
the label variance of one trained on the originals: what that costs on a measured bench says what
timing the sets in rounds can buy (docs/COST_MODELS.md, "What the labels' noise costs").

    tools/label_noise.py --sigma 0.107 --seed 1 OUTDIR profiles/cpu-epyc/*.jsonl.gz
"""

import argparse
import gzip
import json
import math
import os
import random
import statistics
import sys


def scaled(t, f):
    reps = [x * f for x in t["reps_ms"]]
    return {"reps_ms": reps, "median_ms": statistics.median(reps)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sigma", type=float, required=True, help="log s.d. of the factor")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("outdir")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    if not (a.sigma >= 0 and math.isfinite(a.sigma)):
        sys.exit(f"--sigma = {a.sigma} is invalid: a finite log s.d. >= 0")
    os.makedirs(a.outdir, exist_ok=True)
    rng = random.Random(a.seed)
    for path in a.files:
        opener = gzip.open if path.endswith(".gz") else open
        name = os.path.basename(path)
        if name.endswith(".gz"):
            name = name[:-3]
        n = 0
        with opener(path, "rt") as src, open(os.path.join(a.outdir, name), "w") as dst:
            for line in src:
                if not line.strip():
                    continue
                r = json.loads(line)
                m = r["measurement"]
                if m.get("kind") == "compute":
                    f = math.exp(rng.gauss(0.0, a.sigma))
                    for k in ("fwd", "bwd", "total"):
                        m[k] = scaled(m[k], f)
                    n += 1
                dst.write(json.dumps(r) + "\n")
        print(f"{path}: {n} compute records scaled", file=sys.stderr)


if __name__ == "__main__":
    main()
