"""shardplan as a TorchRec planner.

:class:`ShardplanPlanner` has the shape of TorchRec's ``EmbeddingShardingPlanner``: built from a
``Topology`` (and optionally a batch size and ``ParameterConstraints``), its ``plan(module, sharders)``
returns a ``ShardingPlan`` for ``DistributedModelParallel``::

    from shardplan.torchrec import ShardplanPlanner
    planner = ShardplanPlanner(topology=Topology(world_size=8, compute_device="cuda", local_world_size=8),
                               constraints={"t0": ParameterConstraints(pooling_factors=[12.0])})
    plan = planner.plan(model, [EmbeddingBagCollectionSharder()])
    model = DistributedModelParallel(model, plan=plan, ...)

Every ``EmbeddingBagCollection`` in the module is planned together, on the topology's HBM caps, under
TorchRec's own memory accounting (15% of every cap reserved, input and output buffers of a ``batch_size``
batch counted: the rule ``shardplan plan`` uses by default) and the chosen cost model. A table's pooling
factor is the sum of its constraint's ``pooling_factors``, or TorchRec's default of 1.0 per feature. Tables
that do not fit in HBM go to host memory (``fused_uvm_caching`` with the chosen ``cache_load_factor``, or
``fused_uvm``), and each ``ParameterSharding`` carries its table's compute kernel and cache parameters.

torch and torchrec are imported when a plan is built, so importing this module needs neither;
:meth:`ShardplanPlanner.plan_documents` (the per-module plans as TorchRec plan documents) runs without them.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import shardplan

# TorchRec 1.9.2's CROSS_NODE_BANDWIDTH (planner/constants.py), bytes per ms: its Topology's default
# inter_host_bw.
CROSS_NODE_BANDWIDTH = 12.5 * 1024 * 1024 * 1024 / 1000

#: TorchRec's default batch size per rank (``torchrec.distributed.planner.constants.BATCH_SIZE``).
BATCH_SIZE = 512
#: TorchRec's default pooling factor per feature (``POOLING_FACTOR``).
POOLING_FACTOR = 1.0


def embedding_bag_collections(module: Any) -> List[Tuple[str, Any]]:
    """``(path, module)`` of every submodule that has ``embedding_bag_configs()`` (an
    ``EmbeddingBagCollection``), the module itself included (path ``""``)."""
    found = []
    for path, sub in module.named_modules():
        if callable(getattr(sub, "embedding_bag_configs", None)):
            found.append((path, sub))
    return found


class ShardplanPlanner:
    """A TorchRec planner that plans with shardplan (see the module's documentation)."""

    def __init__(
        self,
        topology: Any = None,
        batch_size: Optional[int] = None,
        constraints: Optional[Mapping[str, Any]] = None,
        *,
        planner: Optional[str] = None,
        cost_model: str = "h100",
        budget_ms: Optional[float] = None,
        seed: int = 0,
        reserved_fraction: Optional[float] = None,
    ):
        if topology is None:
            raise shardplan.ShardplanError(
                "field `topology` = None is invalid: give a TorchRec Topology (world_size, HBM per device)"
            )
        self.topology = topology
        self.batch_size = BATCH_SIZE if batch_size is None else batch_size
        self.constraints = dict(constraints or {})
        self.planner = planner
        self.cost_model = cost_model
        self.budget_ms = budget_ms
        self.seed = seed
        self.reserved_fraction = reserved_fraction
        #: The shardplan plan of the last call (its report: costs per device, bottleneck, memory).
        self.last_plan: Optional[shardplan.Plan] = None

    def _caps(self) -> List[int]:
        devices = getattr(self.topology, "devices", None)
        if not devices:
            raise shardplan.ShardplanError("the topology has no devices (expected TorchRec's Topology.devices)")
        return [int(d.storage.hbm) for d in devices]

    def _local_world_size(self) -> int:
        local = getattr(self.topology, "local_world_size", None)
        return int(local) if local else len(self._caps())

    def _hosts(self) -> Optional[Dict[str, Any]]:
        """The topology's hosts as shardplan's (``None`` on one host): devices per host, and TorchRec's
        cross-host bandwidth (bytes per ms) as the network link."""
        local, world = self._local_world_size(), len(self._caps())
        if local >= world:
            return None
        # TorchRec's Topology.inter_host_bw, bytes per ms (its default: CROSS_NODE_BANDWIDTH).
        bw = getattr(self.topology, "inter_host_bw", None) or CROSS_NODE_BANDWIDTH
        return {"devices_per_host": local, "network_gbps": float(bw) * 1e3 / 1e9}

    def _tier(self, config: Any) -> Dict[str, Any]:
        """A table's memory tier from its constraint, as a TorchRec user fixes it: a single UVM compute
        kernel (``compute_kernels=["fused_uvm_caching"]`` or ``["fused_uvm"]``) and the cache's
        ``CacheParams.load_factor``; nothing when the planner may choose."""
        c = self.constraints.get(config.name)
        kernels = list(getattr(c, "compute_kernels", None) or []) if c is not None else []
        load = getattr(getattr(c, "cache_params", None), "load_factor", None) if c is not None else None
        out: Dict[str, Any] = {}
        if len(kernels) == 1 and kernels[0] in ("fused_uvm", "fused_uvm_caching"):
            out["compute_kernel"] = kernels[0]
        if load is not None and out.get("compute_kernel") == "fused_uvm_caching":
            out["cache_load_factor"] = float(load)
        return out

    def _pooling_factor(self, config: Any) -> float:
        c = self.constraints.get(config.name)
        factors = getattr(c, "pooling_factors", None) if c is not None else None
        if factors:
            return float(sum(factors))
        return POOLING_FACTOR * max(1, len(config.feature_names))

    def plan_documents(self, module: Any) -> Dict[str, Dict[str, Any]]:
        """Plans every ``EmbeddingBagCollection`` of ``module`` together; returns, per module path, its
        plan as a TorchRec plan document (``shardplan.torchrec-plan/v1``: ``Plan.to_torchrec_dict``)."""
        ebcs = embedding_bag_collections(module)
        if not ebcs:
            raise shardplan.ShardplanError("the module has no EmbeddingBagCollection to shard")
        tables: List[Dict[str, Any]] = []
        owner: List[Tuple[str, str]] = []  # (module path, table name) per planned table
        for path, ebc in ebcs:
            for config in ebc.embedding_bag_configs():
                record = {
                    # Names are unique across modules in the plan; each module's document uses its own.
                    "name": f"{path}/{config.name}" if len(ebcs) > 1 else config.name,
                    "num_embeddings": int(config.num_embeddings),
                    "embedding_dim": int(config.embedding_dim),
                    "feature_names": list(config.feature_names),
                    "pooling_factor": self._pooling_factor(config),
                    **self._tier(config),
                }
                data_type = getattr(config, "data_type", None)
                if data_type is not None:
                    record["data_type"] = getattr(data_type, "name", str(data_type)).upper()
                tables.append(record)
                owner.append((path, config.name))
        # TorchRec's rule; the fields not given keep the core's defaults (TorchRec's).
        memory: Dict[str, Any] = {"rule": "torchrec", "batch_per_rank": int(self.batch_size)}
        if self.reserved_fraction is not None:
            memory["reserved_fraction"] = self.reserved_fraction
        plan = shardplan.plan(
            tables,
            devices=self._caps(),
            planner=self.planner,
            cost_model=self.cost_model,
            budget_ms=self.budget_ms,
            seed=self.seed,
            memory=memory,
            topology=self._hosts(),
            splits="torchrec",
        )
        self.last_plan = plan
        whole = plan.to_torchrec_dict(local_world_size=self._local_world_size())
        out: Dict[str, Dict[str, Any]] = {}
        for (path, name), record in zip(owner, tables):
            doc = out.setdefault(path, {**{k: v for k, v in whole.items() if k not in ("plan", "tables")},
                                        "plan": {}, "tables": {}})
            doc["plan"][name] = whole["plan"][record["name"]]
            doc["tables"][name] = whole["tables"][record["name"]]
        return out

    def plan(self, module: Any, sharders: List[Any]) -> Any:
        """TorchRec's ``ShardingPlan`` for ``module`` (``sharders`` is accepted for the planner interface;
        the plan is for TorchRec's ``EmbeddingBagCollectionSharder``)."""
        from torchrec.distributed.types import ShardingPlan

        documents = self.plan_documents(module)
        subs = dict(module.named_modules())
        return ShardingPlan({path: module_sharding_plan(subs[path], doc) for path, doc in documents.items()})

    def collective_plan(self, module: Any, sharders: List[Any], pg: Any = None) -> Any:
        """As TorchRec's: every rank plans (shardplan is deterministic for a seed, so ranks agree)."""
        return self.plan(module, sharders)


def _torchrec_row_split(rows: int, world: int) -> List[int]:
    # TorchRec's _calculate_rw_shard_sizes_and_offsets: ceil(rows / world) per rank, the remainder last.
    block = math.ceil(rows / world)
    last = rows // block
    return [block if r < last else (rows - block * last if r == last else 0) for r in range(world)]


def _passthrough(sharding_type: str, kernel: str, shards: List[Tuple[List[int], List[int], int]]) -> Callable:
    from torchrec.distributed.sharding_plan import _get_parameter_sharding

    def generator(param, local_size, world_size, device_type, sharder):
        return _get_parameter_sharding(
            param, sharding_type, shards, local_size, device_type, sharder, compute_kernel=kernel
        )

    return generator


def _with_cache(generator: Callable, load_factor: Optional[float]) -> Callable:
    # A fused_uvm_caching table's HBM cache share, as TorchRec's CacheParams on its ParameterSharding.
    if load_factor is None:
        return generator

    def cached(*args: Any) -> Any:
        from torchrec.distributed.types import CacheParams

        ps = generator(*args)
        ps.cache_params = CacheParams(load_factor=load_factor)
        return ps

    return cached


def generators(doc: Mapping[str, Any]) -> Dict[str, Callable]:
    """Table name → TorchRec ``ParameterShardingGenerator`` for ``construct_module_sharding_plan``: TorchRec's
    public generator where it expresses the layout exactly (``table_wise(rank)``, ``column_wise(ranks)`` for
    equal column blocks, ``row_wise()`` for TorchRec's own row split), otherwise one that passes the
    document's shard offsets, sizes and ranks to ``_get_parameter_sharding`` (the private helper TorchRec's
    public generators call)."""
    from torchrec.distributed.sharding_plan import column_wise, row_wise, table_row_wise, table_wise

    out: Dict[str, Callable] = {}
    local = doc["local_world_size"]
    for name, ps in doc["plan"].items():
        st, kernel, ranks, spec = ps["sharding_type"], ps["compute_kernel"], ps["ranks"], ps["sharding_spec"]
        shards = [(s["shard_sizes"], s["shard_offsets"], r) for s, r in zip(spec, ranks)]
        rows = doc["tables"][name]["num_embeddings"]
        row_sizes = [s["shard_sizes"][0] for s in spec]
        if st == "table_wise":
            gen = table_wise(rank=ranks[0], compute_kernel=kernel)
        elif st == "column_wise" and len({s["shard_sizes"][1] for s in spec}) == 1:
            gen = column_wise(ranks=ranks, compute_kernel=kernel)
        elif (
            st == "row_wise"
            and ranks == list(range(doc["world_size"]))
            and row_sizes == _torchrec_row_split(rows, doc["world_size"])
        ):
            gen = row_wise(compute_kernel=kernel)
        elif (
            st == "table_row_wise"
            and kernel == "fused"
            and ranks[0] % local == 0
            and ranks == list(range(ranks[0], ranks[0] + local))
            and row_sizes == _torchrec_row_split(rows, local)
        ):
            # TorchRec's generator takes no compute kernel (it builds fused shards).
            gen = table_row_wise(host_index=ranks[0] // local)
        elif st in ("column_wise", "row_wise", "table_row_wise"):
            gen = _passthrough(st, kernel, shards)
        else:
            raise shardplan.ShardplanError(f"table {name}: unknown sharding_type {st!r}")
        out[name] = _with_cache(gen, ps.get("cache_load_factor"))
    return out


def module_sharding_plan(ebc: Any, doc: Mapping[str, Any]) -> Any:
    """``construct_module_sharding_plan`` for ``ebc`` (an ``EmbeddingBagCollection``) from a TorchRec plan
    document, after checking that it covers exactly the module's tables with their shapes."""
    from torchrec.distributed.sharding_plan import construct_module_sharding_plan

    shapes = {c.name: (c.num_embeddings, c.embedding_dim) for c in ebc.embedding_bag_configs()}
    for name, shape in doc["tables"].items():
        want = (shape["num_embeddings"], shape["embedding_dim"])
        if shapes.get(name) != want:
            raise shardplan.ShardplanError(f"table {name}: the plan is for shape {want}, the module has {shapes.get(name)}")
    missing = sorted(set(shapes) - set(doc["tables"]))
    if missing:
        raise shardplan.ShardplanError(f"the plan has no sharding for tables {missing}")
    return construct_module_sharding_plan(
        ebc,
        generators(doc),
        local_size=doc["local_world_size"],
        world_size=doc["world_size"],
        device_type=doc["device_type"],
    )
