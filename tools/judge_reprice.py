#!/usr/bin/env python3
"""Does another way of pricing plans predict the measured judge better? Re-prices a measured bench's plans.

Usage: tools/judge_reprice.py BENCH_PLANS [--cost-model NAME] [-- EVALUATE_FLAGS ...]
  e.g. tools/judge_reprice.py bench-epyc-plans -- --expected-max

BENCH_PLANS is a `bench-plans` folder written by `shardplan bench --measure-with` (one sub-folder per cell,
`taskN_PLANNER.plan.json` and `taskN.measured.json` in each), or an OUT_DIR of `tools/judge_variants.sh` (plans
not in the folder are read where the measurement recorded them). Every measured plan is priced again by
`target/release/shardplan evaluate --own-rule --cost-model NAME` (default: the model the bench priced it
with) plus EVALUATE_FLAGS, and set against the same measurements. Per cell, for the bench's own
prediction and for the re-priced one: plan MAPE and bias at the reference speed (each task's measured costs
scaled by the profile's reference reading over the task's), mean Kendall's tau of each task's plans (beside
the judge's own: its even rounds against its odd ones, as `judge_repeatability.py` computes it), and
measured over predicted plan cost by planner (geometric mean); per cell, every measured device's
compute over its predicted compute (geometric mean and log standard deviation); and where the re-priced
ranking loses its tau: the pairs of planners it orders against the judge on tasks where both halves of
the judge agree on the order (a pair the judge itself cannot order is noise, not the model's error); and
the taus over distinct plans, a plan that two planners returned counted once; and per cell, the machines
the plans were measured on beside the one the profile's data was (a CPU profile judged on another CPU, even
one of the same model name, is judged off its hardware).
Nothing is measured. Standard library and `judge_repeatability.py` (beside it) only.
"""

import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from judge_repeatability import centred, kendall_tau, plan_cost, pop_cost_model  # noqa: E402  (the judge's own arithmetic)

ROOT = Path(__file__).resolve().parent.parent
SHARDPLAN = ROOT / "target" / "release" / "shardplan"


def read_card(model):
    """The card of a profile (`card.json`): a profile directory given by path (`--cost-model out/p`), or an
    embedded profile by name; None for a model without one (the analytical model)."""
    name = model.split(":", 1)[-1].split("+", 1)[0]
    card = Path(name) / "card.json"
    if not card.exists():
        card = ROOT / "planner-core" / "profiles" / name / "card.json"
    return json.loads(card.read_text()) if card.exists() else None


def reference_ms(model):
    """The reference-kernel time an embedded profile's costs are expressed at (its card's
    `compute.reference_ms`); None for a model without one."""
    card = read_card(model)
    return card["compute"].get("reference_ms") if card else None


def machine(hardware):
    """A hardware record (a measured document's, or a card's) in a few words: its fingerprint and, for a
    CPU, the last-level cache the collector reported (two CPUs of one model name differ there)."""
    cache = [part.strip() for part in hardware.get("software", "").split(";") if "last-level cache" in part]
    return hardware.get("fingerprint", "?") + (f" ({cache[0]})" if cache else "")


def price_again(cell, measured, name, extra=()):
    """Every plan one measurement (`cell/taskN.measured.json`, read as `measured`) recorded, priced again by
    `shardplan evaluate --own-rule --cost-model NAME EXTRA`: the plans' labels and their new documents."""
    task = measured["_task"]
    # The plan the measurement recorded: its file in the cell's folder, else at the recorded path (a
    # `tools/judge_variants.sh` folder whose bench plans stay in the bench's folder), else the bench's name
    # for the planner's plan.
    files = []
    for p in measured["plans"]:
        candidates = [cell / Path(p["plan"]).name, Path(p["plan"]), cell / f"{task}_{p['planner'].replace('+', '-')}.plan.json"]
        files.append(str(next((c for c in candidates if c.exists()), candidates[0])))
    labels = [Path(f).name[len(task) + 1 : -len(".plan.json")] for f in files]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "priced.json"
        cmd = [str(SHARDPLAN), "evaluate", *files, "--own-rule", "--cost-model", name, *extra, "--out", str(out)]
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            sys.exit(f"{cell / (task + '.measured.json')}: pricing with --cost-model {name} failed: {done.stderr.strip()}")
        return labels, json.loads(out.read_text())


def read_measured(path):
    """A `taskN.measured.json` document, with its task name under `_task`."""
    doc = json.loads(path.read_text())
    doc["_task"] = path.name[: -len(".measured.json")]
    return doc


def main():
    args = sys.argv[1:]
    extra = []
    if "--" in args:
        extra = args[args.index("--") + 1 :]
        args = args[: args.index("--")]
    model = pop_cost_model(args)
    if len(args) != 1:
        sys.exit(__doc__.split("\n\n")[1])
    if not SHARDPLAN.exists():
        sys.exit(f"missing {SHARDPLAN}: cargo build --release -p shardplan-cli")
    root = Path(args[0])
    cells = sorted(c for c in root.iterdir() if c.is_dir() and any(c.glob("task*.measured.json"))) if root.is_dir() else []
    if not cells:
        sys.exit(f"no cell folders in {root}")
    print(f"re-priced with: evaluate --own-rule {' '.join(extra)}")
    print("| cell | tasks | plan MAPE (bias), bench | re-priced | Kendall's tau, bench | re-priced | the judge against itself |")
    print("|---|---|---|---|---|---|---|")
    machine_rows = []
    by_planner_rows = []
    distinct_rows = []
    device_rows = []
    pair_rows = []
    within_rows = []
    for cell in cells:
        ape = {"bench": [], "new": []}
        bias = {"bench": [], "new": []}
        taus = {"bench": [], "new": []}
        self_taus = []
        # The same over distinct plans: a plan two planners returned counted once (its measurements averaged).
        distinct = {"bench": [], "new": [], "self": []}
        repeated = 0
        ratio = {}
        device_logs = {"bench": [], "new": []}
        # Within-task log errors (measured over predicted, less the task's mean) and the judge's own
        # within-task half-against-half differences: what orders a task's plans.
        within = {"bench": [], "new": []}
        judge_within = []
        # Per pair of planners: tasks where the judge's halves agree on their order, and of those, the
        # tasks where the re-priced model orders them the other way.
        decided, against = {}, {}
        tasks = 0
        machines, profile_machine = {}, None
        for measured in sorted(cell.glob("task*.measured.json")):
            doc = read_measured(measured)
            plans = doc["plans"]
            bench_model = plans[0]["predicted"]["cost_model"]
            name = model or bench_model.split(":", 1)[1].split("+", 1)[0]
            card = read_card(name)
            ref = card["compute"].get("reference_ms") if card else None
            scale = ref / doc["reference_ms"] if ref and doc.get("reference_ms") else 1.0
            labels, priced = price_again(cell, doc, name, extra)
            here = machine(doc["hardware"])
            machines[here] = machines.get(here, 0) + 1
            profile_machine = machine(card["hardware"]) if card else None
            meas = [p["measured"]["cost_ms"] * scale for p in plans]
            new_pred = [q["report"]["cost_ms"] for q in priced]
            if all(len(p["round_costs_ms"]) > 1 for p in plans):
                n = len(plans[0]["round_costs_ms"])
                halves = [[plan_cost(p, doc.get("reference_ms"), range(h, n, 2)) for p in plans] for h in (0, 1)]
                self_taus.append(kendall_tau(*halves))
                d = [math.log(b / a) for a, b in zip(*halves)]
                judge_within += centred(d)
                for i in range(len(plans)):
                    for j in range(i + 1, len(plans)):
                        h0, h1 = halves[0][i] - halves[0][j], halves[1][i] - halves[1][j]
                        if h0 * h1 <= 0 or labels[i] == labels[j]:
                            continue
                        key = tuple(sorted((labels[i], labels[j])))
                        decided[key] = decided.get(key, 0) + 1
                        if (new_pred[i] - new_pred[j]) * (meas[i] - meas[j]) < 0:
                            against[key] = against.get(key, 0) + 1
            groups = {}
            for i, q in enumerate(priced):
                pieces = json.loads(Path(q["plan"]).read_text())["pieces"]
                groups.setdefault(json.dumps(pieces, sort_keys=True), []).append(i)
            firsts = [g[0] for g in groups.values()]
            mean_of = lambda xs: [statistics.mean(xs[i] for i in g) for g in groups.values()]
            repeated += len(groups) < len(plans)
            distinct["bench"].append(kendall_tau([plans[i]["predicted"]["cost_ms"] for i in firsts], mean_of(meas)))
            distinct["new"].append(kendall_tau([new_pred[i] for i in firsts], mean_of(meas)))
            if all(len(p["round_costs_ms"]) > 1 for p in plans):
                distinct["self"].append(kendall_tau(mean_of(halves[0]), mean_of(halves[1])))
            for kind, pred in (("bench", [p["predicted"]["cost_ms"] for p in plans]), ("new", new_pred)):
                for a, m in zip(pred, meas):
                    ape[kind].append(abs(a - m) / m)
                    bias[kind].append((a - m) / m)
                taus[kind].append(kendall_tau(pred, meas))
                within[kind] += centred([math.log(m / a) for a, m in zip(pred, meas)])
            for p, q in zip(plans, priced):
                for kind, devices in (("bench", p["predicted"]["devices"]), ("new", q["report"]["devices"])):
                    for a, b in zip(devices, p["measured"]["devices"]):
                        if a["compute_ms"] >= 0.5 and b["compute_ms"] > 0:
                            device_logs[kind].append(math.log(b["compute_ms"] * scale / a["compute_ms"]))
            for p, q, m, label in zip(plans, priced, meas, labels):
                r = ratio.setdefault(label, {"bench": [], "new": []})
                r["bench"].append(m / p["predicted"]["cost_ms"])
                r["new"].append(m / q["report"]["cost_ms"])
            tasks += 1
        f = lambda k: f"{100 * statistics.mean(ape[k]):.1f}% ({100 * statistics.mean(bias[k]):+.1f}%)"
        own = f"{statistics.mean(self_taus):.2f}" if self_taus else "-"
        print(f"| {cell.name} | {tasks} | {f('bench')} | {f('new')} | {statistics.mean(taus['bench']):.2f} | {statistics.mean(taus['new']):.2f} | {own} |")
        distinct_rows.append((cell.name, distinct, repeated, tasks))
        machine_rows.append((cell.name, machines, profile_machine))
        by_planner_rows.append((cell.name, ratio))
        within_rows.append((cell.name, within, judge_within))
        device_rows.append((cell.name, device_logs))
        pair_rows.append((cell.name, decided, against))
    print()
    print("where the plans were measured, against where the profile's data was (its card's hardware record):")
    for cell_name, machines, profile_machine in machine_rows:
        where = ", ".join(f"{m}, {n} tasks" for m, n in sorted(machines.items()))
        if profile_machine is None:
            print(f"- {cell_name}: {where}; the model has no card")
        elif set(machines) == {profile_machine}:
            print(f"- {cell_name}: {where}, the profile's own machine")
        else:
            print(f"- {cell_name}: {where}; the profile's data: {profile_machine}: ANOTHER MACHINE, so the model is judged off its hardware")
    print()
    print("Kendall's tau over distinct plans (a plan two planners returned, the same pieces on the same devices,")
    print("counted once and its measurements averaged: no model can order a plan against itself):")
    def m2(v):
        v = [x for x in v if x is not None and not math.isnan(x)]
        return f"{statistics.mean(v):.2f}" if v else "-"
    for name, distinct, repeated, tasks in distinct_rows:
        print(f"- {name}: bench {m2(distinct['bench'])}, re-priced {m2(distinct['new'])}, the judge against itself "
              f"{m2(distinct['self'])} ({repeated} of {tasks} tasks with a plan two planners returned)")
    print()
    print("measured over predicted plan cost at the reference speed, geometric mean (bench → re-priced):")
    gm = lambda v: math.exp(statistics.mean(math.log(x) for x in v))
    for name, ratio in by_planner_rows:
        print(f"- {name}: " + ", ".join(f"{pl} {gm(r['bench']):.2f} → {gm(r['new']):.2f}" for pl, r in ratio.items()))
    print()
    print("plan MAPE (bias) at the reference speed by planner (bench → re-priced):")
    # Measured m over predicted a is r = m / a, so (a − m) / m = 1 / r − 1.
    err = lambda v: f"{100 * statistics.mean(abs(1 / x - 1) for x in v):.1f}% ({100 * statistics.mean(1 / x - 1 for x in v):+.1f}%)"
    for name, ratio in by_planner_rows:
        print(f"- {name}: " + ", ".join(f"{pl} {err(r['bench'])} → {err(r['new'])}" for pl, r in ratio.items()))
    print()
    print("device compute, measured over predicted at the reference speed (devices predicted >= 0.5 ms):")
    print("| cell | devices | geometric mean, bench | re-priced | log s.d., bench | re-priced |")
    print("|---|---|---|---|---|---|")
    for name, logs in device_rows:
        b, n = logs["bench"], logs["new"]
        if len(b) < 2 or len(n) < 2:
            continue
        print(
            f"| {name} | {len(b)} / {len(n)} | {math.exp(statistics.mean(b)):.3f} | {math.exp(statistics.mean(n)):.3f} "
            f"| {statistics.stdev(b):.3f} | {statistics.stdev(n):.3f} |"
        )
    print()
    print("within a task (what orders its plans): s.d. of log(measured / predicted) about the task's mean, and the")
    print("judge's own noise there (its halves' log difference about the task's mean, halved: the noise of the")
    print("mean over all rounds); the model's own error is about sqrt(s.d.^2 - noise^2):")
    rms = lambda v: math.sqrt(statistics.mean(x * x for x in v)) if v else float("nan")
    for name, within, judge_within in within_rows:
        noise = rms(judge_within) / 2
        own = lambda k: math.sqrt(max(rms(within[k]) ** 2 - noise**2, 0.0))
        print(f"- {name}: bench {100 * rms(within['bench']):.1f}% → re-priced {100 * rms(within['new']):.1f}%; "
              f"judge noise {100 * noise:.1f}%; the model's own, bench {100 * own('bench'):.1f}% → re-priced {100 * own('new'):.1f}%")
    print()
    print("pairs the re-priced model orders against the judge, of the tasks where the judge's halves agree (most first):")
    for name, decided, against in pair_rows:
        total = sum(decided.values())
        worst = sorted(against.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        print(f"- {name}: {sum(against.values())} of {total} decided pairs; "
              + ", ".join(f"{a} / {b} {n} of {decided[(a, b)]}" for (a, b), n in worst))


if __name__ == "__main__":
    main()
