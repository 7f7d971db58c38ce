#!/usr/bin/env python3
"""Where a refinement's predicted gains go when measured: two planners' plans of the same tasks, device by device.

Usage: tools/judge_changes.py BENCH_PLANS START REFINED [--cost-model NAME]
  e.g. tools/judge_changes.py s2027all neuroshard neuroshard+refine

BENCH_PLANS is a `bench-plans` folder written by `shardplan bench --measure-with` (one sub-folder per cell,
`taskN.measured.json` in each, every plan measured beside the others of its task), or an OUT_DIR of
`tools/judge_variants.sh`. START and REFINED name plans as `judge_pairs.py` does (a planner, or a file's
label). REFINED must be a refinement of START's plan (the same devices, changed by moves, swaps and
splits), so device d of one plan is device d of the other. Per cell: REFINED over START (geometric mean over the tasks) of the plan's cost,
of its largest device compute and of the sum of its devices' compute, predicted and measured, and the
pieces per plan. Then, over every cell, each device by what the refinement did to it: nothing; gained
row-wise pieces; gained column pieces; other changes (pieces moved or swapped in or out), with the
summed change of its compute, predicted and measured. Last, per cell, the mean Kendall's tau of each
task's plans (predicted against measured cost) with every plan and without REFINED's: how much of the
model's ranking error that one planner's plans carry. With `--cost-model NAME` every measured plan is
priced again by that model (`shardplan evaluate --own-rule`, as `judge_reprice.py` does) instead of its
recorded prediction: does another profile price the same changes closer to what they measured? Nothing
is measured. Standard library and `judge_errors.py` / `judge_repeatability.py` / `judge_reprice.py`
(beside it) only.
"""

import collections
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from judge_errors import gmean  # noqa: E402
from judge_repeatability import kendall_tau, pop_cost_model  # noqa: E402  (the judge's own arithmetic)
from judge_reprice import price_again, read_measured  # noqa: E402


def kinds(labels):
    """Row pieces, column pieces and whole tables among piece labels (`name[rows a..b]`, `name[cols a..b]`)."""
    out = collections.Counter()
    for s in labels:
        out["row" if "[rows" in s else "col" if "[cols" in s else "whole"] += 1
    return out


def summary(report):
    compute = [d["compute_ms"] for d in report["devices"]]
    return report["cost_ms"], max(compute), sum(compute), sum(len(d["pieces"]) for d in report["devices"])


def by_name(plans, task):
    """A task's measured plans by name: each by its file's label (`taskN_LABEL.plan.json`, as
    `tools/judge_variants.sh` names its variants) and, where no other plan of the task has the same planner,
    by its planner (`neuroshard+refine`), as `judge_pairs.py` names them."""
    planners = [p["planner"] for p in plans]
    out = {}
    for p in plans:
        name = Path(p["plan"]).name
        if name.startswith(task + "_") and name.endswith(".plan.json"):
            out[name[len(task) + 1 : -len(".plan.json")]] = p
        if planners.count(p["planner"]) == 1:
            out[p["planner"]] = p
    return out


def main():
    args = sys.argv[1:]
    model = pop_cost_model(args)
    if len(args) != 3:
        sys.exit(__doc__)
    root, start, refined = Path(args[0]), args[1], args[2]
    by_change = collections.defaultdict(lambda: [0, 0.0, 0.0])
    taus = {}
    print("| cell | tasks | cost, predicted | measured | largest compute, predicted | measured | all compute, predicted | measured | pieces |")
    print("|---|---|---|---|---|---|---|---|---|")
    for cell in sorted(p for p in root.iterdir() if p.is_dir()):
        ratios = []
        for f in sorted(cell.glob("task*.measured.json")):
            doc = read_measured(f)
            every = doc["plans"]
            if model:
                for p, q in zip(every, price_again(cell, doc, model)[1]):
                    p["predicted"] = q["report"]
            plans = by_name(every, doc["_task"])
            for label, kept in (("every plan", every), ("without", [p for p in every if p is not plans.get(refined)])):
                tau = kendall_tau([p["predicted"]["cost_ms"] for p in kept], [p["measured"]["cost_ms"] for p in kept])
                if tau is not None:
                    taus.setdefault((cell.name, label), []).append(tau)
            if start not in plans or refined not in plans:
                continue
            a, b = plans[start], plans[refined]
            pa, pb = summary(a["predicted"]), summary(b["predicted"])
            ma, mb = summary(a["measured"]), summary(b["measured"])
            ratios.append((pb[0] / pa[0], mb[0] / ma[0], pb[1] / pa[1], mb[1] / ma[1], pb[2] / pa[2], mb[2] / ma[2], pa[3], pb[3]))
            for d, (da, db) in enumerate(zip(a["predicted"]["devices"], b["predicted"]["devices"])):
                before, after = set(da["pieces"]), set(db["pieces"])
                gained, lost = kinds(after - before), kinds(before - after)
                if before == after:
                    key = "unchanged"
                elif gained["row"] > lost["row"]:
                    key = "gained row-wise pieces"
                elif gained["col"] > lost["col"]:
                    key = "gained column pieces"
                else:
                    key = "other changes (moves, swaps)"
                e = by_change[key]
                e[0] += 1
                e[1] += db["compute_ms"] - da["compute_ms"]
                e[2] += b["measured"]["devices"][d]["compute_ms"] - a["measured"]["devices"][d]["compute_ms"]
        if not ratios:
            continue
        g = [gmean([r[i] for r in ratios]) for i in range(6)]
        pieces = f"{statistics.mean(r[6] for r in ratios):.1f} → {statistics.mean(r[7] for r in ratios):.1f}"
        print(f"| {cell.name} | {len(ratios)} | " + " | ".join(f"{x:.3f}" for x in g) + f" | {pieces} |")
    print(f"\nevery cell, device by device ({refined} against {start}): summed change of compute, ms")
    print("| the device | devices | predicted | measured |")
    print("|---|---|---|---|")
    for key, (n, dp, dm) in sorted(by_change.items()):
        print(f"| {key} | {n} | {dp:+.1f} | {dm:+.1f} |")
    print(f"\nKendall's tau (predicted against measured), mean over tasks: every plan → without {refined}'s")
    for cell in sorted({c for c, _ in taus}):
        both = [statistics.mean(taus.get((cell, k), [float("nan")])) for k in ("every plan", "without")]
        print(f"- {cell}: {both[0]:.2f} → {both[1]:.2f}")


if __name__ == "__main__":
    main()
