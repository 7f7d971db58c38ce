"""The shardplan package against its own promises and against the CLI (`SHARDPLAN_CLI`, a built
`shardplan` binary; scripts/test-all.sh passes the workspace's)."""

import dataclasses
import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

import shardplan

TABLES = [
    {"name": "big", "rows": 2_000_000, "dim": 128, "pooling_factor": 12.0},
    {"name": "mid", "rows": 300_000, "dim": 64, "pooling_factor": 4.0},
    {"name": "small", "rows": 5_000, "dim": 32, "pooling_factor": 1.0},
]


def cli() -> str:
    path = os.environ.get("SHARDPLAN_CLI")
    assert path, "set SHARDPLAN_CLI to a built shardplan binary (scripts/test-all.sh does)"
    assert Path(path).is_file(), path
    return path


def test_plan_reports_every_device_and_a_bottleneck():
    p = shardplan.plan(TABLES, devices=4, mem="4GiB", seed=1)
    assert p.planner == shardplan.DEFAULT_PLANNER == "auto"
    assert p.report["feasible"] and p.cost_ms > 0 and p.planning_ms >= 0
    assert len(p.devices) == 4 and 0 <= p.bottleneck_device < 4
    assert max(d["total_ms"] for d in p.devices) == pytest.approx(p.cost_ms)
    # Every table is placed; a table's column pieces (row-wise pieces aside) add up to at most its dim.
    assert {piece["table_id"] for piece in p.pieces} == set(range(len(TABLES)))
    for i, t in enumerate(TABLES):
        assert sum(piece["dim"] for piece in p.pieces if piece["table_id"] == i and "rows" not in piece) <= t["dim"]
    assert "auto" in repr(p)


def test_planner_and_cost_model_lists():
    names = [x["name"] for x in shardplan.planners()]
    assert {"auto", "neuroshard", "torchrec", "size-lookup", "dreamshard", "autoshard"} <= set(names)
    models = {m["name"]: m for m in shardplan.cost_models()}
    assert "analytical" in models and models["h100"]["is_default"]


def test_every_planner_plans_or_refuses_by_name():
    for name in [x["name"] for x in shardplan.planners()]:
        try:
            p = shardplan.plan(TABLES, devices=2, mem="8GiB", planner=name, seed=3)
        except shardplan.ShardplanError as e:
            assert str(e), name
        else:
            assert p.planner == name and p.cost_ms > 0


def test_json_round_trip_and_evaluate():
    p = shardplan.plan(TABLES, devices=4, planner="size-lookup")
    again = shardplan.Plan.from_json(p.to_json())
    assert again.pieces == p.pieces
    same = shardplan.evaluate(again)
    assert same.cost_ms == p.cost_ms
    analytical = shardplan.evaluate(p.document, cost_model="analytical")
    assert analytical.report["cost_model"].startswith("analytical") and analytical.cost_ms != p.cost_ms


def test_the_cli_reads_the_document_and_gives_the_same_cost(tmp_path):
    p = shardplan.plan(TABLES, devices=4, seed=5)
    doc = tmp_path / "plan.json"
    doc.write_text(p.to_json())
    out = tmp_path / "again.json"
    subprocess.run([cli(), "evaluate", str(doc), "--out", str(out)], check=True, capture_output=True)
    [evaluated] = json.loads(out.read_text())
    assert evaluated["report"]["cost_ms"] == p.cost_ms


def test_the_same_plan_as_the_cli_on_a_seeded_task(tmp_path):
    out = tmp_path / "cli.json"
    subprocess.run(
        [cli(), "plan", "--sample", "14", "--max-dim", "64", "--devices", "4", "--mem", "3GiB", "--seed", "3",
         "--algo", "neuroshard", "--out", str(out)],
        check=True,
        capture_output=True,
    )
    want = json.loads(out.read_text())
    caps = want["task"]["devices"]["mem_cap_bytes"]
    have = shardplan.plan(want["task"]["tables"], devices=caps, planner="neuroshard", seed=want["seed"])
    assert have.pieces == want["pieces"]
    assert have.cost_ms == want["report"]["cost_ms"]


def test_hosts_by_preset_or_options_and_refused_by_name(tmp_path):
    tables = [{"name": f"t{i}", "rows": 100_000, "dim": 64, "pooling_factor": 4.0} for i in range(24)]
    p = shardplan.plan(tables, devices=16, planner="size-lookup", topology="h100-sxm")
    assert p.document["task"]["topology"]["hosts"] == 2
    assert p.report["bottleneck_link"]["part"] in ("compute", "in-host exchange", "network")
    assert all(d["network_ms"] > 0 for d in p.devices)
    assert p.to_torchrec_dict()["local_world_size"] == 8
    # The same pricing as the CLI's `evaluate` of the document.
    doc = tmp_path / "plan.json"
    doc.write_text(p.to_json())
    out = tmp_path / "again.json"
    subprocess.run([cli(), "evaluate", str(doc), "--out", str(out)], check=True, capture_output=True)
    assert json.loads(out.read_text())[0]["report"]["cost_ms"] == p.cost_ms
    slow = shardplan.plan(tables, devices=16, planner="size-lookup",
                          topology={"hosts": 4, "network_gbps": 1.0, "network_latency_us": 50})
    assert slow.document["task"]["topology"]["devices_per_host"] == 4 and slow.cost_ms > p.cost_ms
    with pytest.raises(shardplan.ShardplanError, match="devices_per_host"):
        shardplan.plan(tables, devices=12, topology="h100-sxm")
    with pytest.raises(shardplan.ShardplanError, match="network"):
        shardplan.plan(tables, devices=8, topology={"hosts": 2})


def test_torchrec_dict():
    p = shardplan.plan(TABLES, devices=4, planner="size-lookup")
    d = p.to_torchrec_dict()
    assert d["world_size"] == 4 and d["local_world_size"] == 4
    assert set(d["plan"]) == {"big", "mid", "small"}
    assert d["plan"]["small"]["sharding_type"] == "table_wise"
    assert p.to_torchrec_dict(local_world_size=2)["local_world_size"] == 2
    with pytest.raises(shardplan.ShardplanError, match="local_world_size"):
        p.to_torchrec_dict(local_world_size=5)


@dataclasses.dataclass
class Table:
    name: str
    rows: int
    dim: int
    pooling_factor: float


class EmbeddingBagConfig:  # the fields TorchRec's has, duck-typed
    def __init__(self, name, num_embeddings, embedding_dim, feature_names):
        self.name, self.num_embeddings, self.embedding_dim, self.feature_names = (
            name, num_embeddings, embedding_dim, feature_names)


def test_tables_as_dataclasses_and_torchrec_configs():
    a = shardplan.plan([Table("a", 100_000, 64, 3.0), Table("b", 1000, 16, 1.0)], devices=2)
    assert len({piece["table_id"] for piece in a.pieces}) == 2
    configs = [EmbeddingBagConfig("a", 100_000, 64, ["f1", "f2"]), EmbeddingBagConfig("b", 1000, 16, ["f3"])]
    b = shardplan.plan(configs, devices=2, pooling_factors={"a": [1.0, 2.0], "b": 1.0})
    assert b.document["task"]["tables"][0]["pooling_factor"] == 3.0
    with pytest.raises(shardplan.ShardplanError, match="pooling_factors"):
        shardplan.plan(configs, devices=2, pooling_factors={"a": 1.0})


def test_errors_are_value_errors_naming_field_and_value():
    assert issubclass(shardplan.ShardplanError, ValueError)
    cases = [
        (dict(tables=[{"name": "t", "rows": 0, "dim": 8, "pooling_factor": 1.0}], devices=2), ["rows", "0"]),
        (dict(tables=[{"name": "t", "rows": 10, "dim": 6, "pooling_factor": 1.0}], devices=2), ["dim", "6"]),
        (dict(tables=TABLES, devices=0), ["devices", "0"]),
        (dict(tables=TABLES, devices=2, mem="4 potatoes"), ["mem", "potatoes"]),
        (dict(tables=TABLES, devices=2, planner="nope"), ["nope"]),
        (dict(tables=TABLES, devices=2, cost_model="nope"), ["nope"]),
        (dict(tables=TABLES, devices=2, budget_ms=-1.0), ["budget_ms", "-1"]),
        (dict(tables=TABLES, devices=2, mem="64MiB", tiers="hbm"), ["GiB"]),
        (dict(tables=[], devices=2), ["tables"]),
        (dict(tables=[object()], devices=2), ["table 0", "object"]),
    ]
    for kwargs, needles in cases:
        with pytest.raises(shardplan.ShardplanError) as e:
            shardplan.plan(**kwargs)
        for n in needles:
            assert n in str(e.value), (kwargs, str(e.value))
    with pytest.raises(shardplan.ShardplanError, match="plan document"):
        shardplan.evaluate("{}")


def test_planning_releases_the_gil():
    # A planner runs in one thread while this one keeps taking timestamps: timestamps that fall inside the
    # planner call (well inside, away from its ends) exist only if the call does not hold the GIL.
    tables = [{"name": f"t{i}", "rows": 50_000 + 997 * i, "dim": 64, "pooling_factor": 1.0 + i % 7} for i in range(120)]
    span = {}
    def work():
        span["start"] = time.perf_counter()
        shardplan.plan(tables, devices=8, mem="8GiB", planner="neuroshard")
        span["end"] = time.perf_counter()
    t = threading.Thread(target=work)
    stamps = []
    t.start()
    while t.is_alive():
        stamps.append(time.perf_counter())
    t.join()
    start, end = span["start"] + 0.006, span["end"] - 0.006
    assert end - start > 0.01, "the plan was too quick to tell"
    inside = sum(start < s < end for s in stamps)
    assert inside > 100, inside


PROFILE = Path(__file__).resolve().parents[2] / "planner-core" / "profiles" / "h100"


def test_a_profile_directory_prices_as_the_cli_prices_it(tmp_path):
    profile = shardplan.load_profile(PROFILE)
    assert profile.name == "h100"
    out = tmp_path / "cli.json"
    subprocess.run(
        [cli(), "plan", "--sample", "12", "--max-dim", "64", "--devices", "4", "--mem", "3GiB", "--seed", "4",
         "--algo", "size-lookup", "--cost-model", str(PROFILE), "--out", str(out)],
        check=True,
        capture_output=True,
    )
    want = json.loads(out.read_text())
    caps = want["task"]["devices"]["mem_cap_bytes"]
    have = shardplan.plan(want["task"]["tables"], devices=caps, planner="size-lookup", cost_model=profile)
    assert have.pieces == want["pieces"]
    assert have.cost_ms == want["report"]["cost_ms"]
    assert shardplan.evaluate(have, cost_model=profile).cost_ms == have.cost_ms


def test_a_bad_profile_directory_is_refused_by_name(tmp_path):
    with pytest.raises(shardplan.ShardplanError, match="missing-profile"):
        shardplan.load_profile(tmp_path / "missing-profile")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "card.json").write_text((PROFILE / "card.json").read_text())
    # The card names graphs the directory does not hold.
    with pytest.raises(shardplan.ShardplanError, match="compute_encoder.onnx"):
        shardplan.load_profile(broken)
    (broken / "card.json").write_text("{ not json")
    with pytest.raises(shardplan.ShardplanError):
        shardplan.load_profile(broken)
    with pytest.raises(shardplan.ShardplanError, match="cost_model"):
        shardplan.plan(TABLES, devices=2, cost_model=3)


def test_tables_too_big_for_hbm_move_to_host_memory_unless_told_not_to():
    tables = [{"name": f"t{i}", "rows": 40_000_000, "dim": 64, "pooling_factor": 2.0} for i in range(6)]
    p = shardplan.plan(tables, devices=2, mem="8GiB", planner="size-lookup")
    cached = [t for t in p.document["task"]["tables"] if "cache_load_factor" in t]
    assert cached and all(0 < t["cache_load_factor"] <= 1 for t in cached)
    assert p.report["feasible"] and any(d["memory"].get("host_bytes", 0) > 0 for d in p.devices)
    with pytest.raises(shardplan.ShardplanError, match="usable in total"):
        shardplan.plan(tables, devices=2, mem="8GiB", planner="size-lookup", tiers="hbm")
    with pytest.raises(shardplan.ShardplanError, match="tiers"):
        shardplan.plan(tables, devices=2, mem="8GiB", tiers="ssd")
