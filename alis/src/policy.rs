//! Sharding policies: hash, range, static one-shot, periodic full re-partition, greedy incremental, light
//! incremental (`alis-base`) and ALIS. All share [`Placement`] and its capacity rule.

use std::collections::VecDeque;
use std::ops::Range;

use rand::SeedableRng;
use rand::rngs::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::AlisError;
use crate::partition::{Hypergraph, PartitionParams, UNASSIGNED, partition};
use crate::placement::{Placement, hash_shard};
use crate::stream::Stream;
use crate::weights::SparseWeights;

/// Names of all policies, in report order (the single registry the CLI reads).
pub const POLICY_NAMES: [&str; 8] = ["hash", "range", "static", "direct", "full", "greedy", "alis-base", "alis"];

/// Settings shared by all policies, with ALIS's own parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PolicyConfig {
    /// Number of shards S (1..=4096).
    pub shards: usize,
    /// Balance slack ε: at most ⌈(1+ε)·rows/S⌉ rows per shard.
    pub epsilon: f64,
    /// Refinement sweeps of the iterative partitioner.
    pub max_iters: usize,
    /// p of the probabilistic-fanout objective, in (0, 1].
    pub p_fanout: f64,
    /// Full re-partition period in windows (`full` policy).
    pub full_every: usize,
    /// The paper's incremental data ratio α: fraction of the latest window's requests that the light
    /// incremental step partitions, in (0, 1].
    pub incr_ratio: f64,
    /// The paper's age decay α(I), per window, in (0, 1]: all accumulated weights (ΔW and shard-set votes)
    /// of age `a` windows count `decay^a`.
    pub decay: f64,
    /// Aggregate history weight β in [0, 1]: score = (1−β)·current + β·history vote.
    pub beta: f64,
    /// Number of previous shard sets that vote (0 disables the aggregate step).
    pub history_sets: usize,
    /// Slots per row of the sparse weight matrix.
    pub top_k: usize,
    /// Light incremental sharding lets the window's rows take the room of cold rows (rows the window does not
    /// touch), which are then moved off overflowing shards, least recently touched first. Off, every row
    /// outside `D_new` keeps its shard and the window's rows share only the cap's slack.
    #[serde(default = "evict_cold_default")]
    pub evict_cold: bool,
    /// Seed of the policy's random choices (partitioner visit order).
    pub seed: u64,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            shards: 8,
            epsilon: 0.05,
            max_iters: 8,
            p_fanout: 0.5,
            full_every: 1,
            incr_ratio: 0.5,
            decay: 0.7,
            beta: 0.8,
            history_sets: 4,
            top_k: 4,
            evict_cold: true,
            seed: 0,
        }
    }
}

fn evict_cold_default() -> bool {
    true
}

impl PolicyConfig {
    /// Checks every field; the error names the field, its value and the allowed range.
    pub fn validate(&self) -> Result<(), AlisError> {
        let bad = |field: &'static str, value: String, allowed: &str| {
            Err(AlisError::InvalidParam { field, value, allowed: allowed.to_string() })
        };
        if !(1..=4096).contains(&self.shards) {
            return bad("shards", self.shards.to_string(), "1..=4096");
        }
        if !(self.epsilon >= 0.0 && self.epsilon <= 10.0) {
            return bad("epsilon", self.epsilon.to_string(), "[0, 10]");
        }
        if self.max_iters > 1000 {
            return bad("max_iters", self.max_iters.to_string(), "0..=1000");
        }
        if !(self.p_fanout > 0.0 && self.p_fanout <= 1.0) {
            return bad("p_fanout", self.p_fanout.to_string(), "(0, 1]");
        }
        if self.full_every == 0 {
            return bad("full_every", "0".into(), ">= 1");
        }
        if !(self.incr_ratio > 0.0 && self.incr_ratio <= 1.0) {
            return bad("incr_ratio", self.incr_ratio.to_string(), "(0, 1]");
        }
        if !(self.decay > 0.0 && self.decay <= 1.0) {
            return bad("decay", self.decay.to_string(), "(0, 1]");
        }
        if !(0.0..=1.0).contains(&self.beta) {
            return bad("beta", self.beta.to_string(), "[0, 1]");
        }
        if self.history_sets > 64 {
            return bad("history_sets", self.history_sets.to_string(), "0..=64");
        }
        if !(1..=64).contains(&self.top_k) {
            return bad("top_k", self.top_k.to_string(), "1..=64");
        }
        Ok(())
    }

    fn partition_params(&self, caps: Vec<usize>) -> PartitionParams {
        PartitionParams { shards: self.shards, caps, max_iters: self.max_iters, p_fanout: self.p_fanout }
    }
}

/// A dynamic sharding policy: sees windows of requests in order and keeps a [`Placement`] of all rows seen.
pub trait Policy {
    /// Registry name.
    fn name(&self) -> &'static str;
    /// Observes requests `window` of `stream` (all earlier requests were observed before) and updates the
    /// placement; afterwards every row occurring in requests `..window.end` is placed.
    fn update(&mut self, stream: &Stream, window: Range<usize>);
    /// The deployed placement.
    fn placement(&self) -> &Placement;
    /// Heap bytes of the policy's state (placement, weights, history).
    fn state_bytes(&self) -> usize;
}

/// Builds the policy registered under `name`.
pub fn make_policy(name: &str, cfg: &PolicyConfig) -> Result<Box<dyn Policy>, AlisError> {
    cfg.validate()?;
    let p = Placement::new(cfg.shards, cfg.epsilon);
    Ok(match name {
        "hash" => Box::new(HashPolicy { placement: p }),
        "range" => Box::new(RangePolicy { placement: p, bounds: None }),
        "static" => Box::new(FullPolicy::new(*cfg, p, Scope::First)),
        "direct" => Box::new(FullPolicy::new(*cfg, p, Scope::Latest)),
        "full" => Box::new(FullPolicy::new(*cfg, p, Scope::All)),
        "greedy" => {
            Box::new(GreedyPolicy { cfg: *cfg, placement: p, weights: SparseWeights::new(cfg.top_k, cfg.decay)? })
        }
        "alis-base" => Box::new(AlisPolicy::new(PolicyConfig { beta: 0.0, history_sets: 0, ..*cfg }, "alis-base")?),
        "alis" => Box::new(AlisPolicy::new(*cfg, "alis")?),
        other => {
            return Err(AlisError::UnknownPolicy { name: other.to_string(), known: POLICY_NAMES.join(", ") });
        }
    })
}

/// `id mod S`: new rows go to their hash shard (spilling only when the cap binds); rows never move.
struct HashPolicy {
    placement: Placement,
}

impl Policy for HashPolicy {
    fn name(&self) -> &'static str {
        "hash"
    }
    fn update(&mut self, stream: &Stream, window: Range<usize>) {
        self.placement.grow_hash(stream, stream.rows_known_after(window.end));
    }
    fn placement(&self) -> &Placement {
        &self.placement
    }
    fn state_bytes(&self) -> usize {
        self.placement.heap_bytes()
    }
}

/// Range sharding on (table id, row id): S contiguous key ranges fixed at the first update (equal row counts
/// of the rows known then); later rows go to their range, spilling under the cap.
struct RangePolicy {
    placement: Placement,
    bounds: Option<Vec<(u32, u64)>>,
}

impl Policy for RangePolicy {
    fn name(&self) -> &'static str {
        "range"
    }
    fn update(&mut self, stream: &Stream, window: Range<usize>) {
        let rows = stream.rows_known_after(window.end);
        let key = |r: usize| (stream.row_table(r as u32), stream.row_key(r as u32));
        let s_count = self.placement.shards();
        let bounds = self.bounds.get_or_insert_with(|| {
            let mut keys: Vec<(u32, u64)> = (0..rows).map(key).collect();
            keys.sort_unstable();
            (1..s_count).filter_map(|s| keys.get(s * keys.len() / s_count).copied()).collect()
        });
        let old = self.placement.len();
        self.placement.grow_hash(stream, rows);
        for r in old..rows {
            let k = key(r);
            let pref = bounds.partition_point(|b| *b <= k) as u16;
            self.placement.place(r as u32, &[pref]);
        }
    }
    fn placement(&self) -> &Placement {
        &self.placement
    }
    fn state_bytes(&self) -> usize {
        self.placement.heap_bytes() + self.bounds.as_ref().map_or(0, |b| b.capacity() * 16)
    }
}

/// Which requests a from-scratch partition reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// The first window only, once (`static`); later rows are placed by hash.
    First,
    /// The latest window, every update (`direct`: the paper's direct sharding, ALIS without its history).
    Latest,
    /// All requests so far, every `full_every` updates (`full`).
    All,
}

/// Partitions of all known rows from scratch: static one-shot, direct (latest window) or periodic full
/// re-partition. Rows the scope's requests do not touch are placed last, into the room left.
struct FullPolicy {
    cfg: PolicyConfig,
    placement: Placement,
    scope: Scope,
    updates: usize,
    rng: ChaCha8Rng,
}

impl FullPolicy {
    fn new(cfg: PolicyConfig, placement: Placement, scope: Scope) -> Self {
        FullPolicy { rng: ChaCha8Rng::seed_from_u64(cfg.seed), cfg, placement, scope, updates: 0 }
    }
}

impl Policy for FullPolicy {
    fn name(&self) -> &'static str {
        match self.scope {
            Scope::First => "static",
            Scope::Latest => "direct",
            Scope::All => "full",
        }
    }
    fn update(&mut self, stream: &Stream, window: Range<usize>) {
        let rows = stream.rows_known_after(window.end);
        let due = match self.scope {
            Scope::First => self.updates == 0,
            Scope::Latest => true,
            Scope::All => self.updates.is_multiple_of(self.cfg.full_every),
        };
        self.updates += 1;
        if !due {
            self.placement.grow_hash(stream, rows);
            return;
        }
        // Global dense ids over all known rows; the scope decides which requests are nets.
        let read = if self.scope == Scope::Latest { window } else { 0..window.end };
        let hg = Hypergraph::new(rows, read.map(|i| stream.request(i)));
        let params = self.cfg.partition_params(vec![self.placement.cap_for(rows); self.cfg.shards]);
        let (part, _) = partition(&hg, &vec![UNASSIGNED; rows], &params, &mut self.rng);
        let part = relabel(&part, self.placement.as_slice(), self.cfg.shards);
        self.placement.set_all(part);
    }
    fn placement(&self) -> &Placement {
        &self.placement
    }
    fn state_bytes(&self) -> usize {
        self.placement.heap_bytes()
    }
}

/// Renames the shards of a fresh partition to maximise the rows that stay where they are (greedy matching on
/// the overlap matrix, largest overlap first, ties by index): shard labels of a fresh partition are
/// arbitrary, and a real system would not move rows just to rename shards.
fn relabel(new: &[u16], old: &[u16], s_count: usize) -> Vec<u16> {
    let mut overlap = vec![0usize; s_count * s_count];
    for (&n, &o) in new.iter().zip(old) {
        overlap[n as usize * s_count + o as usize] += 1;
    }
    let mut pairs: Vec<(usize, usize, usize)> =
        (0..s_count * s_count).map(|i| (overlap[i], i / s_count, i % s_count)).collect();
    pairs.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let mut map = vec![u16::MAX; s_count];
    let mut used = vec![false; s_count];
    for (_, n, o) in pairs {
        if map[n] == u16::MAX && !used[o] {
            map[n] = o as u16;
            used[o] = true;
        }
    }
    new.iter().map(|&n| map[n as usize]).collect()
}

/// Shards of `row` ordered by decreasing score (ties by shard index), and the margin best − second best.
fn ranked(scores: &mut [(u16, f64)]) -> f64 {
    scores.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    match scores {
        [] => 0.0,
        [one] => one.1,
        [a, b, ..] => a.1 - b.1,
    }
}

/// `x` as an integer whose unsigned order is `f64::total_cmp`'s order.
fn total_order_key(x: f64) -> u64 {
    let bits = x.to_bits();
    if bits >> 63 == 1 { !bits } else { bits | (1 << 63) }
}

/// Rows to re-place with their ranked shard preferences, in flat buffers (no allocation per row).
struct Scored {
    /// (row, margin, start and end of its preferences in `prefs`).
    rows: Vec<(u32, f64, usize, usize)>,
    prefs: Vec<u16>,
}

impl Scored {
    fn with_capacity(rows: usize, per_row: usize) -> Self {
        Scored { rows: Vec::with_capacity(rows), prefs: Vec::with_capacity(rows * per_row) }
    }

    /// Ranks `scores` and records the row's preferences.
    fn push(&mut self, row: u32, scores: &mut [(u16, f64)]) {
        let margin = ranked(scores);
        let start = self.prefs.len();
        self.prefs.extend(scores.iter().map(|x| x.0));
        self.rows.push((row, margin, start, self.prefs.len()));
    }

    /// Re-places the rows in decreasing margin order (ties by row), each to its best shard with room.
    fn place(mut self, placement: &mut Placement) {
        // Rows are distinct, so the order is total and an unstable sort gives the same result. Integer keys
        // (the margin's total order, inverted for decreasing) sort faster than comparing floats.
        self.rows.sort_unstable_by_key(|x| (!total_order_key(x.1), x.0));
        let cap = placement.cap();
        for &(row, _, start, end) in &self.rows {
            placement.place_under(row, &self.prefs[start..end], cap);
        }
    }
}

/// Greedy incremental: every row of a request votes for the current shards of its co-requested rows
/// (weight `1/(|r|−1)` per neighbour) into a decayed sparse W; touched rows go to argmax W under the cap.
struct GreedyPolicy {
    cfg: PolicyConfig,
    placement: Placement,
    weights: SparseWeights,
}

impl Policy for GreedyPolicy {
    fn name(&self) -> &'static str {
        "greedy"
    }
    fn update(&mut self, stream: &Stream, window: Range<usize>) {
        let rows = stream.rows_known_after(window.end);
        self.placement.grow_hash(stream, rows);
        self.weights.ensure_rows(rows);
        self.weights.age();
        let mut count = vec![0u32; self.cfg.shards];
        let mut touched: Vec<u32> = Vec::new();
        for i in window {
            let req = stream.request(i);
            touched.extend_from_slice(req);
            if req.len() < 2 {
                continue;
            }
            count.fill(0);
            for &r in req {
                count[self.placement.as_slice()[r as usize] as usize] += 1;
            }
            let w = 1.0 / (req.len() - 1) as f64;
            for &r in req {
                let own = self.placement.as_slice()[r as usize] as usize;
                for (s, &c) in count.iter().enumerate() {
                    let c = c - u32::from(s == own);
                    if c > 0 {
                        self.weights.add(r, s as u16, w * f64::from(c));
                    }
                }
            }
        }
        touched.sort_unstable();
        touched.dedup();
        let mut scored = Scored::with_capacity(touched.len(), self.cfg.top_k);
        let mut sc: Vec<(u16, f64)> = Vec::with_capacity(self.cfg.top_k);
        for r in touched {
            sc.clear();
            sc.extend(self.weights.row(r));
            scored.push(r, &mut sc);
        }
        scored.place(&mut self.placement);
    }
    fn placement(&self) -> &Placement {
        &self.placement
    }
    fn state_bytes(&self) -> usize {
        self.placement.heap_bytes() + self.weights.heap_bytes()
    }
}

/// ALIS: light incremental sharding (iterative partition of the newest `incr_ratio` of the window, warm-
/// started from the deployed placement, accumulated into the sparse W) plus aggregate based sharding (a soft
/// vote of the current and the last `history_sets` interim shard sets, weighted by `decay^age / C` where C is
/// the set's fanout on the held-out part of the latest window, mixed in with weight β). With β = 0 or no
/// history it is plain light incremental (`alis-base`).
struct AlisPolicy {
    name: &'static str,
    cfg: PolicyConfig,
    placement: Placement,
    weights: SparseWeights,
    rng: ChaCha8Rng,
    /// Interim shard set: argmax W per row (the light-incremental result before aggregation).
    interim: Vec<u16>,
    /// Undo logs of `interim`, newest first: the rows each update changed with their previous interim
    /// shard, and the number of rows known before that update.
    undo: VecDeque<(usize, Vec<(u32, u16)>)>,
    /// Which rows the latest window touched, and when each row was last touched.
    index: WindowIndex,
}

/// The voting shard sets on the `D_new` rows, one column per set, youngest first: set `i` votes
/// `sets[i].0` for shard `shards[i · n + l]` of local row `l` if the row was known to it (global row
/// `< sets[i].1`).
struct Votes {
    n: usize,
    shards: Vec<u16>,
    sets: Vec<(f64, usize)>,
}

impl Votes {
    fn with_capacity(n: usize, sets: usize) -> Self {
        Votes { n, shards: Vec::with_capacity(n * sets), sets: Vec::with_capacity(sets) }
    }

    /// Adds a set: its shards for the `D_new` rows, its vote weight, and the rows it knew.
    fn push(&mut self, shards: &[u16], weight: f64, known: usize) {
        self.shards.extend_from_slice(&shards[..self.n]);
        self.sets.push((weight, known));
    }

    /// The votes of local row `l` (global `row`) per shard, summed over the sets in order, into `out`.
    fn of(&self, l: usize, row: u32, out: &mut Vec<(u16, f64)>) {
        out.clear();
        for (i, &(weight, known)) in self.sets.iter().enumerate() {
            if (row as usize) < known {
                let shard = self.shards[i * self.n + l];
                match out.iter_mut().find(|x| x.0 == shard) {
                    Some(x) => x.1 += weight,
                    None => out.push((shard, weight)),
                }
            }
        }
    }
}

/// The latest window in local ids: rows of `D_new` first (`0..n_new_rows`), then the window's other rows.
struct LocalWindow {
    rows: Vec<u32>,
    n_new_rows: usize,
    /// Requests of `D_new` (local ids), flat: request `q` is `new_pins[new_offsets[q]..new_offsets[q + 1]]`.
    new_offsets: Vec<usize>,
    new_pins: Vec<u32>,
    /// Requests used to score shard sets: the window minus `D_new` (all of it when `D_new` is the whole window).
    holdout_offsets: Vec<usize>,
    holdout_pins: Vec<u32>,
}

/// Per-row window bookkeeping of ALIS, dense over all known rows (8 bytes per row): the last update whose
/// window touched the row (`0` = none yet), and the row's local id in that window. A row is in the current
/// window exactly when its stamp is the current update's, so nothing is reset between updates.
#[derive(Debug, Default)]
struct WindowIndex {
    seen: Vec<u32>,
    local: Vec<u32>,
    /// The current update, counted from 1.
    now: u32,
}

impl WindowIndex {
    /// Starts a new update over `rows` known rows.
    fn next_update(&mut self, rows: usize) {
        self.now += 1;
        if self.seen.len() < rows {
            self.seen.resize(rows, 0);
            self.local.resize(rows, 0);
        }
    }

    /// Local id of `row` in the current window; a row met for the first time in this window gets the next id
    /// and is appended to `rows` (the window's rows in local-id order).
    fn intern(&mut self, row: u32, rows: &mut Vec<u32>) -> u32 {
        let i = row as usize;
        if self.seen[i] != self.now {
            self.seen[i] = self.now;
            self.local[i] = rows.len() as u32;
            rows.push(row);
        }
        self.local[i]
    }

    /// Local id of `row` in the current window, if the window touches it.
    fn local_of(&self, row: u32) -> Option<u32> {
        (self.seen.get(row as usize) == Some(&self.now)).then(|| self.local[row as usize])
    }

    fn heap_bytes(&self) -> usize {
        (self.seen.capacity() + self.local.capacity()) * 4
    }
}

impl LocalWindow {
    /// Reads the window and stamps its rows in `index` (which must cover every row the window touches).
    fn new(stream: &Stream, window: &Range<usize>, d_new: &Range<usize>, index: &mut WindowIndex) -> Self {
        let holdout = if d_new.start > window.start { window.start..d_new.start } else { window.clone() };
        let pins = |r: &Range<usize>| r.clone().map(|i| stream.request(i).len()).sum::<usize>();
        let (new_pins, holdout_pins) = (pins(d_new), pins(&holdout));
        let mut lw = LocalWindow {
            rows: Vec::with_capacity(new_pins + holdout_pins),
            n_new_rows: 0,
            new_offsets: Vec::with_capacity(d_new.len() + 1),
            new_pins: Vec::with_capacity(new_pins),
            holdout_offsets: Vec::with_capacity(holdout.len() + 1),
            holdout_pins: Vec::with_capacity(holdout_pins),
        };
        lw.new_offsets.push(0);
        lw.holdout_offsets.push(0);
        for i in d_new.clone() {
            for &r in stream.request(i) {
                let l = index.intern(r, &mut lw.rows);
                lw.new_pins.push(l);
            }
            lw.new_offsets.push(lw.new_pins.len());
        }
        lw.n_new_rows = lw.rows.len();
        for i in holdout {
            for &r in stream.request(i) {
                let l = index.intern(r, &mut lw.rows);
                lw.holdout_pins.push(l);
            }
            lw.holdout_offsets.push(lw.holdout_pins.len());
        }
        lw
    }

    /// Mean fanout of the held-out requests when local row `l` is on `shard[l]`.
    /// `stamp` is scratch of one entry per shard; a shard counts once per request when its stamp is not yet the
    /// request's, so the cost is O(pins) whatever S.
    fn holdout_fanout(&self, shard: &[u16], stamp: &mut [u32]) -> f64 {
        stamp.fill(0);
        let mut total = 0usize;
        let n = self.holdout_offsets.len() - 1;
        for q in 0..n {
            let mark = q as u32 + 1;
            for &l in &self.holdout_pins[self.holdout_offsets[q]..self.holdout_offsets[q + 1]] {
                let s = &mut stamp[usize::from(shard[l as usize])];
                if *s != mark {
                    *s = mark;
                    total += 1;
                }
            }
        }
        (total as f64 / n.max(1) as f64).max(1.0)
    }
}

impl AlisPolicy {
    fn new(cfg: PolicyConfig, name: &'static str) -> Result<Self, AlisError> {
        cfg.validate()?;
        Ok(AlisPolicy {
            name,
            cfg,
            placement: Placement::new(cfg.shards, cfg.epsilon),
            weights: SparseWeights::new(cfg.top_k, cfg.decay)?,
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            interim: Vec::new(),
            undo: VecDeque::new(),
            index: WindowIndex::default(),
        })
    }

    /// Argmax of W for `row` (ties to the lower shard), if the row has weight.
    fn w_argmax(&self, row: u32) -> Option<u16> {
        let mut best: Option<(u16, f64)> = None;
        for (s, w) in self.weights.row(row) {
            if best.is_none_or(|(bs, bw)| w > bw || (w == bw && s < bs)) {
                best = Some((s, w));
            }
        }
        best.map(|b| b.0)
    }

    /// Moves `excess[s]` cold rows (rows the latest window did not touch) off every overflowing shard `s`: the
    /// least recently touched first (ties by row), each to the least loaded shard. The rows were set aside
    /// and not taken back, so they are counted nowhere until re-inserted. One sequential pass over the
    /// placement, only when some shard overflows.
    fn evict(&mut self, excess: &[usize]) {
        if excess.iter().all(|&e| e == 0) {
            return;
        }
        let mut candidates: Vec<Vec<(u32, u32)>> = vec![Vec::new(); excess.len()];
        let now = self.index.now;
        for (r, (&s, &seen)) in self.placement.as_slice().iter().zip(&self.index.seen).enumerate() {
            if seen != now && excess[s as usize] > 0 {
                candidates[s as usize].push((seen, r as u32));
            }
        }
        let mut out: Vec<(u32, u32)> = Vec::new();
        for (c, &e) in candidates.iter_mut().zip(excess) {
            if e > 0 && e < c.len() {
                c.select_nth_unstable(e);
            }
            out.extend_from_slice(&c[..e.min(c.len())]);
        }
        out.sort_unstable();
        for (_, r) in out {
            self.placement.relocate(r);
        }
    }

    /// Soft votes for the `D_new` rows (local ids `0..n_new_rows`) from the current interim set (age 0) and the
    /// previous `history_sets` interim sets (age `a` as it was `a` updates ago); each set votes
    /// `decay^age / C`. Rows unknown to an old set (discovered later) get no vote from it.
    /// `interim_new[l]` is argmax W of `D_new` row `l` after this update's ΔW.
    fn votes(&self, stream: &Stream, lw: &LocalWindow, interim_new: &[u16]) -> Votes {
        let s_count = self.cfg.shards;
        let known_now = self.interim.len();
        let stride = self.cfg.history_sets + 1;
        let mut votes = Votes::with_capacity(lw.n_new_rows, stride);
        // Age 1: the interim before this update (rows unknown then are served by hash).
        let mut cur: Vec<u16> = lw
            .rows
            .iter()
            .map(|&r| self.interim.get(r as usize).copied().unwrap_or_else(|| hash_shard(stream, r, s_count)))
            .collect();
        // Age 0: this update's interim (argmax W for `D_new` rows, unchanged elsewhere).
        let mut now = cur.clone();
        now[..lw.n_new_rows].copy_from_slice(interim_new);
        let mut stamp = vec![0u32; s_count];
        votes.push(&now, 1.0 / lw.holdout_fanout(&now, &mut stamp), usize::MAX);
        // The window's rows that some older set did not know yet, newest first, with their hash shard: an
        // older set serves them by hash. Computed once rather than per set.
        let oldest_known = self.undo.iter().map(|u| u.0).min();
        let mut fresh: Vec<(u32, u32, u16)> = match oldest_known {
            Some(k) => lw
                .rows
                .iter()
                .enumerate()
                .filter(|&(_, &r)| r as usize >= k)
                .map(|(l, &r)| (r, l as u32, hash_shard(stream, r, s_count)))
                .collect(),
            None => Vec::new(),
        };
        fresh.sort_unstable_by_key(|x| std::cmp::Reverse(x.0));
        let mut known = known_now;
        let mut decay = 1.0;
        for age in 1..=self.cfg.history_sets {
            if age > 1 {
                let Some((known_before, log)) = self.undo.get(age - 2) else {
                    break;
                };
                for &(row, old) in log {
                    if let Some(l) = self.index.local_of(row) {
                        cur[l as usize] = old;
                    }
                }
                known = *known_before;
                for &(_, l, h) in fresh.iter().take_while(|x| x.0 as usize >= known) {
                    cur[l as usize] = h;
                }
            }
            if known == 0 {
                break;
            }
            decay *= self.cfg.decay;
            votes.push(&cur, decay / lw.holdout_fanout(&cur, &mut stamp), known);
        }
        votes
    }
}

impl Policy for AlisPolicy {
    fn name(&self) -> &'static str {
        self.name
    }

    fn update(&mut self, stream: &Stream, window: Range<usize>) {
        let known_before = self.placement.len();
        let rows = stream.rows_known_after(window.end);
        self.placement.grow_hash(stream, rows);
        self.weights.ensure_rows(rows);
        let n_new = ((window.len() as f64 * self.cfg.incr_ratio).ceil() as usize).clamp(1, window.len().max(1));
        let d_new = window.end.saturating_sub(n_new).max(window.start)..window.end;
        self.index.next_update(rows);
        let lw = LocalWindow::new(stream, &window, &d_new, &mut self.index);
        let n_local = lw.n_new_rows;
        // Warm start from the deployed placement; rows first seen in this update start unassigned.
        let init: Vec<u16> = lw.rows[..n_local]
            .iter()
            .map(|&r| if (r as usize) < known_before { self.placement.as_slice()[r as usize] } else { UNASSIGNED })
            .collect();
        let hg = Hypergraph::new(n_local, lw.new_offsets.windows(2).map(|w| &lw.new_pins[w[0]..w[1]]));
        // The local partition may use what the global cap leaves each shard once the rows it does not move are
        // counted where they are: the real constraint, rather than balancing the window on its own. With
        // `evict_cold`, only the window's other rows count; rows the window does not touch (cold rows) give
        // way and are moved out afterwards where their shard overflows.
        let cap = self.placement.cap();
        let mut fixed = self.placement.loads().to_vec();
        let mut cold = vec![0usize; self.cfg.shards];
        for &r in &lw.rows[..n_local] {
            fixed[self.placement.as_slice()[r as usize] as usize] -= 1;
        }
        if self.cfg.evict_cold {
            cold.clone_from(&fixed);
            for &r in &lw.rows[n_local..] {
                cold[self.placement.as_slice()[r as usize] as usize] -= 1;
            }
            for (f, c) in fixed.iter_mut().zip(&cold) {
                *f -= c;
            }
        }
        let params = self.cfg.partition_params(fixed.iter().map(|&f| cap.saturating_sub(f)).collect());
        let (local, _) = partition(&hg, &init, &params, &mut self.rng);
        // ΔW = 1 on the local result; older evidence decays by `decay` per window.
        self.weights.age();
        for (l, &r) in lw.rows[..n_local].iter().enumerate() {
            self.weights.add(r, local[l], 1.0);
        }
        // This update's interim set on `D_new` (every row of it just got weight, so W has an argmax), and the
        // votes of the history sets.
        let (interim_new, votes) = if self.cfg.history_sets > 0 {
            let interim: Vec<u16> =
                lw.rows[..n_local].iter().zip(&local).map(|(&r, &s)| self.w_argmax(r).unwrap_or(s)).collect();
            let votes = self.votes(stream, &lw, &interim);
            (interim, Some(votes))
        } else {
            (Vec::new(), None)
        };
        let beta = self.cfg.beta;
        let per_row = self.cfg.top_k + self.cfg.history_sets + 1;
        let mut scored = Scored::with_capacity(n_local, per_row);
        let mut sc: Vec<(u16, f64)> = Vec::with_capacity(per_row);
        let mut v: Vec<(u16, f64)> = Vec::with_capacity(self.cfg.history_sets + 1);
        for (l, &r) in lw.rows[..n_local].iter().enumerate() {
            sc.clear();
            sc.extend(self.weights.row(r));
            let w_sum: f64 = sc.iter().map(|x| x.1).sum();
            for x in &mut sc {
                x.1 = (1.0 - beta) * (x.1 / w_sum);
            }
            if let Some(votes) = votes.as_ref() {
                votes.of(l, r, &mut v);
            }
            if !v.is_empty() {
                let v_sum: f64 = v.iter().map(|x| x.1).sum();
                for &(s, w) in &v {
                    let add = beta * (w / v_sum);
                    match sc.iter_mut().find(|x| x.0 == s) {
                        Some(x) => x.1 += add,
                        None => sc.push((s, add)),
                    }
                }
            }
            scored.push(r, &mut sc);
        }
        self.placement.set_aside(&cold);
        scored.place(&mut self.placement);
        let excess = self.placement.take_back(&cold);
        self.evict(&excess);
        // Commit this update's interim set (argmax W of the rows just partitioned) and log what it replaced.
        if self.cfg.history_sets > 0 {
            let old_len = self.interim.len();
            self.interim.extend_from_slice(&self.placement.as_slice()[old_len..rows]);
            let mut log = Vec::new();
            for (&r, &s) in lw.rows[..n_local].iter().zip(&interim_new) {
                let old = self.interim[r as usize];
                if old != s {
                    self.interim[r as usize] = s;
                    log.push((r, old));
                }
            }
            self.undo.push_front((old_len, log));
            self.undo.truncate(self.cfg.history_sets.saturating_sub(1));
        }
    }

    fn placement(&self) -> &Placement {
        &self.placement
    }

    fn state_bytes(&self) -> usize {
        let undo: usize = self.undo.iter().map(|(_, m)| m.capacity() * 8).sum();
        self.placement.heap_bytes()
            + self.weights.heap_bytes()
            + self.interim.capacity() * 2
            + undo
            + self.index.heap_bytes()
    }
}
