//! Row-sharding strategies: the trait, their shared settings and the one registry ([`STRATEGY_NAMES`],
//! [`make_strategy`]). The baselines (hash, range, static one-shot, direct, periodic full re-partition, greedy
//! incremental) are in `baselines.rs`, ALIS and its light incremental step alone (`alis-base`) in
//! `adaptive.rs`. All share [`Placement`] and its capacity rule.

mod adaptive;
mod baselines;

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::AlisError;
use crate::partition::{PartitionParams, Partitioner};
use crate::placement::Placement;
use crate::stream::Stream;
use crate::weights::SparseWeights;
use adaptive::AlisStrategy;
use baselines::{FullStrategy, GreedyStrategy, HashStrategy, RangeStrategy};
pub use baselines::{Scope, decayed_partition_input, scope_partition_input};

/// Names of all strategies, in report order (the single registry the CLI reads).
pub const STRATEGY_NAMES: [&str; 8] = ["hash", "range", "static", "direct", "full", "greedy", "alis-base", "alis"];

/// Settings shared by all strategies, with ALIS's own parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StrategyConfig {
    /// Number of shards S (1..=4096).
    pub shards: usize,
    /// Balance slack ε: at most ⌈(1+ε)·rows/S⌉ rows per shard.
    pub epsilon: f64,
    /// Refinement sweeps of the iterative partitioner.
    pub max_iters: usize,
    /// p of the probabilistic-fanout objective, in (0, 1].
    pub p_fanout: f64,
    /// Full re-partition period in windows (`full` strategy).
    pub full_every: usize,
    /// Age decay of `full`'s history, per window, in (0, 1]: a request `a` windows older than the latest
    /// weighs `full_decay^a` in the partition (1: all history undecayed). Reports written before this
    /// setting existed read as 1.
    #[serde(default = "full_decay_default")]
    pub full_decay: f64,
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
    /// Previous windows whose requests the light incremental step partitions together with `D_new`
    /// (0: `D_new` alone, as the paper; reports written before this setting existed read as 0).
    #[serde(default)]
    pub history_windows: usize,
    /// ALIS's global step: every `global_every` updates (0: never), in place of the light step, a V-cycle
    /// across shards of the deployed placement on the requests of the last `global_windows` windows
    /// ([`crate::partition::vcycle`]). Reports written before this setting existed read as 0.
    #[serde(default)]
    pub global_every: usize,
    /// Windows the global step reads, the latest included (0: all requests so far).
    #[serde(default = "global_windows_default")]
    pub global_windows: usize,
    /// ALIS's aggregate step ends with a polish: label propagation from the voted placement
    /// ([`crate::partition::polish`]) over the requests the update read (`D_new` and the previous windows)
    /// and the window's held-out part, within the same caps. Off (the paper's ALIS), rows stay where the
    /// vote put them. No effect without an aggregate step (β = 0 or no history sets), so `alis-base` is
    /// unchanged. Reports written before this setting existed read as off.
    #[serde(default)]
    pub polish: bool,
    /// Slots per row of the sparse weight matrix.
    pub top_k: usize,
    /// Light incremental sharding lets the window's rows take the room of cold rows (rows the window does not
    /// touch), which are then moved off overflowing shards, least recently touched first. Off, every row
    /// outside `D_new` keeps its shard and the window's rows share only the cap's slack.
    #[serde(default = "evict_cold_default")]
    pub evict_cold: bool,
    /// The partitioner of `static`, `direct`, `full` and ALIS's light incremental step.
    #[serde(default)]
    pub partitioner: Partitioner,
    /// Seed of the strategy's random choices (partitioner visit order).
    pub seed: u64,
}

impl Default for StrategyConfig {
    fn default() -> Self {
        StrategyConfig {
            shards: 8,
            epsilon: 0.05,
            max_iters: 8,
            p_fanout: 0.5,
            full_every: 1,
            full_decay: full_decay_default(),
            incr_ratio: 0.5,
            decay: 0.7,
            beta: 0.8,
            history_sets: 4,
            history_windows: 1,
            global_every: 0,
            global_windows: global_windows_default(),
            polish: false,
            top_k: 4,
            evict_cold: true,
            partitioner: Partitioner::Multilevel,
            seed: 0,
        }
    }
}

fn evict_cold_default() -> bool {
    true
}

fn full_decay_default() -> f64 {
    1.0
}

fn global_windows_default() -> usize {
    8
}

impl StrategyConfig {
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
        if !(self.full_decay > 0.0 && self.full_decay <= 1.0) {
            return bad("full_decay", self.full_decay.to_string(), "(0, 1]");
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
        if self.history_windows > 64 {
            return bad("history_windows", self.history_windows.to_string(), "0..=64");
        }
        if self.global_every > 1_000_000 {
            return bad("global_every", self.global_every.to_string(), "0..=1000000");
        }
        if self.global_windows > 1_000_000 {
            return bad("global_windows", self.global_windows.to_string(), "0..=1000000 (0: all history)");
        }
        if !(1..=64).contains(&self.top_k) {
            return bad("top_k", self.top_k.to_string(), "1..=64");
        }
        Ok(())
    }

    fn partition_params(&self, caps: Vec<usize>) -> PartitionParams {
        PartitionParams {
            shards: self.shards,
            caps,
            max_iters: self.max_iters,
            p_fanout: self.p_fanout,
            partitioner: self.partitioner,
        }
    }
}

/// A dynamic sharding strategy: sees windows of requests in order and keeps a [`Placement`] of all rows seen.
pub trait Strategy {
    /// Registry name.
    fn name(&self) -> &'static str;
    /// Observes requests `window` of `stream` (all earlier requests were observed before) and updates the
    /// placement; afterwards every row occurring in requests `..window.end` is placed. Errors only when the
    /// strategy's partitioner refuses its input (which the strategies build valid by construction).
    fn update(&mut self, stream: &Stream, window: Range<usize>) -> Result<(), AlisError>;
    /// The deployed placement.
    fn placement(&self) -> &Placement;
    /// Heap bytes of the strategy's state (placement, weights, history).
    fn state_bytes(&self) -> usize;
}

/// Builds the strategy registered under `name`.
pub fn make_strategy(name: &str, cfg: &StrategyConfig) -> Result<Box<dyn Strategy>, AlisError> {
    cfg.validate()?;
    let p = Placement::new(cfg.shards, cfg.epsilon);
    Ok(match name {
        "hash" => Box::new(HashStrategy { placement: p }),
        "range" => Box::new(RangeStrategy { placement: p, bounds: None }),
        "static" => Box::new(FullStrategy::new(*cfg, p, Scope::First)),
        "direct" => Box::new(FullStrategy::new(*cfg, p, Scope::Latest)),
        "full" => Box::new(FullStrategy::new(*cfg, p, Scope::All)),
        "greedy" => {
            Box::new(GreedyStrategy { cfg: *cfg, placement: p, weights: SparseWeights::new(cfg.top_k, cfg.decay)? })
        }
        "alis-base" => Box::new(AlisStrategy::new(StrategyConfig { beta: 0.0, history_sets: 0, ..*cfg }, "alis-base")?),
        "alis" => Box::new(AlisStrategy::new(*cfg, "alis")?),
        other => {
            return Err(AlisError::UnknownStrategy { name: other.to_string(), known: STRATEGY_NAMES.join(", ") });
        }
    })
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

/// Rows to re-place with their ranked shard preferences, in flat buffers (no allocation per row); greedy and
/// ALIS place through it.
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
