//! NeuroShard's search (SPEC section 6): a beam search over column splits, each split state placed by
//! a greedy grid search, every plan priced by the cost model.
//!
//! * **Greedy(s).** Pieces sorted by predicted single-piece compute, largest first (ties: larger
//!   bytes, then position); each goes to the device whose whole set has the lowest predicted compute
//!   once it is added (ties: smaller byte sum, then lower index), among devices where it fits in memory
//!   and `dims_r + dim ≤ s · Σdims / D`. The grid runs `s ∈ {1.00, 1.05, …, 1.50}` (M = 11); each
//!   feasible plan is priced with the full cost (compute and comm, [`crate::cost::evaluate`]'s
//!   definition) and the cheapest kept.
//! * **Beam.** From the unsplit state, for up to L rounds, each of the K beam states proposes the
//!   union of its top-N pieces by bytes and by predicted compute (among pieces whose half dim is a
//!   multiple of 4); each proposal halves that piece (under [`SplitRule::TorchRec`]: every block of its
//!   table, so that blocks stay equal) and runs the grid search; the K best proposals
//!   form the next beam and the best feasible plan seen is returned. States are ranked by bytes over
//!   the caps first, then cost, so that from an infeasible start (a table larger than any device) the
//!   beam walks towards the splits that make it fit.
//!
//! **At scale** ([`NeuroShardConfig::at_scale`], registered as `neuroshard-fast`): a greedy step
//! prices, for every grid point, only the `k` devices with the least predicted compute so far that may
//! take the piece (the paper prices all `D`, here `k = 4`), and on a task of more than 512 tables ×
//! devices each beam state proposes its top 5 pieces by each ranking instead of 10. A step then costs
//! `O(k · groups)` model calls instead of `O(D · groups)`, and a large task's round at most half as
//! many grid searches. With `k ≥ D` the pricing is the paper's.
//!
//! Speed (the paper's search took 10.75 s per task): the grid points run in lockstep — all `s`
//! values share one greedy state until their constraints first choose different devices, so each
//! step prices `D` candidate sets per *distinct* state rather than per grid point; split states are
//! canonical (a table's pieces laid out widest first), so a state reached twice is searched once; and
//! set compute goes through [`super::search::Evaluator`] (vector sums + a native head when the model
//! is incremental, a multiset cache otherwise).

use super::search::{DeviceSet, Evaluator, FastMap, FastSet};
use super::{PlanContext, Planner, Progress, SearchStats, StatsCell, Stopwatch};
use crate::cost::{CostDefinition, CostModel};
use crate::error::{Error, Result};
use crate::plan::{Piece, Plan, SplitRule};
use crate::task::Task;

/// Hyper-parameters of the search; [`Default`] gives the paper's values.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NeuroShardConfig {
    /// N: candidate pieces per state from each ranking (bytes, predicted compute).
    pub candidates: usize,
    /// K: beam width.
    pub beam_width: usize,
    /// L: most split rounds.
    pub max_rounds: usize,
    /// M: grid points over the dim-balance scale `s`.
    pub grid_points: usize,
    /// Largest `s` (the grid spans 1.0 ..= this).
    pub max_scale: f64,
    /// Whether set compute predictions are cached (results are identical either way). Only models
    /// without incremental compute are cached: for the others a head call costs less than a lookup.
    pub set_cache: bool,
    /// Cost definition plans are ranked by.
    pub definition: CostDefinition,
    /// Devices priced per greedy step: `Some(k)` prices, for every grid point, only the `k` devices
    /// with the least predicted compute so far among those the piece may go to (ties: fewer bytes, lower
    /// index); `None` prices every device (the paper). With `k` at least the device count the two are
    /// the same search.
    #[serde(default)]
    pub device_candidates: Option<usize>,
    /// N on a large task (more than [`LARGE_TASK`] tables × devices); `None`: `candidates` at every size.
    #[serde(default)]
    pub candidates_when_large: Option<usize>,
}

/// Tables × devices above which [`NeuroShardConfig::candidates_when_large`] applies.
pub const LARGE_TASK: usize = 512;

impl Default for NeuroShardConfig {
    fn default() -> Self {
        Self {
            candidates: 10,
            beam_width: 3,
            max_rounds: 10,
            grid_points: 11,
            max_scale: 1.5,
            set_cache: true,
            definition: CostDefinition::NeuroShard,
            device_candidates: None,
            candidates_when_large: None,
        }
    }
}

impl NeuroShardConfig {
    /// Refuses values the search cannot run with, naming the field.
    pub fn validate(&self) -> Result<()> {
        let ctx = "neuroshard config";
        if self.beam_width == 0 {
            return Err(Error::field(ctx, "beam_width", 0, "at least 1"));
        }
        if self.grid_points == 0 {
            return Err(Error::field(ctx, "grid_points", 0, "at least 1"));
        }
        if !self.max_scale.is_finite() || self.max_scale < 1.0 {
            return Err(Error::field(ctx, "max_scale", self.max_scale, "a finite number >= 1"));
        }
        if self.device_candidates == Some(0) {
            return Err(Error::field(ctx, "device_candidates", 0, "at least 1 (or none: every device)"));
        }
        Ok(())
    }

    /// The search at scale (`neuroshard-fast`, the default planner's first stage): each greedy step
    /// prices the 4 least-loaded devices the piece may go to, and on a large task each beam state
    /// proposes its top 5 pieces by bytes and by compute instead of 10 (docs/NEUROSHARD.md, "Planning
    /// time at scale").
    #[must_use]
    pub fn at_scale() -> Self {
        Self { device_candidates: Some(4), candidates_when_large: Some(5), ..Self::default() }
    }

    /// N for `task`.
    fn candidates_for(&self, task: &Task) -> usize {
        match self.candidates_when_large {
            Some(n) if task.tables.len().saturating_mul(task.devices.count()) > LARGE_TASK => n,
            _ => self.candidates,
        }
    }

    fn scales(&self) -> Vec<f64> {
        let m = self.grid_points;
        if m == 1 {
            return vec![1.0];
        }
        (0..m).map(|i| 1.0 + (self.max_scale - 1.0) * i as f64 / (m - 1) as f64).collect()
    }
}

/// The NeuroShard planner.
pub struct NeuroShard {
    /// Hyper-parameters.
    pub config: NeuroShardConfig,
    name: &'static str,
    stats: StatsCell,
}

impl Default for NeuroShard {
    fn default() -> Self {
        Self::new(NeuroShardConfig::default())
    }
}

impl NeuroShard {
    /// A planner with `config`, registered as `neuroshard`.
    #[must_use]
    pub fn new(config: NeuroShardConfig) -> Self {
        Self::named("neuroshard", config)
    }

    /// A planner with `config`, reporting itself as `name`.
    #[must_use]
    pub fn named(name: &'static str, config: NeuroShardConfig) -> Self {
        Self { config, name, stats: StatsCell::default() }
    }

    /// Plans `task` and returns the search's counters with the plan.
    pub fn plan_with_stats(&self, task: &Task, ctx: &PlanContext<'_>) -> Result<(Plan, SearchStats)> {
        match self.search(task, ctx)? {
            ((plan, None), stats) => Ok((plan, stats)),
            ((_, Some(no_fit)), _) => Err(no_fit),
        }
    }

    /// The search: the best feasible plan — or, when none fits, the plan with the fewest bytes over and
    /// the [`Error::NoFit`] saying why — and the counters.
    fn search(&self, task: &Task, ctx: &PlanContext<'_>) -> Result<((Plan, Option<Error>), SearchStats)> {
        self.config.validate()?;
        // The budget counts from here: pricing every piece up front is part of the search.
        let watch = ctx.stopwatch();
        let mut search = Search::new(self.name, task, ctx.cost_model, self.config)?;
        let result = search.run(&watch);
        let stats = search.ev.stats;
        self.stats.set(stats);
        Ok((result?, stats))
    }
}

impl Planner for NeuroShard {
    fn name(&self) -> &'static str {
        self.name
    }

    fn plan(&self, task: &Task, ctx: &PlanContext<'_>) -> Result<Plan> {
        self.plan_with_stats(task, ctx).map(|(p, _)| p)
    }

    fn plan_best_effort(&self, task: &Task, ctx: &PlanContext<'_>) -> Result<Plan> {
        Ok(self.search(task, ctx)?.0.0)
    }

    fn last_stats(&self) -> Option<SearchStats> {
        self.stats.get()
    }
}

/// A split state: per table, its piece dims, widest first (offsets follow: aligned dyadic pieces).
type State = Vec<Vec<u32>>;

/// What the grid search found for one state.
#[derive(Debug, Clone)]
struct Outcome {
    /// Bytes over the usable memory of the plan kept (0 when feasible).
    overflow: u128,
    /// Its cost.
    cost_ms: f64,
    /// Device of every piece, in the state's piece order.
    devices: Vec<usize>,
    /// When infeasible: the first piece that fit nowhere (table, bytes, best free bytes).
    misfit: Option<(usize, u64, u64)>,
}

impl Outcome {
    fn rank(&self) -> (u128, f64) {
        (self.overflow, self.cost_ms)
    }
}

/// One greedy state shared by the grid points that agree so far.
#[derive(Clone)]
struct Group {
    scales: Vec<usize>,
    sets: Vec<DeviceSet>,
    compute: Vec<f64>,
    devices: Vec<usize>,
    /// Devices by (compute, bytes, index); kept only when devices are priced by load
    /// ([`NeuroShardConfig::device_candidates`]).
    by_load: Vec<usize>,
}

impl Group {
    /// Puts `piece` (id `id`, at position `at` of the state's pieces) on device `d`, whose set's compute
    /// with it is `compute`.
    fn place(&mut self, ev: &Evaluator<'_>, at: usize, id: u32, d: usize, compute: f64) {
        ev.add(&mut self.sets[d], id);
        self.compute[d] = compute;
        self.devices[at] = d;
        if !self.by_load.is_empty() {
            if let Some(pos) = self.by_load.iter().position(|&x| x == d) {
                self.by_load.remove(pos);
            }
            let (sets, load) = (&self.sets, &self.compute);
            let before = |x: usize| load[x].total_cmp(&load[d]).then(sets[x].bytes.cmp(&sets[d].bytes)).then(x.cmp(&d));
            let pos = self.by_load.partition_point(|&x| before(x).is_lt());
            self.by_load.insert(pos, d);
        }
    }
}

struct Search<'t> {
    name: &'static str,
    ev: Evaluator<'t>,
    config: NeuroShardConfig,
    scales: Vec<f64>,
    memo: FastMap<State, Outcome>,
    /// The budget ran out during the first grid search: every piece left goes to the least-loaded device
    /// that takes it (one model call per piece instead of one per device and grid point).
    hurry: bool,
}

/// Pieces of a state in order: (table, column offset, dim).
fn layout(state: &State) -> Vec<(usize, u32, u32)> {
    let mut out = Vec::new();
    for (t, dims) in state.iter().enumerate() {
        let mut off = 0;
        for &d in dims {
            out.push((t, off, d));
            off += d;
        }
    }
    out
}

impl<'t> Search<'t> {
    fn new(name: &'static str, task: &'t Task, model: &'t dyn CostModel, config: NeuroShardConfig) -> Result<Self> {
        let mut ev = Evaluator::new(task, model, config.definition, config.set_cache)?;
        // Every piece any split can make, priced in one batch.
        let mut all = Vec::new();
        for (t, table) in task.tables.iter().enumerate() {
            let mut d = table.dim;
            loop {
                all.push((t, d, table.rows));
                if d % 8 != 0 {
                    break;
                }
                d /= 2;
            }
        }
        ev.register(&all)?;
        Ok(Self { name, ev, scales: config.scales(), config, memo: FastMap::default(), hurry: false })
    }

    fn ids(&mut self, pieces: &[(usize, u32, u32)]) -> Result<Vec<u32>> {
        let want: Vec<(usize, u32, u64)> =
            pieces.iter().map(|&(t, _, d)| (t, d, self.ev.task.tables[t].rows)).collect();
        self.ev.register(&want)
    }

    /// The greedy grid search on one state (memoised by the state). When the budget runs out part-way,
    /// a search that `must_finish` (the first: there is no plan yet) completes in a hurry; any other
    /// returns `None`.
    fn grid(&mut self, state: &State, watch: &Stopwatch<'_>, must_finish: bool) -> Result<Option<Outcome>> {
        if let Some(o) = self.memo.get(state) {
            return Ok(Some(o.clone()));
        }
        self.ev.stats.grid_searches += 1;
        let pieces = layout(state);
        let ids = self.ids(&pieces)?;
        let n_dev = self.ev.devices();
        let mut single = Vec::with_capacity(ids.len());
        for &id in &ids {
            single.push(self.ev.single_cost(id)?);
        }
        let bytes: Vec<u64> = ids.iter().map(|&id| self.ev.pieces[id as usize].size_bytes).collect();
        let order = super::largest_first(&single, &bytes);
        let total_dims: u64 = pieces.iter().map(|p| u64::from(p.2)).sum();
        let avg = total_dims as f64 / n_dev as f64;
        let limits: Vec<f64> = self.scales.iter().map(|s| s * avg).collect();
        let empty = self.ev.empty_set();
        let by_load = self.config.device_candidates.filter(|&k| k < n_dev);
        let mut groups = vec![Group {
            scales: (0..self.scales.len()).collect(),
            sets: vec![empty; n_dev],
            compute: vec![0.0; n_dev],
            devices: vec![usize::MAX; ids.len()],
            by_load: if by_load.is_some() { (0..n_dev).collect() } else { Vec::new() },
        }];
        let mut costs = vec![f64::NAN; n_dev];
        let mut cands: Vec<usize> = Vec::with_capacity(n_dev);
        let mut counts: Vec<usize> = Vec::with_capacity(self.scales.len());
        let mut choices: Vec<Option<usize>> = Vec::with_capacity(self.scales.len());
        for &i in &order {
            if !self.hurry && watch.out_of_time() {
                self.ev.stats.stopped_early = true;
                if !must_finish {
                    return Ok(None);
                }
                self.hurry = true;
                groups.truncate(1);
            }
            let id = ids[i];
            let info = self.ev.pieces[id as usize];
            let dim = u64::from(info.dim);
            let mut next: Vec<Group> = Vec::with_capacity(groups.len());
            for g in groups {
                // The grid points' scales are in increasing order: the last is the loosest limit.
                let loosest = g.scales.last().map_or(f64::NEG_INFINITY, |&s| limits[s]);
                cands.clear();
                if self.hurry {
                    let within = |d: usize| (g.sets[d].dims + dim) as f64 <= loosest + 1e-9;
                    if let Some(d) = self.least_loaded(&g.sets, &g.compute, id, within) {
                        cands.push(d);
                    }
                } else if let Some(k) = by_load {
                    // The k least-loaded devices each grid point may use (union over the grid points).
                    counts.clear();
                    counts.resize(g.scales.len(), 0);
                    for &d in &g.by_load {
                        if !self.ev.fits(&g.sets[d], d, id) {
                            continue;
                        }
                        let need = (g.sets[d].dims + dim) as f64;
                        let Some(j) = g.scales.iter().position(|&s| need <= limits[s] + 1e-9) else { continue };
                        if counts[j..].iter().all(|&c| c >= k) {
                            continue;
                        }
                        cands.push(d);
                        for c in &mut counts[j..] {
                            *c += 1;
                        }
                        if counts[0] >= k {
                            break;
                        }
                    }
                } else {
                    cands.extend((0..n_dev).filter(|&d| {
                        (g.sets[d].dims + dim) as f64 <= loosest + 1e-9 && self.ev.fits(&g.sets[d], d, id)
                    }));
                }
                for &d in &cands {
                    costs[d] = self.ev.set_cost_with(&g.sets[d], id)?;
                }
                // Each grid point's choice; grid points choosing alike stay together.
                choices.clear();
                for &s in &g.scales {
                    choices.push(
                        cands.iter().copied().filter(|&d| (g.sets[d].dims + dim) as f64 <= limits[s] + 1e-9).min_by(
                            |&a, &b| {
                                costs[a]
                                    .total_cmp(&costs[b])
                                    .then(g.sets[a].bytes.cmp(&g.sets[b].bytes))
                                    .then(a.cmp(&b))
                            },
                        ),
                    );
                }
                let mut g = g;
                // Most steps: every grid point of the group picks the same device.
                if let Some(&Some(d)) = choices.first()
                    && choices.iter().all(|&c| c == Some(d))
                {
                    g.place(&self.ev, i, id, d, costs[d]);
                    next.push(g);
                    continue;
                }
                let mut by_device: Vec<(usize, Vec<usize>)> = Vec::new();
                for (&s, &choice) in g.scales.iter().zip(&choices) {
                    if let Some(d) = choice {
                        match by_device.iter_mut().find(|(x, _)| *x == d) {
                            Some((_, v)) => v.push(s),
                            None => by_device.push((d, vec![s])),
                        }
                    }
                }
                let last = by_device.pop();
                for (d, scales) in by_device {
                    let mut h = g.clone();
                    h.scales = scales;
                    h.place(&self.ev, i, id, d, costs[d]);
                    next.push(h);
                }
                if let Some((d, scales)) = last {
                    g.scales = scales;
                    g.place(&self.ev, i, id, d, costs[d]);
                    next.push(g);
                }
            }
            groups = next;
            if groups.is_empty() {
                break;
            }
        }
        let mut best: Option<Outcome> = None;
        for g in &groups {
            let cost_ms = self.ev.plan_cost(&g.sets, &g.compute)?;
            if best.as_ref().is_none_or(|b| cost_ms < b.cost_ms) {
                best = Some(Outcome { overflow: 0, cost_ms, devices: g.devices.clone(), misfit: None });
            }
        }
        let outcome = match best {
            Some(b) => b,
            None => self.relaxed(&ids, &order)?,
        };
        self.memo.insert(state.clone(), outcome.clone());
        Ok(Some(outcome))
    }

    /// In a hurry: the device with the least compute so far that has room for `id` and passes `allowed`.
    fn least_loaded(
        &self,
        sets: &[DeviceSet],
        compute: &[f64],
        id: u32,
        allowed: impl Fn(usize) -> bool,
    ) -> Option<usize> {
        (0..sets.len())
            .filter(|&d| allowed(d) && self.ev.fits(&sets[d], d, id))
            .min_by(|&a, &b| compute[a].total_cmp(&compute[b]).then(a.cmp(&b)))
    }

    /// When no grid point is feasible: the greedy without the dim constraint, and a piece that fits
    /// nowhere goes where the most memory is free — an infeasible plan, ranked by its overflow.
    fn relaxed(&mut self, ids: &[u32], order: &[usize]) -> Result<Outcome> {
        let n_dev = self.ev.devices();
        let mut sets = vec![self.ev.empty_set(); n_dev];
        let mut compute = vec![0.0; n_dev];
        let mut devices = vec![0; ids.len()];
        let mut misfit = None;
        for &i in order {
            let id = ids[i];
            let info = self.ev.pieces[id as usize];
            let mut best: Option<(usize, f64)> = None;
            if self.hurry
                && let Some(d) = self.least_loaded(&sets, &compute, id, |_| true)
            {
                best = Some((d, self.ev.set_cost_with(&sets[d], id)?));
            }
            for d in (0..n_dev).filter(|_| !self.hurry) {
                if self.ev.fits(&sets[d], d, id) {
                    let c = self.ev.set_cost_with(&sets[d], id)?;
                    let better =
                        best.is_none_or(|(bd, bc)| c.total_cmp(&bc).then(sets[d].bytes.cmp(&sets[bd].bytes)).is_lt());
                    if better {
                        best = Some((d, c));
                    }
                }
            }
            let (d, c) = if let Some(b) = best {
                b
            } else {
                let free = |d: usize| self.ev.free(&sets[d], d);
                let d = (0..n_dev).max_by(|&a, &b| free(a).cmp(&free(b)).then(b.cmp(&a))).unwrap_or(0);
                if misfit.is_none() {
                    misfit = Some((info.table, info.bytes, free(d)));
                }
                (d, self.ev.set_cost_with(&sets[d], id)?)
            };
            self.ev.add(&mut sets[d], id);
            compute[d] = c;
            devices[i] = d;
        }
        let cost_ms = self.ev.plan_cost(&sets, &compute)?;
        Ok(Outcome { overflow: self.ev.overflow(&sets), cost_ms, devices, misfit })
    }

    /// Pieces worth splitting in `state`: top-N by bytes ∪ top-N by predicted compute, one per distinct
    /// (table, dim), among pieces whose half dim is a multiple of 4. Returns (table, dim).
    fn candidates(&mut self, state: &State) -> Result<Vec<(usize, u32)>> {
        let mut distinct: Vec<(usize, u32)> = Vec::new();
        for (t, dims) in state.iter().enumerate() {
            for &d in dims {
                if d % 8 == 0 && !distinct.contains(&(t, d)) {
                    distinct.push((t, d));
                }
            }
        }
        let mut info = Vec::with_capacity(distinct.len());
        for &(t, d) in &distinct {
            let id = self.ev.register(&[(t, d, self.ev.task.tables[t].rows)])?[0];
            info.push((self.ev.pieces[id as usize].size_bytes, self.ev.single_cost(id)?));
        }
        let n = self.config.candidates_for(self.ev.task);
        let mut by_size: Vec<usize> = (0..distinct.len()).collect();
        by_size.sort_by(|&a, &b| info[b].0.cmp(&info[a].0).then(a.cmp(&b)));
        let mut by_cost: Vec<usize> = (0..distinct.len()).collect();
        by_cost.sort_by(|&a, &b| info[b].1.total_cmp(&info[a].1).then(a.cmp(&b)));
        let mut out: Vec<usize> = Vec::new();
        for &i in by_size.iter().take(n).chain(by_cost.iter().take(n)) {
            if !out.contains(&i) {
                out.push(i);
            }
        }
        Ok(out.into_iter().map(|i| distinct[i]).collect())
    }

    /// The best feasible plan, or the plan with the fewest bytes over and the [`Error::NoFit`] saying why
    /// none fits.
    fn run(&mut self, watch: &Stopwatch<'_>) -> Result<(Plan, Option<Error>)> {
        let root: State = self.ev.task.tables.iter().map(|t| vec![t.dim]).collect();
        let first = self.grid(&root, watch, true)?.ok_or_else(|| Error::NoPlan {
            planner: self.name.into(),
            reason: "the first grid search stopped without a plan".into(),
        })?;
        let mut best_any: (State, Outcome) = (root.clone(), first.clone());
        let mut best: Option<(State, Outcome)> = (first.overflow == 0).then(|| (root.clone(), first));
        let mut beam = vec![root];
        'rounds: for round in 0..self.config.max_rounds {
            let progress = Progress {
                planner: self.name,
                step: round,
                max_steps: self.config.max_rounds,
                best_cost_ms: best.as_ref().map(|b| b.1.cost_ms),
            };
            if !watch.report(progress) {
                self.ev.stats.stopped_early = true;
                break;
            }
            let mut proposals: Vec<(State, Outcome)> = Vec::new();
            let mut seen: FastSet<State> = FastSet::default();
            for state in &beam {
                for (t, d) in self.candidates(state)? {
                    let mut next = state.clone();
                    let dims = &mut next[t];
                    if self.ev.task.splits == SplitRule::TorchRec {
                        // Only equal blocks: every block of the table is halved.
                        *dims = vec![d / 2; dims.len() * 2];
                    } else {
                        if let Some(pos) = dims.iter().position(|&x| x == d) {
                            dims.remove(pos);
                        }
                        dims.push(d / 2);
                        dims.push(d / 2);
                        dims.sort_unstable_by(|a, b| b.cmp(a));
                    }
                    if !seen.insert(next.clone()) {
                        continue;
                    }
                    let Some(o) = self.grid(&next, watch, false)? else {
                        break 'rounds;
                    };
                    if o.overflow == 0 && best.as_ref().is_none_or(|b| o.cost_ms < b.1.cost_ms) {
                        best = Some((next.clone(), o.clone()));
                    }
                    if o.rank() < best_any.1.rank() {
                        best_any = (next.clone(), o.clone());
                    }
                    proposals.push((next, o));
                    if watch.out_of_time() {
                        self.ev.stats.stopped_early = true;
                        break 'rounds;
                    }
                }
            }
            if proposals.is_empty() {
                break;
            }
            // Stable sort: ties keep proposal order (beam order, then candidate order).
            proposals.sort_by(|a, b| a.1.overflow.cmp(&b.1.overflow).then(a.1.cost_ms.total_cmp(&b.1.cost_ms)));
            beam = proposals.into_iter().take(self.config.beam_width).map(|(s, _)| s).collect();
            self.ev.stats.rounds += 1;
        }
        let (state, outcome, no_fit) = if let Some((state, outcome)) = best {
            (state, outcome, None)
        } else {
            let (table, need_bytes, best_free_bytes) = best_any.1.misfit.unwrap_or((0, 0, 0));
            let name = self.ev.task.tables.get(table).map(|t| t.name.clone()).unwrap_or_default();
            let no_fit = if self.ev.stats.stopped_early {
                // Splitting might have made it fit: say what stopped the search, not that nothing fits.
                Error::NoPlan {
                    planner: self.name.into(),
                    reason: format!(
                        "stopped by its budget or callback before a plan within memory was found (after {} grid searches, table `{name}` ({}) still fit on no device); allow more time",
                        self.ev.stats.grid_searches,
                        crate::units::format_bytes_exact(need_bytes)
                    ),
                }
            } else {
                Error::NoFit { table: name, need_bytes, best_free_bytes }
            };
            (best_any.0, best_any.1, Some(no_fit))
        };
        let pieces: Vec<Piece> = layout(&state)
            .into_iter()
            .zip(&outcome.devices)
            .map(|((t, off, d), &dev)| Piece::cols(t, off, d, dev))
            .collect();
        Ok((Plan::new(self.ev.task, pieces)?, no_fit))
    }
}
