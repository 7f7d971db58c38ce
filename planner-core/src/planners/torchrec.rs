//! A faithful port of TorchRec 1.9's default planner (`EmbeddingShardingPlanner`, torchrec 1.9.2)
//! for the sharding types shardplan models: table-wise, column-wise and row-wise, all on HBM with the
//! fused kernel. It reproduces TorchRec's own decisions, so it plans with TorchRec's inputs and
//! estimates, not with the [`CostModel`](crate::cost::CostModel) it is handed.
//!
//! Pipeline (each step as in `torchrec/distributed/planner/`):
//! 1. **Storage reservation** (`HeuristicalStorageReservation`, `storage_reservations.py`): per rank,
//!    `int((1 - 0.15) · hbm_cap) − dense − kjt`, with `dense` = 6 × the non-embedding parameters (0 for a
//!    bare `EmbeddingBagCollection`; [`TorchRecMemory::dense_bytes`]) and
//!    `kjt = ceil(Σ_t pf_t · B · 8) · 20` (20 copies of the int64 input indices of a per-rank batch `B`).
//!    Computed by [`crate::memory`] ([`MemoryRule::TorchRec`]), the rule every planner can run under.
//! 2. **Enumeration** (`EmbeddingEnumerator`, `sharding_plan.py`): per table, in TorchRec's sharder order,
//!    table-wise (one shard), column-wise (blocks of the first multiple of 4 in `[128, dim)` dividing the
//!    dim, else the whole dim: `MIN_CW_DIM`), row-wise (one shard per rank, `ceil(rows / W)` rows each,
//!    the remainder on the last non-empty rank; in proportion to the HBM caps when caps differ).
//! 3. **Perf estimate** (`estimator/estimator.py`, `EmbeddingPerfEstimatorConfig`), per shard of `d`
//!    columns, `bi = pf · B`, `bo = min(1, pf) · B`, world size `W`, element size `e`, in ms:
//!    * table-/column-wise: `fwd_compute = (ceil(bi·W·8) + bi·W·max(d, 32)·e + bo·W·d·e) · penalty / hbm_bw`,
//!      `penalty` = 1 (d ≥ 128), 1.15 (64 ≤ d < 128), 1.75 (d < 64); `fwd_comms = bwd_comms = bo·W·d·e / a2a_bw`;
//!    * row-wise: `fwd_compute = (ceil(bi/W·W·8) + bi/W·W·d·e + bo·W·d·e) / hbm_bw`,
//!      `fwd_comms = bo·W·d·e / reduce_scatter_bw`, `bwd_comms = bo·W·d·e / all_gather_bw + bo·W·d·e · 2.455 / hbm_bw`;
//!    * all: `bwd_compute = 2 · fwd_compute`, `input_dist_comms = ceil(bi·W·8) / a2a_bw` (reported, not in the
//!      total), `prefetch_compute = 0`; `total = fwd_compute + bwd_compute + fwd_comms + bwd_comms + prefetch`.
//! 4. **Storage estimate** (`EmbeddingStorageEstimator`), per shard: `rows·cols·e` (+ TorchRec's optimizer
//!    multiplier) `+ input + output` with `input = ceil(bi·W·8)` (row-wise: `ceil(bi/W·W·8)`, 0 for an
//!    empty shard) and `output = ceil(bo·W·cols·e)` (table-wise: the table's dim); also
//!    [`crate::memory`]'s ([`TorchRecMemory::shard`]).
//! 5. **Proposers** (`proposers.py`), in order: grid search (only when the product of option counts is at
//!    most 10,000), greedy by max shard perf, greedy by summed shard perf, uniform (one sharding type for
//!    every table). A proposal already tried is not partitioned again.
//! 6. **Partitioner** (`GreedyPerfPartitioner`, sort by storage): row-wise shards go to their own rank;
//!    then table-/column-wise options, largest total storage first (ties: table order), each shard onto
//!    the rank with the lowest summed perf (ties: local rank, then rank) where it fits.
//! 7. **Objective** (`NoopPerfModel`): max over ranks of the summed shard perf totals; the first plan with
//!    the strictly lowest objective wins.
//!
//! Batch convention: TorchRec plans with a per-rank batch (`BATCH_SIZE` = 512) multiplied by the world
//! size inside its formulas, while shardplan's analytical model takes the global batch (65,536). This
//! planner keeps TorchRec's per-rank batch ([`TorchRecMemory::batch_per_rank`]) so its decisions are
//! TorchRec's; the plans it returns are then priced by whatever cost model the caller evaluates them with.
//!
//! Memory: a task under [`MemoryRule::TorchRec`] plans with that rule's parameters (reserved fraction,
//! dense bytes, batch, input copies), so the port and every other planner count memory alike; under
//! [`MemoryRule::Weights`] the port keeps TorchRec's defaults and its plan must also fit the weights rule.
//!
//! Floating-point operations follow TorchRec's order, so shard perfs and storages match TorchRec's to the
//! last bit on the committed fixtures (`tests/fixtures/torchrec/`).

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::{PlanContext, Planner, SearchStats, StatsCell};
use crate::error::{Error, Result};
use crate::memory::{Layout, MemoryRule, TorchRecMemory};
use crate::plan::{Piece, Plan};
use crate::table::{DEFAULT_CACHE_LOAD_FACTOR, TableSpec, Tier};
use crate::task::Task;
use crate::tier::TierMode;

/// TorchRec `BATCH_SIZE`: default per-rank batch.
pub const BATCH_SIZE: u64 = crate::memory::DEFAULT_BATCH_PER_RANK;
/// TorchRec `HBM_MEM_BW`: 897 GiB/s, in bytes per ms (the fused kernel's device bandwidth).
pub const HBM_MEM_BW: f64 = 897.0 * 1024.0 * 1024.0 * 1024.0 / 1000.0;
/// TorchRec `HBM_TO_DDR_MEM_BW`: 32 GiB/s, in bytes per ms (the device–host link of UVM kernels).
pub const HBM_TO_DDR_MEM_BW: f64 = 32.0 * 1024.0 * 1024.0 * 1024.0 / 1000.0;
/// TorchRec `INTRA_NODE_BANDWIDTH`: 600 GiB/s, in bytes per ms.
pub const INTRA_NODE_BANDWIDTH: f64 = 600.0 * 1024.0 * 1024.0 * 1024.0 / 1000.0;
/// TorchRec `CROSS_NODE_BANDWIDTH`: 12.5 GiB/s, in bytes per ms.
pub const CROSS_NODE_BANDWIDTH: f64 = 12.5 * 1024.0 * 1024.0 * 1024.0 / 1000.0;
/// TorchRec `BIGINT_DTYPE`: bytes per input index (int64).
pub const BIGINT_DTYPE: u64 = crate::memory::INDEX_BYTES;
/// TorchRec `MIN_CW_DIM`: smallest column-wise block.
pub const MIN_CW_DIM: u32 = 128;
/// TorchRec `FULL_BLOCK_EMB_DIM`.
pub const FULL_BLOCK_EMB_DIM: u32 = 128;
/// TorchRec `HALF_BLOCK_PENALTY` (64 ≤ dim < 128).
pub const HALF_BLOCK_PENALTY: f64 = 1.15;
/// TorchRec `QUARTER_BLOCK_PENALTY` (dim < 64).
pub const QUARTER_BLOCK_PENALTY: f64 = 1.75;
/// TorchRec `BWD_COMPUTE_MULTIPLIER`.
pub const BWD_COMPUTE_MULTIPLIER: f64 = 2.0;
/// TorchRec `BATCHED_COPY_PERF_FACTOR` (row-wise backward copy).
pub const BATCHED_COPY_PERF_FACTOR: f64 = 2.455;
/// Minimum columns a table-wise lookup reads ("minimum embedding dim is set to 32 due to kernel usage").
pub const MIN_LOOKUP_DIM: u32 = 32;
/// `heuristical_storage_reservation_percentage` of `EmbeddingShardingPlanner`.
pub const STORAGE_RESERVATION_PERCENTAGE: f64 = crate::memory::DEFAULT_RESERVED_FRACTION;
/// `HeuristicalStorageReservation`'s KJT multiplier: 2 pipelined batches × 10 internal copies.
pub const KJT_STORAGE_MULTIPLIER: u64 = crate::memory::DEFAULT_KJT_COPIES;
/// `GridSearchProposer`'s `MAX_PROPOSALS`.
pub const MAX_GRID_PROPOSALS: u128 = 10_000;

/// A sharding type of TorchRec that this port enumerates, in TorchRec's enumeration order (the
/// sharder's `sharding_types`; `data_parallel`, a table replicated on every rank, is not in shardplan's
/// plans, and grid sharding is only enumerated when a constraint names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShardingType {
    /// The whole table on one rank.
    TableWise,
    /// Column blocks, each on a rank.
    ColumnWise,
    /// Column blocks, all on the ranks of one host.
    TableColumnWise,
    /// Contiguous row ranges, one per rank.
    RowWise,
    /// Contiguous row ranges, one per rank of one host.
    TableRowWise,
}

/// How TorchRec's partitioner places an option's shards (`PartitionByType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionBy {
    /// Shard by shard onto the least-loaded rank that fits (table- and column-wise).
    Device,
    /// All shards on the ranks of one host, the least-loaded host first (table-row- and table-column-wise).
    Host,
    /// Shard `i` on rank `i` (row-wise).
    Uniform,
}

impl ShardingType {
    /// Every type, in TorchRec's enumeration order.
    pub const ALL: [Self; 5] =
        [Self::TableWise, Self::ColumnWise, Self::TableColumnWise, Self::RowWise, Self::TableRowWise];

    /// TorchRec's name (`table_wise`, ...).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TableWise => "table_wise",
            Self::ColumnWise => "column_wise",
            Self::TableColumnWise => "table_column_wise",
            Self::RowWise => "row_wise",
            Self::TableRowWise => "table_row_wise",
        }
    }

    /// Parses TorchRec's name.
    pub fn parse(text: &str) -> Result<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == text).ok_or_else(|| {
            Error::field(
                "torchrec",
                "sharding_type",
                format!("{text:?}"),
                "one of table_wise, column_wise, table_column_wise, row_wise, table_row_wise",
            )
        })
    }

    /// How TorchRec's partitioner places it (`get_partition_by_type`).
    #[must_use]
    pub fn partition_by(self) -> PartitionBy {
        match self {
            Self::TableWise | Self::ColumnWise => PartitionBy::Device,
            Self::TableColumnWise | Self::TableRowWise => PartitionBy::Host,
            Self::RowWise => PartitionBy::Uniform,
        }
    }

    /// Whether its shards are row ranges.
    #[must_use]
    pub fn is_row_wise(self) -> bool {
        matches!(self, Self::RowWise | Self::TableRowWise)
    }
}

/// A compute kernel of TorchRec for an embedding-bag table on CUDA, in TorchRec's order (the sharder's
/// `compute_kernels`; key-value and virtual-table kernels need SSDs or a constraint and are not enumerated).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComputeKernel {
    /// Weights in HBM.
    Fused,
    /// Weights in host DRAM, every lookup over the device–host link (UVM).
    FusedUvm,
    /// Weights in host DRAM behind an HBM cache of a share of the rows.
    FusedUvmCaching,
}

impl ComputeKernel {
    /// Every kernel, in TorchRec's order.
    pub const ALL: [Self; 3] = [Self::Fused, Self::FusedUvm, Self::FusedUvmCaching];

    /// TorchRec's name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fused => "fused",
            Self::FusedUvm => "fused_uvm",
            Self::FusedUvmCaching => "fused_uvm_caching",
        }
    }

    /// Parses TorchRec's name.
    pub fn parse(text: &str) -> Result<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == text).ok_or_else(|| {
            Error::field(
                "torchrec",
                "compute_kernel",
                format!("{text:?}"),
                "one of fused, fused_uvm, fused_uvm_caching",
            )
        })
    }

    /// The table tier it means, with `cache_load_factor` for the caching kernel.
    #[must_use]
    pub fn tier(self, cache_load_factor: f64) -> Tier {
        match self {
            Self::Fused => Tier::Hbm,
            Self::FusedUvm => Tier::Host,
            Self::FusedUvmCaching => Tier::Cached(cache_load_factor),
        }
    }

    /// The kernel of a table tier.
    #[must_use]
    pub fn of(tier: Tier) -> Self {
        match tier {
            Tier::Hbm => Self::Fused,
            Tier::Host => Self::FusedUvm,
            Tier::Cached(_) => Self::FusedUvmCaching,
        }
    }
}

/// TorchRec's `Perf` of one shard, in ms.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Perf {
    /// Forward lookup and pooling.
    pub fwd_compute: f64,
    /// Forward output communication.
    pub fwd_comms: f64,
    /// Backward compute (gradient and fused optimizer).
    pub bwd_compute: f64,
    /// Backward communication (row-wise: plus the batched copy).
    pub bwd_comms: f64,
    /// Input distribution (reported by TorchRec, not part of [`Perf::total`]).
    pub input_dist_comms: f64,
    /// Cache prefetch (0 for fused HBM kernels).
    pub prefetch_compute: f64,
}

impl Perf {
    /// TorchRec's `Perf.total`, summed in its order.
    #[must_use]
    pub fn total(&self) -> f64 {
        self.fwd_compute + self.bwd_compute + self.fwd_comms + self.bwd_comms + self.prefetch_compute
    }

    fn add(&mut self, o: &Self) {
        self.fwd_compute += o.fwd_compute;
        self.fwd_comms += o.fwd_comms;
        self.bwd_compute += o.bwd_compute;
        self.bwd_comms += o.bwd_comms;
        self.input_dist_comms += o.input_dist_comms;
        self.prefetch_compute += o.prefetch_compute;
    }
}

/// One shard of a sharding option: `sizes = [rows, cols]` at `offsets = [row, col]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Shard {
    /// `[row offset, column offset]`.
    pub offsets: [u64; 2],
    /// `[rows, columns]`.
    pub sizes: [u64; 2],
    /// Estimated perf.
    pub perf: Perf,
    /// Estimated HBM bytes.
    pub storage_hbm: u64,
    /// Estimated host DRAM bytes (the weights and optimizer state of a UVM kernel; 0 for `fused`).
    #[serde(default)]
    pub storage_ddr: u64,
}

impl Shard {
    /// `(hbm, ddr)`: TorchRec's `Storage`, compared as a tuple.
    #[must_use]
    pub fn storage(&self) -> (u64, u64) {
        (self.storage_hbm, self.storage_ddr)
    }
}

/// One way to shard one table (TorchRec's `ShardingOption`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardingOption {
    /// Index of the table in the task.
    pub table_id: usize,
    /// How it is sharded.
    pub sharding_type: ShardingType,
    /// Where its weights live.
    pub compute_kernel: ComputeKernel,
    /// The HBM cache's share of the rows, for `fused_uvm_caching` (the table's own, else TorchRec's
    /// `UVM_CACHING_RATIO`, 0.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_load_factor: Option<f64>,
    /// Its shards.
    pub shards: Vec<Shard>,
}

impl ShardingOption {
    /// Sum of the shards' HBM bytes (saturating at `u64::MAX`, a ranking key only — every shard's own
    /// count is exact).
    #[must_use]
    pub fn total_storage_hbm(&self) -> u64 {
        self.shards.iter().fold(0u64, |a, s| a.saturating_add(s.storage_hbm))
    }

    /// `total_storage` as TorchRec's `Storage` tuple `(hbm, ddr)`, summed exactly.
    #[must_use]
    pub fn total_storage(&self) -> (u128, u128) {
        self.shards.iter().fold((0, 0), |(h, d), s| (h + u128::from(s.storage_hbm), d + u128::from(s.storage_ddr)))
    }

    /// `_sharding_option_score`: the max shard perf total (`use_depth`), else their sum.
    #[must_use]
    pub fn score(&self, use_depth: bool) -> f64 {
        if use_depth {
            self.shards.iter().map(|s| s.perf.total()).fold(f64::NEG_INFINITY, f64::max)
        } else {
            self.shards.iter().fold(0.0, |acc, s| acc + s.perf.total())
        }
    }

    /// The table tier its kernel means.
    #[must_use]
    pub fn tier(&self) -> Tier {
        self.compute_kernel.tier(self.cache_load_factor.unwrap_or(DEFAULT_CACHE_LOAD_FACTOR))
    }
}

/// Inputs of TorchRec's planner that shardplan's task does not carry; defaults are TorchRec's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TorchRecConfig {
    /// The storage reservation and the per-rank batch (`BATCH_SIZE`, 512) the estimates use; a task under
    /// [`MemoryRule::TorchRec`] replaces it with its own when planned by [`TorchRecPlanner`].
    pub memory: TorchRecMemory,
    /// Device memory bandwidth in bytes per ms (`HBM_MEM_BW`).
    pub hbm_mem_bw: f64,
    /// Device–host bandwidth of the UVM kernels in bytes per ms (`HBM_TO_DDR_MEM_BW`).
    #[serde(default = "default_hbm_to_ddr_mem_bw")]
    pub hbm_to_ddr_mem_bw: f64,
    /// Intra-host bandwidth in bytes per ms (`INTRA_NODE_BANDWIDTH`).
    pub intra_host_bw: f64,
    /// Inter-host bandwidth in bytes per ms (`CROSS_NODE_BANDWIDTH`).
    pub inter_host_bw: f64,
    /// Ranks per host; `None` = all ranks on one host (TorchRec's default when `local_world_size` is unset).
    pub local_world_size: Option<usize>,
    /// Sharding types to enumerate (always in TorchRec's order).
    pub sharding_types: Vec<ShardingType>,
    /// Compute kernels a table in HBM may take (in TorchRec's order); a table whose tier the task fixes
    /// (a cache share, or host memory) takes its own kernel only.
    #[serde(default = "default_compute_kernels")]
    pub compute_kernels: Vec<ComputeKernel>,
}

fn default_hbm_to_ddr_mem_bw() -> f64 {
    HBM_TO_DDR_MEM_BW
}

fn default_compute_kernels() -> Vec<ComputeKernel> {
    ComputeKernel::ALL.to_vec()
}

impl Default for TorchRecConfig {
    /// TorchRec's default planner: every sharding type shardplan's plans can hold and every default
    /// compute kernel (`fused`, `fused_uvm`, `fused_uvm_caching`).
    fn default() -> Self {
        Self {
            memory: TorchRecMemory::default(),
            hbm_mem_bw: HBM_MEM_BW,
            hbm_to_ddr_mem_bw: HBM_TO_DDR_MEM_BW,
            intra_host_bw: INTRA_NODE_BANDWIDTH,
            inter_host_bw: CROSS_NODE_BANDWIDTH,
            local_world_size: None,
            sharding_types: ShardingType::ALL.to_vec(),
            compute_kernels: default_compute_kernels(),
        }
    }
}

impl TorchRecConfig {
    /// TorchRec restricted to table-, column- and row-wise sharding on the `fused` kernel (weights in
    /// HBM): the search the port first matched TorchRec on.
    #[must_use]
    pub fn fused_hbm() -> Self {
        Self {
            sharding_types: vec![ShardingType::TableWise, ShardingType::ColumnWise, ShardingType::RowWise],
            compute_kernels: vec![ComputeKernel::Fused],
            ..Self::default()
        }
    }

    fn validate(&self, world: usize) -> Result<usize> {
        let ctx = "torchrec planner config";
        for (field, v) in [
            ("hbm_mem_bw", self.hbm_mem_bw),
            ("hbm_to_ddr_mem_bw", self.hbm_to_ddr_mem_bw),
            ("intra_host_bw", self.intra_host_bw),
            ("inter_host_bw", self.inter_host_bw),
        ] {
            if !v.is_finite() || v <= 0.0 {
                return Err(Error::field(ctx, field, v, "a positive bandwidth in bytes per ms"));
            }
        }
        if self.sharding_types.is_empty() {
            return Err(Error::field(
                ctx,
                "sharding_types",
                "[]",
                "at least one of table_wise, column_wise, table_column_wise, row_wise, table_row_wise",
            ));
        }
        if self.compute_kernels.is_empty() {
            return Err(Error::field(
                ctx,
                "compute_kernels",
                "[]",
                "at least one of fused, fused_uvm, fused_uvm_caching",
            ));
        }
        match self.local_world_size {
            Some(0) => Err(Error::field(ctx, "local_world_size", 0, "at least 1")),
            Some(l) if !world.is_multiple_of(l) => {
                Err(Error::field(ctx, "local_world_size", l, format!("a divisor of the world size {world}")))
            }
            Some(l) => Ok(l),
            None => Ok(world),
        }
    }

    /// What a user gives TorchRec's `Topology` for the task's hosts: `local_world_size` = devices per
    /// host, the network link as its cross-node bandwidth, and the device–host link as its
    /// `hbm_to_ddr_mem_bw` (a config that names its own `local_world_size` keeps it and its bandwidths).
    pub fn apply_topology(&mut self, task: &Task) {
        if let (None, Some(t)) = (self.local_world_size, &task.topology) {
            self.local_world_size = Some(t.devices_per_host);
            if let Some(link) = t.network.filter(|_| t.is_multi_host()) {
                self.inter_host_bw = link.bw_bytes_per_s / 1e3;
            }
            if let Some(bw) = t.host_link_bw_bytes_per_s {
                self.hbm_to_ddr_mem_bw = bw / 1e3;
            }
        }
    }

    /// `BasicCommsBandwidths.get_bw` for all-to-all, reduce-scatter and all-gather.
    fn comms_bw(&self, world: usize, local: usize) -> f64 {
        if world <= local { self.intra_host_bw } else { self.inter_host_bw }
    }

    /// `kernel_bw_lookup` on CUDA: the device bandwidth a kernel reads at, bytes per ms.
    fn kernel_bw(&self, kernel: ComputeKernel, cache_load_factor: f64) -> f64 {
        match kernel {
            ComputeKernel::Fused => self.hbm_mem_bw,
            ComputeKernel::FusedUvm => self.hbm_to_ddr_mem_bw / 10.0,
            ComputeKernel::FusedUvmCaching => {
                (cache_load_factor * self.hbm_mem_bw + (1.0 - cache_load_factor) * self.hbm_to_ddr_mem_bw) / 10.0
            }
        }
    }

    /// The kernels `table` may take: its own when the task fixes its tier, else the config's.
    fn kernels_for(&self, table: &TableSpec) -> Vec<(ComputeKernel, Option<f64>)> {
        match table.tier {
            Tier::Hbm => self
                .compute_kernels
                .iter()
                .map(|&k| (k, (k == ComputeKernel::FusedUvmCaching).then_some(DEFAULT_CACHE_LOAD_FACTOR)))
                .collect(),
            Tier::Cached(c) => vec![(ComputeKernel::FusedUvmCaching, Some(c))],
            Tier::Host => vec![(ComputeKernel::FusedUvm, None)],
        }
    }
}

/// The outcome of planning: the chosen option of every table with its ranks, and TorchRec's numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TorchRecOutcome {
    /// Chosen option per table (in table order) and the rank of each of its shards.
    pub options: Vec<(ShardingOption, Vec<usize>)>,
    /// `NoopPerfModel.rate`: max over ranks of summed shard perf totals, ms.
    pub objective_ms: f64,
    /// HBM bytes per rank left for embeddings after the storage reservation (TorchRec's "reserved
    /// topology").
    pub usable_hbm_bytes: Vec<u64>,
    /// Proposals partitioned (TorchRec's `_num_proposals`).
    pub num_proposals: usize,
    /// Proposals that fit (`_num_plans`).
    pub num_plans: usize,
    /// Whether the caller's stop ended the proposals before every proposer was done.
    #[serde(default)]
    pub stopped_early: bool,
}

impl TorchRecOutcome {
    /// The outcome as a shardplan [`Plan`] of [`TorchRecOutcome::tiered_task`]: table- and column-wise
    /// → one piece per shard, (table-)row-wise → one piece per non-empty row range.
    pub fn to_plan(&self, task: &Task) -> Result<Plan> {
        let mut pieces = Vec::new();
        for (opt, ranks) in &self.options {
            let dim = task.tables.get(opt.table_id).map(|t| t.dim).unwrap_or_default();
            for (s, &rank) in opt.shards.iter().zip(ranks) {
                if !opt.sharding_type.is_row_wise() {
                    pieces.push(Piece::cols(opt.table_id, s.offsets[1] as u32, s.sizes[1] as u32, rank));
                } else if s.sizes[0] > 0 {
                    pieces.push(Piece::row_range(opt.table_id, dim, rank, s.offsets[0], s.sizes[0]));
                }
            }
        }
        Plan::new(&self.tiered_task(task), pieces)
    }

    /// `task` with every table in the tier its chosen compute kernel means (`fused` → HBM,
    /// `fused_uvm_caching` → host memory behind an HBM cache, `fused_uvm` → host memory).
    #[must_use]
    pub fn tiered_task(&self, task: &Task) -> Task {
        let mut out = task.clone();
        for (opt, _) in &self.options {
            if let Some(t) = out.tables.get_mut(opt.table_id) {
                t.tier = opt.tier();
            }
        }
        out
    }
}

/// A table's lookups and pooled outputs per rank and step (`bi`, `bo`) and its element size.
struct TableInputs {
    batch_inputs: f64,
    batch_outputs: f64,
    elem: u64,
}

fn table_inputs(t: &TableSpec, memory: &TorchRecMemory) -> TableInputs {
    let (batch_inputs, batch_outputs) = memory.batch_lookups(t);
    TableInputs { batch_inputs, batch_outputs, elem: t.dtype.bytes() }
}

fn block_usage_penalty(dim: u64) -> f64 {
    if dim < u64::from(FULL_BLOCK_EMB_DIM) {
        if dim >= 64 { HALF_BLOCK_PENALTY } else { QUARTER_BLOCK_PENALTY }
    } else {
        1.0
    }
}

/// `ceil` of a non-negative float as TorchRec's `math.ceil` (an integer; perf inputs only — byte
/// counts go through [`crate::memory`]).
fn ceil_u64(x: f64) -> u64 {
    x.ceil() as u64
}

/// The perf of one shard of `cols` columns of an option of type `st` whose kernel reads at `kernel_bw`
/// (bytes per ms), in a world of `world` ranks, `local` per host. (TorchRec's symbols: `w`, `e`, `d`, `l`.)
#[allow(clippy::many_single_char_names)]
fn shard_perf(
    cfg: &TorchRecConfig,
    st: ShardingType,
    kernel_bw: f64,
    x: &TableInputs,
    cols: u64,
    world: usize,
    local: usize,
) -> Perf {
    let w = world as f64;
    let e = x.elem as f64;
    let d = cols as f64;
    let comms_bw = cfg.comms_bw(world, local);
    let out = x.batch_outputs * w * d * e;
    let input_dist_comms = ceil_u64(x.batch_inputs * w * BIGINT_DTYPE as f64) as f64 / comms_bw;
    // `compute_size = c1·input + c2·lookup + c3·output + c4·hash_size` with the default coefficients
    // (1, 1, 1, 0), written out so the rounding follows TorchRec's evaluation order.
    let (fwd_compute, fwd_comms, bwd_comms) = match st {
        ShardingType::TableWise | ShardingType::ColumnWise | ShardingType::TableColumnWise => {
            let input_read = ceil_u64(x.batch_inputs * w * BIGINT_DTYPE as f64) as f64;
            let lookup = x.batch_inputs * w * cols.max(u64::from(MIN_LOOKUP_DIM)) as f64 * e;
            let size = 1.0 * input_read + 1.0 * lookup + 1.0 * out + 0.0;
            (size * block_usage_penalty(cols) / kernel_bw, out / comms_bw, out / comms_bw)
        }
        ShardingType::RowWise => {
            let input_read = ceil_u64(x.batch_inputs / w * w * BIGINT_DTYPE as f64) as f64;
            let lookup = x.batch_inputs / w * w * d * e;
            let size = 1.0 * input_read + 1.0 * lookup + 1.0 * out + 0.0;
            (size * 1.0 / kernel_bw, out / comms_bw, out / comms_bw + out * BATCHED_COPY_PERF_FACTOR / kernel_bw)
        }
        ShardingType::TableRowWise => {
            // `TableRowWiseEvaluator`: the host's share of the lookups; a reduce-scatter and an
            // all-gather inside the host, and with several hosts an all-to-all of the pooled outputs
            // between them.
            let l = local as f64;
            let input_read = ceil_u64(x.batch_inputs / l * w * BIGINT_DTYPE as f64) as f64;
            let lookup = x.batch_inputs / l * w * d * e;
            let size = 1.0 * input_read + 1.0 * lookup + 1.0 * out + 0.0;
            let intra = out / cfg.comms_bw(local, local);
            let groups = (world / local).max(1);
            let inter =
                if groups > 1 { x.batch_outputs * groups as f64 * d * e / cfg.comms_bw(groups, 1) } else { 0.0 };
            (size * 1.0 / kernel_bw, intra + inter, inter + intra + out * BATCHED_COPY_PERF_FACTOR / kernel_bw)
        }
    };
    Perf {
        fwd_compute,
        fwd_comms,
        bwd_compute: fwd_compute * BWD_COMPUTE_MULTIPLIER + 0.0,
        bwd_comms,
        input_dist_comms,
        prefetch_compute: 0.0,
    }
}

/// The storage of one shard (`calculate_shard_storages`, training, no pipeline), by the memory model:
/// `(HBM, host DRAM)` bytes of `t` in the tier of the option's kernel.
fn shard_storage(
    cfg: &TorchRecConfig,
    st: ShardingType,
    t: &TableSpec,
    sizes: [u64; 2],
    world: usize,
    local: usize,
) -> Result<(u64, u64)> {
    let layout = match st {
        ShardingType::TableWise | ShardingType::ColumnWise | ShardingType::TableColumnWise => Layout::Columns,
        ShardingType::RowWise => Layout::Rows,
        ShardingType::TableRowWise => Layout::HostRows(local),
    };
    let m = cfg.memory.shard(t, layout, sizes[0], sizes[1], world)?;
    Ok((m.total_bytes()?, m.host_bytes))
}

/// `_get_block_size_for_cw_shard` with no `min_partition` constraint.
fn column_block(dim: u32) -> u32 {
    let base = (MIN_CW_DIM..dim).find(|&i| dim.is_multiple_of(i) && i.is_multiple_of(4)).unwrap_or(dim);
    let block = base.min(dim);
    if dim.is_multiple_of(block) { block } else { dim }
}

pub use crate::memory::row_split;

/// Enumerates and estimates every option of every table (TorchRec's search space), per table in
/// TorchRec's order: by sharding type (those enabled in `cfg`), then by compute kernel (the config's for a
/// table in HBM, its own for a table whose tier the task fixes).
pub fn enumerate(task: &Task, cfg: &TorchRecConfig) -> Result<Vec<Vec<ShardingOption>>> {
    let caps = task.devices.mem_cap_bytes();
    let world = caps.len();
    let local = cfg.validate(world)?;
    let mut types = cfg.sharding_types.clone();
    types.sort_unstable();
    types.dedup();
    let mut out = Vec::with_capacity(task.tables.len());
    for (table_id, t) in task.tables.iter().enumerate() {
        let x = table_inputs(t, &cfg.memory);
        let mut kernels = cfg.kernels_for(t);
        kernels.sort_by_key(|&(k, _)| k);
        kernels.dedup_by_key(|&mut (k, _)| k);
        let mut options = Vec::with_capacity(types.len() * kernels.len());
        for &st in &types {
            let geometry: Vec<([u64; 2], [u64; 2])> = match st {
                ShardingType::TableWise => vec![([0, 0], [t.rows, u64::from(t.dim)])],
                ShardingType::ColumnWise | ShardingType::TableColumnWise => {
                    let b = column_block(t.dim);
                    (0..t.dim / b).map(|k| ([0, u64::from(k * b)], [t.rows, u64::from(b)])).collect()
                }
                ShardingType::RowWise | ShardingType::TableRowWise => {
                    // Table-row-wise splits evenly over one host's ranks, whatever their caps.
                    let split = if st == ShardingType::RowWise {
                        row_split(t.rows, caps)
                    } else {
                        row_split(t.rows, &vec![1; local])
                    };
                    let mut offset = 0;
                    split
                        .into_iter()
                        .map(|r| {
                            let g = ([offset, 0], [r, u64::from(t.dim)]);
                            offset += r;
                            g
                        })
                        .collect()
                }
            };
            for &(kernel, clf) in &kernels {
                let kernel_bw = cfg.kernel_bw(kernel, clf.unwrap_or(DEFAULT_CACHE_LOAD_FACTOR));
                let in_tier = t.clone().with_tier(kernel.tier(clf.unwrap_or(DEFAULT_CACHE_LOAD_FACTOR)));
                let shards = geometry
                    .iter()
                    .map(|&(offsets, sizes)| {
                        let (storage_hbm, storage_ddr) = shard_storage(cfg, st, &in_tier, sizes, world, local)?;
                        Ok(Shard {
                            offsets,
                            sizes,
                            perf: shard_perf(cfg, st, kernel_bw, &x, sizes[1], world, local),
                            storage_hbm,
                            storage_ddr,
                        })
                    })
                    .collect::<Result<_>>()?;
                options.push(ShardingOption {
                    table_id,
                    sharding_type: st,
                    compute_kernel: kernel,
                    cache_load_factor: clf,
                    shards,
                });
            }
        }
        out.push(options);
    }
    Ok(out)
}

/// `HeuristicalStorageReservation.reserve`: HBM bytes per rank left for embedding shards, by the memory
/// model ([`MemoryRule::TorchRec`] with the config's parameters); [`Error::ReservationExceedsCap`] when
/// the reservation alone exceeds a rank's HBM.
pub fn reserve_storage(task: &Task, cfg: &TorchRecConfig) -> Result<Vec<u64>> {
    cfg.validate(task.devices.count())?;
    MemoryRule::TorchRec(cfg.memory).usable_bytes(&task.tables, &task.devices)
}

/// Host DRAM per rank for UVM kernels: the task's host DRAM shared by its host's devices (TorchRec's
/// `ddr_cap`, 128 GiB per rank by default).
#[must_use]
pub fn ddr_per_rank(task: &Task) -> Vec<u64> {
    let (dram, per_host) = crate::memory::host_dram(task);
    let per_host = per_host.max(1);
    (0..task.devices.count()).map(|d| dram.get(d / per_host).copied().unwrap_or(0) / per_host as u64).collect()
}

/// State of one rank during partitioning.
#[derive(Clone)]
struct Rank {
    hbm: u64,
    ddr: u64,
    perf: Perf,
}

impl Rank {
    fn fits(&self, s: &Shard) -> bool {
        s.storage_hbm <= self.hbm && s.storage_ddr <= self.ddr
    }

    fn take(&mut self, s: &Shard) {
        self.hbm -= s.storage_hbm;
        self.ddr -= s.storage_ddr;
        self.perf.add(&s.perf);
    }
}

/// The rank among `candidates` (by index into `ranks`) where `s` fits with the lowest summed perf (ties:
/// local rank, then rank), as `GreedyPerfPartitioner`'s heap of `OrderedDeviceHardware` picks it.
fn least_loaded(ranks: &[Rank], candidates: std::ops::Range<usize>, s: &Shard, local: usize) -> Option<usize> {
    candidates.filter(|&r| ranks[r].fits(s)).min_by(|&a, &b| {
        ranks[a].perf.total().total_cmp(&ranks[b].perf.total()).then((a % local).cmp(&(b % local))).then(a.cmp(&b))
    })
}

/// Per option of every table, what the proposers and the partitioner sort by, computed once: the greedy
/// proposer's `(max shard HBM, summed HBM, max shard DRAM, summed DRAM)`, whose sums are the option's total
/// storage.
struct StorageKeys(Vec<Vec<(u64, u128, u64, u128)>>);

impl StorageKeys {
    fn new(space: &[Vec<ShardingOption>]) -> Self {
        let key = |opt: &ShardingOption| {
            let (sum_hbm, sum_ddr) = opt.total_storage();
            let max_hbm = opt.shards.iter().map(|s| s.storage_hbm).max().unwrap_or(0);
            let max_ddr = opt.shards.iter().map(|s| s.storage_ddr).max().unwrap_or(0);
            (max_hbm, sum_hbm, max_ddr, sum_ddr)
        };
        Self(space.iter().map(|opts| opts.iter().map(key).collect()).collect())
    }

    /// The greedy proposer's key of option `o` of table `t`.
    fn greedy(&self, t: usize, o: usize) -> (u64, u128, u64, u128) {
        self.0[t][o]
    }

    /// Total storage `(hbm, ddr)` of option `o` of table `t` ([`ShardingOption::total_storage`]).
    fn total(&self, t: usize, o: usize) -> (u128, u128) {
        let (_, hbm, _, ddr) = self.0[t][o];
        (hbm, ddr)
    }
}

/// `GreedyPerfPartitioner.partition` (sort by storage): ranks of every shard of every option of
/// `proposal`, or `None` when a shard fits nowhere. `usable` and `ddr` are each rank's HBM and host DRAM.
fn partition(
    space: &[Vec<ShardingOption>],
    keys: &StorageKeys,
    proposal: &[usize],
    usable: &[u64],
    ddr: &[u64],
    local: usize,
) -> Option<Vec<Vec<usize>>> {
    let mut ranks: Vec<Rank> =
        usable.iter().zip(ddr).map(|(&hbm, &ddr)| Rank { hbm, ddr, perf: Perf::default() }).collect();
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); proposal.len()];
    // Uniform (row-wise) options first: shard i on rank i.
    for (t, &o) in proposal.iter().enumerate() {
        let opt = &space[t][o];
        if opt.sharding_type.partition_by() != PartitionBy::Uniform {
            continue;
        }
        if opt.shards.len() != ranks.len() {
            return None;
        }
        for (i, s) in opt.shards.iter().enumerate() {
            if !ranks[i].fits(s) {
                return None;
            }
            ranks[i].take(s);
            out[t].push(i);
        }
    }
    // The other options, largest total storage `(hbm, ddr)` first (stable: table order on ties).
    let mut order: Vec<usize> = (0..proposal.len())
        .filter(|&t| space[t][proposal[t]].sharding_type.partition_by() != PartitionBy::Uniform)
        .collect();
    order.sort_by(|&a, &b| keys.total(b, proposal[b]).cmp(&keys.total(a, proposal[a])));
    let hosts = ranks.len() / local;
    for t in order {
        let opt = &space[t][proposal[t]];
        match opt.sharding_type.partition_by() {
            PartitionBy::Device => {
                for s in &opt.shards {
                    let best = least_loaded(&ranks, 0..ranks.len(), s, local)?;
                    ranks[best].take(s);
                    out[t].push(best);
                }
            }
            PartitionBy::Host => {
                // `_cohost_partition`: hosts by summed perf (stable), the first whose storage holds the
                // option and where its shards fit: table-row-wise shard i on the host's rank i,
                // table-column-wise shard by shard onto the host's least-loaded rank.
                let host_perf =
                    |h: usize| ranks[h * local..(h + 1) * local].iter().fold(0.0, |a, r| a + r.perf.total());
                let mut order: Vec<usize> = (0..hosts).collect();
                order.sort_by(|&a, &b| host_perf(a).total_cmp(&host_perf(b)));
                let (need_hbm, need_ddr) = opt.total_storage();
                let placed = order.into_iter().find_map(|h| {
                    let span = h * local..(h + 1) * local;
                    let have = ranks[span.clone()]
                        .iter()
                        .fold((0u128, 0u128), |(a, b), r| (a + u128::from(r.hbm), b + u128::from(r.ddr)));
                    if need_hbm > have.0 || need_ddr > have.1 {
                        return None;
                    }
                    let mut trial = ranks.clone();
                    let mut where_: Vec<usize> = Vec::with_capacity(opt.shards.len());
                    for (i, s) in opt.shards.iter().enumerate() {
                        let r = if opt.sharding_type.is_row_wise() {
                            if opt.shards.len() != local {
                                return None;
                            }
                            Some(span.start + i).filter(|&r| trial[r].fits(s))?
                        } else {
                            least_loaded(&trial, span.clone(), s, local)?
                        };
                        trial[r].take(s);
                        where_.push(r);
                    }
                    Some((trial, where_))
                });
                let (trial, where_) = placed?;
                ranks = trial;
                out[t] = where_;
            }
            PartitionBy::Uniform => {}
        }
    }
    Some(out)
}

/// `NoopPerfModel.rate`.
fn rate(space: &[Vec<ShardingOption>], proposal: &[usize], ranks_of: &[Vec<usize>], world: usize) -> f64 {
    let mut perfs = vec![0.0f64; world];
    for (t, &o) in proposal.iter().enumerate() {
        for (s, &r) in space[t][o].shards.iter().zip(&ranks_of[t]) {
            perfs[r] += s.perf.total();
        }
    }
    perfs.into_iter().fold(f64::NEG_INFINITY, f64::max)
}

/// Option indices of one table sorted by score (stable).
fn sorted_by_score(options: &[ShardingOption], use_depth: bool) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..options.len()).collect();
    idx.sort_by(|&a, &b| options[a].score(use_depth).total_cmp(&options[b].score(use_depth)));
    idx
}

/// TorchRec's default proposers, as iterators over proposals (an option index per table).
enum Proposer {
    Grid { sorted: Vec<Vec<usize>>, odometer: Option<Vec<usize>> },
    Greedy { sorted: Vec<Vec<usize>>, current: Option<Vec<usize>> },
    Uniform { proposals: Vec<Vec<usize>>, next: usize },
}

impl Proposer {
    fn grid(space: &[Vec<ShardingOption>]) -> Self {
        let sorted: Vec<Vec<usize>> = space.iter().map(|o| sorted_by_score(o, true)).collect();
        let mut total: u128 = 1;
        for s in &sorted {
            total = total.saturating_mul(s.len() as u128);
        }
        let odometer = (total <= MAX_GRID_PROPOSALS && total > 0).then(|| vec![0; sorted.len()]);
        Self::Grid { sorted, odometer }
    }

    fn greedy(space: &[Vec<ShardingOption>], use_depth: bool) -> Self {
        let sorted: Vec<Vec<usize>> = space.iter().map(|o| sorted_by_score(o, use_depth)).collect();
        Self::Greedy { current: Some(vec![0; sorted.len()]), sorted }
    }

    fn uniform(space: &[Vec<ShardingOption>]) -> Self {
        // Sharding types in order of first appearance in the search space; a type is proposed when
        // every table has it, each table at its option of that type with the lowest max shard perf (the
        // first of equals, as Python's stable sort leaves them).
        let mut types: Vec<ShardingType> = Vec::new();
        for o in space.iter().flatten() {
            if !types.contains(&o.sharding_type) {
                types.push(o.sharding_type);
            }
        }
        let best_of_type = |opts: &[ShardingOption], st: ShardingType| {
            let mut best: Option<usize> = None;
            for (i, o) in opts.iter().enumerate().filter(|(_, o)| o.sharding_type == st) {
                if best.is_none_or(|b| o.score(true) < opts[b].score(true)) {
                    best = Some(i);
                }
            }
            best
        };
        let proposals =
            types.into_iter().filter_map(|st| space.iter().map(|opts| best_of_type(opts, st)).collect()).collect();
        Self::Uniform { proposals, next: 0 }
    }

    fn propose(&self) -> Option<Vec<usize>> {
        match self {
            Self::Grid { sorted, odometer } => {
                odometer.as_ref().map(|idx| idx.iter().zip(sorted).map(|(&i, s)| s[i]).collect())
            }
            Self::Greedy { sorted, current } => {
                current.as_ref().map(|idx| idx.iter().zip(sorted).map(|(&i, s)| s[i]).collect())
            }
            Self::Uniform { proposals, next } => proposals.get(*next).cloned(),
        }
    }

    fn feedback(&mut self, keys: &StorageKeys) {
        match self {
            Self::Grid { sorted, odometer } => {
                if let Some(idx) = odometer {
                    // itertools.product order: the last table varies fastest.
                    let mut k = idx.len();
                    loop {
                        if k == 0 {
                            *odometer = None;
                            break;
                        }
                        k -= 1;
                        idx[k] += 1;
                        if idx[k] < sorted[k].len() {
                            break;
                        }
                        idx[k] = 0;
                    }
                }
            }
            Self::Greedy { sorted, current } => {
                let Some(idx) = current else { return };
                // Advance the table whose current option has the largest (max shard HBM, summed HBM,
                // max shard host DRAM, summed host DRAM).
                let mut largest: Option<usize> = None;
                let mut largest_storage = (0u64, 0u128, 0u64, 0u128);
                for (t, &i) in idx.iter().enumerate() {
                    if i + 1 < sorted[t].len() {
                        let storage = keys.greedy(t, sorted[t][i]);
                        if storage > largest_storage {
                            largest = Some(t);
                            largest_storage = storage;
                        }
                    }
                }
                match largest {
                    Some(t) => idx[t] += 1,
                    None => *current = None,
                }
            }
            Self::Uniform { next, .. } => *next += 1,
        }
    }
}

/// Runs TorchRec's planner on `task`.
pub fn plan_torchrec(task: &Task, cfg: &TorchRecConfig) -> Result<TorchRecOutcome> {
    plan_torchrec_until(task, cfg, &|| false)
}

/// [`plan_torchrec`], proposing until `stop` says so, which is asked once a proposal fits: then the best
/// plan so far. (Before one fits there is no plan to return, so the proposals go on.)
pub fn plan_torchrec_until(task: &Task, cfg: &TorchRecConfig, stop: &dyn Fn() -> bool) -> Result<TorchRecOutcome> {
    let mut cfg = cfg.clone();
    cfg.apply_topology(task);
    let cfg = &cfg;
    let world = task.devices.count();
    let local = cfg.validate(world)?;
    let usable = reserve_storage(task, cfg)?;
    let ddr = ddr_per_rank(task);
    let space = enumerate(task, cfg)?;
    let keys = StorageKeys::new(&space);
    let mut proposers = [
        Proposer::grid(&space),
        Proposer::greedy(&space, true),
        Proposer::greedy(&space, false),
        Proposer::uniform(&space),
    ];
    let mut tried: HashSet<Vec<usize>> = HashSet::new();
    let mut best: Option<(f64, Vec<usize>, Vec<Vec<usize>>)> = None;
    let (mut num_proposals, mut num_plans) = (0, 0);
    let mut lowest_storage = (u128::MAX, u128::MAX);
    let mut stopped = false;
    'proposers: for proposer in &mut proposers {
        while let Some(proposal) = proposer.propose() {
            if best.is_some() && stop() {
                stopped = true;
                break 'proposers;
            }
            if tried.contains(&proposal) {
                proposer.feedback(&keys);
                continue;
            }
            num_proposals += 1;
            if let Some(ranks_of) = partition(&space, &keys, &proposal, &usable, &ddr, local) {
                num_plans += 1;
                let rating = rate(&space, &proposal, &ranks_of, world);
                if best.as_ref().is_none_or(|(b, _, _)| rating < *b) {
                    best = Some((rating, proposal.clone(), ranks_of));
                }
            } else {
                let storage = proposal.iter().enumerate().fold((0u128, 0u128), |(h, d), (t, &o)| {
                    let (oh, od) = keys.total(t, o);
                    (h + oh, d + od)
                });
                lowest_storage = lowest_storage.min(storage);
            }
            tried.insert(proposal);
            proposer.feedback(&keys);
        }
    }
    let Some((objective_ms, proposal, ranks_of)) = best else {
        let available: u128 = usable.iter().map(|&u| u128::from(u)).sum();
        let available_ddr: u128 = ddr.iter().map(|&u| u128::from(u)).sum();
        let short = lowest_storage.0 > available || lowest_storage.1 > available_ddr;
        let why = if short { "insufficient storage" } else { "no proposal could be partitioned" };
        let bytes = |b: u128| crate::units::format_bytes_exact(u64::try_from(b).unwrap_or(u64::MAX));
        let host = if lowest_storage.1 > 0 {
            format!(" (and {} of host DRAM, {} available)", bytes(lowest_storage.1), bytes(available_ddr))
        } else {
            String::new()
        };
        return Err(Error::NoPlan {
            planner: "torchrec".into(),
            reason: format!(
                "{why}: {num_proposals} proposals tried; the smallest needs {} of HBM{host}, {} are available over {world} ranks after the storage reservation",
                bytes(lowest_storage.0),
                bytes(available)
            ),
        });
    };
    let options = proposal.iter().enumerate().map(|(t, &o)| space[t][o].clone()).zip(ranks_of).collect();
    Ok(TorchRecOutcome {
        options,
        objective_ms,
        usable_hbm_bytes: usable,
        num_proposals,
        num_plans,
        stopped_early: stopped,
    })
}

/// TorchRec's estimate of any plan, in TorchRec's units: per rank, the summed `Perf.total` of the shards
/// it holds, for TorchRec's per-rank batch ([`TorchRecMemory::batch_per_rank`], 512 by default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TorchRecPricing {
    /// Per rank, ms.
    pub rank_ms: Vec<f64>,
    /// `NoopPerfModel.rate`: the largest, ms — the objective TorchRec's planner minimises.
    pub objective_ms: f64,
    /// Samples per rank the estimate is for.
    pub batch_per_rank: u64,
}

/// Prices `plan` with TorchRec's perf estimator as TorchRec would shard it: an unsplit table is
/// `table_wise`, column pieces are `column_wise` shards, a row-split table is `row_wise` with one shard
/// per rank (empty ones included, as TorchRec writes them). The per-rank batch is the task's when it
/// runs under [`MemoryRule::TorchRec`], else `cfg`'s. Equals [`TorchRecOutcome::objective_ms`] on
/// TorchRec's own plans.
pub fn price_plan(task: &Task, plan: &Plan, cfg: &TorchRecConfig) -> Result<TorchRecPricing> {
    let mut cfg = cfg.clone();
    if let MemoryRule::TorchRec(m) = task.memory {
        cfg.memory = m;
    }
    cfg.apply_topology(task);
    let world = task.devices.count();
    let local = cfg.validate(world)?;
    let mut rank_ms = vec![0.0f64; world];
    for group in plan.table_groups() {
        let t = &task.tables[group[0].table_id];
        let x = table_inputs(t, &cfg.memory);
        let kernel_bw =
            cfg.kernel_bw(ComputeKernel::of(t.tier), t.cache_load_factor().unwrap_or(DEFAULT_CACHE_LOAD_FACTOR));
        let st = sharding_type_of(task, group);
        match st {
            ShardingType::RowWise => {
                let perf = shard_perf(&cfg, st, kernel_bw, &x, u64::from(t.dim), world, local).total();
                for r in &mut rank_ms {
                    *r += perf;
                }
            }
            ShardingType::TableRowWise => {
                let perf = shard_perf(&cfg, st, kernel_bw, &x, u64::from(t.dim), world, local).total();
                let host = group[0].device / local;
                for r in &mut rank_ms[host * local..(host + 1) * local] {
                    *r += perf;
                }
            }
            _ => {
                for p in group {
                    rank_ms[p.device] += shard_perf(&cfg, st, kernel_bw, &x, u64::from(p.dim), world, local).total();
                }
            }
        }
    }
    let objective_ms = rank_ms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Ok(TorchRecPricing { rank_ms, objective_ms, batch_per_rank: cfg.memory.batch_per_rank() })
}

/// TorchRec's sharding type for one table's pieces (a plan's table group): an unsplit table is
/// `table_wise`, column pieces `column_wise`, row pieces `row_wise` or `table_row_wise`, as
/// [`crate::memory::group_layout`] reads them. The TorchRec export and [`price_plan`] read a plan
/// through it.
#[must_use]
pub fn sharding_type_of(task: &Task, group: &[Piece]) -> ShardingType {
    match crate::memory::group_layout(task, group) {
        Layout::Columns if group.len() <= 1 => ShardingType::TableWise,
        Layout::Columns => ShardingType::ColumnWise,
        Layout::Rows => ShardingType::RowWise,
        Layout::HostRows(_) => ShardingType::TableRowWise,
    }
}

/// The `torchrec` planner: [`plan_torchrec`] with its config ([`TorchRecConfig::default`], TorchRec's
/// default planner) — the memory parameters taken from the task when it runs under
/// [`MemoryRule::TorchRec`] — returned as a shardplan [`Plan`]. It ignores the context's cost model
/// (TorchRec plans with its own estimates) and refuses a plan that would overfill a device under the
/// task's memory rule (the weights rule counts shardplan's optimizer state, which can exceed TorchRec's
/// for row-wise Adagrad state on fp16 tables). [`Planner::plan`] keeps every table in the tier the task
/// gives it (`fused` for a table in HBM); [`Planner::plan_tiered`] lets TorchRec choose the compute
/// kernel of every table the task leaves in HBM, as TorchRec's default planner does.
#[derive(Debug, Clone, Default)]
pub struct TorchRecPlanner {
    /// TorchRec's inputs.
    pub config: TorchRecConfig,
    stats: StatsCell,
}

impl TorchRecPlanner {
    /// The port with `config`.
    #[must_use]
    pub fn new(config: TorchRecConfig) -> Self {
        Self { config, stats: StatsCell::default() }
    }

    /// Plans with `kernels` for the tables the task leaves in HBM; the task as planned and the plan.
    fn run(&self, task: &Task, ctx: &PlanContext<'_>, kernels: Option<Vec<ComputeKernel>>) -> Result<(Task, Plan)> {
        let mut config = self.config.clone();
        if let MemoryRule::TorchRec(m) = task.memory {
            config.memory = m;
        }
        if let Some(k) = kernels {
            config.compute_kernels = k;
        }
        let watch = ctx.stopwatch();
        let outcome = plan_torchrec_until(task, &config, &|| watch.out_of_time())?;
        self.stats.set(SearchStats {
            proposals: outcome.num_proposals as u64,
            proposals_fit: outcome.num_plans as u64,
            stopped_early: outcome.stopped_early,
            ..SearchStats::default()
        });
        let tiered = outcome.tiered_task(task);
        let plan = outcome.to_plan(task)?;
        let over = crate::memory::plan_violations(&tiered, &plan)?;
        if !over.is_empty() {
            return Err(Error::NoPlan {
                planner: "torchrec".into(),
                reason: format!(
                    "TorchRec's plan does not fit under the task's {} memory rule: {}",
                    task.memory.name(),
                    over.join("; ")
                ),
            });
        }
        Ok((tiered, plan))
    }
}

impl Planner for TorchRecPlanner {
    fn name(&self) -> &'static str {
        "torchrec"
    }

    fn plan(&self, task: &Task, ctx: &PlanContext<'_>) -> Result<Plan> {
        Ok(self.run(task, ctx, Some(vec![ComputeKernel::Fused]))?.1)
    }

    fn plan_tiered(&self, task: &Task, ctx: &PlanContext<'_>, mode: TierMode) -> Result<(Task, Plan)> {
        match mode {
            TierMode::Auto => self.run(task, ctx, None),
            TierMode::Hbm => self.run(task, ctx, Some(vec![ComputeKernel::Fused])),
        }
    }

    fn last_stats(&self) -> Option<SearchStats> {
        self.stats.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{ElementType, NUM_BINS, OptimizerState};
    use crate::task::Devices;

    fn table(name: &str, rows: u64, dim: u32, pf: f64) -> TableSpec {
        TableSpec::new("t", name.into(), rows, dim, pf, [0.0; NUM_BINS], ElementType::Fp32, OptimizerState::None)
            .unwrap()
    }

    #[test]
    fn column_blocks_follow_min_cw_dim() {
        for (dim, block) in [(64, 64), (128, 128), (192, 192), (256, 128), (320, 160), (384, 128), (512, 128)] {
            assert_eq!(column_block(dim), block, "dim {dim}");
        }
    }

    #[test]
    fn row_split_is_ceil_then_remainder() {
        assert_eq!(row_split(10, &[1; 4]), vec![3, 3, 3, 1]);
        assert_eq!(row_split(5, &[1; 4]), vec![2, 2, 1, 0]);
        assert_eq!(row_split(3, &[1; 4]), vec![1, 1, 1, 0]);
        assert_eq!(row_split(100, &[1, 3]), vec![25, 75]);
    }

    #[test]
    fn hand_computed_table_wise_shard() {
        // 1000 x 64 fp32, pf 2, B = 512, W = 4: bi = 1024, bo = 512.
        let task = Task::new(vec![table("a", 1000, 64, 2.0)], Devices::uniform(4, 1 << 30).unwrap()).unwrap();
        let space = enumerate(&task, &TorchRecConfig::fused_hbm()).unwrap();
        let tw = &space[0][0].shards[0];
        let input = 1024.0 * 4.0 * 8.0;
        let lookup = 1024.0 * 4.0 * 64.0 * 4.0;
        let out = 512.0 * 4.0 * 64.0 * 4.0;
        let fwd = (input + lookup + out) * 1.15 / HBM_MEM_BW;
        assert_eq!(tw.perf.fwd_compute, fwd);
        assert_eq!(tw.perf.bwd_compute, 2.0 * fwd);
        assert_eq!(tw.perf.fwd_comms, out / INTRA_NODE_BANDWIDTH);
        assert_eq!(tw.storage_hbm, 1000 * 64 * 4 + 32_768 + 524_288);
        // Row-wise: four shards of 250 rows, each reading a quarter of the indices, no block penalty,
        // no 32-column minimum, full-batch outputs.
        let rw = &space[0][2];
        assert_eq!(rw.shards.iter().map(|s| s.sizes[0]).collect::<Vec<_>>(), vec![250; 4]);
        let fwd_rw = (1024.0 * 8.0 + 1024.0 * 64.0 * 4.0 + out) / HBM_MEM_BW;
        assert_eq!(rw.shards[0].perf.fwd_compute, fwd_rw);
        assert_eq!(rw.shards[0].perf.bwd_comms, out / INTRA_NODE_BANDWIDTH + out * 2.455 / HBM_MEM_BW);
        assert_eq!(rw.shards[0].storage_hbm, 250 * 64 * 4 + 8_192 + 524_288);
        // The default search adds table-column-wise and table-row-wise and the UVM kernels, in TorchRec's
        // order: 5 sharding types × 3 kernels. On one host table-row-wise prices as row-wise.
        let all = enumerate(&task, &TorchRecConfig::default()).unwrap();
        let kinds: Vec<(&str, &str)> =
            all[0].iter().map(|o| (o.sharding_type.as_str(), o.compute_kernel.as_str())).collect();
        assert_eq!(kinds.len(), 15);
        assert_eq!(
            &kinds[..4],
            &[
                ("table_wise", "fused"),
                ("table_wise", "fused_uvm"),
                ("table_wise", "fused_uvm_caching"),
                ("column_wise", "fused")
            ]
        );
        assert_eq!(all[0][9].shards[0].perf, all[0][12].shards[0].perf);
        // `fused_uvm` reads at a tenth of the host link; its weights move to host memory, whose bytes
        // TorchRec counts as DDR.
        let uvm = &all[0][1].shards[0];
        assert_eq!(uvm.perf.fwd_compute, (input + lookup + out) * 1.15 / (HBM_TO_DDR_MEM_BW / 10.0));
        assert_eq!((uvm.storage_hbm, uvm.storage_ddr), (32_768 + 524_288, 1000 * 64 * 4));
        // `fused_uvm_caching` at 0.2: HBM holds round(0.2 · 256,000) of weights and 1000 · (4 + 3.2) of
        // cache state.
        let cached = &all[0][2].shards[0];
        assert_eq!((cached.storage_hbm, cached.storage_ddr), (51_200 + 7_200 + 32_768 + 524_288, 256_000));
    }

    #[test]
    fn reservation_and_no_fit_errors_are_clear() {
        let cfg = TorchRecConfig::fused_hbm();
        let task = Task::new(vec![table("a", 1000, 64, 2.0)], Devices::uniform(2, 1_000_000).unwrap()).unwrap();
        // int(0.85 · 1e6) − ceil(2 · 512 · 8) · 20.
        assert_eq!(reserve_storage(&task, &cfg).unwrap(), vec![850_000 - 163_840; 2]);
        let big = Task::new(vec![table("a", 10_000_000, 64, 2.0)], Devices::uniform(2, 1 << 30).unwrap()).unwrap();
        let e = plan_torchrec(&big, &cfg).unwrap_err().to_string();
        assert!(e.contains("insufficient storage"), "{e}");
        // With the UVM kernels (TorchRec's default) the table goes to host memory behind a cache.
        let out = plan_torchrec(&big, &TorchRecConfig::default()).unwrap();
        assert_eq!(out.options[0].0.compute_kernel, ComputeKernel::FusedUvmCaching);
        assert_eq!(out.tiered_task(&big).tables[0].tier, Tier::Cached(0.2));
        // 200 lookups per sample: 200 · 512 · 8 · 20 bytes of input indices, far more than a 1000-byte rank.
        let tiny = Task::new(vec![table("a", 10, 4, 200.0)], Devices::uniform(2, 1000).unwrap()).unwrap();
        let e = plan_torchrec(&tiny, &cfg).unwrap_err();
        assert!(matches!(e, Error::ReservationExceedsCap { device: 0, cap_bytes: 1000, .. }), "{e}");
        assert!(e.to_string().contains("15.6 MiB (16,384,000 bytes) of input indices"), "{e}");
        let bad = TorchRecMemory::new(0.15, 0, 0, 20).unwrap_err().to_string();
        assert!(bad.contains("`batch_per_rank` = 0"), "{bad}");
    }

    #[test]
    fn grid_odometer_visits_every_combination_once() {
        let task =
            Task::new(vec![table("a", 100, 8, 1.0), table("b", 100, 8, 1.0)], Devices::uniform(2, 1 << 30).unwrap())
                .unwrap();
        let space = enumerate(&task, &TorchRecConfig::fused_hbm()).unwrap();
        let keys = StorageKeys::new(&space);
        let mut p = Proposer::grid(&space);
        let mut seen = Vec::new();
        while let Some(x) = p.propose() {
            seen.push(x);
            p.feedback(&keys);
        }
        assert_eq!(seen.len(), 9);
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 9);
    }
}
