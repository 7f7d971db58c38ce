"""ShardplanPlanner against the real TorchRec (1.9.2, CPU build: tools/torchrec_reference/install.sh), run
by developers, not CI (the environment is 5.5 GB):

    TORCHREC_VENV=../.venv-torchrec bash tools/torchrec_reference/install.sh
    ../.venv-torchrec/bin/pip install python/dist/shardplan-*.whl      # maturin build --release --out dist
    ../.venv-torchrec/bin/python python/tests/torchrec_check.py

A module with two EmbeddingBagCollections (meta device: no memory is allocated) is planned for a 2-host ×
2-GPU Topology by ShardplanPlanner and by TorchRec's EmbeddingShardingPlanner. The ShardingPlan TorchRec
builds from shardplan's must hold exactly the shards shardplan chose (sharding type, kernel, ranks,
offsets, sizes, placements) for every table of both modules; both plans are printed with their sharding
types. Exits 1 on any mismatch.
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
    return ps.sharding_type, ps.compute_kernel, list(ps.ranks or []), spec


def main() -> int:
    topology = Topology(world_size=4, compute_device="cuda", hbm_cap=16 << 30, local_world_size=2)
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
            want = (ps["sharding_type"], ps["compute_kernel"], ps["ranks"],
                    [(s["shard_offsets"], s["shard_sizes"], s["placement"]) for s in ps["sharding_spec"]])
            got = shards(module_plan[name])
            if want != got:
                bad += 1
                print(f"{path}.{name}: shardplan {want}\n  torchrec {got}", file=sys.stderr)
    print(f"shardplan ({ours.last_plan.planner}, predicted {ours.last_plan.cost_ms:.3f} ms under "
          f"{ours.last_plan.report['cost_model']}):")
    for path, doc in documents.items():
        print(f"  {path}: " + ", ".join(f"{n} {p['sharding_type']} {p['ranks']}" for n, p in doc["plan"].items()))
    theirs = EmbeddingShardingPlanner(topology=topology, batch_size=512, constraints=constraints).plan(model, sharders)
    print("TorchRec's EmbeddingShardingPlanner:")
    for path, module_plan in theirs.plan.items():
        print(f"  {path}: " + ", ".join(f"{n} {p.sharding_type} {list(p.ranks)}" for n, p in module_plan.items()))
    print(f"{sum(len(d['plan']) for d in documents.values())} tables in {len(documents)} modules, {bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
