//! Local search after any planner: move a piece to another device, swap two pieces, merge two column
//! halves of a table back into one piece, split a piece's columns in half onto another device (under
//! [`SplitRule::TorchRec`], where blocks stay equal: halve every block of the table, or merge its blocks
//! pairwise), make a
//! table (whole or split column-wise) row-wise over every device (TorchRec's row-wise sharding, rows
//! split as TorchRec splits them: [`super::torchrec::row_split`]), or make a row-wise table whole again
//! on one device —
//! accepting a change only when the cost model says the plan gets cheaper and no device goes over
//! its usable memory (an overfull input, e.g. from `random`, is first driven towards fitting: fewer
//! bytes over always wins).
//!
//! First improvement, bottleneck first: each pass visits, in a seeded random order, the changes that
//! involve the plan's bottleneck device (a piece there moved, split, swapped, merged, or its table made
//! row-wise), and only when none of them helps the rest of the neighbourhood; it restarts after an
//! accepted change and ends at a local optimum of the whole neighbourhood, after `max_passes` accepted
//! changes, after `max_evaluations` priced neighbours, or when the budget or the progress callback says
//! stop. (An overfull plan looks at the whole neighbourhood each pass.) The plan's cost is its
//! bottleneck's time, so a change elsewhere rarely lowers it: looking there first finds improvements
//! after far fewer priced neighbours, and a pass no longer builds and shuffles every swap of a
//! thousand-piece plan. Only the devices a change touches are re-priced, through the same evaluator
//! NeuroShard uses (vector sums and a set cache), and a neighbour is priced from its device sets
//! alone (the piece list is rebuilt only for a change kept). Row-wise pieces are never moved, swapped,
//! merged or split one by one: a row-wise table keeps one range per device, the layout TorchRec builds.
//!
//! [`Refined`] runs a planner and then this search. Refining a plan the same model searched for
//! (`neuroshard+refine`, `neuroshard+place`, `neuroshard-fast+refine`) keeps the refined plan only when
//! the model predicts it cheaper by at least its own measured error of a device's time
//! ([`SEARCHED_MIN_GAIN_SD`]); a smaller predicted gain is within what the model gets wrong, and measured
//! slower than the searched plan.

use rand::{SeedableRng, rngs::ChaCha8Rng, seq::SliceRandom};

use super::search::{DeviceSet, Evaluator};
use super::{Budget, DeclinedGain, PlanContext, Planner, Progress, SearchStats, StatsCell};
use crate::cost::{CostDefinition, evaluate};
use crate::error::Result;
use crate::plan::{Piece, Plan, RowRange, SplitRule};
use crate::task::Task;

/// Limits of a refinement.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RefineConfig {
    /// Most accepted changes.
    pub max_passes: usize,
    /// Most neighbours priced.
    pub max_evaluations: u64,
    /// Whether set compute predictions are cached (results are identical either way).
    pub set_cache: bool,
    /// Cost definition plans are compared by.
    pub definition: CostDefinition,
    /// Whether changes may reshape tables (split a piece's columns, merge two halves, make a table
    /// row-wise or whole again); without, only moves and swaps of the pieces as they are: the split
    /// layout of the plan refined stays.
    #[serde(default = "reshapes")]
    pub reshape: bool,
}

fn reshapes() -> bool {
    true
}

impl Default for RefineConfig {
    fn default() -> Self {
        Self {
            max_passes: 200,
            max_evaluations: 100_000,
            set_cache: true,
            definition: CostDefinition::NeuroShard,
            reshape: true,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct RPiece {
    table: usize,
    off: u32,
    dim: u32,
    rows: Option<RowRange>,
    device: usize,
    id: u32,
}

#[derive(Debug, Clone, Copy)]
enum Change {
    Move(usize, usize),
    Swap(usize, usize),
    /// Merge pieces `a` and `b` (a's columns first) onto a device.
    Merge(usize, usize, usize),
    /// Split a piece: first half stays, second half goes to the device.
    Split(usize, usize),
    /// Make a table (whole or split column-wise) row-wise over every device.
    RowWise(usize),
    /// Make the row-wise table whole again on the device.
    Whole(usize, usize),
    /// Equal blocks only ([`SplitRule::TorchRec`]): halve every block of a piece's table, the piece's
    /// second half going to the device, the other blocks' halves staying where their block was.
    Halve(usize, usize),
    /// Equal blocks only: merge a table's blocks pairwise in column order (an even number of them), each
    /// pair onto its left (`false`) or right (`true`) member's device.
    Pair(usize, bool),
}

/// Device sets a change touches, by device, as they would be after it.
type Touched = Vec<(usize, DeviceSet)>;

/// Which part of the neighbourhood a pass looks at ([`State::changes`]).
#[derive(Debug, Clone, Copy)]
enum Focus {
    /// Every change.
    All,
    /// The changes that involve the device (the bottleneck: where a cheaper plan must start).
    Only(usize),
    /// The changes that do not.
    Except(usize),
}

struct State<'t> {
    ev: Evaluator<'t>,
    pieces: Vec<RPiece>,
    sets: Vec<DeviceSet>,
    compute: Vec<f64>,
    cost_ms: f64,
    overflow: u128,
    /// The device whose time is the plan's cost.
    bottleneck: usize,
    /// [`RefineConfig::reshape`].
    reshape: bool,
}

impl State<'_> {
    fn id(&mut self, table: usize, dim: u32, rows: Option<RowRange>) -> Result<u32> {
        let r = rows.map_or(self.ev.task.tables[table].rows, |r| r.count);
        Ok(self.ev.register(&[(table, dim, r)])?[0])
    }

    /// The neighbourhood, or the part of it `focus` selects: a change involves a device when one of
    /// the pieces it moves, splits or merges is there (a swap: either piece; a table-wide change: any
    /// piece of the table).
    fn changes(&self, focus: Focus) -> Vec<Change> {
        let n_dev = self.sets.len();
        let equal_blocks = self.ev.task.splits == SplitRule::TorchRec;
        let on = |i: usize| match focus {
            Focus::All => true,
            Focus::Only(b) | Focus::Except(b) => self.pieces[i].device == b,
        };
        let mut table_on = vec![false; self.ev.task.tables.len()];
        for (i, p) in self.pieces.iter().enumerate() {
            table_on[p.table] |= on(i);
        }
        let keep = |involved: bool| match focus {
            Focus::All => true,
            Focus::Only(_) => involved,
            Focus::Except(_) => !involved,
        };
        let mut out = Vec::new();
        let mut row_tables: Vec<usize> = Vec::new();
        // Swaps pair a piece with any later piece on another device; under `Only`, only the pieces on
        // the focus device start a pair (each pair once).
        let column: Vec<usize> = (0..self.pieces.len()).filter(|&j| self.pieces[j].rows.is_none()).collect();
        for (i, p) in self.pieces.iter().enumerate() {
            if p.rows.is_some() {
                if !row_tables.contains(&p.table) {
                    row_tables.push(p.table);
                    if self.reshape && keep(table_on[p.table]) {
                        out.extend((0..n_dev).map(|d| Change::Whole(p.table, d)));
                    }
                }
                continue;
            }
            let t = &self.ev.task.tables[p.table];
            // Once per table, at its first-column piece.
            if self.reshape && p.off == 0 && n_dev > 1 && t.rows >= 2 && keep(table_on[p.table]) {
                out.push(Change::RowWise(p.table));
            }
            if keep(on(i)) {
                for d in (0..n_dev).filter(|&d| d != p.device) {
                    out.push(Change::Move(i, d));
                    let half = p.dim / 2;
                    let halves = p.dim.is_multiple_of(8);
                    if self.reshape && equal_blocks && halves {
                        out.push(Change::Halve(i, d));
                    } else if self.reshape
                        && !equal_blocks
                        && halves
                        && t.dim.is_multiple_of(half)
                        && (t.dim / half).is_power_of_two()
                    {
                        out.push(Change::Split(i, d));
                    }
                }
            }
            match focus {
                Focus::Only(_) if on(i) => {
                    for &j in column.iter().filter(|&&j| self.pieces[j].device != p.device) {
                        out.push(Change::Swap(i.min(j), i.max(j)));
                    }
                }
                Focus::Only(_) => {}
                _ => {
                    for &j in column.iter().filter(|&&j| j > i && self.pieces[j].device != p.device) {
                        if keep(on(i) || on(j)) {
                            out.push(Change::Swap(i, j));
                        }
                    }
                }
            }
        }
        if !self.reshape {
            return out;
        }
        if equal_blocks {
            for p in self
                .pieces
                .iter()
                .filter(|p| p.off == 0 && p.rows.is_none() && p.dim < self.ev.task.tables[p.table].dim)
            {
                let blocks = self.ev.task.tables[p.table].dim / p.dim;
                if blocks.is_multiple_of(2) && keep(table_on[p.table]) {
                    out.push(Change::Pair(p.table, false));
                    out.push(Change::Pair(p.table, true));
                }
            }
            return out;
        }
        for (i, a) in self.pieces.iter().enumerate() {
            let t = &self.ev.task.tables[a.table];
            let double = a.dim * 2;
            if a.rows.is_some()
                || !t.dim.is_multiple_of(double)
                || !(t.dim / double).is_power_of_two()
                || a.off % double != 0
            {
                continue;
            }
            if let Some(j) = self
                .pieces
                .iter()
                .position(|b| b.table == a.table && b.rows.is_none() && b.dim == a.dim && b.off == a.off + a.dim)
                && keep(on(i) || on(j))
            {
                out.push(Change::Merge(i, j, a.device));
                if self.pieces[j].device != a.device {
                    out.push(Change::Merge(i, j, self.pieces[j].device));
                }
            }
        }
        out
    }

    /// The device sets after `change`, for the devices it touches, and (with `edit`) the pieces after it
    /// (a neighbour is priced from its sets alone; the pieces are rebuilt only for a change kept).
    fn apply(&mut self, change: Change, edit: bool) -> Result<(Option<Vec<RPiece>>, Touched)> {
        let mut out: Option<Vec<RPiece>> = edit.then(|| self.pieces.clone());
        let mut touched: Touched = Vec::new();
        let set = |touched: &mut Touched, device: usize, sets: &[DeviceSet]| -> usize {
            if let Some(k) = touched.iter().position(|(x, _)| *x == device) {
                k
            } else {
                touched.push((device, sets[device].clone()));
                touched.len() - 1
            }
        };
        match change {
            Change::Move(at, to) => {
                let p = self.pieces[at];
                let k = set(&mut touched, p.device, &self.sets);
                self.ev.remove(&mut touched[k].1, p.id);
                let k = set(&mut touched, to, &self.sets);
                self.ev.add(&mut touched[k].1, p.id);
                if let Some(pieces) = out.as_mut() {
                    pieces[at].device = to;
                }
            }
            Change::Swap(first, second) => {
                let (a, b) = (self.pieces[first], self.pieces[second]);
                let ka = set(&mut touched, a.device, &self.sets);
                let kb = set(&mut touched, b.device, &self.sets);
                self.ev.remove(&mut touched[ka].1, a.id);
                self.ev.add(&mut touched[ka].1, b.id);
                self.ev.remove(&mut touched[kb].1, b.id);
                self.ev.add(&mut touched[kb].1, a.id);
                if let Some(pieces) = out.as_mut() {
                    pieces[first].device = b.device;
                    pieces[second].device = a.device;
                }
            }
            Change::Merge(left, right, to) => {
                let (a, b) = (self.pieces[left], self.pieces[right]);
                let merged = self.id(a.table, a.dim * 2, None)?;
                let ka = set(&mut touched, a.device, &self.sets);
                self.ev.remove(&mut touched[ka].1, a.id);
                let kb = set(&mut touched, b.device, &self.sets);
                self.ev.remove(&mut touched[kb].1, b.id);
                let kd = set(&mut touched, to, &self.sets);
                self.ev.add(&mut touched[kd].1, merged);
                if let Some(pieces) = out.as_mut() {
                    pieces[left] = RPiece { dim: a.dim * 2, device: to, id: merged, ..a };
                    pieces.remove(right);
                }
            }
            Change::Split(at, to) => {
                let p = self.pieces[at];
                let half = self.id(p.table, p.dim / 2, None)?;
                let ks = set(&mut touched, p.device, &self.sets);
                self.ev.remove(&mut touched[ks].1, p.id);
                self.ev.add(&mut touched[ks].1, half);
                let kd = set(&mut touched, to, &self.sets);
                self.ev.add(&mut touched[kd].1, half);
                if let Some(pieces) = out.as_mut() {
                    pieces[at] = RPiece { dim: p.dim / 2, id: half, ..p };
                    pieces.push(RPiece { off: p.off + p.dim / 2, dim: p.dim / 2, device: to, id: half, ..p });
                }
            }
            Change::RowWise(table) => {
                for p in self.pieces.iter().filter(|p| p.table == table) {
                    let k = set(&mut touched, p.device, &self.sets);
                    self.ev.remove(&mut touched[k].1, p.id);
                }
                let t = &self.ev.task.tables[table];
                let (rows, dim) = (t.rows, t.dim);
                let mut added = Vec::new();
                let mut offset = 0;
                for (d, count) in
                    super::torchrec::row_split(rows, self.ev.task.devices.mem_cap_bytes()).into_iter().enumerate()
                {
                    if count == 0 {
                        continue;
                    }
                    let range = RowRange { offset, count };
                    offset += count;
                    let id = self.id(table, dim, Some(range))?;
                    let k = set(&mut touched, d, &self.sets);
                    self.ev.add(&mut touched[k].1, id);
                    added.push(RPiece { table, off: 0, dim, rows: Some(range), device: d, id });
                }
                if let Some(pieces) = out.as_mut() {
                    pieces.retain(|p| p.table != table);
                    pieces.extend(added);
                }
            }
            Change::Halve(at, to) => {
                let table = self.pieces[at].table;
                let blocks: Vec<(usize, RPiece)> =
                    self.pieces.iter().copied().enumerate().filter(|(_, p)| p.table == table).collect();
                let mut halves = Vec::new();
                for (k, p) in blocks {
                    let half = self.id(table, p.dim / 2, None)?;
                    let ks = set(&mut touched, p.device, &self.sets);
                    self.ev.remove(&mut touched[ks].1, p.id);
                    self.ev.add(&mut touched[ks].1, half);
                    let second = if k == at { to } else { p.device };
                    let kd = set(&mut touched, second, &self.sets);
                    self.ev.add(&mut touched[kd].1, half);
                    halves.push(RPiece { dim: p.dim / 2, id: half, ..p });
                    halves.push(RPiece { off: p.off + p.dim / 2, dim: p.dim / 2, device: second, id: half, ..p });
                }
                if let Some(pieces) = out.as_mut() {
                    pieces.retain(|p| p.table != table);
                    pieces.extend(halves);
                }
            }
            Change::Pair(table, right) => {
                let mut blocks: Vec<RPiece> = self.pieces.iter().filter(|p| p.table == table).copied().collect();
                blocks.sort_by_key(|p| p.off);
                let mut merged_blocks = Vec::new();
                for pair in blocks.chunks_exact(2) {
                    let (a, b) = (pair[0], pair[1]);
                    let merged = self.id(table, a.dim * 2, None)?;
                    let ka = set(&mut touched, a.device, &self.sets);
                    self.ev.remove(&mut touched[ka].1, a.id);
                    let kb = set(&mut touched, b.device, &self.sets);
                    self.ev.remove(&mut touched[kb].1, b.id);
                    let to = if right { b.device } else { a.device };
                    let kd = set(&mut touched, to, &self.sets);
                    self.ev.add(&mut touched[kd].1, merged);
                    merged_blocks.push(RPiece { dim: a.dim * 2, device: to, id: merged, ..a });
                }
                if let Some(pieces) = out.as_mut() {
                    pieces.retain(|p| p.table != table);
                    pieces.extend(merged_blocks);
                }
            }
            Change::Whole(table, to) => {
                let dim = self.ev.task.tables[table].dim;
                for p in self.pieces.iter().filter(|p| p.table == table) {
                    let k = set(&mut touched, p.device, &self.sets);
                    self.ev.remove(&mut touched[k].1, p.id);
                }
                let id = self.id(table, dim, None)?;
                let k = set(&mut touched, to, &self.sets);
                self.ev.add(&mut touched[k].1, id);
                if let Some(pieces) = out.as_mut() {
                    pieces.retain(|p| p.table != table);
                    pieces.push(RPiece { table, off: 0, dim, rows: None, device: to, id });
                }
            }
        }
        Ok((out, touched))
    }
}

/// Refines `plan` for `task` under `ctx`'s cost model; returns the refined plan and the counters.
pub fn refine(task: &Task, plan: &Plan, ctx: &PlanContext<'_>, config: &RefineConfig) -> Result<(Plan, SearchStats)> {
    let watch = ctx.stopwatch();
    let n_dev = task.devices.count();
    let mut ev = Evaluator::new(task, ctx.cost_model, config.definition, config.set_cache)?.without_plan_memo();
    let want: Vec<(usize, u32, u64)> =
        plan.pieces().iter().map(|p| (p.table_id, p.dim, p.row_count(task.tables[p.table_id].rows))).collect();
    let ids = ev.register(&want)?;
    let mut sets = vec![ev.empty_set(); n_dev];
    let mut pieces = Vec::with_capacity(ids.len());
    for (p, &id) in plan.pieces().iter().zip(&ids) {
        ev.add(&mut sets[p.device], id);
        pieces.push(RPiece { table: p.table_id, off: p.col_offset, dim: p.dim, rows: p.rows, device: p.device, id });
    }
    let mut compute = Vec::with_capacity(n_dev);
    for s in &sets {
        compute.push(ev.set_cost(s)?);
    }
    let (bottleneck, cost_ms) = ev.plan_times(&sets.iter().collect::<Vec<_>>(), &compute)?;
    let overflow = ev.overflow(&sets);
    let mut st = State { ev, pieces, sets, compute, cost_ms, overflow, bottleneck, reshape: config.reshape };
    let mut rng = ChaCha8Rng::seed_from_u64(ctx.seed);
    let mut evaluations = 0u64;
    let mut accepted = 0usize;
    'search: while accepted < config.max_passes {
        let progress = Progress {
            planner: "refine",
            step: accepted,
            max_steps: config.max_passes,
            best_cost_ms: (st.overflow == 0).then_some(st.cost_ms),
        };
        if !watch.report(progress) {
            st.ev.stats.stopped_early = true;
            break;
        }
        // A plan within memory is first changed where its bottleneck is; the rest of the neighbourhood
        // is looked at only when no such change helps. An overfull plan looks at everything at once.
        let parts: &[Focus] = if st.overflow == 0 && n_dev > 1 {
            &[Focus::Only(st.bottleneck), Focus::Except(st.bottleneck)]
        } else {
            &[Focus::All]
        };
        let mut improved = false;
        'parts: for &focus in parts {
            let mut changes = st.changes(focus);
            changes.shuffle(&mut rng);
            for c in changes {
                if evaluations >= config.max_evaluations {
                    break 'search;
                }
                evaluations += 1;
                if evaluations.is_multiple_of(256) && watch.out_of_time() {
                    st.ev.stats.stopped_early = true;
                    break 'search;
                }
                let (_, touched) = st.apply(c, false)?;
                let over = |d: usize, s: &DeviceSet| st.ev.over(s, d);
                let overflow = touched.iter().fold(st.overflow, |o, (d, s)| o - over(*d, &st.sets[*d]) + over(*d, s));
                if overflow > st.overflow {
                    continue;
                }
                let mut compute = st.compute.clone();
                let mut after: Vec<&DeviceSet> = st.sets.iter().collect();
                for (d, s) in &touched {
                    compute[*d] = st.ev.set_cost(s)?;
                    after[*d] = s;
                }
                let (bottleneck, cost_ms) = st.ev.plan_times(&after, &compute)?;
                let better = overflow < st.overflow || cost_ms < st.cost_ms - 1e-9 * st.cost_ms.abs().max(1.0);
                if better {
                    let (pieces, touched) = st.apply(c, true)?;
                    for (d, s) in touched {
                        st.sets[d] = s;
                    }
                    if let Some(pieces) = pieces {
                        st.pieces = pieces;
                    }
                    st.compute = compute;
                    st.cost_ms = cost_ms;
                    st.overflow = overflow;
                    st.bottleneck = bottleneck;
                    accepted += 1;
                    improved = true;
                    break 'parts;
                }
            }
        }
        if !improved {
            break;
        }
    }
    st.ev.stats.rounds = accepted as u64;
    let out: Vec<Piece> = st
        .pieces
        .iter()
        .map(|p| match p.rows {
            Some(r) => Piece::row_range(p.table, p.dim, p.device, r.offset, r.count),
            None => Piece::cols(p.table, p.off, p.dim, p.device),
        })
        .collect();
    Ok((Plan::new(task, out)?, st.ev.stats))
}

/// The gain floor of refining a plan the same cost model already searched for
/// ([`Refined::with_min_gain_sd`]): one standard deviation of the model's measured error of a device's
/// time. A search that has minimised a model's prediction sits where the model errs low; the further
/// gains a local search finds from there are drawn from the same errors, and on the CPU backend they
/// measured slower than the searched plan in every sitting, the largest predicted gains included
/// (docs/BENCHMARKS.md, "Refinement's gains against the model's error").
pub const SEARCHED_MIN_GAIN_SD: f64 = 1.0;

/// Any planner followed by [`refine`].
pub struct Refined {
    name: &'static str,
    inner: Box<dyn Planner>,
    /// Limits of the refinement.
    pub config: RefineConfig,
    /// The smallest predicted gain kept, in multiples of the cost model's measured error
    /// ([`crate::cost::CostModel::measured_error_sd`]); 0 keeps any gain.
    min_gain_sd: f64,
    stats: StatsCell,
}

impl Refined {
    /// `inner`, then refinement, registered as `name`.
    #[must_use]
    pub fn new(name: &'static str, inner: Box<dyn Planner>) -> Self {
        Self { name, inner, config: RefineConfig::default(), min_gain_sd: 0.0, stats: StatsCell::default() }
    }

    /// Keeps the refined plan only when the model predicts it cheaper than the inner planner's by at
    /// least `sd` times the model's measured relative error of a device's time
    /// ([`crate::cost::CostModel::measured_error_sd`]); otherwise the inner planner's plan is returned
    /// and [`SearchStats::declined_gain`] says why. A model with no measured error (the analytical
    /// model) keeps any gain, and so does an inner plan over memory (refinement repairs it).
    #[must_use]
    pub fn with_min_gain_sd(mut self, sd: f64) -> Self {
        self.min_gain_sd = sd;
        self
    }

    /// `inner`, then refinement by moves and swaps only ([`RefineConfig::reshape`] off), as `name`.
    #[must_use]
    pub fn placement_only(name: &'static str, inner: Box<dyn Planner>) -> Self {
        Self { config: RefineConfig { reshape: false, ..RefineConfig::default() }, ..Self::new(name, inner) }
    }
}

impl Planner for Refined {
    fn name(&self) -> &'static str {
        self.name
    }

    fn plan(&self, task: &Task, ctx: &PlanContext<'_>) -> Result<Plan> {
        let start_ms = ctx.budget.map(|b| (b.clock_ms)());
        // Where the inner planner finds nothing that fits, refinement starts from its closest plan and
        // may repair it (fewer bytes over always wins; a row-wise split can make a table fit); the plan
        // is returned only if it ends within memory.
        let (first, no_fit) = match self.inner.plan(task, ctx) {
            Ok(plan) => (plan, None),
            Err(e @ crate::error::Error::NoFit { .. }) => (self.inner.plan_best_effort(task, ctx)?, Some(e)),
            Err(e) => return Err(e),
        };
        // The refinement gets what the inner planner left of the budget.
        let budget = ctx.budget.zip(start_ms).map(|(b, start)| Budget {
            clock_ms: b.clock_ms,
            limit_ms: (b.limit_ms - ((b.clock_ms)() - start)).max(0.0),
        });
        let rest = PlanContext { cost_model: ctx.cost_model, seed: ctx.seed, budget, progress: ctx.progress };
        let (plan, mut stats) = if no_fit.is_none() && budget.is_some_and(|b| b.limit_ms <= 0.0) {
            // Nothing left to refine with: the inner plan as it is (pricing it would only overrun).
            (first, SearchStats { stopped_early: true, ..SearchStats::default() })
        } else {
            let (refined, mut stats) = refine(task, &first, &rest, &self.config)?;
            match self.declined(task, &first, &refined, ctx)? {
                Some(declined) => {
                    stats.declined_gain = Some(declined);
                    (first, stats)
                }
                None => (refined, stats),
            }
        };
        if let Some(e) = no_fit {
            // A device whose bytes cannot even be counted does not fit either.
            if !crate::memory::plan_violations(task, &plan).is_ok_and(|v| v.is_empty()) {
                return Err(e);
            }
        }
        if let Some(inner) = self.inner.last_stats() {
            stats.set_cache_hits += inner.set_cache_hits;
            stats.set_cache_misses += inner.set_cache_misses;
            stats.plan_evaluations += inner.plan_evaluations;
            stats.plan_memo_hits += inner.plan_memo_hits;
            stats.grid_searches += inner.grid_searches;
            stats.stopped_early |= inner.stopped_early;
        }
        self.stats.set(stats);
        Ok(plan)
    }

    fn last_stats(&self) -> Option<SearchStats> {
        self.stats.get()
    }
}

impl Refined {
    /// The refined plan's gain and the floor it fell short of, when the floor sends the inner planner's
    /// plan back ([`Refined::with_min_gain_sd`]); `None` when the refined plan stands.
    fn declined(
        &self,
        task: &Task,
        first: &Plan,
        refined: &Plan,
        ctx: &PlanContext<'_>,
    ) -> Result<Option<DeclinedGain>> {
        let Some(sd) = ctx.cost_model.measured_error_sd().filter(|_| self.min_gain_sd > 0.0) else {
            return Ok(None);
        };
        let floor = self.min_gain_sd * sd;
        let before = evaluate(task, first, ctx.cost_model, self.config.definition)?;
        if !before.feasible || before.cost_ms <= 0.0 {
            return Ok(None);
        }
        let after = evaluate(task, refined, ctx.cost_model, self.config.definition)?;
        let gain = 1.0 - after.cost_ms / before.cost_ms;
        Ok((gain < floor).then_some(DeclinedGain { gain, floor }))
    }
}
