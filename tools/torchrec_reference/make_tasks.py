#!/usr/bin/env python3
"""Tasks for the default-planner fixtures (`planner-core/tests/fixtures/torchrec/default_*.json`) that
`shardplan tasks` cannot draw: pool tables larger than the devices' HBM, a two-host topology, and tables
the user placed in host memory. Standard library only; the pool is planner-core's embedded copy.

    python3 tools/torchrec_reference/make_tasks.py --out-dir /tmp/tasks

writes `big40.jsonl` (40 pool tables, dims drawn from {4, 8, ..., 128}, seed 1: 34.4 GiB of weights on
4 × 4 GiB), `big40_2gib.jsonl` (the same on 4 × 2 GiB), and, from the fixtures' own tasks,
`hosts_40x8.jsonl` (the `pool_40x4` tables on 8 × 4 GiB as 2 hosts of 4, network 25 GB/s, 512 GiB DRAM
per host, 51.2 GB/s host link) and `wide_tiers.jsonl` (the `wide_7x4` tables with `wide384` cached at 0.5
and `d96` in host memory without a cache). Then, for each:

    $VENV/bin/python tools/torchrec_reference/reference.py --tasks big40.jsonl --search default --out default_uvm_40x4.json
"""

import argparse
import csv
import json
import random
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
POOL = REPO / "planner-core" / "data" / "dlrm_t856_table_stats.csv"
FIXTURES = REPO / "planner-core" / "tests" / "fixtures" / "torchrec"
GIB = 1 << 30


def task_record(tables, caps, topology=None):
    t = {"schema": "shardplan.task/v1", "index": 0, "seed": 0, "protocol": "neuroshard", "pool_ids": [],
         "tables": tables, "devices": {"mem_cap_bytes": caps}}
    if topology:
        t["topology"] = topology
    return t


def pool_tables(n, max_dim, seed):
    rows = list(csv.DictReader(POOL.open()))
    rng = random.Random(seed)
    out = []
    for i in range(n):
        r = rng.choice(rows)
        dim = rng.choice(list(range(4, max_dim + 1, 4)))
        out.append({"name": f"t{i}_{r['table_id']}", "rows": int(r["row"]), "dim": dim,
                    "pooling_factor": float(r["pooling_factor"]),
                    "bins": [float(r[f"bin_{k}"]) for k in range(17)]})
    return out


def fixture_task(name):
    return json.loads((FIXTURES / f"{name}.json").read_text())["task"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", required=True)
    a = ap.parse_args()
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    big = pool_tables(40, 128, 1)
    tasks = {
        "big40": task_record(big, [4 * GIB] * 4),
        "big40_2gib": task_record(big, [2 * GIB] * 4),
    }
    hosts = fixture_task("pool_40x4")
    tasks["hosts_40x8"] = task_record(hosts["tables"], [4 * GIB] * 8, {
        "hosts": 2, "devices_per_host": 4, "network": {"bw_bytes_per_s": 25e9, "latency_ms": 0.025},
        "host_dram_bytes": 512 * GIB, "host_link_bw_bytes_per_s": 51.2e9})
    wide = fixture_task("wide_7x4")
    wide["tables"][1]["cache_load_factor"] = 0.5
    wide["tables"][4]["compute_kernel"] = "fused_uvm"
    tasks["wide_tiers"] = task_record(wide["tables"], wide["devices"]["mem_cap_bytes"])
    for name, t in tasks.items():
        (out / f"{name}.jsonl").write_text(json.dumps(t) + "\n")
        print(f"wrote {out / name}.jsonl")


if __name__ == "__main__":
    main()
