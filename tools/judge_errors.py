#!/usr/bin/env python3
"""Where a cost model's predictions miss, by planner: measured over predicted plan cost and device compute.

Usage: tools/judge_errors.py BENCH_PLANS

BENCH_PLANS is a `bench-plans` folder written by `shardplan bench --measure-with` (one sub-folder per cell,
`taskN.measured.json` in each). For every cell and planner it prints the geometric mean of measured /
predicted for the plan's cost, for every device's compute (devices predicted under 0.5 ms are left out),
and for the bottleneck device's compute, with the share of devices the model underprices by more than
25%. A search that walks to the sets its model underprices shows up as a planner whose ratios sit above
the others'. Then, over every cell, device compute by what the device holds (from the plan documents
beside the measurements): only whole tables (by how many), a column piece of a table split column-wise,
a row piece, two or more pieces of one table. Last, whether two devices of one plan err together: the
correlation of their log(measured / predicted compute), each task's mean taken off (the host's speed that
day), by the cosine of what they hold (per table, its pieces' lookups × width, as `cost::piece_weight`
weighs them; 0: no table in common, 1: the same tables in the same proportions, as a row-wise plan's
devices). Before that last table, the searched planners' (`neuroshard*`, `auto`) device compute against
the others', by pieces held and memory fill. Standard library and `judge_repeatability.py` (beside it) only.
"""

import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from judge_repeatability import cell_folders  # noqa: E402  (the bench folder's layout, read one way)


def gmean(values):
    return math.exp(statistics.mean(math.log(v) for v in values)) if values else float("nan")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.split("\n\n")[1])
    cells = cell_folders(Path(sys.argv[1]))
    for cell in cells:
        by_planner = {}
        measured_files = sorted(cell.glob("task*.measured.json"))
        for path in measured_files:
            for p in json.loads(path.read_text())["plans"]:
                row = by_planner.setdefault(p["planner"], {"plan": [], "compute": [], "bottleneck": []})
                pred, meas = p["predicted"], p["measured"]
                if pred["cost_ms"] > 0 and meas["cost_ms"] > 0:
                    row["plan"].append(meas["cost_ms"] / pred["cost_ms"])
                for a, b in zip(pred["devices"], meas["devices"]):
                    if a["compute_ms"] >= 0.5 and b["compute_ms"] > 0:
                        row["compute"].append(b["compute_ms"] / a["compute_ms"])
                k = pred.get("bottleneck_device")
                if k is not None and pred["devices"][k]["compute_ms"] >= 0.5:
                    row["bottleneck"].append(meas["devices"][k]["compute_ms"] / pred["devices"][k]["compute_ms"])
        print(f"## {cell.name} ({len(measured_files)} tasks): measured / predicted, geometric mean")
        print("| planner | plan cost | device compute | under by > 25% | predicted bottleneck's compute |")
        print("|---|---|---|---|---|")
        for name, row in by_planner.items():
            under = sum(r > 1.25 for r in row["compute"])
            print(
                f"| {name} | {gmean(row['plan']):.2f} | {gmean(row['compute']):.2f} | "
                f"{under}/{len(row['compute'])} | {gmean(row['bottleneck']):.2f} |"
            )
        print()
    by_kind(cells)
    by_size(cells)
    together(cells)


def device_kinds(plan, device):
    """What `device` of a plan document holds: (pieces, column pieces, row pieces, pieces whose table has
    another piece on the device)."""
    tables = plan["task"]["tables"]
    pieces = [p for p in plan["pieces"] if p["device"] == device]
    per_table = {}
    for p in pieces:
        per_table[p["table_id"]] = per_table.get(p["table_id"], 0) + 1
    cols = sum(1 for p in pieces if not p.get("rows") and p["dim"] < tables[p["table_id"]]["dim"])
    rows = sum(1 for p in pieces if p.get("rows"))
    same = sum(n for n in per_table.values() if n > 1)
    return len(pieces), cols, rows, same


def measured_devices(cells):
    """Every measured device of every plan whose plan document lies beside its measurement, predicted at
    0.5 ms or more: (planner, plan document, predicted device, measured device)."""
    for cell in cells:
        for path in sorted(cell.glob("task*.measured.json")):
            for p in json.loads(path.read_text())["plans"]:
                doc = cell / Path(p["plan"]).name
                if not doc.exists():
                    continue
                plan = json.loads(doc.read_text())
                for a, b in zip(p["predicted"]["devices"], p["measured"]["devices"]):
                    if a["compute_ms"] >= 0.5 and b["compute_ms"] > 0:
                        yield p["planner"], plan, a, b


def by_kind(cells):
    """Measured / predicted device compute over every cell, by what the devices hold."""
    groups = {}
    for _, plan, a, b in measured_devices(cells):
        n, cols, rows, same = device_kinds(plan, a["device"])
        if same:
            kind = "2+ pieces of one table"
        elif rows:
            kind = "a row piece"
        elif cols:
            kind = "a column piece (no other of its table)"
        else:
            kind = f"whole tables only, {'1-3' if n <= 3 else '4-9' if n <= 9 else '10+'}"
        groups.setdefault(kind, []).append(b["compute_ms"] / a["compute_ms"])
    if not groups:
        return
    print("## Every cell: device compute, measured / predicted, by what the device holds")
    print("| the device holds | devices | geometric mean | log s.d. |")
    print("|---|---|---|---|")
    for kind in sorted(groups):
        v = groups[kind]
        sd = statistics.pstdev([math.log(x) for x in v]) if len(v) > 1 else 0.0
        print(f"| {kind} | {len(v)} | {gmean(v):.3f} | {sd:.3f} |")
    print()


def searched(planner):
    """Whether a planner searches under its cost model (`neuroshard*`, `auto`) rather than follows a rule."""
    return planner.startswith("neuroshard") or planner.startswith("auto")


def by_size(cells):
    """Measured / predicted device compute, the searched planners' devices against the others', by how many
    pieces the device holds and how full its memory is: a search that keeps the sets its model errs low on
    shows up as a gap at every size, a set the model has not seen as a gap at one."""
    groups = {}
    for planner, plan, a, b in measured_devices(cells):
        who = "searched" if searched(planner) else "the others"
        n = device_kinds(plan, a["device"])[0]
        pieces = "1" if n == 1 else "2-3" if n <= 3 else "4-7" if n <= 7 else "8-15" if n <= 15 else "16+"
        fill = a["bytes"] / a["mem_cap_bytes"] if a.get("mem_cap_bytes") else 0.0
        memory = "< 50%" if fill < 0.5 else "50-80%" if fill < 0.8 else ">= 80%"
        ratio = b["compute_ms"] / a["compute_ms"]
        groups.setdefault(("pieces", pieces, who), []).append(ratio)
        groups.setdefault(("memory", memory, who), []).append(ratio)
    if not groups:
        return
    print("## Every cell: device compute, measured / predicted, searched planners against the others")
    print("| the device | searched: devices, geometric mean | the others: devices, geometric mean |")
    print("|---|---|---|")
    order = [("pieces", k) for k in ("1", "2-3", "4-7", "8-15", "16+")] + [
        ("memory", k) for k in ("< 50%", "50-80%", ">= 80%")
    ]
    for what, key in order:
        cols = []
        for who in ("searched", "the others"):
            v = groups.get((what, key, who), [])
            cols.append(f"{len(v)}, {gmean(v):.3f}" if v else "-")
        label = (f"{key} piece" + ("" if key == "1" else "s")) if what == "pieces" else f"memory {key} full"
        print(f"| {label} | {cols[0]} | {cols[1]} |")
    print()


def table_shares(plan, device):
    """Per table, the lookups × width of its pieces on `device` (`cost::piece_weight`)."""
    tables = plan["task"]["tables"]
    shares = {}
    for p in plan["pieces"]:
        if p["device"] != device:
            continue
        t = tables[p["table_id"]]
        fraction = p["rows"]["count"] / t["rows"] if p.get("rows") and t["rows"] else 1.0
        shares[p["table_id"]] = shares.get(p["table_id"], 0.0) + max(t["pooling_factor"], 0.0) * fraction * p["dim"]
    return shares


def cosine(a, b):
    na, nb = math.sqrt(sum(v * v for v in a.values())), math.sqrt(sum(v * v for v in b.values()))
    if na <= 0 or nb <= 0:
        return 0.0
    return sum(v * b.get(t, 0.0) for t, v in a.items()) / (na * nb)


def together(cells):
    """Correlation of two devices' errors within a plan, by the cosine of their table shares."""
    bins = [(0.0, 1e-9, "0 (no table in common)"), (1e-9, 0.3, "(0, 0.3)"), (0.3, 0.7, "[0.3, 0.7)"),
            (0.7, 0.95, "[0.7, 0.95)"), (0.95, 1.01, "[0.95, 1]")]
    pairs = {label: [] for _, _, label in bins}
    for cell in cells:
        for path in sorted(cell.glob("task*.measured.json")):
            logs = []
            for p in json.loads(path.read_text())["plans"]:
                doc = cell / Path(p["plan"]).name
                if not doc.exists():
                    continue
                plan = json.loads(doc.read_text())
                devs = [
                    (math.log(b["compute_ms"] / a["compute_ms"]), table_shares(plan, a["device"]))
                    for a, b in zip(p["predicted"]["devices"], p["measured"]["devices"])
                    if a["compute_ms"] >= 0.5 and b["compute_ms"] > 0
                ]
                logs.append(devs)
            flat = [r for devs in logs for r, _ in devs]
            if len(flat) < 2:
                continue
            mean = statistics.mean(flat)
            for devs in logs:
                for i in range(len(devs)):
                    for j in range(i + 1, len(devs)):
                        c = cosine(devs[i][1], devs[j][1])
                        label = next(lb for lo, hi, lb in bins if lo <= c < hi)
                        pairs[label].append((devs[i][0] - mean, devs[j][0] - mean))
    if not any(len(v) > 2 for v in pairs.values()):
        return
    print("## Every cell: do two devices of a plan err together? (log measured / predicted compute, task mean off)")
    print("| cosine of what the two hold | pairs | correlation |")
    print("|---|---|---|")
    for _, _, label in bins:
        v = pairs[label]
        if len(v) > 2:
            print(f"| {label} | {len(v)} | {statistics.correlation([a for a, _ in v], [b for _, b in v]):+.2f} |")
    print()


if __name__ == "__main__":
    main()
