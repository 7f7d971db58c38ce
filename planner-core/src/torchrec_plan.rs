//! Interop with TorchRec: any shardplan [`Plan`] written as a TorchRec sharding plan.
//!
//! The document (`shardplan.torchrec-plan/v1`, `docs/FORMATS.md`) holds, per table, TorchRec's
//! `ParameterSharding` fields — `sharding_type`, `compute_kernel` (the table's tier: `fused` in HBM,
//! `fused_uvm_caching` with its `cache_load_factor`, `fused_uvm`), `ranks` — and its `sharding_spec` as a list of `ShardMetadata` (`shard_offsets = [row, col]`,
//! `shard_sizes = [rows, cols]`, `placement = "rank:R/cuda:L"` with `L = R mod local_world_size`), plus
//! each table's shape so the plan can be checked against an `EmbeddingBagCollection`.
//! `tools/torchrec_apply.py` turns it into `construct_module_sharding_plan(...)`.
//!
//! Mapping ([`crate::planners::torchrec::sharding_type_of`]): an unsplit table is `table_wise`; column
//! pieces are `column_wise` (one shard per piece, in column order, ranks may repeat); row pieces are
//! `row_wise`, one shard per rank in rank order (empty shards are added for the remaining ranks, as
//! TorchRec's own planner writes them), or `table_row_wise` when they lie on one host's ranks of several
//! (one shard per rank of that host). A plan TorchRec
//! cannot build — uneven column blocks, row ranges off TorchRec's rank order — is refused with an error
//! naming the table ([`Plan::check_torchrec_buildable`], the rule [`crate::plan::SplitRule::TorchRec`]
//! plans under).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::plan::{Piece, Plan};
use crate::planners::torchrec::{ShardingType, sharding_type_of};
use crate::task::Task;

/// Schema tag of TorchRec plan documents.
pub const TORCHREC_PLAN_SCHEMA: &str = "shardplan.torchrec-plan/v1";

/// TorchRec's `ShardMetadata` of one shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardMetadata {
    /// `[first row, first column]`.
    pub shard_offsets: [u64; 2],
    /// `[rows, columns]`.
    pub shard_sizes: [u64; 2],
    /// `rank:R/cuda:L`.
    pub placement: String,
}

/// TorchRec's `ParameterSharding` of one table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParameterSharding {
    /// `table_wise`, `column_wise`, `row_wise` or `table_row_wise`.
    pub sharding_type: String,
    /// `fused`, `fused_uvm_caching` or `fused_uvm`.
    pub compute_kernel: String,
    /// The HBM cache's share of the rows of a `fused_uvm_caching` table (TorchRec's
    /// `CacheParams.load_factor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_load_factor: Option<f64>,
    /// Rank of every shard.
    pub ranks: Vec<usize>,
    /// The shards (`EnumerableShardingSpec`).
    pub sharding_spec: Vec<ShardMetadata>,
}

/// A table's shape, as in TorchRec's `EmbeddingBagConfig`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableShape {
    /// Rows.
    pub num_embeddings: u64,
    /// Columns.
    pub embedding_dim: u32,
}

/// A shardplan plan as a TorchRec sharding plan for one `EmbeddingBagCollection`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchRecPlanDocument {
    /// Always [`TORCHREC_PLAN_SCHEMA`].
    pub schema: String,
    /// Ranks in the process group.
    pub world_size: usize,
    /// Ranks per host (the `L` of `cuda:L` placements).
    pub local_world_size: usize,
    /// Device type of the placements (`cuda`).
    pub device_type: String,
    /// Table name → its sharding.
    pub plan: BTreeMap<String, ParameterSharding>,
    /// Table name → its shape.
    pub tables: BTreeMap<String, TableShape>,
}

/// Writes `plan` (a plan of `task`) as a TorchRec sharding plan; `local_world_size` defaults to the
/// task's devices per host (all devices without a topology), and must equal it when the task has one.
pub fn to_torchrec_plan(task: &Task, plan: &Plan, local_world_size: Option<usize>) -> Result<TorchRecPlanDocument> {
    let world = task.devices.count();
    let local = local_world_size.unwrap_or(task.devices_per_host());
    if local == 0 || local > world {
        return Err(Error::field("TorchRec export", "local_world_size", local, format!("1..={world}")));
    }
    if let Some(t) = task.topology.as_ref().filter(|t| t.devices_per_host != local) {
        return Err(Error::field(
            "TorchRec export",
            "local_world_size",
            local,
            format!("{} (the task's topology: {})", t.devices_per_host, t.describe()),
        ));
    }
    plan.check_torchrec_buildable(task)?;
    let place = |r: usize| format!("rank:{r}/cuda:{}", r % local);
    let mut out = BTreeMap::new();
    let mut tables = BTreeMap::new();
    for group in plan.table_groups() {
        let table = &task.tables[group[0].table_id];
        let sharding_type = sharding_type_of(task, group);
        let mut spec: Vec<ShardMetadata> = Vec::new();
        let mut ranks = Vec::new();
        if sharding_type.is_row_wise() {
            // Row-wise: every rank; table-row-wise: every rank of the pieces' host.
            let first = if sharding_type == ShardingType::TableRowWise { group[0].device } else { 0 };
            let count = if sharding_type == ShardingType::TableRowWise { local } else { world };
            for (k, p) in group.iter().enumerate() {
                let r = p.rows.unwrap_or_default();
                spec.push(ShardMetadata {
                    shard_offsets: [r.offset, 0],
                    shard_sizes: [r.count, u64::from(table.dim)],
                    placement: place(first + k),
                });
                ranks.push(first + k);
            }
            for k in group.len()..count {
                spec.push(ShardMetadata {
                    shard_offsets: [table.rows, 0],
                    shard_sizes: [0, u64::from(table.dim)],
                    placement: place(first + k),
                });
                ranks.push(first + k);
            }
        } else {
            for p in group {
                spec.push(ShardMetadata {
                    shard_offsets: [0, u64::from(p.col_offset)],
                    shard_sizes: [table.rows, u64::from(p.dim)],
                    placement: place(p.device),
                });
                ranks.push(p.device);
            }
        }
        out.insert(
            table.name.clone(),
            ParameterSharding {
                sharding_type: sharding_type.as_str().into(),
                compute_kernel: table.tier.kernel_name().into(),
                cache_load_factor: table.cache_load_factor(),
                ranks,
                sharding_spec: spec,
            },
        );
        tables.insert(table.name.clone(), TableShape { num_embeddings: table.rows, embedding_dim: table.dim });
    }
    Ok(TorchRecPlanDocument {
        schema: TORCHREC_PLAN_SCHEMA.into(),
        world_size: world,
        local_world_size: local,
        device_type: "cuda".into(),
        plan: out,
        tables,
    })
}

impl TorchRecPlanDocument {
    /// Parses and checks a document (schema tag, ranks, every placement's rank).
    pub fn from_json(text: &str) -> Result<Self> {
        let doc: Self = serde_json::from_str(text)
            .map_err(|e| Error::Parse { context: "TorchRec plan JSON".into(), message: e.to_string() })?;
        let ctx = "TorchRec plan JSON";
        if doc.schema != TORCHREC_PLAN_SCHEMA {
            return Err(Error::field(ctx, "schema", format!("{:?}", doc.schema), format!("{TORCHREC_PLAN_SCHEMA:?}")));
        }
        if doc.world_size == 0 || doc.world_size > crate::task::MAX_DEVICES {
            return Err(Error::field(ctx, "world_size", doc.world_size, format!("1..={}", crate::task::MAX_DEVICES)));
        }
        for (name, s) in &doc.plan {
            if s.ranks.len() != s.sharding_spec.len() {
                return Err(Error::field(
                    format!("{ctx}, table `{name}`"),
                    "ranks",
                    format!("{} ranks", s.ranks.len()),
                    format!("one per shard ({} shards)", s.sharding_spec.len()),
                ));
            }
            if let Some(&r) = s.ranks.iter().find(|&&r| r >= doc.world_size) {
                return Err(Error::field(
                    format!("{ctx}, table `{name}`"),
                    "ranks",
                    r,
                    format!("0..{}", doc.world_size),
                ));
            }
        }
        Ok(doc)
    }

    /// `task` with every table the document names in the tier its `compute_kernel` (and
    /// `cache_load_factor`) say, refusing a kernel or share shardplan cannot hold by table name.
    pub fn tiered_task(&self, task: &Task) -> Result<Task> {
        let mut out = task.clone();
        for t in &mut out.tables {
            if let Some(s) = self.plan.get(&t.name) {
                let ctx = format!("TorchRec plan JSON, table `{}`", t.name);
                t.tier = crate::table::Tier::from_fields(&ctx, Some(&s.compute_kernel), s.cache_load_factor)?;
            }
        }
        Ok(out)
    }

    /// The plan as a shardplan [`Plan`] of `task`, whose tables are matched by name (every table of the
    /// task must be in the plan with the same shape, and no other). Table-wise → one piece, column-wise →
    /// a piece per shard, row-wise → a piece per non-empty shard.
    pub fn to_plan(&self, task: &Task) -> Result<Plan> {
        let ctx = "TorchRec plan JSON";
        if self.world_size != task.devices.count() {
            return Err(Error::field(
                ctx,
                "world_size",
                self.world_size,
                format!("the task's {} devices", task.devices.count()),
            ));
        }
        if let Some(extra) = self.plan.keys().find(|n| !task.tables.iter().any(|t| &t.name == *n)) {
            return Err(Error::field(ctx, "plan", format!("table `{extra}`"), "only tables of the tables file"));
        }
        let mut pieces = Vec::new();
        for (id, t) in task.tables.iter().enumerate() {
            let Some(s) = self.plan.get(&t.name) else {
                return Err(Error::field(
                    ctx,
                    "plan",
                    format!("no entry for table `{}`", t.name),
                    "every table of the tables file",
                ));
            };
            if let Some(shape) = self.tables.get(&t.name)
                && (shape.num_embeddings != t.rows || shape.embedding_dim != t.dim)
            {
                return Err(Error::field(
                    format!("{ctx}, table `{}`", t.name),
                    "shape",
                    format!("{} x {}", shape.num_embeddings, shape.embedding_dim),
                    format!("the tables file's {} x {}", t.rows, t.dim),
                ));
            }
            let kind = ShardingType::parse(&s.sharding_type)?;
            for (m, &rank) in s.sharding_spec.iter().zip(&s.ranks) {
                let [row, col] = m.shard_offsets;
                let [rows, cols] = m.shard_sizes;
                let cols32 = u32::try_from(cols).map_err(|_| {
                    Error::field(format!("{ctx}, table `{}`", t.name), "shard_sizes", cols, "a column count")
                })?;
                let col32 = u32::try_from(col).map_err(|_| {
                    Error::field(format!("{ctx}, table `{}`", t.name), "shard_offsets", col, "a column offset")
                })?;
                if kind.is_row_wise() {
                    if rows > 0 {
                        pieces.push(Piece::row_range(id, t.dim, rank, row, rows));
                    }
                } else {
                    pieces.push(Piece::cols(id, col32, cols32, rank));
                }
            }
        }
        Plan::new(task, pieces)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{ElementType, NUM_BINS, OptimizerState, TableSpec};
    use crate::task::Devices;

    fn task() -> Task {
        let t = |name: &str, rows, dim| {
            TableSpec::new("t", name.into(), rows, dim, 1.0, [0.0; NUM_BINS], ElementType::Fp32, OptimizerState::None)
                .unwrap()
        };
        Task::new(vec![t("a", 100, 32), t("b", 10, 8), t("c", 3, 4)], Devices::uniform(4, 1 << 20).unwrap()).unwrap()
    }

    #[test]
    fn writes_torchrec_fields() {
        let t = task();
        let plan = Plan::new(
            &t,
            vec![
                Piece::cols(0, 0, 16, 3),
                Piece::cols(0, 16, 16, 1),
                Piece::row_range(1, 8, 0, 0, 3),
                Piece::row_range(1, 8, 1, 3, 3),
                Piece::row_range(1, 8, 2, 6, 3),
                Piece::row_range(1, 8, 3, 9, 1),
                Piece::cols(2, 0, 4, 2),
            ],
        )
        .unwrap();
        let doc = to_torchrec_plan(&t, &plan, Some(2)).unwrap();
        let a = &doc.plan["a"];
        assert_eq!((a.sharding_type.as_str(), a.ranks.clone()), ("column_wise", vec![3, 1]));
        assert_eq!(a.sharding_spec[1].shard_offsets, [0, 16]);
        assert_eq!(a.sharding_spec[0].placement, "rank:3/cuda:1");
        let b = &doc.plan["b"];
        assert_eq!(b.sharding_type, "row_wise");
        assert_eq!(b.sharding_spec.iter().map(|s| s.shard_sizes[0]).collect::<Vec<_>>(), vec![3, 3, 3, 1]);
        assert_eq!(doc.plan["c"].sharding_type, "table_wise");
        assert_eq!(doc.tables["b"], TableShape { num_embeddings: 10, embedding_dim: 8 });
        let json = serde_json::to_string(&doc).unwrap();
        assert_eq!(TorchRecPlanDocument::from_json(&json).unwrap(), doc);
        // Read back, it is the same plan.
        assert_eq!(doc.to_plan(&t).unwrap(), plan);
    }

    #[test]
    fn pads_row_wise_with_empty_shards_and_refuses_other_layouts() {
        let t = task();
        let ok = Plan::new(
            &t,
            vec![
                Piece::cols(0, 0, 32, 0),
                Piece::row_range(1, 8, 0, 0, 5),
                Piece::row_range(1, 8, 1, 5, 5),
                Piece::cols(2, 0, 4, 0),
            ],
        )
        .unwrap();
        let b = &to_torchrec_plan(&t, &ok, None).unwrap().plan["b"];
        assert_eq!(b.ranks, vec![0, 1, 2, 3]);
        assert_eq!(b.sharding_spec[3].shard_sizes, [0, 8]);
        assert_eq!(b.sharding_spec[3].shard_offsets, [10, 0]);
        let swapped = Plan::new(
            &t,
            vec![
                Piece::cols(0, 0, 32, 0),
                Piece::row_range(1, 8, 1, 0, 5),
                Piece::row_range(1, 8, 0, 5, 5),
                Piece::cols(2, 0, 4, 0),
            ],
        )
        .unwrap();
        let e = to_torchrec_plan(&t, &swapped, None).unwrap_err().to_string();
        assert!(e.contains("table `b`") && e.contains("[1, 0]"), "{e}");
        assert!(to_torchrec_plan(&t, &ok, Some(5)).unwrap_err().to_string().contains("local_world_size"));
    }

    #[test]
    fn refuses_uneven_column_blocks_naming_the_table() {
        let t = task();
        let pieces = vec![
            Piece::cols(0, 0, 16, 0),
            Piece::cols(0, 16, 8, 1),
            Piece::cols(0, 24, 8, 2),
            Piece::cols(1, 0, 8, 0),
            Piece::cols(2, 0, 4, 0),
        ];
        let halvings = Plan::new(&t, pieces.clone()).unwrap();
        let e = to_torchrec_plan(&t, &halvings, None).unwrap_err().to_string();
        assert!(e.contains("table `a`") && e.contains("[16, 8, 8]") && e.contains("equal blocks"), "{e}");
        // Under the TorchRec split rule such a plan cannot even be made.
        let strict = t.clone().with_splits(crate::plan::SplitRule::TorchRec);
        assert!(Plan::new(&strict, pieces).unwrap_err().to_string().contains("[16, 8, 8]"));
        let mut equal = vec![Piece::cols(1, 0, 8, 0), Piece::cols(2, 0, 4, 0)];
        equal.extend((0..4).map(|k| Piece::cols(0, 8 * k, 8, (k % 2) as usize)));
        let plan = Plan::new(&strict, equal).unwrap();
        let a = &to_torchrec_plan(&strict, &plan, None).unwrap().plan["a"];
        assert_eq!((a.sharding_type.as_str(), a.ranks.clone()), ("column_wise", vec![0, 1, 0, 1]));
    }
}
