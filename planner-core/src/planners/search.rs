//! The evaluation machinery searches share (NeuroShard, refinement, the exact search): distinct
//! pieces priced once, device sets as sorted piece ids plus a fixed-point vector sum, a set-cost cache
//! keyed by the multiset of pieces, and a memo of comm evaluations.
//!
//! With a model that offers [`IncrementalCompute`], a set's compute is the head over the sum of its
//! pieces' vectors: pricing "set + one piece" costs one vector addition and one head evaluation. With
//! any other model the set is handed to [`CostModel::compute_ms`], and a cache keyed by the set's
//! multiset of pieces is what keeps the search affordable (an incremental model is not cached: its head
//! call costs less than hashing the key). Either way the cost of a set depends only on its multiset of
//! pieces, so turning the cache off changes speed, never a result.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use super::SearchStats;
use crate::cost::incremental::{FIXED_SCALE, add_into, to_fixed};
use crate::cost::{
    CostDefinition, CostModel, IncrementalCompute, PieceRef, TableShares, device_times, piece_weight, plan_cost,
    table_shares,
};
use crate::error::{Error, Result};
use crate::task::Task;

/// A small multiplicative hasher for integer keys (the std `SipHash` costs more than a head call).
#[derive(Default, Clone, Copy)]
pub(crate) struct MixHasher(u64);

impl MixHasher {
    fn add(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for MixHasher {
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            self.add(u64::from_le_bytes(b));
        }
    }

    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<MixHasher>>;
pub(crate) type FastSet<K> = HashSet<K, BuildHasherDefault<MixHasher>>;

/// A distinct piece as the cost model sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PieceInfo {
    pub table: usize,
    pub dim: u32,
    pub rows: u64,
    /// Bytes counted against a device's usable memory under the task's rule (fit decisions).
    pub bytes: u64,
    /// Weights plus optimizer state (rankings and tie-breaks of pieces, as in the seeds).
    pub size_bytes: u64,
    /// Its cache misses per step in fixed point (`crate::tier`; 0 for a piece of a table in HBM).
    pub miss: i64,
}

/// The pieces on one device: sorted ids, their vector sum (incremental models), bytes under the
/// task's memory rule (a `u128`, so an overfull device cannot wrap) and dim sum.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeviceSet {
    pub ids: Vec<u32>,
    pub sum: Vec<i64>,
    pub bytes: u128,
    pub dims: u64,
    /// Its pieces' cache misses, fixed point.
    pub miss: i64,
}

/// Prices sets and plans for one task under one model.
pub(crate) struct Evaluator<'a> {
    pub task: &'a Task,
    model: &'a dyn CostModel,
    inc: Option<&'a dyn IncrementalCompute>,
    width: usize,
    definition: CostDefinition,
    index: FastMap<(usize, u32, u64), u32>,
    pub pieces: Vec<PieceInfo>,
    usable: Vec<u64>,
    vectors: Vec<i64>,
    use_cache: bool,
    set_cache: FastMap<Vec<u32>, f64>,
    comm_memo: FastMap<Vec<u64>, (usize, f64)>,
    /// Whether [`Evaluator::plan_cost`] memoises plans (a search that revisits plans); a local search,
    /// whose plans are nearly all new, turns it off ([`Evaluator::without_plan_memo`]).
    memo_plans: bool,
    key: Vec<u32>,
    sum: Vec<i64>,
    pub stats: SearchStats,
}

impl<'a> Evaluator<'a> {
    /// An evaluator of `task`'s plans; the rule's reservation must fit every cap
    /// ([`Task::usable_bytes`]).
    pub fn new(task: &'a Task, model: &'a dyn CostModel, definition: CostDefinition, use_cache: bool) -> Result<Self> {
        let inc = model.incremental().filter(|i| i.vector_len() > 0);
        let width = inc.map_or(0, IncrementalCompute::vector_len);
        // With an incremental model a set's compute is one head evaluation over a vector sum, cheaper
        // than hashing the set's pieces to look it up (measured: the cache's keys, hashing and memory
        // were two thirds of a 200-table search, and its entries most of a 500-table search's memory).
        // The cache is kept for models that price a set from its pieces.
        let use_cache = use_cache && inc.is_none();
        Ok(Self {
            task,
            model,
            inc,
            width,
            definition,
            index: FastMap::default(),
            pieces: Vec::new(),
            usable: task.usable_bytes()?,
            vectors: Vec::new(),
            use_cache,
            set_cache: FastMap::default(),
            comm_memo: FastMap::default(),
            memo_plans: true,
            key: Vec::new(),
            sum: vec![0; width],
            stats: SearchStats::default(),
        })
    }

    /// The same evaluator without the plan memo (its keys are two numbers per device: a local search
    /// at hundreds of devices would fill memory with plans it never sees again).
    #[must_use]
    pub fn without_plan_memo(mut self) -> Self {
        self.memo_plans = false;
        self
    }

    /// Number of devices.
    pub fn devices(&self) -> usize {
        self.task.devices.count()
    }

    /// Bytes pieces may use on every device under the task's memory rule.
    pub fn usable(&self) -> &[u64] {
        &self.usable
    }

    /// Whether piece `id` fits on device `device` holding `set`.
    pub fn fits(&self, set: &DeviceSet, device: usize, id: u32) -> bool {
        set.bytes + u128::from(self.pieces[id as usize].bytes) <= u128::from(self.usable[device])
    }

    /// Usable bytes left on device `device` holding `set` (0 when it is full or overfull).
    pub fn free(&self, set: &DeviceSet, device: usize) -> u64 {
        u64::try_from(u128::from(self.usable[device]).saturating_sub(set.bytes)).unwrap_or(0)
    }

    /// Bytes of `set` over device `device`'s usable memory.
    pub fn over(&self, set: &DeviceSet, device: usize) -> u128 {
        set.bytes.saturating_sub(u128::from(self.usable[device]))
    }

    /// Registers pieces `(table, dim, rows)` not seen yet (one batched model call) and returns the ids of all.
    pub fn register(&mut self, wanted: &[(usize, u32, u64)]) -> Result<Vec<u32>> {
        let mut new: Vec<(usize, u32, u64)> = Vec::new();
        for w in wanted {
            if !self.index.contains_key(w) && !new.contains(w) {
                new.push(*w);
            }
        }
        if !new.is_empty() {
            if let Some(inc) = self.inc {
                let refs: Vec<PieceRef<'_>> =
                    new.iter().map(|&(t, dim, rows)| PieceRef { table: &self.task.tables[t], dim, rows }).collect();
                let v = inc.piece_vectors(&refs)?;
                if v.len() != new.len() * self.width {
                    return Err(Error::CostModel {
                        model: self.model.name(),
                        message: format!(
                            "{} piece vector values for {} pieces of width {}",
                            v.len(),
                            new.len(),
                            self.width
                        ),
                    });
                }
                let name = self.model.name();
                for x in v {
                    self.vectors.push(to_fixed(&name, x)?);
                }
            }
            let link = crate::tier::host_link_bw(self.task);
            let name = self.model.name();
            for &(t, dim, rows) in &new {
                let id = self.pieces.len() as u32;
                let table = &self.task.tables[t];
                let bytes = self.task.block_bytes(table, rows, dim)?;
                let size_bytes = table.block_bytes(rows, dim);
                let miss_ms = crate::tier::set_miss_ms(&[PieceRef { table, dim, rows }], self.model, link)?;
                let miss = to_fixed(&name, miss_ms)?;
                self.pieces.push(PieceInfo { table: t, dim, rows, bytes, size_bytes, miss });
                self.index.insert((t, dim, rows), id);
                self.stats.pieces += 1;
            }
        }
        Ok(wanted.iter().map(|w| self.index.get(w).copied().unwrap_or(0)).collect())
    }

    fn vector(&self, id: u32) -> &[i64] {
        let i = id as usize * self.width;
        &self.vectors[i..i + self.width]
    }

    /// An empty device set.
    pub fn empty_set(&self) -> DeviceSet {
        DeviceSet { ids: Vec::new(), sum: vec![0; self.width], bytes: 0, dims: 0, miss: 0 }
    }

    /// Adds piece `id` to `set`.
    pub fn add(&self, set: &mut DeviceSet, id: u32) {
        let pos = set.ids.partition_point(|&x| x <= id);
        set.ids.insert(pos, id);
        if self.width > 0 {
            add_into(&mut set.sum, self.vector(id));
        }
        let p = &self.pieces[id as usize];
        set.bytes += u128::from(p.bytes);
        set.dims += u64::from(p.dim);
        set.miss += p.miss;
    }

    /// Removes one piece `id` from `set` (no-op if absent).
    pub fn remove(&self, set: &mut DeviceSet, id: u32) {
        if let Some(pos) = set.ids.iter().position(|&x| x == id) {
            set.ids.remove(pos);
            if self.width > 0 {
                crate::cost::incremental::sub_from(&mut set.sum, self.vector(id));
            }
            let p = &self.pieces[id as usize];
            set.bytes -= u128::from(p.bytes);
            set.dims -= u64::from(p.dim);
            set.miss -= p.miss;
        }
    }

    /// Compute of the set `ids` (sorted) whose vector sum is in `self.sum` when incremental.
    fn compute_key(&mut self) -> Result<f64> {
        if self.use_cache
            && let Some(&c) = self.set_cache.get(self.key.as_slice())
        {
            self.stats.set_cache_hits += 1;
            return Ok(c);
        }
        self.stats.set_cache_misses += 1;
        let miss = self.key.iter().map(|&id| self.pieces[id as usize].miss).sum::<i64>() as f64 / FIXED_SCALE;
        let c = miss
            + if let Some(inc) = self.inc {
                inc.head_ms(&self.sum)
            } else {
                let refs: Vec<PieceRef<'_>> = self
                    .key
                    .iter()
                    .map(|&id| {
                        let p = &self.pieces[id as usize];
                        PieceRef { table: &self.task.tables[p.table], dim: p.dim, rows: p.rows }
                    })
                    .collect();
                self.model.compute_ms(&refs)?
            };
        if self.use_cache {
            self.set_cache.insert(self.key.clone(), c);
        }
        Ok(c)
    }

    /// Compute of `set`.
    pub fn set_cost(&mut self, set: &DeviceSet) -> Result<f64> {
        if let (Some(inc), false) = (self.inc, self.use_cache) {
            return Ok(inc.head_ms(&set.sum) + set.miss as f64 / FIXED_SCALE);
        }
        self.key.clear();
        self.key.extend_from_slice(&set.ids);
        if self.width > 0 {
            self.sum.copy_from_slice(&set.sum);
        }
        self.compute_key()
    }

    /// Compute of `set` plus piece `extra`.
    pub fn set_cost_with(&mut self, set: &DeviceSet, extra: u32) -> Result<f64> {
        if let (Some(inc), false) = (self.inc, self.use_cache) {
            let i = extra as usize * self.width;
            let miss = (set.miss + self.pieces[extra as usize].miss) as f64 / FIXED_SCALE;
            return Ok(inc.head_ms_with(&set.sum, &self.vectors[i..i + self.width], &mut self.sum) + miss);
        }
        self.key.clear();
        let pos = set.ids.partition_point(|&x| x <= extra);
        self.key.extend_from_slice(&set.ids[..pos]);
        self.key.push(extra);
        self.key.extend_from_slice(&set.ids[pos..]);
        if self.width > 0 {
            let i = extra as usize * self.width;
            for ((s, a), b) in self.sum.iter_mut().zip(&set.sum).zip(&self.vectors[i..i + self.width]) {
                *s = a + b;
            }
        }
        self.compute_key()
    }

    /// Compute of the single piece `id`.
    pub fn single_cost(&mut self, id: u32) -> Result<f64> {
        let set = self.empty_set();
        self.set_cost_with(&set, id)
    }

    /// The plan's cost when device `d` holds `sets[d]` at compute `compute[d]` (SPEC section 1, this
    /// evaluator's definition).
    pub fn plan_cost(&mut self, sets: &[DeviceSet], compute: &[f64]) -> Result<f64> {
        let sets: Vec<&DeviceSet> = sets.iter().collect();
        Ok(self.plan_times(&sets, compute)?.1)
    }

    /// `(device, table, dim)` of the row pieces of `sets` (device `d` holding `sets[d]`) when the task has
    /// several hosts (the network prices them: [`crate::topology::Topology::network_dims`]); empty
    /// otherwise, where they change nothing.
    fn row_pieces(&self, sets: &[&DeviceSet]) -> Vec<(usize, usize, u32)> {
        if !self.task.topology.as_ref().is_some_and(crate::topology::Topology::is_multi_host) {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (d, set) in sets.iter().enumerate() {
            for &id in &set.ids {
                let p = &self.pieces[id as usize];
                if p.rows < self.task.tables[p.table].rows {
                    out.push((d, p.table, p.dim));
                }
            }
        }
        out
    }

    /// What each device's compute is made of, for a model that prices the expected slowest device
    /// ([`crate::cost::table_shares`]); empty for one that does not.
    fn shares(&self, sets: &[&DeviceSet]) -> Vec<TableShares> {
        if self.model.plan_error_sd().is_none() {
            return Vec::new();
        }
        table_shares(
            sets.len(),
            sets.iter().enumerate().flat_map(|(d, set)| {
                set.ids.iter().map(move |&id| {
                    let p = &self.pieces[id as usize];
                    (d, p.table, piece_weight(&self.task.tables[p.table], p.dim, p.rows))
                })
            }),
        )
    }

    /// The bottleneck device and the plan's cost when device `d` holds `sets[d]` at compute `compute[d]`.
    pub fn plan_times(&mut self, sets: &[&DeviceSet], compute: &[f64]) -> Result<(usize, f64)> {
        self.stats.plan_evaluations += 1;
        let dims: Vec<u64> = sets.iter().map(|s| s.dims).collect();
        let row_pieces = self.row_pieces(sets);
        let shares = self.shares(sets);
        let price = |ev: &Self| -> Result<(usize, f64)> {
            let dims_f: Vec<f64> = dims.iter().map(|&d| d as f64).collect();
            let times =
                device_times(ev.model, compute, &dims_f, &row_pieces, ev.definition, ev.task.topology.as_ref())?;
            Ok(plan_cost(ev.model, compute, &times.total_ms, &shares))
        };
        // (The memo's key is compute and dims: a plan with row pieces, or priced at its expected slowest
        // device, which depends on what the devices hold, is priced afresh.)
        if !self.memo_plans || !row_pieces.is_empty() || !shares.is_empty() {
            return price(self);
        }
        let key: Vec<u64> = compute.iter().map(|c| c.to_bits()).chain(dims.iter().copied()).collect();
        if let Some(&c) = self.comm_memo.get(&key) {
            self.stats.plan_memo_hits += 1;
            return Ok(c);
        }
        let cost = price(self)?;
        self.comm_memo.insert(key, cost);
        Ok(cost)
    }

    /// Bytes over the usable memory, summed over devices.
    pub fn overflow(&self, sets: &[DeviceSet]) -> u128 {
        sets.iter().enumerate().map(|(d, s)| self.over(s, d)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_prices_the_expected_slowest_device_as_the_report_does() {
        // TorchRec's plan shares tables row-wise across devices: the correlated expected maximum is what
        // both the searches and `evaluate` price, to rounding.
        let devices = crate::task::Devices::uniform(4, 4 << 30).unwrap();
        let task = crate::task::sample_task(devices, 64, Some(30), 5, 0).unwrap();
        let emax = crate::cost::ModelChoice { expected_max: true, ..crate::cost::ModelChoice::new("cpu-epyc-2t") }
            .build()
            .unwrap();
        let ctx = crate::planners::PlanContext::new(emax.as_ref(), 1);
        let plan = crate::planners::planner("torchrec").unwrap().build().plan(&task, &ctx).unwrap();
        assert!(plan.pieces().iter().any(|p| p.rows.is_some()), "the test wants a plan with row pieces");
        let report = crate::cost::evaluate(&task, &plan, emax.as_ref(), CostDefinition::NeuroShard).unwrap();
        let mut ev = Evaluator::new(&task, emax.as_ref(), CostDefinition::NeuroShard, false).unwrap();
        let want: Vec<(usize, u32, u64)> =
            plan.pieces().iter().map(|p| (p.table_id, p.dim, p.row_count(task.tables[p.table_id].rows))).collect();
        let ids = ev.register(&want).unwrap();
        let mut sets = vec![ev.empty_set(); 4];
        for (p, &id) in plan.pieces().iter().zip(&ids) {
            ev.add(&mut sets[p.device], id);
        }
        let compute: Vec<f64> = sets.iter().map(|s| ev.set_cost(s).unwrap()).collect();
        let searched = ev.plan_cost(&sets, &compute).unwrap();
        assert!((searched / report.cost_ms - 1.0).abs() < 1e-9, "{searched} vs {}", report.cost_ms);
        // Independent errors would price it higher.
        let totals: Vec<f64> = report.devices.iter().map(|d| d.total_ms).collect();
        let independent = crate::cost::expected_max_ms(&compute, &totals, emax.plan_error_sd().unwrap(), &[]);
        assert!(report.cost_ms < independent, "{} vs {independent}", report.cost_ms);
    }
}
