#!/usr/bin/env python3
"""Apply a shardplan plan in TorchRec.

`shardplan plan --torchrec-out plan.torchrec.json` (or `shardplan export-torchrec plan.json`) writes
a plan as TorchRec's per-table `ParameterSharding` fields (schema `shardplan.torchrec-plan/v1`,
docs/FORMATS.md). This module turns that file into the `construct_module_sharding_plan(...)` call for
your `EmbeddingBagCollection`:

    from torchrec_apply import load_plan, module_sharding_plan
    doc = load_plan("plan.torchrec.json")
    ebc_plan = module_sharding_plan(ebc, doc)              # EmbeddingModuleShardingPlan
    plan = ShardingPlan({"path.to.ebc": ebc_plan})         # for DistributedModelParallel(plan=...)

Needs the `shardplan` package installed in the TorchRec environment (docs/PYTHON.md): the conversion
is `shardplan.torchrec.module_sharding_plan`. Each table uses TorchRec's public generator when it expresses the layout exactly — `table_wise(rank)`,
`column_wise(ranks)` for equal column blocks, `row_wise()` for TorchRec's own row split — and otherwise
a generator that passes the file's shard offsets, sizes and ranks through to TorchRec's
`_get_parameter_sharding` (a private helper of `torchrec.distributed.sharding_plan`, the one its
public generators call). Every table is checked against the module's shapes first.

Run as a script it checks a file end to end against the installed TorchRec: it builds an
`EmbeddingBagCollection` on the meta device from the file's table shapes, constructs the plan and
verifies that every table's sharding type, kernel, ranks, offsets, sizes and placements are the file's:

    python tools/torchrec_apply.py plan.torchrec.json
"""

from __future__ import annotations

import json
import sys
from typing import Any, Dict

# The conversion lives in the Python package (`python/`, `shardplan.torchrec`); install its wheel into the
# TorchRec environment (docs/PYTHON.md).
from shardplan.torchrec import generators, module_sharding_plan  # noqa: F401  (re-exported for callers)

SCHEMA = "shardplan.torchrec-plan/v1"


def load_plan(path: str) -> Dict[str, Any]:
    """Reads and checks a `shardplan.torchrec-plan/v1` document."""
    with open(path) as f:
        doc = json.load(f)
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {doc.get('schema')!r}, expected {SCHEMA!r}")
    return doc


def check(path: str) -> int:
    """Builds a meta-device EBC from the file's shapes, applies the plan and compares every field."""
    import torch
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    doc = load_plan(path)
    configs = [
        EmbeddingBagConfig(
            name=n, num_embeddings=s["num_embeddings"], embedding_dim=s["embedding_dim"], feature_names=[f"f_{n}"]
        )
        for n, s in doc["tables"].items()
    ]
    ebc = EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
    plan = module_sharding_plan(ebc, doc)
    bad = 0
    for name, ps in doc["plan"].items():
        got = plan[name]
        spec = [
            {"shard_offsets": list(m.shard_offsets), "shard_sizes": list(m.shard_sizes), "placement": str(m.placement)}
            for m in got.sharding_spec.shards
        ]
        mine = (ps["sharding_type"], ps["compute_kernel"], ps["ranks"], ps["sharding_spec"])
        theirs = (got.sharding_type, got.compute_kernel, list(got.ranks), spec)
        if mine != theirs:
            bad += 1
            print(f"table {name}: file {mine}\n  torchrec {theirs}", file=sys.stderr)
    kinds = sorted({ps["sharding_type"] for ps in doc["plan"].values()})
    print(f"{path}: {len(doc['plan'])} tables ({', '.join(kinds)}), {bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print(__doc__)
        sys.exit(2)
    sys.exit(check(sys.argv[1]))
