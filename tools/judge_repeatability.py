#!/usr/bin/env python3
"""How far the measured judge agrees with itself: the same plans measured in two bench runs.

Usage: tools/judge_repeatability.py [--per-set-speed] RUN_A RUN_B
       tools/judge_repeatability.py [--per-set-speed] [--ceiling] RUN

RUN_A and RUN_B are `bench-plans` folders written by `shardplan bench --measure-with` (one sub-folder per
cell, `taskN_PLANNER.plan.json` and `taskN.measured.json` in each). For every task measured in both runs,
plans are matched by planner and kept only where both runs measured the identical plan (same pieces on the
same devices). Per cell it prints:

* the ratio of a plan's measured cost in B to A (p10 / p50 / p90, and the s.d. of its log), as measured
  and at the reference speed (each run's cost divided by that task's reference-kernel reading);
* the same for each plan's cost relative to the `torchrec` plan of its task in the same run, which is
  what a planner comparison rests on;
* Kendall's tau between the two runs' rankings of a task's plans (mean over tasks) and on how many tasks
  both runs pick the same fastest plan;
* whether a run carries an error its rounds share: the s.d. of a plan's log cost about its task's mean, B
  against A, beside what the runs' own noise (each from its halves) accounts for, and the rest.

A model cannot be shown to rank plans better than the judge ranks them against itself, so the mean tau
here is the ceiling for the "Kendall's tau" goal on that machine and protocol. With one folder, the two
halves of one run are compared instead: every plan's mean over its even-numbered measuring rounds
against its mean over the odd-numbered ones (with 2 rounds, the first round against the second; the plans
of a task are interleaved, so both halves saw the same conditions); a half has half the repetitions, so
this agreement is a lower bound on the run's own. A plan's cost over some of its rounds is computed as
`measure-plan` computes it over all of them (per device, the median compute plus the median all-to-alls;
the largest device total). `--per-set-speed` first scales each round's compute of a device by the run's
reference-kernel reading over the reading taken right after that set was timed (runs that record
`round_device_reference_ms`).

`--ceiling` (one run) estimates the tau a perfect model could show against this judge. The two halves give
each cell's noise: the s.d. of a plan's log cost, half against half, with the task's common shift removed
(drift moves a task's interleaved plans together and changes no ranking), is `sqrt(2)` times a half's
noise; a mean over all rounds has half a half's variance. Taking each plan's measured cost over all rounds
as its true cost, a simulated judge adds that noise (normal in the log, independent per plan, seeded) and
the mean tau between truth and simulated judge is the ceiling, printed for the run's rounds and for 2×
and 4× as many; beside it, the tau an imperfect model could expect, its log error about the task's mean
of s.d. 2, 4, 6 or 8% (`judge_reprice.py` measures a model's). The measured costs spread the plans a little more than their true costs do, which
pushes the estimate up; the check printed beside it, two simulated halves against each other next to the
measured halves' tau, shows how far it is off (within about ±0.1 on the project's benches). On one run it
sees the noise between that run's rounds only; on two sittings merged by `judge_merge.py` (whose halves
are the two sittings) it sees the noise between sittings, an error a sitting's rounds would share
included. Standard library only.
"""

import json
import math
import random
import statistics
import sys
from itertools import combinations
from pathlib import Path


def plan_cost(p, run_reference_ms, rounds=None, per_set_speed=False):
    """One measured plan's cost, ms: the largest device total of the medians over `rounds` (all by default)
    of each round's compute, backward and forward all-to-all, as `measure-plan` computes it. With
    `per_set_speed`, each round's compute of a device is first expressed at the run's reference speed: times
    the run's reference reading over the one taken right after that set was timed (runs that record
    `round_device_reference_ms`); a host whose speed drifts within a run then stops moving single sets."""
    devices = p.get("round_devices_ms") or []
    if rounds is None and not per_set_speed:
        return p["measured"]["cost_ms"]
    if not devices:
        return statistics.mean(p["round_costs_ms"][r] for r in (rounds or range(len(p["round_costs_ms"]))))
    rounds = range(len(devices)) if rounds is None else rounds
    refs = p.get("round_device_reference_ms") or []
    if per_set_speed and (not refs or not run_reference_ms):
        sys.exit(f"plan {p['plan']}: --per-set-speed needs a run that records round_device_reference_ms")
    totals = []
    for d in range(len(devices[0])):
        compute, bws, fws = [], [], []
        for r in rounds:
            c, bw, fw = devices[r][d]
            if per_set_speed and refs[r][d] > 0:
                c *= run_reference_ms / refs[r][d]
            compute.append(c)
            bws.append(bw)
            fws.append(fw)
        totals.append(statistics.median(compute) + statistics.median(bws) + statistics.median(fws))
    return max(totals)


def plan_label(prefix, p):
    """A measured plan's label: LABEL of its file `PREFIX` + `LABEL.plan.json` (`prefix` is `taskN_`) where
    the measurement names one, since the variants of `tools/judge_variants.sh` share their planner's name;
    else its planner."""
    recorded = Path(p["plan"]).name
    if recorded.startswith(prefix) and recorded.endswith(".plan.json"):
        return recorded[len(prefix) : -len(".plan.json")]
    return p["planner"].replace("+", "-")


def pop_cost_model(args, default=None):
    """Removes `--cost-model NAME` from the argument list `args` and returns NAME (`default` without it);
    stops with a message when the option has no value."""
    if "--cost-model" not in args:
        return default
    i = args.index("--cost-model")
    if i + 1 >= len(args) or args[i + 1].startswith("--"):
        sys.exit("--cost-model needs a value: an embedded profile's name or a profile directory")
    model = args[i + 1]
    del args[i : i + 2]
    return model


def cell_folders(root: Path):
    """The cell folders of a `bench-plans` folder, sorted; stops with a message when there are none."""
    cells = sorted(c for c in root.iterdir() if c.is_dir()) if root.is_dir() else []
    if not cells:
        sys.exit(f"no cell folders in {root}")
    return cells


def shared_cells(a_root: Path, b_root: Path):
    """The cell folders two runs both have, sorted; stops with a message when a run is not a folder or
    none is shared."""
    for root in (a_root, b_root):
        if not root.is_dir():
            sys.exit(f"not a folder: {root}")
    cells = sorted(c.name for c in a_root.iterdir() if c.is_dir() and (b_root / c.name).is_dir())
    if not cells:
        sys.exit(f"no cell folder is in both {a_root} and {b_root}")
    return cells


def centred(logs):
    """`logs` less their mean, rescaled for the degree of freedom the mean takes (empty below two)."""
    if len(logs) < 2:
        return []
    mean = statistics.mean(logs)
    return [(x - mean) * math.sqrt(len(logs) / (len(logs) - 1)) for x in logs]


def load_cell(cell: Path, half=None, per_set_speed=False):
    """{task index: (reference_ms, {planner: (pieces, cost_ms)})} for one cell folder; with `half` (0 or 1),
    each plan's cost over its even-numbered (0) or odd-numbered (1) measuring rounds instead of all of
    them; `per_set_speed` as in `plan_cost`."""
    out = {}
    for measured in sorted(cell.glob("task*.measured.json")):
        task = measured.name[len("task") : -len(".measured.json")]
        doc = json.loads(measured.read_text())
        plans = {}
        for p in doc["plans"]:
            prefix = f"task{task}_"
            name = plan_label(prefix, p)
            plan_file = next((f for f in (cell / f"{prefix}{name}.plan.json", Path(p["plan"])) if f.exists()), None)
            pieces = json.loads(plan_file.read_text())["pieces"] if plan_file else None
            n = len(p["round_costs_ms"])
            if half is not None and n < 2:
                sys.exit(f"{measured}: plan {name} has fewer than 2 rounds to split in halves")
            rounds = None if half is None else range(half, n, 2)
            plans[name] = (pieces, plan_cost(p, doc.get("reference_ms"), rounds, per_set_speed))
        out[task] = (doc.get("reference_ms"), plans)
    return out


def kendall_tau(xs, ys):
    """Tau-b of two equally long sequences (ties counted as neither concordant nor discordant)."""
    conc = disc = tx = ty = 0
    for i, j in combinations(range(len(xs)), 2):
        dx, dy = xs[i] - xs[j], ys[i] - ys[j]
        if dx == 0 and dy == 0:
            continue
        if dx == 0:
            tx += 1
        elif dy == 0:
            ty += 1
        elif (dx > 0) == (dy > 0):
            conc += 1
        else:
            disc += 1
    denom = math.sqrt((conc + disc + tx) * (conc + disc + ty))
    return (conc - disc) / denom if denom else float("nan")


def within_rms(a, b, kept):
    """Root mean square over the plans `kept` (task → names) of log(b / a) about each task's mean, rescaled for
    the degree of freedom the mean takes; `a` and `b` as `load_cell` reads them."""
    res = [r for task, names in kept.items() for r in centred([math.log(b[task][1][n][1] / a[task][1][n][1]) for n in names])]
    return math.sqrt(statistics.mean(r * r for r in res)) if res else float("nan")


def quantiles(values):
    v = sorted(values)
    q = statistics.quantiles(v, n=10, method="inclusive") if len(v) > 1 else v * 9
    return q[0], statistics.median(v), q[-1]


def spread(ratios):
    p10, p50, p90 = quantiles(ratios)
    logs = [math.log(r) for r in ratios]
    sd = statistics.stdev(logs) if len(logs) > 1 else float("nan")
    return f"{p10:.2f} / {p50:.2f} / {p90:.2f} (log s.d. {100 * sd:.1f}%)"


def rounds_of(cell: Path):
    """The measuring rounds of a cell's plans (the smallest count over its plans)."""
    counts = [
        len(p["round_costs_ms"])
        for m in cell.glob("task*.measured.json")
        for p in json.loads(m.read_text())["plans"]
    ]
    return min(counts) if counts else 0


# Within-task model errors (s.d. of the log) whose expected tau `--ceiling` prints beside the perfect model's.
MODEL_ERRORS = (0.02, 0.04, 0.06, 0.08)


def ceiling(a, b, full, draws=400, seed=1):
    """The tau a perfect model could expect against a cell's judge (see the module's `--ceiling`), from the
    cell's halves `a` and `b` and its whole run `full`, as `load_cell` reads them."""
    diffs, truths = [], []
    for task in sorted(set(a) & set(b) & set(full), key=int):
        names = sorted(set(a[task][1]) & set(b[task][1]) & set(full[task][1]))
        if len(names) < 2:
            continue
        # Residuals about the task's common shift, rescaled for the mean they lose.
        diffs += centred([math.log(b[task][1][n][1] / a[task][1][n][1]) for n in names])
        truths.append([math.log(full[task][1][n][1]) for n in names])
    if not truths:
        return None
    half_sd = math.sqrt(statistics.mean(x * x for x in diffs) / 2)
    rng = random.Random(seed)
    # The method's check: two simulated halves against each other, to set beside the measured halves' tau.
    halves = statistics.mean(
        kendall_tau([x + rng.gauss(0.0, half_sd) for x in t], [x + rng.gauss(0.0, half_sd) for x in t])
        for t in truths
        for _ in range(draws)
    )
    out = []
    for scale in (1, 2, 4):
        sd = half_sd / math.sqrt(2 * scale)
        taus = [
            kendall_tau(t, [x + rng.gauss(0.0, sd) for x in t]) for t in truths for _ in range(draws)
        ]
        out.append((scale, sd, statistics.mean(taus)))
    # A model whose log error about the task's mean has s.d. `err`, against the judge at the run's rounds.
    sd = half_sd / math.sqrt(2)
    models = [
        (err, statistics.mean(
            kendall_tau([x + rng.gauss(0.0, err) for x in t], [x + rng.gauss(0.0, sd) for x in t])
            for t in truths
            for _ in range(draws)
        ))
        for err in MODEL_ERRORS
    ]
    return half_sd, len(truths), halves, out, models


def main():
    args = sys.argv[1:]
    per_set_speed = "--per-set-speed" in args
    want_ceiling = "--ceiling" in args
    args = [a for a in args if a not in ("--per-set-speed", "--ceiling")]
    if len(args) not in (1, 2) or (want_ceiling and len(args) != 1):
        sys.exit(__doc__.split("\n\n")[1])
    a_root, b_root = Path(args[0]), Path(args[-1])
    halves = len(args) == 1
    for cell in shared_cells(a_root, b_root):
        if halves:
            a, b = load_cell(a_root / cell, 0, per_set_speed), load_cell(b_root / cell, 1, per_set_speed)
        else:
            a, b = load_cell(a_root / cell, None, per_set_speed), load_cell(b_root / cell, None, per_set_speed)
        ratios, ratios_ref, rel, taus, same_winner, tasks, differing = [], [], [], [], 0, 0, 0
        kept = {}
        for task in sorted(set(a) & set(b), key=int):
            (ref_a, pa), (ref_b, pb) = a[task], b[task]
            names = []
            for name in sorted(set(pa) & set(pb)):
                if pa[name][0] is None or pa[name][0] != pb[name][0]:
                    differing += 1
                    continue
                names.append(name)
            if len(names) < 2:
                continue
            tasks += 1
            kept[task] = names
            ca = [pa[n][1] for n in names]
            cb = [pb[n][1] for n in names]
            for x, y in zip(ca, cb):
                ratios.append(y / x)
                if ref_a and ref_b:
                    ratios_ref.append((y / ref_b) / (x / ref_a))
            if "torchrec" in names:
                t = names.index("torchrec")
                rel += [(cb[k] / cb[t]) / (ca[k] / ca[t]) for k in range(len(names)) if k != t]
            taus.append(kendall_tau(ca, cb))
            same_winner += min(range(len(ca)), key=ca.__getitem__) == min(range(len(cb)), key=cb.__getitem__)
        what = "plans, odd rounds against even rounds" if halves else "identical plans measured in both runs"
        print(f"## {cell}: {tasks} tasks, {len(ratios)} {what}", end="")
        print(f" ({differing} plans differ between the runs and are left out)" if differing else "")
        if not ratios:
            continue
        print(f"- cost B / A, p10 / p50 / p90: {spread(ratios)}")
        if not halves and len(ratios_ref) == len(ratios):
            print(f"- at reference speed: {spread(ratios_ref)}")
        if rel:
            print(f"- cost relative to the task's torchrec plan, B / A: {spread(rel)}")
        print(f"- Kendall's tau between the runs' rankings: mean {statistics.mean(taus):.2f} "
              f"(per task {', '.join(f'{t:.2f}' for t in taus)}); same fastest plan on {same_winner}/{tasks} tasks")
        if not halves and rounds_of(a_root / cell) > 1 and rounds_of(b_root / cell) > 1:
            # Does a run carry an error its rounds share? Between the runs, a plan's log cost about its task's
            # mean differs by the two runs' noise alone if not; each run's noise comes from its halves.
            noise = [
                within_rms(load_cell(r / cell, 0, per_set_speed), load_cell(r / cell, 1, per_set_speed), kept) / 2
                for r in (a_root, b_root)
            ]
            between = within_rms(a, b, kept)
            shared = math.sqrt(max(between**2 - noise[0] ** 2 - noise[1] ** 2, 0.0))
            print(f"- a plan's log cost about its task's mean, B against A: s.d. {100 * between:.1f}%; "
                  f"each run's own noise (from its halves) {100 * noise[0]:.1f}% and {100 * noise[1]:.1f}% "
                  f"(together {100 * math.hypot(*noise):.1f}%); an error a run's rounds share, beyond that: "
                  f"{100 * shared:.1f}%")
        est = ceiling(a, b, load_cell(a_root / cell, None, per_set_speed)) if want_ceiling else None
        if est:
            half_sd, n_tasks, sim_halves, rows, models = est
            rounds = rounds_of(a_root / cell)
            print(f"- a half's noise in a plan's log cost relative to its task: s.d. {100 * half_sd:.1f}%; "
                  f"simulated halves agree at tau {sim_halves:.2f} (measured above: {statistics.mean(taus):.2f}); "
                  f"the tau a perfect model could expect against the judge ({n_tasks} tasks): "
                  + ", ".join(f"{rounds * sc} rounds {t:.2f} (noise {100 * sd:.1f}%)" for sc, sd, t in rows)
                  + f"; a model off by {' / '.join(f'{100 * e:.0f}' for e, _ in models)}% within a task could "
                  f"expect {' / '.join(f'{t:.2f}' for _, t in models)} at {rounds} rounds")


if __name__ == "__main__":
    main()
