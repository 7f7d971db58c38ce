//! The [`Planner`] trait and the one registry of planners by name (the CLI, the browser binding
//! and the benchmarks all read [`REGISTRY`]).

pub mod baselines;
pub mod torchrec;

use crate::cost::CostModel;
use crate::error::{Error, Result};
use crate::plan::Plan;
use crate::task::Task;

/// What a planner may use besides the task.
pub struct PlanContext<'a> {
    /// The cost model to plan against (baselines ignore it).
    pub cost_model: &'a dyn CostModel,
    /// Seed for any randomness; the same seed gives the same plan.
    pub seed: u64,
}

/// A sharding algorithm.
pub trait Planner {
    /// Registry name.
    fn name(&self) -> &'static str;
    /// Plans `task`. A planner that cannot place a table within memory returns [`Error::NoFit`]
    /// rather than an invalid plan (the random baseline excepted: it never checks memory, as in the
    /// seeds, and its report says whether the plan fits).
    fn plan(&self, task: &Task, ctx: &PlanContext<'_>) -> Result<Plan>;
}

/// A registered planner.
pub struct PlannerEntry {
    /// Name used on the command line and in reports.
    pub name: &'static str,
    /// One line on what it does.
    pub summary: &'static str,
    /// Whether it is one of the seed papers' baselines (improvements are reported over the best of them).
    pub is_seed_baseline: bool,
    make: fn() -> Box<dyn Planner>,
}

impl PlannerEntry {
    /// A fresh instance.
    #[must_use]
    pub fn build(&self) -> Box<dyn Planner> {
        (self.make)()
    }
}

/// Every planner, in report order.
pub const REGISTRY: &[PlannerEntry] = &[
    PlannerEntry {
        name: "random",
        summary: "uniformly random device per table, no memory check (seed baseline)",
        is_seed_baseline: true,
        make: || Box::new(baselines::RandomPlanner),
    },
    PlannerEntry {
        name: "size",
        summary: "greedy by table size onto the device with the smallest size sum (seed baseline)",
        is_seed_baseline: true,
        make: || Box::new(baselines::Greedy(baselines::GreedyKey::Size)),
    },
    PlannerEntry {
        name: "dim",
        summary: "greedy by dim onto the device with the smallest dim sum (seed baseline)",
        is_seed_baseline: true,
        make: || Box::new(baselines::Greedy(baselines::GreedyKey::Dim)),
    },
    PlannerEntry {
        name: "lookup",
        summary: "greedy by dim x pooling factor (seed baseline)",
        is_seed_baseline: true,
        make: || Box::new(baselines::Greedy(baselines::GreedyKey::Lookup)),
    },
    PlannerEntry {
        name: "size-lookup",
        summary: "greedy by dim x pooling factor x log10(rows) (seed baseline)",
        is_seed_baseline: true,
        make: || Box::new(baselines::Greedy(baselines::GreedyKey::SizeLookup)),
    },
    PlannerEntry {
        name: "torchrec",
        summary: "port of TorchRec 1.9's default planner: table/column/row-wise, its estimators, proposers, greedy partitioner",
        is_seed_baseline: false,
        make: || Box::new(torchrec::TorchRecPlanner::default()),
    },
];

/// Looks a planner up by name.
pub fn planner(name: &str) -> Result<&'static PlannerEntry> {
    REGISTRY.iter().find(|e| e.name == name).ok_or_else(|| Error::UnknownPlanner {
        name: name.to_string(),
        known: REGISTRY.iter().map(|e| e.name).collect::<Vec<_>>().join(", "),
    })
}

/// Resolves a comma-separated list of planner names; `all` means every registered planner.
pub fn planners(list: &str) -> Result<Vec<&'static PlannerEntry>> {
    if list.trim() == "all" {
        return Ok(REGISTRY.iter().collect());
    }
    list.split(',').map(|n| planner(n.trim())).collect()
}
