#!/usr/bin/env python3
"""Two sittings of the same plans as one judge: merges two measurements of a bench's plans.

Usage: tools/judge_merge.py RUN_A RUN_B OUT

RUN_A is a `bench-plans` folder written by `shardplan bench --measure-with` (or an OUT_DIR of
`tools/judge_variants.sh`), RUN_B a second measurement of the same plans (`tools/judge_variants.sh` with
no variant, BASE naming the planners), each with one sub-folder per cell. For every task measured in both
with the same plans and the same number of rounds, OUT/CELL/taskN.measured.json holds every plan's rounds
of both sittings, interleaved (A's first round, B's first, A's second, ...), its cost recomputed over all
of them as `measure-plan` computes it (per device, the median compute plus the median all-to-alls; the
largest device total) and the two sittings' mean reference-kernel reading; the plan documents are copied
beside it. The interleaving makes the merged run's halves (its even rounds against its odd ones) the two
sittings, so on OUT:

* `tools/judge_repeatability.py --ceiling OUT` estimates the tau a perfect model could expect against the
  merged judge (both sittings) and against 2× and 4× as many sittings, from the noise between whole
  sittings (an error a sitting's rounds share included), not only the noise between one sitting's rounds;
* `tools/judge_reprice.py OUT` sets the model against the two sittings' judge, beside the sittings'
  agreement with each other.

A plan whose document differs between the two runs (not the same pieces) stops the merge. Standard
library and `judge_repeatability.py` (beside it) only.
"""

import json
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from judge_repeatability import plan_label, shared_cells  # noqa: E402  (the judge tools' one reading of a run)


def label(task, p):
    """A measured plan's label, as the other judge tools name it (`task` is `taskN`)."""
    return plan_label(f"{task}_", p)


def plan_file(cell, task, p):
    """The plan document a measurement recorded: in the cell's folder, else at the recorded path."""
    for f in (cell / f"{task}_{label(task, p)}.plan.json", Path(p["plan"])):
        if f.exists():
            return f
    sys.exit(f"{cell}/{task}: the plan {p['plan']} is not on disk")


def interleave(xs, ys):
    return [v for pair in zip(xs, ys) for v in pair]


def merge_plan(pa, pb):
    """Plan `pa`'s record with `pb`'s rounds interleaved into it and its cost over all of them."""
    out = json.loads(json.dumps(pa))
    for key in ("round_costs_ms", "round_devices_ms", "round_device_reference_ms"):
        if key in pa and key in pb:
            out[key] = interleave(pa[key], pb[key])
        else:
            out.pop(key, None)
    rounds = out.get("round_devices_ms")
    if rounds:
        totals = []
        for d, dev in enumerate(out["measured"]["devices"]):
            compute = statistics.median(r[d][0] for r in rounds)
            bw = statistics.median(r[d][1] for r in rounds)
            fw = statistics.median(r[d][2] for r in rounds)
            dev.update(compute_ms=compute, bw_comm_ms=bw, fw_comm_ms=fw, total_ms=compute + bw + fw)
            totals.append(compute + bw + fw)
        out["measured"]["cost_ms"] = max(totals)
    else:
        out["measured"]["cost_ms"] = statistics.mean(out["round_costs_ms"])
    costs = out["round_costs_ms"]
    out["cost_cv"] = statistics.stdev(costs) / statistics.mean(costs) if len(costs) > 1 else 0.0
    return out


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.split("\n\n")[1])
    a_root, b_root, out_root = (Path(x) for x in sys.argv[1:])
    for cell in shared_cells(a_root, b_root):
        a_cell, b_cell, o_cell = a_root / cell, b_root / cell, out_root / cell
        merged = 0
        for ma in sorted(a_cell.glob("task*.measured.json")):
            mb = b_cell / ma.name
            if not mb.exists():
                continue
            task = ma.name[: -len(".measured.json")]
            da, db = json.loads(ma.read_text()), json.loads(mb.read_text())
            pb = {label(task, p): p for p in db["plans"]}
            plans = []
            o_cell.mkdir(parents=True, exist_ok=True)
            for p in da["plans"]:
                name = label(task, p)
                q = pb.get(name)
                if q is None:
                    continue
                fa, fb = plan_file(a_cell, task, p), plan_file(b_cell, task, q)
                if json.loads(fa.read_text())["pieces"] != json.loads(fb.read_text())["pieces"]:
                    sys.exit(f"{cell}/{task}: plan {name} differs between {fa} and {fb}")
                if len(p["round_costs_ms"]) != len(q["round_costs_ms"]):
                    sys.exit(f"{cell}/{task}: plan {name} has {len(p['round_costs_ms'])} rounds in A and "
                             f"{len(q['round_costs_ms'])} in B; merge runs of equal rounds")
                target = o_cell / f"{task}_{name}.plan.json"
                shutil.copyfile(fa, target)
                m = merge_plan(p, q)
                m["plan"] = str(target)
                plans.append(m)
            if len(plans) < 2:
                continue
            doc = dict(da)
            doc["plans"] = plans
            doc["rounds"] = len(plans[0]["round_costs_ms"])
            refs = [d["reference_ms"] for d in (da, db) if d.get("reference_ms")]
            if refs:
                doc["reference_ms"] = statistics.mean(refs)
            (o_cell / ma.name).write_text(json.dumps(doc, indent=1))
            merged += 1
        print(f"{cell}: {merged} tasks merged")


if __name__ == "__main__":
    main()
