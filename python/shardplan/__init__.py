"""shardplan: split and place the embedding tables of a recommendation model across GPUs.

A thin layer over the Rust planner (``shardplan._shardplan``, planner-core's binding API): tables and
options become the JSON the planner reads, results become :class:`Plan` objects. No dependency beyond
the standard library; TorchRec integration lives in :mod:`shardplan.torchrec` and imports torch lazily.

    import shardplan
    plan = shardplan.plan([{"name": "t0", "rows": 1_000_000, "dim": 64, "pooling_factor": 8.0}], devices=4)
    print(plan.cost_ms, plan.to_torchrec_dict()["plan"]["t0"]["sharding_type"])
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from . import _shardplan
from ._shardplan import Profile, ShardplanError

__all__ = [
    "Plan",
    "Profile",
    "ShardplanError",
    "cost_models",
    "evaluate",
    "load_profile",
    "plan",
    "planners",
    "tables_from",
    "__version__",
]

__version__: str = _shardplan.version()

#: The planner :func:`plan` uses when none is named (the CLI's default).
DEFAULT_PLANNER: str = _shardplan.default_planner()


def planners() -> list[dict[str, Any]]:
    """Every registered planner: ``{"name", "summary", "is_seed_baseline"}``."""
    return json.loads(_shardplan.planners_json())


def cost_models() -> list[dict[str, Any]]:
    """Every cost model this build knows: ``{"name", "summary", "is_default", "hardware", "definitions"}``."""
    return json.loads(_shardplan.cost_models_json())


def load_profile(path: Union[str, "os.PathLike[str]"]) -> Profile:
    """A cost-model profile directory that ``shardplan-train`` wrote (``card.json`` and the ``.onnx`` graphs
    it names), checked by loading it once; pass it as ``cost_model=`` to :func:`plan` and :func:`evaluate`.
    Its graphs run in planner-core's own evaluators, which take chains of dense layers (every graph the
    trainer exports); any other graph is refused, naming it."""
    directory = os.fspath(path)
    card = os.path.join(directory, "card.json")
    try:
        with open(card, encoding="utf-8") as f:
            card_json = f.read()
        files = {}
        for name in sorted(os.listdir(directory)):
            if name.endswith(".onnx"):
                with open(os.path.join(directory, name), "rb") as f:
                    files[name] = f.read()
    except OSError as e:
        raise ShardplanError(f"profile directory {directory!r}: {e.strerror or e}: {e.filename or card}") from None
    return Profile(card_json, files)


def _size(field: str, value: Union[int, str]) -> int:
    if isinstance(value, bool):
        raise ShardplanError(f"field `{field}` = {value!r} is invalid (allowed: bytes as an int, or a size like \"4GiB\")")
    if isinstance(value, int):
        if value < 0:
            raise ShardplanError(f"field `{field}` = {value} is invalid (allowed: a byte count >= 0)")
        return value
    if isinstance(value, str):
        return _shardplan.parse_bytes(field, value)
    raise ShardplanError(f"field `{field}` = {value!r} is invalid (allowed: bytes as an int, or a size like \"4GiB\")")


def _record(i: int, table: Any, pooling_factors: Mapping[str, float]) -> dict[str, Any]:
    """One table as a record of the planner's tables JSON: shardplan's own fields, or TorchRec's."""
    if dataclasses.is_dataclass(table) and not isinstance(table, type):
        table = dataclasses.asdict(table)
    if isinstance(table, Mapping):
        record = dict(table)
        name = record.get("name")
        if name in pooling_factors and "pooling_factor" not in record:
            record["pooling_factor"] = pooling_factors[name]
        return record
    # An EmbeddingBagConfig-like object (duck-typed): TorchRec's fields, pooling factor given apart.
    try:
        name = table.name
        record = {
            "name": name,
            "num_embeddings": table.num_embeddings,
            "embedding_dim": table.embedding_dim,
            "feature_names": list(table.feature_names),
        }
    except AttributeError as e:
        raise ShardplanError(
            f"table {i}: {type(table).__name__} is neither a dict, a dataclass nor an EmbeddingBagConfig-like "
            f"object (name, num_embeddings, embedding_dim, feature_names): {e}"
        ) from None
    data_type = getattr(table, "data_type", None)
    if data_type is not None:
        record["data_type"] = getattr(data_type, "name", str(data_type)).upper()
    if name not in pooling_factors:
        raise ShardplanError(
            f"table {i} (`{name}`): no pooling factor; give pooling_factors={{{name!r}: <mean lookups per sample>}}"
            " (TorchRec's ParameterConstraints.pooling_factors)"
        )
    record["pooling_factor"] = float(pooling_factors[name])
    return record


def tables_from(tables: Iterable[Any], pooling_factors: Optional[Mapping[str, float]] = None) -> list[dict[str, Any]]:
    """Validated task tables from dicts (shardplan's ``name, rows, dim, pooling_factor[, bins, dtype,
    optimizer]`` or TorchRec's ``name, num_embeddings, embedding_dim, feature_names, pooling_factor``),
    dataclasses with those fields, or ``EmbeddingBagConfig``-like objects whose pooling factor is in
    ``pooling_factors`` (table name -> mean lookups per sample)."""
    pf = dict(pooling_factors or {})
    # TorchRec's ParameterConstraints give a list per feature; a table's factor is their sum.
    pf = {k: (sum(v) if isinstance(v, (list, tuple)) else v) for k, v in pf.items()}
    records = [_record(i, t, pf) for i, t in enumerate(tables)]
    if not records:
        raise ShardplanError("field `tables` = [] is invalid (allowed: at least one table)")
    kinds = {"num_embeddings" in r for r in records}
    if len(kinds) > 1:
        raise ShardplanError("tables mix shardplan records (rows, dim) and TorchRec ones (num_embeddings, embedding_dim)")
    return json.loads(_shardplan.parse_tables_json(json.dumps(records), "json"))


class Plan:
    """A plan and its report, as the CLI writes it (``shardplan.plan/v1``)."""

    def __init__(self, document: dict[str, Any], planning_ms: Optional[float] = None):
        self.document = document
        #: Wall time of the planner call alone, ms (``None`` for an evaluated document).
        self.planning_ms = planning_ms

    @property
    def planner(self) -> str:
        return self.document["planner"]

    @property
    def report(self) -> dict[str, Any]:
        """The cost report: ``cost_ms``, ``bottleneck_device``, ``feasible``, ``devices`` (per device:
        compute, comm, total, bytes and memory), ``cost_model``, ``definition``."""
        return self.document["report"]

    @property
    def cost_ms(self) -> float:
        return self.report["cost_ms"]

    @property
    def bottleneck_device(self) -> int:
        return self.report["bottleneck_device"]

    @property
    def devices(self) -> list[dict[str, Any]]:
        return self.report["devices"]

    @property
    def pieces(self) -> list[dict[str, Any]]:
        """``{table_id, col_offset, dim, device[, rows]}`` per piece."""
        return self.document["pieces"]

    def to_json(self, **kwargs: Any) -> str:
        """The plan document as JSON (the file ``shardplan plan --out`` writes and every command reads)."""
        return json.dumps(self.document, **kwargs)

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        return cls(json.loads(text))

    def to_torchrec_dict(self, local_world_size: Optional[int] = None) -> dict[str, Any]:
        """TorchRec's sharding plan (``shardplan export --format torchrec``): per table its sharding type,
        compute kernel, ranks and shard metadata. ``local_world_size`` = ranks per host."""
        return json.loads(_shardplan.torchrec_json(json.dumps(self.document), local_world_size))

    def __repr__(self) -> str:
        return (
            f"Plan(planner={self.planner!r}, cost_ms={self.cost_ms:.4f}, devices={len(self.devices)}, "
            f"pieces={len(self.pieces)}, feasible={self.report['feasible']})"
        )


def _model(
    cost_model: Union[str, Profile], definition: str, hw: Optional[str], global_batch: Optional[int]
) -> tuple[dict[str, Any], Optional[Profile]]:
    """The model options as JSON, and the loaded profile when ``cost_model`` is one."""
    profile = cost_model if isinstance(cost_model, Profile) else None
    name = profile.name if profile is not None else cost_model
    if not isinstance(name, str):
        raise ShardplanError(
            f"field `cost_model` = {cost_model!r} is invalid (allowed: a cost model name, or load_profile(path))"
        )
    model: dict[str, Any] = {"cost_model": name, "definition": definition}
    if hw is not None:
        model["hw"] = hw
    if global_batch is not None:
        model["global_batch"] = global_batch
    return model, profile


def plan(
    tables: Iterable[Any],
    devices: Union[int, Sequence[Union[int, str]]],
    *,
    mem: Union[int, str] = "4GiB",
    planner: Optional[str] = None,
    cost_model: Union[str, Profile] = "h100",
    definition: str = "neuroshard",
    hw: Optional[str] = None,
    global_batch: Optional[int] = None,
    budget_ms: Optional[float] = None,
    seed: int = 0,
    pooling_factors: Optional[Mapping[str, float]] = None,
    memory: Optional[dict[str, Any]] = None,
    topology: Union[None, str, Mapping[str, Any]] = None,
    splits: str = "any",
    tiers: str = "auto",
) -> Plan:
    """Plans ``tables`` on ``devices`` (a count of devices with ``mem`` each, or a list of per-device
    caps) with ``planner`` (default: the CLI's, ``auto``) under ``cost_model`` (a name from
    :func:`cost_models`, or a :func:`load_profile` directory), as ``shardplan plan``.

    ``memory`` is the memory rule (default TorchRec's: 15% of every cap reserved, buffers counted), as
    the CLI's ``--memory-rule``. ``topology`` groups the devices into hosts: a preset name (``"h100-sxm"``,
    ``"a100-sxm"``, ``"pcie"``) or a dict with the CLI's ``--topology`` options (``preset``, ``hosts``,
    ``devices_per_host``, ``network_gbps``, ``network_latency_us``, ``host_dram_bytes``); default one
    host. ``splits="torchrec"`` keeps to splits TorchRec can build (equal column blocks, TorchRec's
    row-wise layout), as the CLI's ``--splits``; the default ``"any"`` also allows NeuroShard's halvings.
    ``tiers="auto"`` moves tables to host memory behind HBM caches when they do not fit in HBM (the
    CLI's ``--tiers``); ``"hbm"`` keeps every table in HBM. ``budget_ms`` bounds the search time. Raises :class:`ShardplanError`
    (a ``ValueError``) naming the field and value of any bad input, or why no plan fits."""
    if isinstance(devices, bool) or not isinstance(devices, (int, list, tuple)):
        raise ShardplanError(f"field `devices` = {devices!r} is invalid (allowed: a count, or a list of per-device caps)")
    if isinstance(devices, int):
        # Checked before the list of caps is made (the core's limit).
        if not 1 <= devices <= _shardplan.MAX_DEVICES:
            raise ShardplanError(f"field `devices` = {devices} is invalid (allowed: 1..={_shardplan.MAX_DEVICES})")
        caps = [_size("mem", mem)] * devices
    else:
        caps = [_size(f"devices[{i}]", c) for i, c in enumerate(devices)]
    task = {"tables": tables_from(tables, pooling_factors), "devices": {"mem_cap_bytes": caps}, "splits": splits}
    model, profile = _model(cost_model, definition, hw, global_batch)
    request: dict[str, Any] = {"task": task, "planner": planner or DEFAULT_PLANNER, "seed": seed, "model": model,
                               "tiers": tiers}
    if budget_ms is not None:
        request["budget_ms"] = budget_ms
    if memory is not None:
        request["memory"] = memory
    if isinstance(topology, str):
        request["topology"] = {"preset": topology}
    elif topology is not None:
        request["topology"] = dict(topology)
    out = json.loads(_shardplan.plan_json(json.dumps(request), profile))
    return Plan(out["document"], out["planning_ms"])


def evaluate(
    plan: Union[Plan, dict[str, Any], str],
    *,
    cost_model: Union[str, Profile] = "h100",
    definition: str = "neuroshard",
    hw: Optional[str] = None,
    global_batch: Optional[int] = None,
) -> Plan:
    """Re-prices a plan (a :class:`Plan`, its document, or its JSON) under ``cost_model``, as
    ``shardplan evaluate``; the plan's task and pieces are validated first."""
    if isinstance(plan, Plan):
        text = plan.to_json()
    elif isinstance(plan, str):
        text = plan
    else:
        text = json.dumps(plan)
    model, profile = _model(cost_model, definition, hw, global_batch)
    return Plan(json.loads(_shardplan.evaluate_json(text, json.dumps(model), profile)))
