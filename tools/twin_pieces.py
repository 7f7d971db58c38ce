#!/usr/bin/env python3
"""Do two pieces of one table on one device cost more than two pieces of two tables? Measured.

Usage: tools/twin_pieces.py --plan PLAN.json --tables NAME[,NAME...] --out DIR
       [--collect target/release/shardplan-collect] [--cli target/release/shardplan]
       [--cost-model cpu-epyc-2t] [--dim 32] [--rounds 3] [--reps 8] [--batch 4096] [--seed 11]

For every named table of the plan document's task, a task of two identical copies of it (A and B: the same
statistics, other lookups) on two devices, and seven plans of it, measured together in interleaved rounds
by `measure-plan` and priced by `shardplan evaluate`:

  whole   A on device 0, B on device 1
  same2   A in two column halves on device 0, B's on device 1       (two pieces of one table per device)
  mix2    A's and B's first halves on device 0, second halves on 1  (the same pieces, of two tables)
  same4 / mix4   the same with four column quarters
  rsame / rmix   the same with two row halves

If pieces of one table interacted on a device (they share their lookups), `same` would measure apart from
`mix`; the model, which prices a set as the sum of its pieces' encodings, cannot tell them apart. Prints
per plan the measured and predicted mean device compute, each against `whole`, and measured over predicted
at the profile's reference speed (the measurement scaled by the profile's reference kernel time over the
run's). Standard library only.
"""

import argparse
import copy
import json
import statistics
import subprocess
import sys
from pathlib import Path


def layouts(rows):
    half = rows // 2

    def col(t, off, width, dev):
        return {"table_id": t, "col_offset": off, "dim": width, "device": dev}

    def row(t, off, count, dev, dim):
        return {"table_id": t, "col_offset": 0, "dim": dim, "device": dev, "rows": {"offset": off, "count": count}}

    def build(dim):
        h, q = dim // 2, dim // 4
        return {
            "whole": [col(0, 0, dim, 0), col(1, 0, dim, 1)],
            "same2": [col(0, 0, h, 0), col(0, h, h, 0), col(1, 0, h, 1), col(1, h, h, 1)],
            "mix2": [col(0, 0, h, 0), col(1, 0, h, 0), col(0, h, h, 1), col(1, h, h, 1)],
            "same4": [col(0, o, q, 0) for o in range(0, dim, q)] + [col(1, o, q, 1) for o in range(0, dim, q)],
            "mix4": [col(t, o, q, 0) for t in (0, 1) for o in (0, q)]
            + [col(t, o, q, 1) for t in (0, 1) for o in (2 * q, 3 * q)],
            "rsame": [row(0, 0, half, 0, dim), row(0, half, rows - half, 0, dim),
                      row(1, 0, half, 1, dim), row(1, half, rows - half, 1, dim)],
            "rmix": [row(0, 0, half, 0, dim), row(1, 0, half, 0, dim),
                     row(0, half, rows - half, 1, dim), row(1, half, rows - half, 1, dim)],
        }

    return build


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd[:2])} failed ({done.returncode}):\n{done.stderr}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", required=True, type=Path)
    ap.add_argument("--tables", required=True)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--collect", default="target/release/shardplan-collect")
    ap.add_argument("--cli", default="target/release/shardplan")
    ap.add_argument("--cost-model", default="cpu-epyc-2t")
    ap.add_argument("--profile-card", type=Path, help="card.json of the profile (its compute.reference_ms)")
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=11)
    a = ap.parse_args()
    if a.dim < 4 or a.dim % 4:
        sys.exit(f"--dim = {a.dim}: must be a multiple of 4, at least 4")
    src = json.loads(a.plan.read_text())
    by_name = {t["name"]: t for t in src["task"]["tables"]}
    a.out.mkdir(parents=True, exist_ok=True)
    card = a.profile_card or Path(f"planner-core/profiles/{a.cost_model}/card.json")
    ref_ms = json.loads(card.read_text())["compute"]["reference_ms"]
    print(f"| table | plan | measured ms (÷ whole) | predicted ms (÷ whole) | measured ÷ predicted at reference speed |")
    print("|---|---|---|---|---|")
    for name in a.tables.split(","):
        if name not in by_name:
            sys.exit(f"--tables: {name!r} is not a table of {a.plan} ({', '.join(by_name)})")
        x = copy.deepcopy(by_name[name])
        x["dim"] = a.dim
        x["name"] = f"{name}_a"
        y = dict(x, name=f"{name}_b")
        files = []
        for kind, pieces in layouts(x["rows"])(a.dim).items():
            doc = copy.deepcopy(src)
            doc["planner"] = kind
            doc["task"]["tables"] = [x, y]
            doc["task"]["devices"] = {"mem_cap_bytes": [64 * 2**30] * 2}
            doc["pieces"] = pieces
            f = a.out / f"{name}_{kind}.plan.json"
            f.write_text(json.dumps(doc))
            files.append(f)
        measured = a.out / f"{name}.measured.json"
        run([a.collect, "measure-plan", "--quiet", "--batch-size", str(a.batch), "--rounds",
                        str(a.rounds), "--reps", str(a.reps), "--seed", str(a.seed), "--out", str(measured),
                        *map(str, files)])
        predicted = a.out / f"{name}.predicted.json"
        run([a.cli, "evaluate", "--cost-model", a.cost_model, "--comm-fallback", "--own-rule",
                        "--out", str(predicted), *map(str, files)])
        m = json.loads(measured.read_text())
        scale = ref_ms / m["reference_ms"]
        meas = {Path(p["plan"]).name: statistics.mean(d["compute_ms"] for d in p["measured"]["devices"])
                for p in m["plans"]}
        pred = {Path(p["plan"]).name: statistics.mean(d["compute_ms"] for d in p["report"]["devices"])
                for p in json.loads(predicted.read_text())}
        w = f"{name}_whole.plan.json"
        for f in files:
            k = f.name
            print(f"| {name} | {k[len(name) + 1:-10]} | {meas[k]:.2f} ({meas[k] / meas[w]:.2f}) | "
                  f"{pred[k]:.2f} ({pred[k] / pred[w]:.2f}) | {meas[k] * scale / pred[k]:.2f} |")
    print(f"\nreference kernel: profile {ref_ms:.2f} ms")


if __name__ == "__main__":
    main()
