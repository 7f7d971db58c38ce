#!/usr/bin/env python3
"""How would a planner changed since a measured bench have fared on it, where its new plans were measured?

Usage: tools/judge_replanned.py BENCH_PLANS LABEL ALGO [--cost-model NAME] [--write DIR] [-- PLAN_FLAGS ...]
  e.g. tools/judge_replanned.py s2027all neuroshard-refine neuroshard+refine --write s2027floor

BENCH_PLANS is a `bench-plans` folder written by `shardplan bench --measure-with` (one sub-folder per cell) or
an OUT_DIR of `tools/judge_variants.sh`. For every measured task, ALGO plans the task again with the current
build (`target/release/shardplan plan`, the task's tables, devices, caps and seed read back from its plan
documents, TorchRec's memory rule, `--cost-model NAME`, default cpu-epyc-2t, plus PLAN_FLAGS). Where the new
plan is, piece for piece, a plan the task measured, it takes the place of the plan labelled LABEL: its
measurement is that plan's, its prediction the new plan's report. A task whose new plan matches no measured
plan is left out and named; nothing is timed again. Per cell: how many tasks' plans changed and to whose,
and, as measured and with the new plans, the mean Kendall's tau-b of each task's plans (pairs tied in both
prediction and measurement count for neither), the same over distinct plans (a plan two planners returned
counted once, its measurements averaged), and the judge against itself over distinct plans (its even
rounds against its odd ones). With `--write DIR`, the judged tasks are written to DIR as a bench folder of
their own (one sub-folder per cell: every plan file, and each measured document with plan LABEL's entry
replaced by the measurement of the plan the new one equals, its prediction, and the new plan's file), so that
`judge_reprice.py` and `judge_pairs.py` judge the new planner on the same measurements. Standard library and
`judge_repeatability.py` (beside it) only.
"""

import copy

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from judge_repeatability import cell_folders, kendall_tau, plan_cost, plan_label, pop_cost_model  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SHARDPLAN = ROOT / "target" / "release" / "shardplan"


def plan_file(cell, task, p):
    """The file of measured plan `p` of `task`: in the cell folder, else where the measurement recorded it."""
    name = plan_label(f"{task}_", p)
    for f in (cell / f"{task}_{name}.plan.json", Path(p["plan"])):
        if f.exists():
            return f
    sys.exit(f"{cell}: the plan file of {task}'s {name} is in neither {cell} nor {p['plan']}")


def replan(plan_doc, algo, model, flags, tmp):
    """ALGO's plan of the task `plan_doc` was made for: (pieces, predicted cost ms, declined-gain line or '')."""
    doc = json.loads(Path(plan_doc).read_text())
    tables = Path(tmp) / "tables.json"
    tables.write_text(json.dumps(doc["task"]["tables"]))
    caps = ",".join(str(c) for c in doc["task"]["devices"]["mem_cap_bytes"])
    out = Path(tmp) / "plan.json"
    cmd = [str(SHARDPLAN), "plan", "--tables", str(tables), "--devices", str(len(doc["task"]["devices"]["mem_cap_bytes"])),
           "--mem", caps, "--memory-rule", "torchrec", "--cost-model", model, "--algo", algo,
           "--seed", str(doc["seed"]), *flags, "--out", str(out)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"{' '.join(cmd)}\n{run.stderr}")
    new = json.loads(out.read_text())
    note = next((line for line in run.stdout.splitlines() if line.startswith("Refinement's plan")), "")
    return new["pieces"], new["report"]["cost_ms"], note, new


def write_task(out, task, doc, files, k, j, label, new_doc):
    """Writes `task` to the cell folder `out`: its plan files, the new plan as `TASK_LABEL.plan.json`, and its
    measured document with plan `k`'s entry replaced by plan `j`'s (the plan the new one equals) under
    plan `k`'s planner and file name."""
    out.mkdir(parents=True, exist_ok=True)
    for f in files:
        (out / f.name).write_text(f.read_text())
    name = f"{task}_{label}.plan.json"
    (out / name).write_text(json.dumps(new_doc, indent=1))
    doc = copy.deepcopy(doc)
    entry = copy.deepcopy(doc["plans"][j])
    entry["plan"] = str(out / name)
    entry["planner"] = doc["plans"][k]["planner"]
    doc["plans"][k] = entry
    (out / f"{task}.measured.json").write_text(json.dumps(doc, indent=1))


def taus(pieces, pred, meas, halves):
    """(tau, tau over distinct plans, the judge's halves over distinct plans) of one task's plans, given
    each plan's pieces."""
    groups = {}
    for i, pc in enumerate(pieces):
        groups.setdefault(json.dumps(pc, sort_keys=True), []).append(i)
    g = list(groups.values())
    mean_of = lambda xs: [statistics.mean(xs[i] for i in grp) for grp in g]  # noqa: E731
    return (kendall_tau(pred, meas), kendall_tau([pred[grp[0]] for grp in g], mean_of(meas)),
            kendall_tau(mean_of(halves[0]), mean_of(halves[1])))


def main():
    args = sys.argv[1:]
    flags = []
    if "--" in args:
        k = args.index("--")
        args, flags = args[:k], args[k + 1:]
    model = pop_cost_model(args, "cpu-epyc-2t")
    write = None
    if "--write" in args:
        k = args.index("--write")
        if k + 1 >= len(args):
            sys.exit("--write needs a folder")
        write = Path(args[k + 1])
        del args[k : k + 2]
        if write.exists() and any(write.iterdir()):
            sys.exit(f"--write {write}: the folder exists and is not empty; nothing was written")
    if len(args) != 3:
        sys.exit(__doc__)
    root, label, algo = Path(args[0]), args[1], args[2]
    if not SHARDPLAN.exists():
        sys.exit(f"missing {SHARDPLAN}: cargo build --release -p shardplan-cli")
    print(f"`{algo}` planned again for the plans labelled `{label}` (cost model {model})")
    print("| cell | tasks | new plan is, piece for piece | tau, as measured | with the new plans | distinct plans, as measured | with the new plans | the judge against itself, distinct, new |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for cell in cell_folders(root):
            before, after = {"t": [], "d": []}, {"t": [], "d": [], "s": []}
            became, missing, notes = {}, [], 0
            for measured in sorted(cell.glob("task*.measured.json")):
                task = measured.name[: -len(".measured.json")]
                doc = json.loads(measured.read_text())
                plans = doc["plans"]
                labels = [plan_label(f"{task}_", p) for p in plans]
                if label not in labels:
                    sys.exit(f"{measured}: no plan labelled {label} (labels: {', '.join(labels)})")
                k = labels.index(label)
                files = [plan_file(cell, task, p) for p in plans]
                pieces = [json.loads(f.read_text())["pieces"] for f in files]
                new_pieces, new_cost, note, new_doc = replan(files[k], algo, model, flags, tmp)
                notes += bool(note)
                same = [i for i, pc in enumerate(pieces) if pc == new_pieces]
                if not same:
                    missing.append(task)
                    continue
                n = len(plans[0]["round_costs_ms"])
                halves = [[plan_cost(p, doc.get("reference_ms"), range(h, n, 2)) for p in plans] for h in (0, 1)]
                pred = [p["predicted"]["cost_ms"] for p in plans]
                meas = [p["measured"]["cost_ms"] for p in plans]
                t, d, _ = taus(pieces, pred, meas, halves)
                before["t"].append(t)
                before["d"].append(d)
                j = k if k in same else same[0]
                became[labels[j]] = became.get(labels[j], 0) + 1
                swap = lambda xs, x: xs[:k] + [x] + xs[k + 1:]  # noqa: E731  (plan k replaced)
                t2, d2, s2 = taus(swap(pieces, pieces[j]), swap(pred, new_cost), swap(meas, meas[j]),
                                  [swap(h, h[j]) for h in halves])
                after["t"].append(t2)
                after["d"].append(d2)
                after["s"].append(s2)
                if write:
                    write_task(write / cell.name, task, doc, files, k, j, label, new_doc)
            m = lambda v: f"{statistics.mean(v):.2f}" if v else "-"  # noqa: E731
            kinds = ", ".join(f"{name} {c}" for name, c in sorted(became.items(), key=lambda x: -x[1]))
            left = f"; left out (new plan not measured): {', '.join(missing)}" if missing else ""
            print(f"| {cell.name} | {len(before['t'])}{left} | {kinds} | {m(before['t'])} | {m(after['t'])} | "
                  f"{m(before['d'])} | {m(after['d'])} | {m(after['s'])} |")
            if notes:
                print(f"  ({cell.name}: `{algo}` declined its refinement on {notes} tasks)", file=sys.stderr)


if __name__ == "__main__":
    main()
