//! The [`Planner`] trait and the one registry of planners by name (the CLI, the browser binding
//! and the benchmarks all read [`REGISTRY`]).

pub mod autoshard;
pub mod baselines;
pub mod dreamshard;
pub mod neuroshard;
pub mod portfolio;
pub mod refine;
pub(crate) mod search;
pub mod torchrec;

use std::cell::Cell;

use serde::Serialize;

use crate::cost::CostModel;
use crate::error::{Error, Result};
use crate::plan::Plan;
use crate::task::Task;

/// What a planner may use besides the task. Build it with [`PlanContext::new`] and the `with_*` methods.
#[non_exhaustive]
pub struct PlanContext<'a> {
    /// The cost model to plan against (baselines ignore it).
    pub cost_model: &'a dyn CostModel,
    /// Seed for any randomness; the same seed gives the same plan.
    pub seed: u64,
    /// A time budget for searches that can stop early (the core has no clock: the caller lends one).
    pub budget: Option<Budget<'a>>,
    /// Called between search steps; returning `false` stops the search, which returns its best plan so far.
    pub progress: Option<&'a dyn Fn(Progress) -> bool>,
}

/// A time budget: `clock_ms` reads a monotonic clock in milliseconds (any origin), and a search stops
/// once `limit_ms` have passed since it started, returning its best plan so far.
#[derive(Clone, Copy)]
pub struct Budget<'a> {
    /// The caller's clock, milliseconds.
    pub clock_ms: &'a dyn Fn() -> f64,
    /// Milliseconds a search may take.
    pub limit_ms: f64,
}

/// Where a search stands, as passed to [`PlanContext::progress`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Progress {
    /// The planner reporting.
    pub planner: &'static str,
    /// Steps done (beam rounds, refinement passes).
    pub step: usize,
    /// Most steps it will take.
    pub max_steps: usize,
    /// Cost of the best feasible plan so far.
    pub best_cost_ms: Option<f64>,
}

impl<'a> PlanContext<'a> {
    /// A context with no budget and no progress callback.
    #[must_use]
    pub fn new(cost_model: &'a dyn CostModel, seed: u64) -> Self {
        Self { cost_model, seed, budget: None, progress: None }
    }

    /// Stops searches `limit_ms` after they start, as read on `clock_ms`.
    #[must_use]
    pub fn with_budget(mut self, clock_ms: &'a dyn Fn() -> f64, limit_ms: f64) -> Self {
        self.budget = Some(Budget { clock_ms, limit_ms });
        self
    }

    /// Reports progress to `progress` (which may stop the search by returning `false`).
    #[must_use]
    pub fn with_progress(mut self, progress: &'a dyn Fn(Progress) -> bool) -> Self {
        self.progress = Some(progress);
        self
    }

    /// A stopwatch for one search under this context's budget and callback.
    pub(crate) fn stopwatch(&self) -> Stopwatch<'a> {
        Stopwatch {
            budget: self.budget,
            progress: self.progress,
            start_ms: self.budget.map_or(0.0, |b| (b.clock_ms)()),
        }
    }
}

/// The budget and callback of one search.
pub(crate) struct Stopwatch<'a> {
    budget: Option<Budget<'a>>,
    progress: Option<&'a dyn Fn(Progress) -> bool>,
    start_ms: f64,
}

impl Stopwatch<'_> {
    /// Whether the budget is spent.
    pub(crate) fn out_of_time(&self) -> bool {
        self.budget.is_some_and(|b| (b.clock_ms)() - self.start_ms >= b.limit_ms)
    }

    /// Reports `p`; whether the search may go on (callback and budget both agree).
    pub(crate) fn report(&self, p: Progress) -> bool {
        let go_on = self.progress.is_none_or(|f| f(p));
        go_on && !self.out_of_time()
    }
}

/// Counters of a search, readable after planning through [`Planner::last_stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct SearchStats {
    /// Set-compute lookups answered by the set cache.
    pub set_cache_hits: u64,
    /// Set-compute lookups the cache did not answer (a model call; uncached incremental models count
    /// neither hits nor misses).
    pub set_cache_misses: u64,
    /// Distinct pieces priced.
    pub pieces: u64,
    /// Full plan evaluations (comm included).
    pub plan_evaluations: u64,
    /// Full plan evaluations answered from the plan memo.
    pub plan_memo_hits: u64,
    /// Greedy grid searches run (distinct split states).
    pub grid_searches: u64,
    /// Beam rounds completed.
    pub rounds: u64,
    /// Whether the budget or the callback stopped the search early.
    pub stopped_early: bool,
    /// TorchRec's planner: proposals partitioned (`_num_proposals`; 0 for other planners).
    pub proposals: u64,
    /// TorchRec's planner: proposals that fit (`_num_plans`).
    pub proposals_fit: u64,
    /// Refinement with a gain floor ([`refine::Refined::with_min_gain_sd`]): the gain it found and the
    /// floor it fell short of, both fractions of the inner plan's predicted cost, when it returned the
    /// inner planner's plan for that reason.
    pub declined_gain: Option<DeclinedGain>,
}

/// A refinement whose predicted gain was below its floor ([`SearchStats::declined_gain`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DeclinedGain {
    /// The refined plan's predicted gain over the inner planner's, a fraction of the latter's cost.
    pub gain: f64,
    /// The smallest gain that would have been kept.
    pub floor: f64,
}

impl SearchStats {
    /// Share of set-compute lookups the cache answered (0 with no lookups).
    #[must_use]
    pub fn hit_rate(&self) -> f64 {
        let total = self.set_cache_hits + self.set_cache_misses;
        if total == 0 { 0.0 } else { self.set_cache_hits as f64 / total as f64 }
    }
}

/// Where a planner keeps the counters of its last run (planners are used through `&self`).
#[derive(Debug, Clone, Default)]
pub(crate) struct StatsCell(Cell<Option<SearchStats>>);

impl StatsCell {
    pub(crate) fn set(&self, s: SearchStats) {
        self.0.set(Some(s));
    }

    pub(crate) fn get(&self) -> Option<SearchStats> {
        self.0.get()
    }
}

/// Indices `0..cost.len()` by decreasing `cost`, ties by decreasing `size`, then by index: the placement order
/// of the greedy planners (largest, hardest-to-fit items first).
#[must_use]
pub fn largest_first(cost: &[f64], size: &[u64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..cost.len()).collect();
    order.sort_by(|&a, &b| cost[b].total_cmp(&cost[a]).then(size[b].cmp(&size[a])).then(a.cmp(&b)));
    order
}

/// Index of the largest of `values` whose `legal` flag is set (ties → lowest index); `None` when none is.
/// The greedy action of the learned policies.
#[must_use]
pub fn argmax_legal<T: PartialOrd + Copy>(values: &[T], legal: &[bool]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, (&v, &ok)) in values.iter().zip(legal).enumerate() {
        if ok && best.is_none_or(|b| v > values[b]) {
            best = Some(i);
        }
    }
    best
}

/// Where a learned policy sends a table once the budget is spent: the legal device with the least `load`
/// (ties → lowest index), so a stopped rollout still ends in a plan at the cost of one comparison per
/// device and table.
#[must_use]
pub(crate) fn least_loaded_legal(load: &[f64], legal: &[bool]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, (&v, &ok)) in load.iter().zip(legal).enumerate() {
        if ok && best.is_none_or(|b| v < load[b]) {
            best = Some(i);
        }
    }
    best
}

/// A sharding algorithm.
pub trait Planner {
    /// Registry name.
    fn name(&self) -> &'static str;
    /// Plans `task`. A planner that cannot place a table within memory returns [`Error::NoFit`]
    /// rather than an invalid plan (the random baseline excepted: it never checks memory, as in the
    /// seeds, and its report says whether the plan fits).
    fn plan(&self, task: &Task, ctx: &PlanContext<'_>) -> Result<Plan>;
    /// A plan even where none fits: a search's plan with the fewest bytes over the usable memory, for a
    /// later stage (refinement) to repair. By default [`Planner::plan`].
    fn plan_best_effort(&self, task: &Task, ctx: &PlanContext<'_>) -> Result<Plan> {
        self.plan(task, ctx)
    }
    /// Counters of the last [`Planner::plan`] call, for planners that search.
    fn last_stats(&self) -> Option<SearchStats> {
        None
    }
    /// Plans `task` choosing memory tiers as `mode` allows; returns the task as planned (its tables'
    /// tiers chosen) and the plan. By default the shared choice: tables move to host memory behind HBM
    /// caches when they do not fit in HBM ([`crate::tier::assign`]), then [`Planner::plan`]; when the
    /// planner cannot place them at one fill target ([`TIER_FILLS`]), the next, lower one is tried. The
    /// tiered task is checked as [`crate::memory::check_capacity`] checks a task. TorchRec's port chooses
    /// compute kernels itself, as TorchRec does.
    fn plan_tiered(&self, task: &Task, ctx: &PlanContext<'_>, mode: crate::tier::TierMode) -> Result<(Task, Plan)> {
        let mut last = None;
        let mut tried: Option<Vec<crate::table::TableSpec>> = None;
        for fill in TIER_FILLS {
            let tiered = tiers_at(task, ctx, mode, fill)?;
            // The same tiers as the last try: the same refusal.
            if tried.as_ref() == Some(&tiered.tables) {
                continue;
            }
            tried = Some(tiered.tables.clone());
            match self.plan(&tiered, ctx) {
                Ok(plan) => return Ok((tiered, plan)),
                // With tiers to choose, a refusal lowers the fill target (more tables leave HBM).
                Err(e @ (Error::NoFit { .. } | Error::NoPlan { .. })) if mode == crate::tier::TierMode::Auto => {
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::NoPlan { planner: self.name().into(), reason: "no fill target left".into() }))
    }
}

/// A planner's plan with its co-located column pieces merged ([`Plan::coalesced`]): the devices hold the
/// same bytes in fewer pieces, and no cost model is asked.
pub struct Coalesced {
    name: &'static str,
    inner: Box<dyn Planner>,
}

impl Planner for Coalesced {
    fn name(&self) -> &'static str {
        self.name
    }

    fn plan(&self, task: &Task, ctx: &PlanContext<'_>) -> Result<Plan> {
        self.inner.plan(task, ctx)?.coalesced(task)
    }

    fn plan_best_effort(&self, task: &Task, ctx: &PlanContext<'_>) -> Result<Plan> {
        self.inner.plan_best_effort(task, ctx)?.coalesced(task)
    }

    fn last_stats(&self) -> Option<SearchStats> {
        self.inner.last_stats()
    }
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

/// The planner `shardplan plan` and the page use when none is named.
pub const DEFAULT_PLANNER: &str = "auto";

/// The largest task, in tables × devices, on which `auto` also runs `torchrec+refine`. The TorchRec port's
/// search partitions every proposal over every rank and grows as the square of the tables: past this size
/// it costs about as much as the rest of `auto`, and soon far more (docs/NEUROSHARD.md, "Planning time at
/// scale").
pub const AUTO_TORCHREC_LIMIT: usize = 10_000;

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
        make: || Box::new(size_lookup()),
    },
    PlannerEntry {
        name: "neuroshard",
        summary: "NeuroShard: beam search over column splits, greedy grid search over placements, on any cost model",
        is_seed_baseline: false,
        make: || Box::new(neuroshard::NeuroShard::default()),
    },
    PlannerEntry {
        name: "neuroshard+refine",
        summary: "neuroshard, then local search (move, swap, merge, split) under the cost model, its plan kept only when predicted cheaper by the model's measured error",
        is_seed_baseline: false,
        make: || {
            Box::new(
                refine::Refined::new("neuroshard+refine", Box::new(neuroshard::NeuroShard::default()))
                    .with_min_gain_sd(refine::SEARCHED_MIN_GAIN_SD),
            )
        },
    },
    PlannerEntry {
        name: "neuroshard+place",
        summary: "neuroshard, then local search by moves and swaps only: its split layout stays (docs/BENCHMARKS.md, \"every planner on the unseen suite\")",
        is_seed_baseline: false,
        make: || {
            Box::new(
                refine::Refined::placement_only("neuroshard+place", Box::new(neuroshard::NeuroShard::default()))
                    .with_min_gain_sd(refine::SEARCHED_MIN_GAIN_SD),
            )
        },
    },
    PlannerEntry {
        name: "neuroshard+coalesce",
        summary: "neuroshard, then every pair of aligned column halves on one device merged into one piece (the same bytes, one lookup per row where it took two)",
        is_seed_baseline: false,
        make: || {
            Box::new(Coalesced { name: "neuroshard+coalesce", inner: Box::new(neuroshard::NeuroShard::default()) })
        },
    },
    PlannerEntry {
        name: "neuroshard-fast",
        summary: "NeuroShard's search at scale: each greedy step prices the 4 least-loaded devices; 5 split candidates per ranking past 512 tables x devices",
        is_seed_baseline: false,
        make: || Box::new(neuroshard_fast()),
    },
    PlannerEntry {
        name: "neuroshard-fast+refine",
        summary: "neuroshard-fast, then local search (move, swap, merge, split) under the cost model",
        is_seed_baseline: false,
        make: || Box::new(neuroshard_fast_refined()),
    },
    PlannerEntry {
        name: DEFAULT_PLANNER,
        summary: "the default: size-lookup, then neuroshard-fast, then (up to 10,000 tables x devices) torchrec+refine; the cheapest plan within memory",
        is_seed_baseline: false,
        make: || {
            Box::new(
                portfolio::Portfolio::new(DEFAULT_PLANNER, vec![Box::new(size_lookup()), Box::new(neuroshard_fast())])
                    .member_up_to(Box::new(torchrec_refined()), AUTO_TORCHREC_LIMIT),
            )
        },
    },
    PlannerEntry {
        name: "autoshard",
        summary: "AutoShard: an LSTM policy trained by actor-critic (V-trace) places tables one by one, greedily",
        is_seed_baseline: false,
        make: || Box::new(autoshard::AutoShard::default()),
    },
    PlannerEntry {
        name: "size-lookup+refine",
        summary: "the size-lookup greedy baseline, then local search (move, swap, merge, split)",
        is_seed_baseline: false,
        make: || Box::new(size_lookup_refined()),
    },
    PlannerEntry {
        name: "dreamshard",
        summary: "DreamShard: a trained policy places tables one by one (argmax over devices that fit), table-wise",
        is_seed_baseline: false,
        make: || Box::new(dreamshard::DreamShard::default()),
    },
    PlannerEntry {
        name: "torchrec",
        summary: "port of TorchRec 1.9's default planner: table/column/row-wise and table-row/column-wise, fused and UVM kernels, its estimators, proposers, greedy partitioner",
        is_seed_baseline: false,
        make: || Box::new(torchrec::TorchRecPlanner::default()),
    },
    PlannerEntry {
        name: "neuroshard+torchrec",
        summary: "neuroshard, then torchrec+refine; the cheaper plan within memory under the cost model",
        is_seed_baseline: false,
        make: || {
            Box::new(portfolio::Portfolio::new(
                "neuroshard+torchrec",
                vec![Box::new(neuroshard::NeuroShard::default()), Box::new(torchrec_refined())],
            ))
        },
    },
    PlannerEntry {
        name: "torchrec+refine",
        summary: "the TorchRec port's plan, then local search (move, swap, merge, split, row-wise) under the cost model",
        is_seed_baseline: false,
        make: || Box::new(torchrec_refined()),
    },
];

fn torchrec_refined() -> refine::Refined {
    refine::Refined::new("torchrec+refine", Box::new(torchrec::TorchRecPlanner::default()))
}

fn size_lookup_refined() -> refine::Refined {
    refine::Refined::new("size-lookup+refine", Box::new(size_lookup()))
}

fn neuroshard_fast_refined() -> refine::Refined {
    refine::Refined::new("neuroshard-fast+refine", Box::new(neuroshard_fast()))
        .with_min_gain_sd(refine::SEARCHED_MIN_GAIN_SD)
}

fn size_lookup() -> baselines::Greedy {
    baselines::Greedy(baselines::GreedyKey::SizeLookup)
}

fn neuroshard_fast() -> neuroshard::NeuroShard {
    neuroshard::NeuroShard::named("neuroshard-fast", neuroshard::NeuroShardConfig::at_scale())
}

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

/// HBM fill targets [`plan_tiered`] tries in turn: the share of the devices' usable bytes the tables in
/// HBM may take, lowered when a planner cannot place them.
pub const TIER_FILLS: [f64; 5] = [0.9, 0.8, 0.7, 0.6, 0.5];

/// Plans `task` with `planner`, choosing memory tiers as `mode` allows ([`Planner::plan_tiered`]);
/// returns the task as planned and the plan. Every front end plans through it, so every planner meets
/// the same tier rules.
pub fn plan_tiered(
    planner: &dyn Planner,
    task: &Task,
    ctx: &PlanContext<'_>,
    mode: crate::tier::TierMode,
) -> Result<(Task, Plan)> {
    refuse_unplaceable(task, ctx, mode)?;
    planner.plan_tiered(task, ctx, mode)
}

/// The one refusal of a task no planner can place, before any planner runs: tables that do not fit in
/// HBM (with [`crate::tier::TierMode::Hbm`]), or not even with the fewest of them moved to host memory
/// behind HBM caches, within the hosts' DRAM (with [`crate::tier::TierMode::Auto`]). Moving more tables
/// to host memory only adds host DRAM, so the fullest HBM fill is the test; a planner that chooses its own
/// kernels (TorchRec's port) is refused the same way as every other.
fn refuse_unplaceable(task: &Task, ctx: &PlanContext<'_>, mode: crate::tier::TierMode) -> Result<()> {
    tiers_at(task, ctx, mode, 1.0).map(|_| ())
}

/// `task` with tiers chosen for the HBM fill target `fill` ([`crate::tier::assign`]), checked against both
/// memories ([`crate::memory::check_tiered_capacity`]). Tables that cannot fit even in host memory get the
/// task's own capacity refusal (how much memory they need), when it applies.
fn tiers_at(task: &Task, ctx: &PlanContext<'_>, mode: crate::tier::TierMode, fill: f64) -> Result<Task> {
    let batch = ctx.cost_model.global_batch().unwrap_or(crate::cost::analytical::DEFAULT_GLOBAL_BATCH);
    let tiered = crate::tier::assign(task, mode, fill, batch)
        .map_err(|e| crate::memory::check_capacity(task).err().unwrap_or(e))?;
    crate::memory::check_tiered_capacity(task, &tiered)?;
    Ok(tiered)
}
