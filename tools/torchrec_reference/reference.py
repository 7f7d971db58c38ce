#!/usr/bin/env python3
"""Run TorchRec's own planner (EmbeddingShardingPlanner, TorchRec 1.9.2) on shardplan tasks.

Reads a task suite written by `shardplan tasks` (JSON Lines, `shardplan.task/v1`), builds for each
selected task an `EmbeddingBagCollection` on the meta device (one `EmbeddingBagConfig` per table, one
feature per table), gives every table's pooling factor through `ParameterConstraints`, restricts the
search to what shardplan models (sharding types table_wise, column_wise, row_wise; compute kernel
fused; everything else TorchRec's defaults), and plans for a CPU-only `Topology` with
compute_device="cuda" and the task's memory caps as HBM caps. Writes one JSON document per task:

    {"schema": "shardplan.torchrec-reference/v1", "torchrec_version", "torch_version",
     "batch_size_per_rank", "world_size", "task": {...as in the suite...},
     "reserved_hbm_bytes": [per rank, after HeuristicalStorageReservation],
     "objective": max over ranks of summed shard perf (NoopPerfModel.rate), "num_proposals", "num_plans",
     "planning_time_s": wall time of planner.plan(),
     "plan": [{"table", "sharding_type", "compute_kernel", "ranks",
               "shards": [{"offsets", "sizes", "rank", "storage_hbm",
                           "perf": {"fwd_compute", "fwd_comms", "bwd_compute", "bwd_comms",
                                    "input_dist_comms", "prefetch_compute", "total"}}]}],
     "search_space": [...every enumerated option, same shard fields without rank...]  (--search-space)}

Perf values are TorchRec's: milliseconds (its bandwidths are bytes per ms). Floats are written with
Python's shortest round-trip repr, so a reader gets TorchRec's doubles bit for bit.

Usage (after tools/torchrec_reference/install.sh):
    $VENV/bin/python tools/torchrec_reference/reference.py --tasks tasks.jsonl --index 0 --out ref.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Dict, List

import torch
import torchrec
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
from torchrec.distributed.planner.perf_models import NoopPerfModel
from torchrec.distributed.planner.types import CustomTopologyData, ParameterConstraints
from torchrec.distributed.types import CacheParams
from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection

SHARDING_TYPES = ["table_wise", "column_wise", "row_wise"]
DTYPES = {"fp32": DataType.FP32, "fp16": DataType.FP16}


# TorchRec 1.9.2's default sharding types for an EmbeddingBagCollection on CUDA (grid shard is only enumerated
# when a constraint names it), without data_parallel, which shardplan's plans cannot express (a replicated table).
DEFAULT_SHARDING_TYPES = ["table_wise", "column_wise", "table_column_wise", "row_wise", "table_row_wise"]


def build(task: Dict[str, Any], search: str):
    tables = task["tables"]
    configs = []
    constraints = {}
    for t in tables:
        if t.get("optimizer", "none") != "none":
            raise SystemExit(f"table {t['name']}: optimizer state is not modelled by this script")
        if t.get("dtype", "fp32") not in DTYPES:
            raise SystemExit(f"table {t['name']}: dtype {t.get('dtype')!r} is not one of {list(DTYPES)}")
        configs.append(
            EmbeddingBagConfig(
                name=t["name"],
                embedding_dim=t["dim"],
                num_embeddings=t["rows"],
                feature_names=[f"f_{t['name']}"],
                data_type=DTYPES[t.get("dtype", "fp32")],
            )
        )
        # A table the task places in host memory keeps that tier: its kernel (and cache share) is a
        # constraint, as a TorchRec user would write it.
        kernels, cache = None, None
        if "cache_load_factor" in t or t.get("compute_kernel") in ("fused_uvm", "fused_uvm_caching"):
            kernels = [t.get("compute_kernel", "fused_uvm_caching")]
            if kernels == ["fused_uvm_caching"]:
                cache = CacheParams(load_factor=float(t.get("cache_load_factor", 0.2)))
        if search == "full":
            # TorchRec's default search space: every sharding type and compute kernel the sharder offers.
            constraints[t["name"]] = ParameterConstraints(
                compute_kernels=kernels, cache_params=cache, pooling_factors=[float(t["pooling_factor"])]
            )
        elif search == "default":
            # The same without data_parallel; compute kernels left to TorchRec (fused, fused_uvm,
            # fused_uvm_caching on CUDA).
            constraints[t["name"]] = ParameterConstraints(
                sharding_types=DEFAULT_SHARDING_TYPES,
                compute_kernels=kernels,
                cache_params=cache,
                pooling_factors=[float(t["pooling_factor"])],
            )
        else:
            if kernels is not None:
                raise SystemExit(f"table {t['name']}: a table in host memory needs --search default or full")
            constraints[t["name"]] = ParameterConstraints(
                sharding_types=SHARDING_TYPES,
                compute_kernels=["fused"],
                pooling_factors=[float(t["pooling_factor"])],
            )
    ebc = EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
    caps = task["devices"]["mem_cap_bytes"]
    world = len(caps)
    # The task's hosts as TorchRec's Topology takes them: ranks per host, the network as the cross-node
    # bandwidth (bytes per ms), host DRAM shared by a host's ranks, the device-host link.
    extra: Dict[str, Any] = {}
    topo = task.get("topology")
    if topo:
        per_host = topo["devices_per_host"]
        extra["local_world_size"] = per_host
        if topo.get("network") and topo["hosts"] > 1:
            extra["inter_host_bw"] = topo["network"]["bw_bytes_per_s"] / 1e3
        if topo.get("host_dram_bytes") is not None:
            extra["ddr_cap"] = topo["host_dram_bytes"] // per_host
        if topo.get("host_link_bw_bytes_per_s") is not None:
            extra["hbm_to_ddr_mem_bw"] = topo["host_link_bw_bytes_per_s"] / 1e3
    if len(set(caps)) == 1:
        topology = Topology(world_size=world, compute_device="cuda", hbm_cap=caps[0], **extra)
    else:
        topology = Topology(
            world_size=world,
            compute_device="cuda",
            custom_topology_data=CustomTopologyData(data={"hbm_cap": caps}, world_size=world),
            **extra,
        )
    return ebc, constraints, topology


def perf_json(p) -> Dict[str, float]:
    return {
        "fwd_compute": p.fwd_compute,
        "fwd_comms": p.fwd_comms,
        "bwd_compute": p.bwd_compute,
        "bwd_comms": p.bwd_comms,
        "input_dist_comms": p.input_dist_comms,
        "prefetch_compute": p.prefetch_compute,
        "total": p.total,
    }


def option_json(o, with_rank: bool) -> Dict[str, Any]:
    shards = []
    for s in o.shards:
        d = {
            "offsets": list(s.offset),
            "sizes": list(s.size),
            "storage_hbm": s.storage.hbm,
            "storage_ddr": s.storage.ddr,
            "perf": perf_json(s.perf),
        }
        if with_rank:
            d["rank"] = s.rank
        shards.append(d)
    out = {"table": o.name, "sharding_type": o.sharding_type, "compute_kernel": o.compute_kernel, "shards": shards}
    if o.cache_load_factor is not None:
        out["cache_load_factor"] = o.cache_load_factor
    if with_rank:
        out["ranks"] = [s.rank for s in o.shards]
    return out


def run(task: Dict[str, Any], batch_size: int, search_space: bool, search: str) -> Dict[str, Any]:
    ebc, constraints, topology = build(task, search)
    planner = EmbeddingShardingPlanner(
        topology=topology, batch_size=batch_size, constraints=constraints, stats=[], debug=False
    )
    sharder = EmbeddingBagCollectionSharder()
    started = time.perf_counter()
    error = None
    try:
        planner.plan(ebc, [sharder])
    except Exception as e:  # TorchRec's PlannerError: no plan fits. Recorded, not hidden.
        error = f"{type(e).__name__}: {e}"
    elapsed = time.perf_counter() - started
    reserved = planner._storage_reservation.last_reserved_topology
    out: Dict[str, Any] = {
        "schema": "shardplan.torchrec-reference/v1",
        "torchrec_version": getattr(torchrec, "__version__", "unknown"),
        "torch_version": torch.__version__,
        "batch_size_per_rank": batch_size,
        "search": search,
        "world_size": topology.world_size,
        "task": {k: task[k] for k in ("tables", "devices", "topology") if k in task},
        "reserved_hbm_bytes": [d.storage.hbm for d in reserved.devices] if reserved else None,
        "num_proposals": planner._num_proposals,
        "num_plans": planner._num_plans,
        "planning_time_s": elapsed,
    }
    if error is not None:
        out["error"] = error
        out["plan"] = None
        out["objective"] = None
    else:
        best = planner._best_plan
        out["objective"] = NoopPerfModel(topology=topology).rate(best)
        out["plan"] = [option_json(o, True) for o in best]
    if search_space:
        out["search_space"] = [option_json(o, False) for o in planner._search_space]
    return out


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", required=True, help="task suite (JSON Lines) from `shardplan tasks`")
    ap.add_argument("--index", type=int, action="append", help="task index to run (repeatable; default all)")
    ap.add_argument("--batch-size", type=int, default=512, help="per-rank batch (TorchRec's BATCH_SIZE, 512)")
    ap.add_argument("--search-space", action="store_true", help="also dump every enumerated option")
    ap.add_argument(
        "--search",
        choices=["shardplan", "default", "full"],
        default="shardplan",
        help="shardplan: table_wise, column_wise, row_wise on the fused kernel (the port's restricted mode); "
        "default: TorchRec's default sharding types without data_parallel, every default compute kernel "
        "(fused, fused_uvm, fused_uvm_caching) - the port's default mode; full: TorchRec's default search "
        "with data_parallel (not expressible in shardplan's plans; for comparison only)",
    )
    ap.add_argument("--out", required=True, help="output JSON (a list when several tasks are run)")
    args = ap.parse_args(argv)
    with open(args.tasks) as f:
        tasks = [json.loads(line) for line in f if line.strip()]
    chosen = args.index if args.index else list(range(len(tasks)))
    results = []
    for i in chosen:
        if not 0 <= i < len(tasks):
            raise SystemExit(f"--index {i}: the suite has {len(tasks)} tasks")
        r = run(tasks[i], args.batch_size, args.search_space, args.search)
        r["index"] = i
        results.append(r)
        status = r.get("error") or f"objective {r['objective']:.6f} ms"
        print(
            f"task {i}: {len(tasks[i]['tables'])} tables / {r['world_size']} ranks: {status}; "
            f"{r['num_proposals']} proposals in {r['planning_time_s']:.3f} s",
            file=sys.stderr,
        )
    with open(args.out, "w") as f:
        json.dump(results[0] if len(results) == 1 else results, f, separators=(",", ":"))
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
