//! How good can a plan be? A lower bound on the cost of any plan of a task, and an exact search for
//! small tasks.
//!
//! ## The lower bound ([`lower_bound`])
//! Write `c(t, w)` for the compute of a lone piece of `w` columns of table `t` and `m(x)` for the
//! comm (backward + forward, no delays) of a device whose dim sum is `x` while the others hold
//! nothing. The plans bounded are the column-wise ones (table-wise, dyadic halvings, equal blocks):
//! every piece of `t` has a width `w` that divides `t`'s dim, is a multiple of 4 and fits a device's
//! usable memory under the task's memory rule.
//! * **Piece bound.** Some device holds a piece of `t`; its total is at least `c(t, w) + m(w)` for
//!   that piece's width, so the step time is at least `max_t min_w (c(t, w) + m(w))`.
//! * **Work bound** (additive compute only). The step time is at least the mean device total,
//!   `(Σ_r compute_r + Σ_r comm_r) / D`. With additive compute, a table split into widths `w_i`
//!   (`Σ w_i = dim`) costs `Σ_i w_i · c(t, w_i)/w_i ≥ dim · min_w c(t, w)/w`; with comm linear in a
//!   device's own dim sum, `Σ_r comm_r = m(Σ_t dim_t)` whatever the placement. So the step time is at
//!   least `(Σ_t dim_t · min_w c(t, w)/w + m(Σ_t dim_t)) / D`.
//!
//! Assumptions, stated plainly: the piece bound needs a set's compute to be at least that of any of
//! its pieces and a device's comm to grow with its own dim sum, not shrink with the others' or with
//! start delays; the work bound needs exactly additive compute and linear comm. All of this holds for
//! [`crate::cost::AnalyticalModel`] (sums of per-piece terms; comm `∝` the device's dim sum, blind to
//! delays), so there the bound is proven. A learned model guarantees none of it — fused sets are
//! sub-additive, which is why the work bound is only used when [`CostModel::compute_is_additive`]
//! says so — and for it the piece bound is an estimate resting on monotonicity, which the trained
//! profiles show but cannot prove. Row-wise pieces are outside the bounded plans.
//!
//! ## The exact search ([`exact`])
//! Branch and bound over the device of every piece, for tasks of at most 12 tables, each table
//! optionally halved into `2^k` equal pieces for `k ≤ max_split_depth`. Pieces are placed largest
//! predicted compute first; a partial plan is pruned when `max_r (compute_r + m_r)` of what is already
//! placed reaches the best cost found (valid under the same monotonicity, hence exact for the
//! analytical model); with equal usable memory, devices are interchangeable and a piece opens at
//! most one empty device. It returns the optimum within that space.

use crate::cost::{CostDefinition, CostModel, PieceRef};
use crate::error::{Error, Result};
use crate::plan::{Piece, Plan};
use crate::planners::search::{DeviceSet, Evaluator, FastMap};
use crate::task::Task;

/// A lower bound on a task's cost and its parts.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct LowerBound {
    /// `max(piece_bound_ms, work_bound_ms)`.
    pub cost_ms: f64,
    /// `max_t min_w (c(t, w) + m(w))`.
    pub piece_bound_ms: f64,
    /// The mean-device bound, when the model's compute is additive.
    pub work_bound_ms: Option<f64>,
    /// Whether the bound is proven for this model (additive compute) rather than an estimate.
    pub proven: bool,
}

/// Widths a piece of `t` may have in a column-wise plan and that fit the largest usable memory
/// (`max_usable`, under the task's memory rule).
fn widths(task: &Task, t: usize, max_usable: u64) -> Result<Vec<u32>> {
    let table = &task.tables[t];
    let all: Vec<u32> = (1..=table.dim / 4).map(|k| 4 * k).filter(|&w| table.dim.is_multiple_of(w)).collect();
    let mut fit = Vec::with_capacity(all.len());
    for w in all {
        if task.block_bytes(table, table.rows, w)? <= max_usable {
            fit.push(w);
        }
    }
    if fit.is_empty() {
        return Err(Error::NoFit {
            table: table.name.clone(),
            need_bytes: task.block_bytes(table, table.rows, 4)?,
            best_free_bytes: max_usable,
        });
    }
    Ok(fit)
}

/// Comm of one device holding dim sum `x` while the others hold nothing (backward + forward, no delays;
/// on several hosts, the network phase of a host holding only `x`).
fn comm_one(model: &dyn CostModel, task: &Task, x: f64) -> Result<f64> {
    let devices = task.devices.count();
    let mut dims = vec![0.0; devices];
    dims[0] = x;
    let t = crate::cost::device_times(
        model,
        &vec![0.0; devices],
        &dims,
        &[],
        CostDefinition::FourPhase,
        task.topology.as_ref(),
    )?;
    Ok(t.total_ms.first().copied().unwrap_or(0.0))
}

/// A lower bound on the cost of any column-wise plan of `task` under `model` (see the module doc for
/// its derivation and when it is proven).
pub fn lower_bound(task: &Task, model: &dyn CostModel) -> Result<LowerBound> {
    let n_dev = task.devices.count();
    let max_usable = task.usable_bytes()?.into_iter().max().unwrap_or(0);
    let mut piece_bound = 0.0f64;
    let mut work = 0.0;
    let mut total_dims = 0.0;
    for (t, table) in task.tables.iter().enumerate() {
        let mut best_piece = f64::INFINITY;
        let mut best_per_col = f64::INFINITY;
        for w in widths(task, t, max_usable)? {
            let c = model.compute_ms(&[PieceRef::whole(table, w)])?;
            best_piece = best_piece.min(c + comm_one(model, task, f64::from(w))?);
            best_per_col = best_per_col.min(c / f64::from(w));
        }
        piece_bound = piece_bound.max(best_piece);
        work += f64::from(table.dim) * best_per_col;
        total_dims += f64::from(table.dim);
    }
    let additive = model.compute_is_additive();
    let work_bound = if additive { Some((work + comm_one(model, task, total_dims)?) / n_dev as f64) } else { None };
    Ok(LowerBound {
        cost_ms: work_bound.map_or(piece_bound, |w| w.max(piece_bound)),
        piece_bound_ms: piece_bound,
        work_bound_ms: work_bound,
        proven: additive,
    })
}

/// Limits of the exact search.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ExactConfig {
    /// Most tables accepted.
    pub max_tables: usize,
    /// Each table may be halved `k` times into equal pieces for `k` up to this.
    pub max_split_depth: u32,
    /// Most search nodes before giving up on proving optimality (the best plan found is returned).
    pub max_nodes: u64,
    /// Cost definition.
    pub definition: CostDefinition,
}

impl Default for ExactConfig {
    fn default() -> Self {
        Self { max_tables: 12, max_split_depth: 0, max_nodes: 50_000_000, definition: CostDefinition::NeuroShard }
    }
}

/// What the exact search found.
#[derive(Debug, Clone, PartialEq)]
pub struct ExactResult {
    /// The best plan.
    pub plan: Plan,
    /// Its cost.
    pub cost_ms: f64,
    /// Search nodes visited.
    pub nodes: u64,
    /// Whether the whole space was searched (the plan is optimal within it).
    pub complete: bool,
}

struct Bnb<'t> {
    ev: Evaluator<'t>,
    symmetric: bool,
    comm: FastMap<u64, f64>,
    best_cost: f64,
    best: Option<Vec<(usize, u32, u32, usize)>>,
    nodes: u64,
    max_nodes: u64,
}

impl Bnb<'_> {
    fn comm(&mut self, model: &dyn CostModel, x: u64) -> Result<f64> {
        if let Some(&c) = self.comm.get(&x) {
            return Ok(c);
        }
        let c = comm_one(model, self.ev.task, x as f64)?;
        self.comm.insert(x, c);
        Ok(c)
    }

    #[allow(clippy::too_many_arguments)]
    fn dfs(
        &mut self,
        model: &dyn CostModel,
        pieces: &[(usize, u32, u32)],
        ids: &[u32],
        order: &[usize],
        k: usize,
        sets: &mut Vec<DeviceSet>,
        compute: &mut Vec<f64>,
        devices: &mut Vec<usize>,
    ) -> Result<()> {
        self.nodes += 1;
        if self.nodes > self.max_nodes {
            return Ok(());
        }
        if k == order.len() {
            let cost = self.ev.plan_cost(sets, compute)?;
            if cost < self.best_cost {
                self.best_cost = cost;
                self.best = Some(pieces.iter().zip(devices.iter()).map(|(&(t, o, w), &d)| (t, o, w, d)).collect());
            }
            return Ok(());
        }
        let i = order[k];
        let id = ids[i];
        let mut opened_empty = false;
        for d in 0..sets.len() {
            if !self.ev.fits(&sets[d], d, id) {
                continue;
            }
            if self.symmetric && sets[d].ids.is_empty() {
                if opened_empty {
                    continue;
                }
                opened_empty = true;
            }
            let c = self.ev.set_cost_with(&sets[d], id)?;
            let mut lb = 0.0f64;
            for r in 0..sets.len() {
                let (cr, dr) =
                    if r == d { (c, sets[r].dims + u64::from(pieces[i].2)) } else { (compute[r], sets[r].dims) };
                lb = lb.max(cr + self.comm(model, dr)?);
            }
            if lb >= self.best_cost {
                continue;
            }
            let old = compute[d];
            self.ev.add(&mut sets[d], id);
            compute[d] = c;
            devices[i] = d;
            self.dfs(model, pieces, ids, order, k + 1, sets, compute, devices)?;
            self.ev.remove(&mut sets[d], id);
            compute[d] = old;
        }
        Ok(())
    }
}

/// The best column-wise plan of a small task (see the module doc).
pub fn exact(task: &Task, model: &dyn CostModel, config: &ExactConfig) -> Result<ExactResult> {
    let n = task.tables.len();
    if n > config.max_tables {
        return Err(Error::field("exact search", "tables", n, format!("at most {}", config.max_tables)));
    }
    let ev = Evaluator::new(task, model, config.definition, true)?;
    let usable = ev.usable();
    let symmetric = usable.iter().all(|&c| c == usable[0]);
    let mut bnb = Bnb {
        ev,
        symmetric,
        comm: FastMap::default(),
        best_cost: f64::INFINITY,
        best: None,
        nodes: 0,
        max_nodes: config.max_nodes,
    };
    // Split levels per table (odometer over every combination).
    let max_level: Vec<u32> = task
        .tables
        .iter()
        .map(|t| (0..=config.max_split_depth).take_while(|&k| t.dim % (4 << k) == 0).last().unwrap_or(0))
        .collect();
    let mut level = vec![0u32; n];
    loop {
        let mut pieces = Vec::new();
        for (t, table) in task.tables.iter().enumerate() {
            let w = table.dim >> level[t];
            for j in 0..(1u32 << level[t]) {
                pieces.push((t, j * w, w));
            }
        }
        let want: Vec<(usize, u32, u64)> = pieces.iter().map(|&(t, _, w)| (t, w, task.tables[t].rows)).collect();
        let ids = bnb.ev.register(&want)?;
        let mut single = Vec::with_capacity(ids.len());
        for &id in &ids {
            single.push(bnb.ev.single_cost(id)?);
        }
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by(|&a, &b| single[b].total_cmp(&single[a]).then(a.cmp(&b)));
        let n_dev = task.devices.count();
        let mut sets = vec![bnb.ev.empty_set(); n_dev];
        // The empty set's compute (a learned head need not give 0 for it).
        let empty_ms = bnb.ev.set_cost(&sets[0])?;
        let mut compute = vec![empty_ms; n_dev];
        let mut devices = vec![0; ids.len()];
        bnb.dfs(model, &pieces, &ids, &order, 0, &mut sets, &mut compute, &mut devices)?;
        // Next split combination.
        let mut t = 0;
        while t < n && level[t] == max_level[t] {
            level[t] = 0;
            t += 1;
        }
        if t == n {
            break;
        }
        level[t] += 1;
    }
    let complete = bnb.nodes <= bnb.max_nodes;
    let Some(best) = bnb.best else {
        return Err(Error::NoPlan {
            planner: "exact".into(),
            reason: format!(
                "no placement of the {n} tables fits the usable memory (split depth {})",
                config.max_split_depth
            ),
        });
    };
    let plan = Plan::new(task, best.iter().map(|&(t, o, w, d)| Piece::cols(t, o, w, d)).collect())?;
    Ok(ExactResult { plan, cost_ms: bnb.best_cost, nodes: bnb.nodes, complete })
}
