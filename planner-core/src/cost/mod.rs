//! Cost models and the cost of a plan (SPEC section 1).
//!
//! A [`CostModel`] answers three questions: the compute time of a *set* of table pieces fused on one
//! device (one prediction for the whole set: multi-table cost is not a sum of singles in general), and
//! the backward and forward all-to-all times of every device given the per-device dim sums (and, for
//! forward, the start delays). [`evaluate`] turns a plan into a [`PlanReport`] with NeuroShard's
//! code-exact definition or DreamShard's four-phase sum.

pub mod analytical;
pub mod card;
pub mod choice;
pub mod incremental;
pub mod native;
pub mod neural;
pub mod onnx;
pub mod profiles;
pub mod terms;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::memory::{DeviceMemoryReport, MemoryRule};
use crate::plan::{Piece, Plan};
use crate::table::TableSpec;
use crate::task::Task;

pub use analytical::{AnalyticalModel, HardwareProfile};
pub use card::ModelCard;
pub use choice::{ModelChoice, model_names};
pub use incremental::IncrementalCompute;
pub use neural::{NeuralModel, members_mean_sd};
pub use terms::TermsModel;

/// One piece of a table as a cost model sees it: the table's statistics, the piece's dim and its rows.
///
/// A row-wise piece (`rows < table.rows`) holds a contiguous range of the table's rows and all its
/// columns. Assuming lookups spread over rows in proportion to their count, it serves
/// [`PieceRef::row_fraction`] of the table's lookups, yet produces partial sums for the whole batch
/// (reduced across devices). A learned compute model should price it as a table of
/// [`PieceRef::rows`] rows with pooling factor [`PieceRef::pooling_factor`] and the table's access bins
/// unchanged (an approximation: the bins describe the whole table, and hot rows need not spread evenly).
#[derive(Debug, Clone, Copy)]
pub struct PieceRef<'a> {
    /// The table the piece belongs to.
    pub table: &'a TableSpec,
    /// Columns in this piece.
    pub dim: u32,
    /// Rows in this piece (`table.rows` unless the table is split row-wise).
    pub rows: u64,
}

impl<'a> PieceRef<'a> {
    /// A piece of all rows and `dim` columns of `table`.
    #[must_use]
    pub fn whole(table: &'a TableSpec, dim: u32) -> Self {
        Self { table, dim, rows: table.rows }
    }

    /// The cost-model view of `piece`, a piece of `table`.
    #[must_use]
    pub fn of(table: &'a TableSpec, piece: &Piece) -> Self {
        Self { table, dim: piece.dim, rows: piece.row_count(table.rows) }
    }

    /// Whether the piece holds only some of the table's rows (row-wise sharding).
    #[must_use]
    pub fn is_row_split(&self) -> bool {
        self.rows < self.table.rows
    }

    /// Fraction of the table's rows, and so of its lookups, that this piece serves (1 for column pieces).
    #[must_use]
    pub fn row_fraction(&self) -> f64 {
        if self.is_row_split() { self.rows as f64 / self.table.rows as f64 } else { 1.0 }
    }

    /// Mean lookups per sample served by this piece: the table's pooling factor × [`PieceRef::row_fraction`].
    #[must_use]
    pub fn pooling_factor(&self) -> f64 {
        self.table.pooling_factor * self.row_fraction()
    }
}

/// Forward and backward parts of a compute cost, for models that can tell them apart.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ComputeSplit {
    /// Forward (lookup + pooling) time.
    pub fwd_ms: f64,
    /// Backward (gradient + fused update) time.
    pub bwd_ms: f64,
}

/// A model of what a plan costs on some hardware.
pub trait CostModel {
    /// Name shown in reports (e.g. `analytical:torchrec`).
    fn name(&self) -> String;
    /// Time of one fused forward + backward over all `set` pieces on one device, in ms.
    fn compute_ms(&self, set: &[PieceRef<'_>]) -> Result<f64>;
    /// [`CostModel::compute_ms`] of many sets at once (models with per-call overhead batch them).
    fn compute_many_ms(&self, sets: &[&[PieceRef<'_>]]) -> Result<Vec<f64>> {
        sets.iter().map(|s| self.compute_ms(s)).collect()
    }
    /// The forward/backward parts of [`CostModel::compute_ms`], when the model knows them.
    fn compute_split(&self, _set: &[PieceRef<'_>]) -> Result<Option<ComputeSplit>> {
        Ok(None)
    }
    /// The incremental form of [`CostModel::compute_ms`], when the model's set cost is a head over a
    /// sum of per-piece vectors (searches then price a set plus one piece by adding vectors).
    fn incremental(&self) -> Option<&dyn IncrementalCompute> {
        None
    }
    /// The compute time of `set` under each member of an ensemble, ms (`None` for a single model). The
    /// model's [`CostModel::compute_ms`] is their mean.
    fn compute_members_ms(&self, _set: &[PieceRef<'_>]) -> Result<Option<Vec<f64>>> {
        Ok(None)
    }
    /// The calibrated multiplier of the members' standard deviation that makes a prediction interval
    /// (`None` when the model has no calibrated interval).
    fn interval_z(&self) -> Option<f64> {
        None
    }
    /// The hardware fingerprint and the reference-kernel time the model's times are expressed at, when it
    /// was trained on speed-normalised measurements (`docs/COST_MODELS.md`, "Speed").
    fn reference_speed(&self) -> Option<(String, f64)> {
        None
    }
    /// The hardware record of the machine the model's data was measured on (its card's `hardware`), when
    /// it has one; [`card::other_machine`] tells whether another machine is the same.
    fn measured_on(&self) -> Option<&serde_json::Value> {
        None
    }
    /// The global batch (samples per step over all devices) the model's times are for, when it knows it.
    fn global_batch(&self) -> Option<u64> {
        None
    }
    /// Bytes one unit of a device's dim sum puts into one all-to-all per step: the global batch × the
    /// bytes of an exchanged element (fp32 pooled outputs unless the model says otherwise). The network
    /// phase of a multi-host exchange is priced from it ([`crate::topology`]); `None` when the model
    /// does not know its batch.
    fn exchange_bytes_per_dim(&self) -> Option<f64> {
        self.global_batch().map(|b| b as f64 * 4.0)
    }
    /// The relative standard deviation of a device's compute error when the model prices a plan at the
    /// expected time of its slowest device ([`expected_max_ms`]) instead of its largest predicted total
    /// (`None`, the default: the plan costs its largest predicted total).
    fn plan_error_sd(&self) -> Option<f64> {
        None
    }
    /// The relative standard deviation of a device's compute error the model measured on data it was not
    /// trained on, whether or not it prices plans by it: [`evaluate`] reports a plan's expected measured
    /// cost from it ([`PlanReport::expected_cost_ms`]). `None` (the default) for a model with no measured
    /// error (the analytical model).
    fn measured_error_sd(&self) -> Option<f64> {
        None
    }
    /// Whether [`CostModel::compute_ms`] of a set is exactly the sum over its pieces of their single
    /// costs (true for the analytical model: it has no fusion effect). Lower bounds use it.
    fn compute_is_additive(&self) -> bool {
        false
    }
    /// Forgets what the model has memoised (pieces priced, sets seen), so the next plan pays what a fresh
    /// process would; results never change. Benchmarks call it before timing each planner, so a planner
    /// is not timed on the memo of the one before it. Models that memoise nothing need not implement it.
    fn forget_memo(&self) {}
    /// Backward all-to-all time of every device, given per-device dim sums.
    fn bw_comm_ms(&self, dims: &[f64]) -> Result<Vec<f64>>;
    /// Forward all-to-all time of every device, given per-device dim sums and start delays (ms).
    fn fw_comm_ms(&self, dims: &[f64], delays_ms: &[f64]) -> Result<Vec<f64>>;
}

/// Which definition of a plan's cost to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum CostDefinition {
    /// NeuroShard (code-exact): forward comm sees the start delays that compute + backward comm create.
    #[default]
    #[serde(rename = "neuroshard")]
    NeuroShard,
    /// DreamShard: max over devices of the four phases' sum, no delays.
    #[serde(rename = "four-phase")]
    FourPhase,
}

impl CostDefinition {
    /// Every definition, in the order they are documented.
    pub const ALL: [Self; 2] = [Self::NeuroShard, Self::FourPhase];

    /// The name a user writes (`neuroshard`, `four-phase`): the same as in plan documents.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::NeuroShard => "neuroshard",
            Self::FourPhase => "four-phase",
        }
    }

    /// The definition a user named; an error naming the value and the choices otherwise.
    pub fn from_name(name: &str) -> crate::Result<Self> {
        Self::ALL.into_iter().find(|d| d.name() == name).ok_or_else(|| {
            crate::Error::field("cost definition", "definition", format!("{name:?}"), "neuroshard or four-phase")
        })
    }
}

impl std::fmt::Display for CostDefinition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What one device does under a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceReport {
    /// Device index.
    pub device: usize,
    /// Labels of the pieces on it (`name`, `name[cols a..b]` or `name[rows a..b]`).
    pub pieces: Vec<String>,
    /// Bytes of its pieces counted against its usable memory under the task's memory rule (weights,
    /// optimizer state and buffers: [`DeviceReport::memory`]).
    pub bytes: u64,
    /// Its memory cap.
    pub mem_cap_bytes: u64,
    /// The memory breakdown: the terms of `bytes`, the rule's reservation and the usable bytes
    /// (absent in reports written before memory rules: all 0).
    #[serde(default)]
    pub memory: DeviceMemoryReport,
    /// Sum of its pieces' dims (a row-wise piece counts its full dim: its partial sums cover the whole
    /// batch, so its reduce-scatter moves as many bytes as a table-wise piece's all-to-all).
    pub dim_sum: u64,
    /// Fused compute time.
    pub compute_ms: f64,
    /// Prediction interval of `compute_ms` (`[low, high]`, ms), when the model has a calibrated one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_interval_ms: Option<[f64; 2]>,
    /// Forward/backward parts of `compute_ms`, when the model knows them.
    pub compute_split: Option<ComputeSplit>,
    /// Forward all-to-all time.
    pub fw_comm_ms: f64,
    /// Backward all-to-all time.
    pub bw_comm_ms: f64,
    /// The part of `fw_comm_ms + bw_comm_ms` spent on the network between hosts (0 on one host).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub network_ms: f64,
    /// Start delay fed to the forward comm model (NeuroShard definition; 0 otherwise).
    pub delay_ms: f64,
    /// `compute_ms + fw_comm_ms + bw_comm_ms`.
    pub total_ms: f64,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// The cost of a plan and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanReport {
    /// Cost model that produced the numbers.
    pub cost_model: String,
    /// Definition used.
    pub definition: CostDefinition,
    /// Max over devices of `total_ms` (the step time of the embedding part).
    pub cost_ms: f64,
    /// Prediction interval of `cost_ms` (`[low, high]`, ms): the plan priced by every ensemble member
    /// (comm as for `cost_ms`), `cost_ms ± z · sd`. Absent without a calibrated interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_interval_ms: Option<[f64; 2]>,
    /// What a measurement of the plan should read on average, ms: the expected time of its slowest
    /// device, each device's compute off by the model's measured error ([`CostModel::measured_error_sd`]),
    /// devices holding pieces of the same tables erring together ([`expected_max_ms`]). A measured plan
    /// costs the largest of its devices' measured times, which exceeds the largest of their predictions on
    /// average, the more the more devices a plan fills to the same predicted time: `cost_ms` (the
    /// objective) is the largest prediction, and measured searched plans sit 10–20% above it
    /// (`docs/BENCHMARKS.md`). Equal to `cost_ms` when the model prices plans this way (`--expected-max`);
    /// absent for a model with no measured error (the analytical model) and in older reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_cost_ms: Option<f64>,
    /// The global batch the times are for ([`CostModel::global_batch`]; absent when the model does not
    /// say, and in reports written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_batch: Option<u64>,
    /// Device with the largest total.
    pub bottleneck_device: usize,
    /// The memory rule the bytes were counted by (absent in reports written before memory rules: the
    /// weights rule, the only one there was).
    #[serde(default)]
    pub memory_rule: MemoryRule,
    /// Whether every device's pieces fit its usable memory (and every reservation its cap).
    pub feasible: bool,
    /// One line per device over its usable memory (or whose reservation exceeds its cap).
    pub violations: Vec<String>,
    /// Per-device breakdown.
    pub devices: Vec<DeviceReport>,
    /// On several hosts, what holds up the bottleneck device ([`PlanReport::bottleneck_link`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bottleneck_link: Option<BottleneckLink>,
}

/// What holds up the bottleneck device: its compute, its exchange inside its host, or the network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BottleneckLink {
    /// `compute`, `in-host exchange` or `network`: the largest of the three.
    pub part: String,
    /// Fused compute, ms.
    pub compute_ms: f64,
    /// Forward + backward exchange inside the host, ms.
    pub in_host_ms: f64,
    /// Forward + backward network phase, ms.
    pub network_ms: f64,
}

impl PlanReport {
    /// The bottleneck device's time split into compute, in-host exchange and network.
    #[must_use]
    pub fn bottleneck_link(&self) -> Option<BottleneckLink> {
        let d = self.devices.get(self.bottleneck_device)?;
        let in_host_ms = (d.fw_comm_ms + d.bw_comm_ms - d.network_ms).max(0.0);
        let parts = [("compute", d.compute_ms), ("in-host exchange", in_host_ms), ("network", d.network_ms)];
        let part = parts.iter().fold(parts[0], |best, &p| if p.1 > best.1 { p } else { best }).0.to_owned();
        Some(BottleneckLink { part, compute_ms: d.compute_ms, in_host_ms, network_ms: d.network_ms })
    }
}

/// Computes a plan's report under `model` and `definition`.
pub fn evaluate(task: &Task, plan: &Plan, model: &dyn CostModel, definition: CostDefinition) -> Result<PlanReport> {
    let n = task.devices.count();
    let by_device = plan.pieces_by_device(n);
    let pieces = plan.pieces();
    let usage = crate::memory::plan_usage(task, plan)?;
    let mut devices = Vec::with_capacity(n);
    let mut violations = Vec::new();
    let host_bytes: Vec<u64> = usage.iter().map(|(_, m)| m.host_bytes).collect();
    // What each device's cached pieces add for their misses (crate::tier), the same under every member.
    let link = crate::tier::host_link_bw(task);
    let misses = by_device
        .iter()
        .map(|idx| {
            let set: Vec<PieceRef<'_>> =
                idx.iter().map(|&i| PieceRef::of(&task.tables[pieces[i].table_id], &pieces[i])).collect();
            crate::tier::set_miss_ms(&set, model, link)
        })
        .collect::<Result<Vec<f64>>>()?;
    for ((device, idx), (dm, memory)) in by_device.iter().enumerate().zip(usage) {
        let set: Vec<PieceRef<'_>> =
            idx.iter().map(|&i| PieceRef::of(&task.tables[pieces[i].table_id], &pieces[i])).collect();
        let bytes = memory.placed_bytes()?;
        violations.extend(crate::memory::violation(device, &dm, bytes, task.memory.name()));
        let labels = idx
            .iter()
            .map(|&i| {
                let p = pieces[i];
                let t = &task.tables[p.table_id];
                if let Some(r) = p.rows {
                    format!("{}[rows {}..{}]", t.name, r.offset, r.offset + r.count)
                } else if p.dim == t.dim {
                    t.name.clone()
                } else {
                    format!("{}[cols {}..{}]", t.name, p.col_offset, p.col_offset + p.dim)
                }
            })
            .collect();
        devices.push(DeviceReport {
            device,
            pieces: labels,
            bytes,
            mem_cap_bytes: dm.cap_bytes,
            memory,
            dim_sum: set.iter().map(|p| u64::from(p.dim)).sum(),
            compute_ms: model.compute_ms(&set)? + misses[device],
            compute_interval_ms: None,
            // A cached piece's misses: its row fetches in the forward pass, its write-backs in the backward.
            compute_split: model.compute_split(&set)?.map(|c| ComputeSplit {
                fwd_ms: c.fwd_ms + misses[device] / 2.0,
                bwd_ms: c.bwd_ms + misses[device] / 2.0,
            }),
            fw_comm_ms: 0.0,
            bw_comm_ms: 0.0,
            network_ms: 0.0,
            delay_ms: 0.0,
            total_ms: 0.0,
        });
    }
    violations.extend(crate::memory::host_violations(task, &host_bytes));
    let dims: Vec<f64> = devices.iter().map(|d| d.dim_sum as f64).collect();
    let compute: Vec<f64> = devices.iter().map(|d| d.compute_ms).collect();
    let times = device_times(model, &compute, &dims, &row_pieces(task, plan), definition, task.topology.as_ref())?;
    for (i, d) in devices.iter_mut().enumerate() {
        d.bw_comm_ms = times.bw_comm_ms[i];
        d.fw_comm_ms = times.fw_comm_ms[i];
        d.network_ms = times.network_ms[i];
        d.delay_ms = times.delay_ms[i];
        d.total_ms = times.total_ms[i];
    }
    let shares = if model.plan_error_sd().is_some() || model.measured_error_sd().is_some() {
        table_shares(
            n,
            pieces.iter().map(|p| {
                let t = &task.tables[p.table_id];
                (p.device, p.table_id, piece_weight(t, p.dim, p.row_count(t.rows)))
            }),
        )
    } else {
        Vec::new()
    };
    let (bottleneck_device, cost_ms) = plan_cost(model, &compute, &times.total_ms, &shares);
    let expected_cost_ms = match model.plan_error_sd() {
        Some(_) => Some(cost_ms),
        None => model.measured_error_sd().map(|sd| expected_max_ms(&compute, &times.total_ms, sd, &shares)),
    };
    let mut cost_interval_ms = None;
    if let Some(z) = model.interval_z() {
        // Every device's members; an empty device costs 0 under every member.
        let mut member_totals: Option<Vec<Vec<f64>>> = Some(Vec::with_capacity(n));
        for (d, idx) in by_device.iter().enumerate() {
            let set: Vec<PieceRef<'_>> =
                idx.iter().map(|&i| PieceRef::of(&task.tables[pieces[i].table_id], &pieces[i])).collect();
            let comm = devices[d].bw_comm_ms + devices[d].fw_comm_ms;
            let members = if set.is_empty() { None } else { model.compute_members_ms(&set)? };
            match (members, &mut member_totals) {
                (Some(m), Some(all)) => {
                    let m: Vec<f64> = m.iter().map(|c| c + misses[d]).collect();
                    devices[d].compute_interval_ms = Some(interval(devices[d].compute_ms, &m, z));
                    all.push(m.iter().map(|c| c + comm).collect());
                }
                (None, Some(all)) if set.is_empty() => all.push(Vec::new()),
                _ => member_totals = None,
            }
        }
        if let Some(all) = member_totals {
            let k = all.iter().map(Vec::len).max().unwrap_or(0);
            let costs: Vec<f64> = (0..k)
                .map(|m| all.iter().map(|d| d.get(m).copied().unwrap_or(0.0)).fold(f64::NEG_INFINITY, f64::max))
                .collect();
            if k > 1 {
                cost_interval_ms = Some(interval(cost_ms, &costs, z));
            }
        }
    }
    let mut report = PlanReport {
        cost_model: model.name(),
        definition,
        cost_ms,
        cost_interval_ms,
        expected_cost_ms,
        global_batch: model.global_batch(),
        bottleneck_device,
        memory_rule: task.memory,
        feasible: violations.is_empty(),
        violations,
        devices,
        bottleneck_link: None,
    };
    if task.is_multi_host() {
        report.bottleneck_link = report.bottleneck_link();
    }
    Ok(report)
}

/// `center ± z · sd(members)`, the low end clamped at 0.
fn interval(center: f64, members: &[f64], z: f64) -> [f64; 2] {
    let n = members.len() as f64;
    let mean = members.iter().sum::<f64>() / n;
    let sd = if members.len() > 1 {
        (members.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    [(center - z * sd).max(0.0), center + z * sd]
}

fn check_len(model: &dyn CostModel, what: &str, v: &[f64], n: usize) -> Result<()> {
    if v.len() == n && v.iter().all(|x| x.is_finite()) {
        return Ok(());
    }
    Err(Error::CostModel {
        model: model.name(),
        message: format!(
            "{what} returned {} values for {n} devices (all finite: {})",
            v.len(),
            v.iter().all(|x| x.is_finite())
        ),
    })
}

/// Every device's exchange times and total under a cost definition, from its compute and dim sum.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceTimes {
    /// Backward all-to-all per device, ms.
    pub bw_comm_ms: Vec<f64>,
    /// Forward all-to-all per device (after its start delay), ms.
    pub fw_comm_ms: Vec<f64>,
    /// The network part of `bw_comm_ms + fw_comm_ms` per device (0 on one host), ms.
    pub network_ms: Vec<f64>,
    /// Start delay of the forward all-to-all per device ([`start_delays_ms`]), ms.
    pub delay_ms: Vec<f64>,
    /// `compute + bw + fw` per device, ms; the largest is the plan's cost ([`bottleneck`]).
    pub total_ms: Vec<f64>,
}

/// `(device, table, dim)` of every row piece of `plan` (what [`device_times`] needs to price the network
/// on several hosts: [`crate::topology::Topology::network_dims`]).
#[must_use]
pub fn row_pieces(task: &Task, plan: &Plan) -> Vec<(usize, usize, u32)> {
    plan.pieces()
        .iter()
        .filter(|p| p.rows.is_some_and(|r| task.tables.get(p.table_id).is_some_and(|t| r.count < t.rows)))
        .map(|p| (p.device, p.table_id, p.dim))
        .collect()
}

/// The one cost formula (SPEC section 1) from per-device compute: the backward exchange, the start
/// delays, the forward exchange with those delays, and each device's total. [`evaluate`] and the searches
/// call it; the collector's measured plans use its parts ([`start_delays_ms`], [`bottleneck`]) with measured
/// exchanges.
///
/// On one host (`topology` absent or of one host) both exchanges are the model's. On several hosts each
/// is hierarchical ([`crate::topology`]): the model's exchange among each host's devices, plus the
/// network phase priced from the host's network dims (its dim sum, a row-split table's dim once per host
/// holding its `row_pieces`).
///
/// # Errors
/// [`Error::CostModel`] when the model returns the wrong number of values or non-finite ones, or cannot
/// say its exchange volume for a multi-host topology.
pub fn device_times(
    model: &dyn CostModel,
    compute_ms: &[f64],
    dim_sums: &[f64],
    row_pieces: &[(usize, usize, u32)],
    definition: CostDefinition,
    topology: Option<&crate::topology::Topology>,
) -> Result<DeviceTimes> {
    let n = compute_ms.len();
    let multi = topology.filter(|t| t.is_multi_host() && t.hosts * t.devices_per_host == n);
    let (mut bw, network) = match multi {
        None => {
            let bw = model.bw_comm_ms(dim_sums)?;
            check_len(model, "backward comm", &bw, n)?;
            (bw, vec![0.0; n])
        }
        Some(t) => {
            let bytes = model.exchange_bytes_per_dim().ok_or_else(|| Error::CostModel {
                model: model.name(),
                message: format!(
                    "the model does not say its global batch, so the network of {} cannot be priced",
                    t.describe()
                ),
            })?;
            let mut bw = Vec::with_capacity(n);
            for host in dim_sums.chunks(t.devices_per_host) {
                let part = model.bw_comm_ms(host)?;
                check_len(model, "backward comm", &part, host.len())?;
                bw.extend(part);
            }
            (bw, t.network_ms(&t.network_dims(dim_sums, row_pieces), bytes))
        }
    };
    for (b, net) in bw.iter_mut().zip(&network) {
        *b += net;
    }
    let delays = start_delays_ms(compute_ms, &bw, definition);
    let mut fw = match multi {
        None => model.fw_comm_ms(dim_sums, &delays)?,
        Some(t) => {
            let mut fw = Vec::with_capacity(n);
            for (host, d) in dim_sums.chunks(t.devices_per_host).zip(delays.chunks(t.devices_per_host)) {
                let part = model.fw_comm_ms(host, d)?;
                check_len(model, "forward comm", &part, host.len())?;
                fw.extend(part);
            }
            fw
        }
    };
    check_len(model, "forward comm", &fw, n)?;
    for (f, net) in fw.iter_mut().zip(&network) {
        *f += net;
    }
    let total_ms = (0..n).map(|i| compute_ms[i] + bw[i] + fw[i]).collect();
    let network_ms = network.iter().map(|x| 2.0 * x).collect();
    Ok(DeviceTimes { bw_comm_ms: bw, fw_comm_ms: fw, network_ms, delay_ms: delays, total_ms })
}

/// The forward all-to-all's start delay of every device (SPEC section 1): under NeuroShard's definition a
/// device starts its forward exchange when its compute and backward exchange are done, so its delay is
/// `compute + bw − min over devices of (compute + bw)`; under the four-phase definition every delay is 0.
/// Predicted and measured plans both go through this one formula.
#[must_use]
pub fn start_delays_ms(compute_ms: &[f64], bw_comm_ms: &[f64], definition: CostDefinition) -> Vec<f64> {
    match definition {
        CostDefinition::NeuroShard => {
            let start: Vec<f64> = compute_ms.iter().zip(bw_comm_ms).map(|(c, b)| c + b).collect();
            let min = start.iter().copied().fold(f64::INFINITY, f64::min);
            start.iter().map(|s| s - min).collect()
        }
        CostDefinition::FourPhase => vec![0.0; compute_ms.len()],
    }
}

/// Each device's wait for the last device to start the forward exchange: `max delay − delay`. A device's
/// forward time is this wait plus the exchange itself; the learned comm models that say so
/// ([`card::CommCard::fw_after_wait`]) predict only the exchange, and the trainer takes this same wait off
/// the measured times they learn from.
#[must_use]
pub fn start_wait_ms(delays_ms: &[f64]) -> Vec<f64> {
    let last = delays_ms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    delays_ms.iter().map(|d| last - d).collect()
}

/// The bottleneck device and the plan's cost under `model`: the largest device total, or with the
/// model's [`CostModel::plan_error_sd`] the expected largest ([`expected_max_ms`]), the devices' errors
/// correlated through the tables they share (`shares`, one entry per device from [`table_shares`]; empty:
/// independent). [`evaluate`] and the searches price plans through it; measured plans take the plain
/// [`bottleneck`].
#[must_use]
pub fn plan_cost(model: &dyn CostModel, compute_ms: &[f64], totals_ms: &[f64], shares: &[TableShares]) -> (usize, f64) {
    let (device, max) = bottleneck(totals_ms);
    match model.plan_error_sd() {
        Some(sd) => (device, expected_max_ms(compute_ms, totals_ms, sd, shares)),
        None => (device, max),
    }
}

/// What a device's compute is made of, as far as its prediction's error goes: `(table, weight)` pairs
/// sorted by table, a table's weight the sum of its pieces' [`piece_weight`] on the device.
pub type TableShares = Vec<(usize, f64)>;

/// A piece's weight in its device's compute error: its lookups per sample (the table's pooling factor
/// times the piece's share of the rows, the split assumption of [`PieceRef`]) times its width. Only the
/// ratios between a device's pieces matter.
#[must_use]
pub fn piece_weight(table: &TableSpec, dim: u32, rows: u64) -> f64 {
    let pooling = if table.pooling_factor.is_finite() { table.pooling_factor.max(0.0) } else { 0.0 };
    let fraction = if table.rows == 0 { 1.0 } else { rows.min(table.rows) as f64 / table.rows as f64 };
    pooling * fraction * f64::from(dim)
}

/// Every device's [`TableShares`] from `(device, table, weight)` of the plan's pieces; a device index at
/// or beyond `devices` is ignored.
#[must_use]
pub fn table_shares(devices: usize, pieces: impl IntoIterator<Item = (usize, usize, f64)>) -> Vec<TableShares> {
    let mut out: Vec<TableShares> = vec![Vec::new(); devices];
    for (d, t, w) in pieces {
        if let Some(s) = out.get_mut(d) {
            s.push((t, w));
        }
    }
    for s in &mut out {
        s.sort_by_key(|&(t, _)| t);
        s.dedup_by(|b, a| {
            let same = a.0 == b.0;
            if same {
                a.1 += b.1;
            }
            same
        });
    }
    out
}

/// The length of a device's [`TableShares`] as a vector of weights.
fn shares_norm(s: &TableShares) -> f64 {
    s.iter().map(|&(_, w)| w * w).sum::<f64>().sqrt()
}

/// The correlation of two devices' compute errors: the cosine of their [`TableShares`] `a` and `b`, whose
/// [`shares_norm`]s are `na` and `nb`. Measured plans show it (`docs/COST_MODELS.md`, "The expected
/// slowest device"): devices holding pieces of the same tables err together (a row-wise table's pieces on
/// every device most of all), devices sharing no table independently.
fn error_correlation(a: &TableShares, na: f64, b: &TableShares, nb: f64) -> f64 {
    if !(na > 0.0 && nb > 0.0) {
        return 0.0;
    }
    let (mut i, mut j, mut dot) = (0, 0, 0.0);
    while i < a.len() && j < b.len() {
        match a[i].0.cmp(&b[j].0) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                dot += a[i].1 * b[j].1;
                i += 1;
                j += 1;
            }
        }
    }
    (dot / (na * nb)).clamp(0.0, 1.0)
}

/// The expected largest device total when each device's compute is off by an error of relative standard
/// deviation `rel_sd` (normal, mean 0) and the rest of its total (comm, delay) is as predicted. Two
/// devices' errors correlate by [`error_correlation`] of their `shares` (one per device, or empty: all
/// independent). A plan's measured cost is the largest of its devices' measured totals, and the largest
/// of several uncertain times exceeds the largest of their predictions on average, the more so the more
/// devices are close to the top and the less their errors move together: pricing the plain maximum
/// rewards plans that fill every device to the same predicted time, while devices holding the same
/// tables' pieces (a row-wise plan) rise and fall together and add little. Clark's moments of the
/// maximum of correlated normal variables (C. E. Clark, "The greatest of a finite set of random
/// variables", Operations Research 9(2), 1961), taking the devices from the largest total down and
/// carrying the running maximum's covariance with the devices still to come; exact for two devices.
/// `rel_sd` ≤ 0 (or non-finite) gives the plain maximum.
#[must_use]
pub fn expected_max_ms(compute_ms: &[f64], totals_ms: &[f64], rel_sd: f64, shares: &[TableShares]) -> f64 {
    let max = bottleneck(totals_ms).1;
    if !(rel_sd.is_finite() && rel_sd > 0.0) || totals_ms.is_empty() {
        return max;
    }
    let count = totals_ms.len();
    let mut order: Vec<usize> = (0..count).collect();
    order.sort_by(|&a, &b| totals_ms[b].total_cmp(&totals_ms[a]).then(a.cmp(&b)));
    let sd: Vec<f64> = (0..count).map(|i| rel_sd * compute_ms.get(i).copied().unwrap_or(0.0).max(0.0)).collect();
    let correlated = shares.len() == count;
    let norms: Vec<f64> = if correlated { shares.iter().map(shares_norm).collect() } else { Vec::new() };
    let cov = |i: usize, j: usize| -> f64 {
        if i == j {
            sd[i] * sd[i]
        } else if correlated && sd[i] > 0.0 && sd[j] > 0.0 {
            error_correlation(&shares[i], norms[i], &shares[j], norms[j]) * sd[i] * sd[j]
        } else {
            0.0
        }
    };
    // The running maximum: its mean, variance and covariance with every device (read for those to come).
    let first = order[0];
    let (mut mean, mut var) = (totals_ms[first], cov(first, first));
    let mut with: Vec<f64> = if correlated { (0..count).map(|k| cov(first, k)).collect() } else { vec![0.0; count] };
    for (step, &i) in order.iter().enumerate().skip(1) {
        let (m2, v2) = (totals_ms[i], cov(i, i));
        // The spread of the difference; none (up to rounding of a correlation of 1) takes the larger.
        let spread = (var + v2 - 2.0 * with[i]).max(0.0).sqrt();
        if spread <= f64::EPSILON * mean.abs().max(1.0) || spread <= 1e-6 * (var + v2).sqrt() {
            if m2 > mean {
                (mean, var) = (m2, v2);
                if correlated {
                    for &k in &order[step + 1..] {
                        with[k] = cov(i, k);
                    }
                }
            }
            continue;
        }
        let alpha = (mean - m2) / spread;
        let (keep, take, pdf) = (normal_cdf(alpha), normal_cdf(-alpha), normal_pdf(alpha));
        let first = mean * keep + m2 * take + spread * pdf;
        let second = (mean * mean + var) * keep + (m2 * m2 + v2) * take + (mean + m2) * spread * pdf;
        if correlated {
            for &k in &order[step + 1..] {
                with[k] = with[k] * keep + cov(i, k) * take;
            }
        }
        (mean, var) = (first, (second - first * first).max(0.0));
    }
    mean.max(max)
}

/// The standard normal distribution function.
fn normal_cdf(x: f64) -> f64 {
    0.5 * libm::erfc(-x / std::f64::consts::SQRT_2)
}

/// The standard normal density.
fn normal_pdf(x: f64) -> f64 {
    (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt()
}

/// The bottleneck device and the plan's cost: the largest device total (the first device on ties).
#[must_use]
pub fn bottleneck(totals_ms: &[f64]) -> (usize, f64) {
    totals_ms
        .iter()
        .copied()
        .enumerate()
        .fold((0, f64::NEG_INFINITY), |best, (i, c)| if c > best.1 { (i, c) } else { best })
}

#[cfg(test)]
mod tests {
    use rand::{RngExt, SeedableRng, rngs::ChaCha8Rng};

    use super::*;

    /// A standard normal draw (Box–Muller).
    fn standard_normal(rng: &mut ChaCha8Rng) -> f64 {
        let (u1, u2): (f64, f64) = (rng.random::<f64>().max(1e-300), rng.random());
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// The mean over `draws` seeded draws of the largest `total + sd·compute·Z` (Box–Muller normals).
    fn monte_carlo_max(compute: &[f64], totals: &[f64], sd: f64, draws: usize) -> f64 {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut sum = 0.0;
        for _ in 0..draws {
            let mut top = f64::NEG_INFINITY;
            for (c, t) in compute.iter().zip(totals) {
                top = top.max(t + sd * c * standard_normal(&mut rng));
            }
            sum += top;
        }
        sum / draws as f64
    }

    #[test]
    fn expected_max_is_the_plain_maximum_without_error_or_with_one_device() {
        let (c, t) = ([4.0, 6.0, 5.0], [7.0, 9.0, 8.5]);
        assert_eq!(expected_max_ms(&c, &t, 0.0, &[]), 9.0);
        assert_eq!(expected_max_ms(&c, &t, f64::NAN, &[]), 9.0);
        assert_eq!(expected_max_ms(&[6.0], &[9.0], 0.3, &[]), 9.0);
        assert_eq!(expected_max_ms(&[], &[], 0.3, &[]), f64::NEG_INFINITY);
    }

    #[test]
    fn two_equal_devices_exceed_their_prediction_by_sd_over_root_pi() {
        // The largest of two independent N(μ, s²) has mean μ + s/√π; Clark's recursion is exact for two.
        let (sd, c) = (0.2, 10.0);
        let got = expected_max_ms(&[c, c], &[12.0, 12.0], sd, &[]);
        let want = 12.0 + sd * c / std::f64::consts::PI.sqrt();
        assert!((got - want).abs() < 1e-9, "{got} vs {want}");
    }

    #[test]
    fn expected_max_agrees_with_sampling_and_rewards_slack() {
        // Eight devices, the top four within 5% of each other: Clark's approximation within 1% of 200,000
        // draws, and well above the plain maximum.
        let compute = [10.0, 9.8, 9.6, 9.5, 7.0, 6.0, 4.0, 2.0];
        let totals = [12.0, 11.9, 11.7, 11.4, 9.0, 8.0, 6.5, 4.0];
        let sd = 0.16;
        let clark = expected_max_ms(&compute, &totals, sd, &[]);
        let mc = monte_carlo_max(&compute, &totals, sd, 200_000);
        assert!((clark / mc - 1.0).abs() < 0.01, "Clark {clark} vs sampled {mc}");
        assert!(clark > 12.0 * 1.08, "{clark}");
        // The same top device with the others far below it: barely above its prediction.
        let slack = [12.0, 6.0, 6.0, 6.0, 6.0, 6.0, 6.0, 4.0];
        let alone = expected_max_ms(&compute, &slack, sd, &[]);
        assert!((12.0..12.0 * 1.01).contains(&alone), "{alone}");
        // Monotone in the error.
        assert!(expected_max_ms(&compute, &totals, 0.08, &[]) < clark);
    }

    #[test]
    fn a_plan_priced_at_its_expected_slowest_device_says_so() {
        let devices = crate::task::Devices::uniform(4, 4 << 30).unwrap();
        let task = crate::task::sample_task(devices, 32, Some(40), 3, 0).unwrap();
        let plain = crate::cost::ModelChoice::new("cpu-epyc-2t").build().unwrap();
        let ctx = crate::planners::PlanContext::new(plain.as_ref(), 1);
        let plan = crate::planners::planner("size").unwrap().build().plan(&task, &ctx).unwrap();
        let emax = crate::cost::ModelChoice { expected_max: true, ..crate::cost::ModelChoice::new("cpu-epyc-2t") }
            .build()
            .unwrap();
        assert!(emax.name().ends_with("+expected-max"), "{}", emax.name());
        let sd = emax.plan_error_sd().unwrap();
        assert!(sd > 0.05 && sd < 0.5, "{sd}");
        assert_eq!(plain.plan_error_sd(), None);
        let a = evaluate(&task, &plan, plain.as_ref(), CostDefinition::NeuroShard).unwrap();
        let b = evaluate(&task, &plan, emax.as_ref(), CostDefinition::NeuroShard).unwrap();
        assert!(b.cost_ms > a.cost_ms, "{} vs {}", b.cost_ms, a.cost_ms);
        let compute: Vec<f64> = a.devices.iter().map(|d| d.compute_ms).collect();
        let totals: Vec<f64> = a.devices.iter().map(|d| d.total_ms).collect();
        // `size` places whole tables: no two devices share one, so their errors are independent.
        assert!(plan.pieces().iter().all(|p| p.dim == task.tables[p.table_id].dim && p.rows.is_none()));
        assert!((b.cost_ms - expected_max_ms(&compute, &totals, sd, &[])).abs() < 1e-9);
        // Either way the report says what a measurement should read: the plain model keeps its maximum as
        // the cost and reports the expected slowest device beside it; priced by it, the two are one.
        assert_eq!(plain.measured_error_sd(), Some(sd));
        assert_eq!(a.expected_cost_ms, Some(b.cost_ms));
        assert_eq!(b.expected_cost_ms, Some(b.cost_ms));
        let analytical = crate::cost::ModelChoice::new("analytical").build().unwrap();
        assert_eq!(
            evaluate(&task, &plan, analytical.as_ref(), CostDefinition::NeuroShard).unwrap().expected_cost_ms,
            None
        );
    }

    /// The mean over `draws` seeded draws of the largest `total + sd·compute·e`, where device `i`'s error
    /// `e` is `Σ_t w_it·z_t / |w_i|` over one standard normal `z_t` per table: exactly the correlation
    /// [`error_correlation`] gives (the cosine of the shares).
    fn monte_carlo_correlated(compute: &[f64], totals: &[f64], sd: f64, shares: &[TableShares], draws: usize) -> f64 {
        let tables = shares.iter().flatten().map(|&(t, _)| t + 1).max().unwrap_or(0);
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let mut z = vec![0.0; tables];
        let mut sum = 0.0;
        for _ in 0..draws {
            for v in &mut z {
                *v = standard_normal(&mut rng);
            }
            let mut top = f64::NEG_INFINITY;
            for ((c, t), s) in compute.iter().zip(totals).zip(shares) {
                let norm = shares_norm(s);
                let e = s.iter().map(|&(k, w)| w * z[k]).sum::<f64>() / norm;
                top = top.max(t + sd * c * e);
            }
            sum += top;
        }
        sum / draws as f64
    }

    #[test]
    fn devices_holding_the_same_tables_err_together() {
        let (sd, c) = (0.2, 10.0);
        // Two devices each holding a quarter of the same two tables (a row-wise plan): one error, no
        // rise above the prediction; two devices sharing nothing: the independent maximum.
        let same = table_shares(2, [(0, 0, 3.0), (0, 1, 1.0), (1, 0, 3.0), (1, 1, 1.0)]);
        assert_eq!(expected_max_ms(&[c, c], &[12.0, 12.0], sd, &same), 12.0);
        let apart = table_shares(2, [(0, 0, 3.0), (1, 1, 1.0)]);
        let independent = expected_max_ms(&[c, c], &[12.0, 12.0], sd, &[]);
        assert_eq!(expected_max_ms(&[c, c], &[12.0, 12.0], sd, &apart), independent);
        // Pieces of one table on one device add up; out-of-range devices are ignored.
        let summed = table_shares(2, [(0, 1, 1.0), (0, 0, 2.0), (0, 1, 0.5), (5, 0, 1.0)]);
        assert_eq!(summed, vec![vec![(0, 2.0), (1, 1.5)], vec![]]);
        // Half the weight shared: between the two.
        let half = table_shares(2, [(0, 0, 1.0), (0, 1, 1.0), (1, 0, 1.0), (1, 2, 1.0)]);
        assert!(
            (error_correlation(&half[0], shares_norm(&half[0]), &half[1], shares_norm(&half[1])) - 0.5).abs() < 1e-12
        );
        let between = expected_max_ms(&[c, c], &[12.0, 12.0], sd, &half);
        assert!(12.0 < between && between < independent, "{between} vs {independent}");
        // Exact for two devices: E max = μ + s·√(1 − ρ)/√π for two N(μ, s²) of correlation ρ.
        let want = 12.0 + sd * c * 0.5f64.sqrt() / std::f64::consts::PI.sqrt();
        assert!((between - want).abs() < 1e-9, "{between} vs {want}");
    }

    #[test]
    fn correlated_expected_max_agrees_with_sampling() {
        // Eight devices near the top: a row-wise table on the first four, whole tables and a column-split
        // table elsewhere. Clark's recursion within 1.5% of 200,000 draws, and below the independent value.
        let compute = [10.0, 9.8, 9.6, 9.5, 9.0, 8.0, 6.0, 3.0];
        let totals = [12.0, 11.9, 11.7, 11.6, 11.4, 10.5, 8.0, 4.0];
        let sd = 0.16;
        let mut pieces = Vec::new();
        for d in 0..4 {
            pieces.extend([(d, 0, 4.0), (d, 1 + d, 2.0)]);
        }
        pieces.extend([(4, 5, 3.0), (4, 6, 1.0), (5, 6, 1.0), (5, 7, 2.0), (6, 8, 1.0), (7, 9, 1.0)]);
        let shares = table_shares(8, pieces);
        let clark = expected_max_ms(&compute, &totals, sd, &shares);
        let mc = monte_carlo_correlated(&compute, &totals, sd, &shares, 200_000);
        assert!((clark / mc - 1.0).abs() < 0.015, "Clark {clark} vs sampled {mc}");
        assert!(clark < expected_max_ms(&compute, &totals, sd, &[]) - 0.05, "{clark}");
        assert!(clark > 12.0);
    }
}
