#!/usr/bin/env python3
"""Topology-aware against topology-blind plans, priced by the topology model (predicted costs).

For every point (devices, tables) and every seed, each planner plans the same sampled task twice with
`shardplan plan`: blind (one host, as every planner did before topologies) and aware (`--topology`).
`shardplan evaluate --topology` then prices all of them on the topology, so both are judged by the same
cost model, memory rule and definition. Reported per point: the gain of each aware plan over the best
blind plan of any planner, and over the same planner's blind plan (mean ± standard error over tasks, and
on how many tasks the aware plan was not dearer).

    python3 tools/topology_bench.py --cli target/release/shardplan --out docs/results/topology.md

Standard library only. Costs are predictions of the default cost model, not measurements.
"""

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return r.stdout


def mean_se(xs):
    n = len(xs)
    m = sum(xs) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1)) if n > 1 else 0.0
    return m, sd / math.sqrt(n)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default="target/release/shardplan")
    ap.add_argument("--points", default="64:500,128:1000,256:2000", help="devices:tables, comma-separated")
    ap.add_argument("--tasks", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1, help="first task seed")
    ap.add_argument("--topology", default="h100-sxm", help="preset (or JSON file) for --topology")
    ap.add_argument("--mem", default="12GiB")
    ap.add_argument("--max-dim", default="128")
    ap.add_argument("--planners", default="auto,neuroshard-fast+refine,torchrec")
    ap.add_argument("--extra", default="", help="more flags for plan and evaluate (e.g. '--network-gbps 24')")
    ap.add_argument("--out", help="write the markdown table here (and the raw costs beside it as .json)")
    a = ap.parse_args()
    planners = a.planners.split(",")
    extra = a.extra.split()
    rows, raw = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for point in a.points.split(","):
            devices, tables = (int(x) for x in point.split(":"))
            gains_best = {p: [] for p in planners}
            gains_best_tr = {p: [] for p in planners}
            gains_self = {p: [] for p in planners}
            shares = []
            for k in range(a.tasks):
                seed = a.seed + k
                files = {}
                for p in planners:
                    for mode in ("blind", "aware"):
                        f = Path(tmp) / f"{devices}-{seed}-{p}-{mode}.json"
                        cmd = [a.cli, "plan", "--sample", str(tables), "--devices", str(devices), "--mem", a.mem,
                               "--max-dim", a.max_dim, "--seed", str(seed), "--algo", p, "--out", str(f)]
                        if mode == "aware":
                            cmd += ["--topology", a.topology, *extra]
                        run(cmd)
                        files[(p, mode)] = f
                priced = Path(tmp) / f"{devices}-{seed}-priced.json"
                order = list(files)
                run([a.cli, "evaluate", "--topology", a.topology, *extra, "--out", str(priced),
                     *[str(files[o]) for o in order]])
                reports = json.loads(priced.read_text())
                cost = {o: r["report"]["cost_ms"] for o, r in zip(order, reports)}
                trc = {o: r["torchrec"]["objective_ms"] for o, r in zip(order, reports)}
                best_blind = min(cost[(p, "blind")] for p in planners)
                best_blind_tr = min(trc[(p, "blind")] for p in planners)
                for p in planners:
                    gains_best[p].append(100 * (best_blind - cost[(p, "aware")]) / best_blind)
                    gains_best_tr[p].append(100 * (best_blind_tr - trc[(p, "aware")]) / best_blind_tr)
                    gains_self[p].append(100 * (cost[(p, "blind")] - cost[(p, "aware")]) / cost[(p, "blind")])
                aware_auto = reports[order.index((planners[0], "aware"))]["report"]
                b = aware_auto["devices"][aware_auto["bottleneck_device"]]
                shares.append(100 * b.get("network_ms", 0.0) / b["total_ms"])
                raw.append({"devices": devices, "tables": tables, "seed": seed,
                            "cost_ms": {f"{p}/{m}": c for (p, m), c in cost.items()},
                            "torchrec_estimate_ms": {f"{p}/{m}": c for (p, m), c in trc.items()}})
                print(f"{devices} devices, seed {seed}: best blind {best_blind:.3f} ms, "
                      + ", ".join(f"{p} aware {cost[(p, 'aware')]:.3f}" for p in planners), flush=True)
            for p in planners:
                mb, sb = mean_se(gains_best[p])
                ms, ss = mean_se(gains_self[p])
                mt, st = mean_se(gains_best_tr[p])
                wins_b = sum(g >= 0 for g in gains_best[p])
                wins_s = sum(g >= 0 for g in gains_self[p])
                wins_t = sum(g >= 0 for g in gains_best_tr[p])
                rows.append(f"| {devices} ({devices // 8} × 8) / {tables} | {p} | {mb:+.1f}% ± {sb:.1f} ({wins_b}/{a.tasks}) "
                            f"| {ms:+.1f}% ± {ss:.1f} ({wins_s}/{a.tasks}) | {mt:+.1f}% ± {st:.1f} ({wins_t}/{a.tasks}) |")
            m, s = mean_se(shares)
            rows.append(f"| {devices} / {tables} | network share of {planners[0]}'s bottleneck device | {m:.0f}% ± {s:.0f} | | |")
    head = [
        f"Topology `{a.topology}` {' '.join(extra)}; memory {a.mem} per device, max dim {a.max_dim}, "
        f"{a.tasks} tasks per point (seeds {a.seed}..{a.seed + a.tasks - 1}). **Predicted** costs (default cost model), "
        "every plan priced on the topology by `shardplan evaluate --topology`; the last column prices the same plans "
        "with TorchRec's estimator on the same hosts.",
        "",
        "| devices / tables | planner | aware vs the best blind plan | aware vs its own blind plan "
        "| aware vs the best blind plan, by TorchRec's estimate |",
        "|---|---|---|---|---|",
    ]
    text = "\n".join(head + rows) + "\n"
    print(text)
    if a.out:
        Path(a.out).write_text(text)
        Path(a.out).with_suffix(".json").write_text(json.dumps(raw, indent=1) + "\n")


if __name__ == "__main__":
    main()
