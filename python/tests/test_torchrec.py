"""shardplan.torchrec without torch: importing it needs neither torch nor torchrec, and the per-module plan
documents are made from duck-typed TorchRec objects. tests/torchrec_check.py runs it against TorchRec."""

import sys
from types import SimpleNamespace

import pytest

import shardplan
from shardplan.torchrec import ShardplanPlanner, embedding_bag_collections


class Config(SimpleNamespace):
    pass


class EBC:
    def __init__(self, configs):
        self._configs = configs

    def embedding_bag_configs(self):
        return self._configs

    def named_modules(self):
        return [("", self)]


class Model:
    def __init__(self, **children):
        self.children = children

    def named_modules(self):
        return [("", self)] + list(self.children.items())


def topology(world=4, local=2, hbm=16 << 30):
    return SimpleNamespace(
        world_size=world,
        local_world_size=local,
        devices=[SimpleNamespace(storage=SimpleNamespace(hbm=hbm)) for _ in range(world)],
    )


def test_importing_needs_no_torch():
    assert "torch" not in sys.modules and "torchrec" not in sys.modules


def test_every_collection_is_planned_together_with_its_own_table_names():
    a = EBC([Config(name="t", num_embeddings=2_000_000, embedding_dim=128, feature_names=["f1", "f2"]),
             Config(name="s", num_embeddings=1000, embedding_dim=16, feature_names=["f3"])])
    b = EBC([Config(name="t", num_embeddings=500_000, embedding_dim=64, feature_names=["f4"])])
    model = Model(sparse=a, user=b)
    assert [p for p, _ in embedding_bag_collections(model)] == ["sparse", "user"]
    planner = ShardplanPlanner(topology(), constraints={"s": SimpleNamespace(pooling_factors=[3.0, 4.0])})
    docs = planner.plan_documents(model)
    assert set(docs) == {"sparse", "user"}
    assert set(docs["sparse"]["plan"]) == {"t", "s"} and set(docs["user"]["plan"]) == {"t"}
    assert docs["user"]["tables"]["t"] == {"num_embeddings": 500_000, "embedding_dim": 64}
    assert docs["sparse"]["world_size"] == 4 and docs["sparse"]["local_world_size"] == 2
    # Only splits TorchRec can build are searched.
    assert planner.last_plan.document["task"]["splits"] == "torchrec"
    # The hosts are planned on: 2 of 2 devices, over TorchRec's default cross-node bandwidth.
    hosts = planner.last_plan.document["task"]["topology"]
    assert (hosts["hosts"], hosts["devices_per_host"]) == (2, 2)
    assert hosts["network"]["bw_bytes_per_s"] == pytest.approx(12.5 * 2**30)
    # Pooling factors: the constraint's sum, else TorchRec's 1.0 per feature.
    tables = {t["name"]: t for t in planner.last_plan.document["task"]["tables"]}
    assert tables["sparse/s"]["pooling_factor"] == 7.0 and tables["sparse/t"]["pooling_factor"] == 2.0
    # TorchRec's memory accounting with the planner's batch size.
    assert planner.last_plan.report["memory_rule"]["rule"] == "torchrec"
    assert planner.last_plan.report["memory_rule"]["batch_per_rank"] == 512


def test_refusals():
    with pytest.raises(shardplan.ShardplanError, match="topology"):
        ShardplanPlanner()
    with pytest.raises(shardplan.ShardplanError, match="EmbeddingBagCollection"):
        ShardplanPlanner(topology()).plan_documents(Model())
    huge = EBC([Config(name="h", num_embeddings=10**10, embedding_dim=128, feature_names=["f"])])
    with pytest.raises(shardplan.ShardplanError, match="GiB"):
        ShardplanPlanner(topology(hbm=1 << 30)).plan_documents(huge)
