"""ShardplanPlanner against the real TorchRec (1.9.2, CPU build: tools/torchrec_reference/install.sh), run
by developers, not CI (the environment is 5.5 GB):

    TORCHREC_VENV=../.venv-torchrec bash tools/torchrec_reference/install.sh
    ../.venv-torchrec/bin/pip install python/dist/shardplan-*.whl      # maturin build --release --out dist
    ../.venv-torchrec/bin/python python/tests/torchrec_check.py

A module with two EmbeddingBagCollections (meta device: no memory is allocated) is planned for a 2-host ×
2-GPU Topology by ShardplanPlanner and by TorchRec's EmbeddingShardingPlanner. The ShardingPlan TorchRec
builds from shardplan's must hold exactly the shards shardplan chose (sharding type, kernel, cache load
factor, ranks, offsets, sizes, placements) for every table of both modules; both plans are printed with
their sharding types and kernels. Run twice: on 16 GiB per GPU (everything in HBM) and on 2 GiB per GPU
(the tables need about 3× the HBM, so some live in host memory behind HBM caches). Exits 1 on any
mismatch.
"""

import sys

import torch
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.planner import EmbeddingShardingPlanner
from torchrec.distributed.planner.types import ParameterConstraints, Topology
from torchrec.modules.embedding_configs import EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection

from shardplan.torchrec import ShardplanPlanner


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        meta = torch.device("meta")
        self.sparse = EmbeddingBagCollection(
            tables=[
                EmbeddingBagConfig(name="huge", num_embeddings=40_000_000, embedding_dim=128, feature_names=["f_huge"]),
                EmbeddingBagConfig(name="wide", num_embeddings=2_000_000, embedding_dim=256, feature_names=["f_w1", "f_w2"]),
                EmbeddingBagConfig(name="mid", num_embeddings=500_000, embedding_dim=64, feature_names=["f_mid"]),
            ]
            + [
                EmbeddingBagConfig(name=f"small{i}", num_embeddings=10_000 * (i + 1), embedding_dim=32, feature_names=[f"f_s{i}"])
                for i in range(6)
            ],
            device=meta,
        )
        self.user = EmbeddingBagCollection(
            tables=[EmbeddingBagConfig(name="user", num_embeddings=8_000_000, embedding_dim=64, feature_names=["f_user"])],
            device=meta,
        )


def shards(ps):
    spec = [
        (list(m.shard_offsets), list(m.shard_sizes), str(m.placement)) for m in ps.sharding_spec.shards
    ] if ps.sharding_spec is not None else []
    load = ps.cache_params.load_factor if ps.cache_params is not None else None
    return ps.sharding_type, ps.compute_kernel, load, list(ps.ranks or []), spec


def kinds(p):
    return f"{p['sharding_type']}/{p['compute_kernel']}" + (f"@{p['cache_load_factor']:g}" if p.get("cache_load_factor") else "")


def check(hbm_gib: int) -> int:
    topology = Topology(world_size=4, compute_device="cuda", hbm_cap=hbm_gib << 30, local_world_size=2)
    constraints = {"huge": ParameterConstraints(pooling_factors=[20.0]), "wide": ParameterConstraints(pooling_factors=[4.0, 6.0])}
    model = Model()
    sharders = [EmbeddingBagCollectionSharder()]
    ours = ShardplanPlanner(topology=topology, batch_size=512, constraints=constraints)
    documents = ours.plan_documents(model)
    plan = ours.plan(model, sharders)
    bad = 0
    for path, doc in documents.items():
        module_plan = plan.plan[path]
        for name, ps in doc["plan"].items():
            want = (ps["sharding_type"], ps["compute_kernel"], ps.get("cache_load_factor"), ps["ranks"],
                    [(s["shard_offsets"], s["shard_sizes"], s["placement"]) for s in ps["sharding_spec"]])
            got = shards(module_plan[name])
            if want != got:
                bad += 1
                print(f"{path}.{name}: shardplan {want}\n  torchrec {got}", file=sys.stderr)
    print(f"{hbm_gib} GiB per GPU: shardplan ({ours.last_plan.planner}, predicted {ours.last_plan.cost_ms:.3f} ms "
          f"under {ours.last_plan.report['cost_model']}):")
    for path, doc in documents.items():
        print(f"  {path}: " + ", ".join(f"{n} {kinds(p)} {p['ranks']}" for n, p in doc["plan"].items()))
    theirs = EmbeddingShardingPlanner(topology=topology, batch_size=512, constraints=constraints).plan(model, sharders)
    print("TorchRec's EmbeddingShardingPlanner:")
    for path, module_plan in theirs.plan.items():
        print(f"  {path}: " + ", ".join(
            f"{n} {p.sharding_type}/{p.compute_kernel} {list(p.ranks)}" for n, p in module_plan.items()))
    print(f"{sum(len(d['plan']) for d in documents.values())} tables in {len(documents)} modules, {bad} mismatches")
    return bad


def main() -> int:
    bad = sum(check(gib) for gib in (16, 2))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
