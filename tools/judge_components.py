#!/usr/bin/env python3
"""Which part of a prediction costs Kendall's tau: the model's parts replaced, one at a time, by measurements.

Usage: tools/judge_components.py BENCH_PLANS

BENCH_PLANS is a `bench-plans` folder written by `shardplan bench --measure-with` (one sub-folder per cell,
`taskN.measured.json` in each, measured in 2 rounds or more; the plan documents beside them name each
device's pieces). Under NeuroShard's cost definition a device's total is its compute and backward exchange,
its wait for the last device to start the forward exchange, and that exchange; so a plan's cost is
`max over devices (compute + bw) + max over devices (exchange)`, the exchange being the forward time less
the wait. Each prediction is rebuilt that way from the model's parts (the bench's recorded prediction) with
some parts taken from the measurement instead, and its ranking of a task's plans is set against the judge.

To keep the measured parts from sharing the judge's noise, the rounds are split in halves: the parts come
from one half (per device, the median of its rounds, as `measure-plan` takes them) and the judge is the
other half's plan cost; both ways round, averaged. So every tau here is against a judge of half the rounds
(lower than against the whole run), and "every part measured" is the judge's agreement with itself. The
measured parts are taken to the profile's reference speed first (times its reference reading over the
run's, as `judge_reprice.py` scales plan costs), so that a device priced by measurement and one priced by
the model are on the same clock. The
rows in between say how much of the distance from the model's tau to that figure each part, or the compute
of one kind of device, would close if it were priced exactly.

Kinds of device, by what they hold: a column piece (any `[cols a..b]`), a row piece (any `[rows a..b]`, no
column piece), whole tables only. Standard library and `judge_repeatability.py` (beside it) only; nothing
is measured.
"""

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from judge_repeatability import cell_folders, kendall_tau, plan_cost  # noqa: E402  (the judge's own arithmetic)
from judge_reprice import reference_ms  # noqa: E402  (the profile's reference speed, as the re-pricing reads it)

KINDS = ("column piece", "row piece", "whole tables only")


def kind(pieces):
    """What a device holds, as KINDS names it."""
    if any("[cols " in p for p in pieces):
        return KINDS[0]
    if any("[rows " in p for p in pieces):
        return KINDS[1]
    return KINDS[2]


def parts_predicted(plan):
    """Per device of a measured plan's prediction: (compute, bw, exchange) in ms, the exchange being the
    forward time less the wait the cost definition gives it."""
    devices = plan["predicted"]["devices"]
    return split_wait([(d["compute_ms"], d["bw_comm_ms"], d["fw_comm_ms"]) for d in devices])


def parts_measured(plan, rounds, scale):
    """The same from the measurement: per device, the medians over `rounds` of each round's compute,
    backward and forward times (`round_devices_ms`), times `scale` (to the profile's reference speed)."""
    rows = plan["round_devices_ms"]
    n_dev = len(rows[0])
    med = [
        tuple(scale * statistics.median(rows[r][d][i] for r in rounds) for i in range(3))
        for d in range(n_dev)
    ]
    return split_wait(med)


def split_wait(devices):
    """(compute, bw, forward) per device → (compute, bw, exchange): the forward time less the wait for the
    last device to start, `max_j (c_j + bw_j) − (c + bw)`, never below zero."""
    last = max(c + bw for c, bw, _ in devices)
    return [(c, bw, max(fw - (last - (c + bw)), 0.0)) for c, bw, fw in devices]


def cost(parts):
    """A plan's cost from its devices' (compute, bw, exchange): the slowest start plus the longest exchange."""
    return max(c + bw for c, bw, _ in parts) + max(x for _, _, x in parts)


VARIANTS = (
    ("the model, rebuilt from its parts", (False, False, False), KINDS),
    ("compute measured", (True, False, False), KINDS),
    ("bw and exchange measured", (False, True, True), KINDS),
    ("exchange measured", (False, False, True), KINDS),
    ("compute measured on devices with a column piece", (True, False, False), (KINDS[0],)),
    ("compute measured on devices with a row piece", (True, False, False), (KINDS[1],)),
    ("compute measured on devices with whole tables only", (True, False, False), (KINDS[2],)),
    ("every part measured (the judge against itself)", (True, True, True), KINDS),
)


def load(cell: Path):
    """Per task: its plans as (device kinds, model parts, [parts from rounds 0, 2, …], [… 1, 3, …],
    [judge cost of half 0, of half 1])."""
    tasks = []
    for measured in sorted(cell.glob("task*.measured.json")):
        doc = json.loads(measured.read_text())
        plans = []
        for p in doc["plans"]:
            rounds = len(p.get("round_devices_ms") or [])
            if rounds < 2:
                sys.exit(f"{measured}: plan {p['plan']} has fewer than 2 rounds of device times to split in halves")
            halves = [range(0, rounds, 2), range(1, rounds, 2)]
            kinds = [kind(d["pieces"]) for d in p["predicted"]["devices"]]
            # Measured parts join the model's at the speed the model prices: the profile's reference reading
            # over the run's (1 where either is missing), as `judge_reprice.py` scales a plan's cost.
            ref = reference_ms(p["predicted"]["cost_model"])
            scale = ref / doc["reference_ms"] if ref and doc.get("reference_ms") else 1.0
            plans.append(
                (
                    kinds,
                    parts_predicted(p),
                    [parts_measured(p, h, scale) for h in halves],
                    [plan_cost(p, doc.get("reference_ms"), h) for h in halves],
                )
            )
        tasks.append(plans)
    return tasks


def tau_of(tasks, take, kinds):
    """Mean over tasks and both halves of the tau between the mixed prediction and the other half's judge."""
    taus = []
    for plans in tasks:
        for h in (0, 1):
            pred, judge = [], []
            for dev_kinds, model, halves, costs in plans:
                parts = [
                    tuple(halves[h][d][i] if take[i] and dev_kinds[d] in kinds else model[d][i] for i in range(3))
                    for d in range(len(model))
                ]
                pred.append(cost(parts))
                judge.append(costs[1 - h])
            t = kendall_tau(pred, judge)
            if t == t:
                taus.append(t)
    return statistics.mean(taus) if taus else float("nan")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.split("\n\n")[1])
    cells = cell_folders(Path(sys.argv[1]))
    rows = {name: [] for name, _, _ in VARIANTS}
    for cell in cells:
        tasks = load(cell)
        for name, take, kinds in VARIANTS:
            rows[name].append(tau_of(tasks, take, kinds))
    print("Kendall's tau against a judge of half the rounds (the other half's parts), mean over tasks and halves\n")
    print("| prediction | " + " | ".join(c.name for c in cells) + " |")
    print("|---|" + "---|" * len(cells))
    for name, _, _ in VARIANTS:
        print(f"| {name} | " + " | ".join(f"{t:.2f}" for t in rows[name]) + " |")


if __name__ == "__main__":
    main()
