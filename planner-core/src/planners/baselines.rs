//! The seed papers' baselines (SPEC section 6): random placement and four greedy heuristics.
//!
//! Greedy: sort tables by a scalar cost, largest first (ties: larger size, then lower index); put
//! each on the device with the smallest running cost sum among devices where it fits in memory
//! (ties: less memory used, then lower index). Costs: size = bytes; dim = dim; lookup = dim ×
//! pooling factor; size-lookup = dim × pooling factor × log10(rows) (the authors' code; the paper's
//! text says × size). Sizes (weights plus optimizer state) sort; the task's [`crate::MemoryRule`]
//! decides where a table fits. Unlike the authors' code, which silently appended a table that fits
//! nowhere to the last device, a table that fits nowhere is an [`Error::NoFit`].

use rand::{RngExt, SeedableRng, rngs::ChaCha8Rng};

use super::{PlanContext, Planner};
use crate::error::{Error, Result};
use crate::memory::fits;
use crate::plan::Plan;
use crate::table::TableSpec;
use crate::task::Task;

/// Uniformly random device per table; memory is not checked (as in the seeds).
pub struct RandomPlanner;

impl Planner for RandomPlanner {
    fn name(&self) -> &'static str {
        "random"
    }

    fn plan(&self, task: &Task, ctx: &PlanContext<'_>) -> Result<Plan> {
        let mut rng = ChaCha8Rng::seed_from_u64(ctx.seed);
        let n = task.devices.count();
        let devices: Vec<usize> = task.tables.iter().map(|_| rng.random_range(0..n)).collect();
        Plan::unsplit(task, &devices)
    }
}

/// The scalar a greedy baseline sorts and balances by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GreedyKey {
    /// Table bytes.
    Size,
    /// Table dim.
    Dim,
    /// dim × pooling factor.
    Lookup,
    /// dim × pooling factor × log10(rows).
    SizeLookup,
}

impl GreedyKey {
    /// The cost of one table under this key.
    #[must_use]
    pub fn cost(self, t: &TableSpec) -> f64 {
        match self {
            Self::Size => t.size_bytes() as f64,
            Self::Dim => f64::from(t.dim),
            Self::Lookup => f64::from(t.dim) * t.pooling_factor,
            Self::SizeLookup => f64::from(t.dim) * t.pooling_factor * (t.rows as f64).log10(),
        }
    }
}

/// A greedy baseline.
pub struct Greedy(pub GreedyKey);

impl Planner for Greedy {
    fn name(&self) -> &'static str {
        match self.0 {
            GreedyKey::Size => "size",
            GreedyKey::Dim => "dim",
            GreedyKey::Lookup => "lookup",
            GreedyKey::SizeLookup => "size-lookup",
        }
    }

    fn plan(&self, task: &Task, _ctx: &PlanContext<'_>) -> Result<Plan> {
        let costs: Vec<f64> = task.tables.iter().map(|t| self.0.cost(t)).collect();
        let sizes: Vec<u64> = task.tables.iter().map(TableSpec::size_bytes).collect();
        let order = super::largest_first(&costs, &sizes);
        let usable = task.usable_bytes()?;
        let mut cost_sum = vec![0.0f64; usable.len()];
        // Bytes under the task's memory rule; only ever raised to at most `usable`, so never past u64.
        let mut used = vec![0u64; usable.len()];
        let mut assignment = vec![0usize; task.tables.len()];
        for t in order {
            let table = &task.tables[t];
            let need = task.block_bytes(table, table.rows, table.dim)?;
            let best = (0..usable.len())
                .filter(|&d| fits(used[d], need, usable[d]))
                .min_by(|&a, &b| cost_sum[a].total_cmp(&cost_sum[b]).then(used[a].cmp(&used[b])).then(a.cmp(&b)));
            let Some(d) = best else {
                let best_free = usable.iter().zip(&used).map(|(c, u)| c.saturating_sub(*u)).max().unwrap_or(0);
                return Err(Error::NoFit { table: table.name.clone(), need_bytes: need, best_free_bytes: best_free });
            };
            cost_sum[d] += costs[t];
            used[d] += need;
            assignment[t] = d;
        }
        Plan::unsplit(task, &assignment)
    }
}
