//! Memory tiers: a table in HBM, or in host DRAM behind an HBM cache (TorchRec's `fused_uvm_caching`
//! with a `cache_load_factor`), what its cache misses cost, and the choice of tier and cache share per
//! table when the tables do not fit in HBM.
//!
//! **The miss model.** A table's 17 access bins (SPEC section 2) say which share of its accessed rows
//! falls in each access-count range: bin `k` holds rows accessed `(2^(k−1), 2^k]` times (bin 0 once),
//! taken at the range's middle (`1`, then `1.5 · 2^(k−1)`). A cache of a share `c` of the rows holds the
//! hottest rows, so its hit rate is the share of accesses that go to the hottest `c` of the rows
//! ([`hit_rate`]), counting every row as accessed (the bins do not say how many rows are never read, so
//! the rate is a lower bound). Every miss fetches its row over the device's link to host memory and
//! writes the row it evicts back (2 row transfers), so a piece serving `B · pf · f` lookups per step
//! (global batch `B`, pooling factor `pf`, the piece's share `f` of the table's rows) pays
//! ```text
//! miss_ms = B · pf · f · (1 − hit_rate) · 2 · dim · element bytes / host_link_bw
//! ```
//! on top of what the cost model charges for the piece in HBM (the hits are served from the cache at HBM
//! speed). A table in host DRAM with no cache (TorchRec's `fused_uvm`) has a hit rate of 0: every lookup
//! reads its row over the link, and the fused optimizer writes it back. Every cost model prices a cached piece this way; TorchRec's port keeps TorchRec's own
//! estimate. The link defaults to TorchRec's `HBM_TO_DDR_MEM_BW` (32 GiB/s) unless the task's topology
//! names one.
//!
//! **The choice** ([`assign`]). When the tables need more HBM than the devices have (their weights,
//! optimizer state and buffers over a fill target of the usable bytes), tables move to host DRAM at
//! the cache share that frees HBM most cheaply: starting from every table in HBM, the option (table,
//! share) with the least added miss time per byte of HBM freed is taken, repeatedly, until the rest
//! fits; host memory with no cache is the last option, for a table whose cache state alone is too much.
//! Tables the user placed (a `cache_load_factor` or `compute_kernel` in the input) keep their tier.

use crate::cost::PieceRef;
use crate::error::{Error, Result};
use crate::table::{NUM_BINS, TableSpec, Tier};
use crate::task::Task;

/// TorchRec's `HBM_TO_DDR_MEM_BW`, bytes per second: the device–host link when the topology names none.
pub const DEFAULT_HOST_LINK_BW: f64 = 32.0 * 1024.0 * 1024.0 * 1024.0;

/// The cache shares the choice considers.
pub const CACHE_SHARES: [f64; 7] = [0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5];

/// Share of accesses to the hottest `cache_share` of `table`'s rows (1 for a table with no lookups).
#[must_use]
pub fn hit_rate(table: &TableSpec, cache_share: f64) -> f64 {
    let count = |k: usize| if k == 0 { 1.0 } else { 1.5 * f64::from(1u32 << (k - 1)) };
    let total: f64 = (0..NUM_BINS).map(|k| table.bins[k] * count(k)).sum();
    if total <= 0.0 {
        return 1.0;
    }
    let mut room = cache_share.clamp(0.0, 1.0);
    let mut hits = 0.0;
    for k in (0..NUM_BINS).rev() {
        let take = table.bins[k].min(room);
        hits += take * count(k);
        room -= take;
        if room <= 0.0 {
            break;
        }
    }
    (hits / total).clamp(0.0, 1.0)
}

/// The device–host link of `task`, bytes per second.
#[must_use]
pub fn host_link_bw(task: &Task) -> f64 {
    task.topology.as_ref().and_then(|t| t.host_link_bw_bytes_per_s).unwrap_or(DEFAULT_HOST_LINK_BW)
}

/// What a piece's cache misses add to its compute per step, ms (0 for a piece of a table in HBM).
#[must_use]
pub fn miss_ms(piece: &PieceRef<'_>, global_batch: u64, host_link_bw: f64) -> f64 {
    let Some(clf) = piece.table.tier.hbm_row_share() else { return 0.0 };
    let lookups = global_batch as f64 * piece.pooling_factor();
    let row_bytes = f64::from(piece.dim) * piece.table.dtype.bytes() as f64;
    lookups * (1.0 - hit_rate(piece.table, clf)) * 2.0 * row_bytes / host_link_bw * 1e3
}

/// The misses of a device's pieces together, ms, at `model`'s global batch (0 without cached pieces);
/// an error when a piece is cached and the model does not say its batch.
pub fn set_miss_ms(set: &[PieceRef<'_>], model: &dyn crate::cost::CostModel, host_link_bw: f64) -> Result<f64> {
    if !set.iter().any(|p| p.table.in_host_memory()) {
        return Ok(0.0);
    }
    let batch = model.global_batch().ok_or_else(|| Error::CostModel {
        model: model.name(),
        message: "the model does not say its global batch, so the misses of tables in host memory cannot be priced"
            .into(),
    })?;
    Ok(set.iter().map(|p| miss_ms(p, batch, host_link_bw)).sum())
}

/// Tiers a planner may choose from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TierMode {
    /// Keep tables in HBM unless they do not fit, then choose tiers ([`assign`]).
    #[default]
    Auto,
    /// HBM only (tables the user cached stay cached).
    Hbm,
}

impl TierMode {
    /// Parses `auto` or `hbm`.
    pub fn parse(text: &str) -> Result<Self> {
        match text {
            "auto" => Ok(Self::Auto),
            "hbm" => Ok(Self::Hbm),
            _ => Err(Error::field("tiers", "tiers", format!("{text:?}"), "auto or hbm")),
        }
    }
}

/// HBM a table needs whole under `task`'s rule (weights, optimizer state, buffers, cache state).
fn hbm_need(task: &Task, t: &TableSpec) -> Result<u128> {
    Ok(u128::from(task.block_bytes(t, t.rows, t.dim)?))
}

/// A table's move to another tier: the tier, its HBM need and miss time, and the score ranking it.
struct Move {
    score: f64,
    tier: Tier,
    need: u128,
    miss_ms: f64,
}

/// The best move of `t` (now needing `need` bytes of HBM and adding `miss` ms of misses): the first of
/// its smaller cache shares — and, once it has the smallest, no cache — with the least added miss time
/// per byte of HBM freed; `None` when no move frees HBM.
fn next_move(task: &Task, t: &TableSpec, need: u128, miss: f64, global_batch: u64, link: f64) -> Result<Option<Move>> {
    let now = t.tier.hbm_row_share().unwrap_or(1.0);
    let options = CACHE_SHARES.iter().filter(|&&c| c < now).map(|&c| Tier::Cached(c));
    let no_cache = (t.tier == Tier::Cached(CACHE_SHARES[0])).then_some(Tier::Host);
    let mut best: Option<Move> = None;
    for tier in options.chain(no_cache) {
        let moved = t.clone().with_tier(tier);
        let n = hbm_need(task, &moved)?;
        if n >= need {
            continue;
        }
        let m = miss_ms(&PieceRef::whole(&moved, moved.dim), global_batch, link);
        let score = (m - miss).max(0.0) / (need - n) as f64;
        if best.as_ref().is_none_or(|b| score < b.score) {
            best = Some(Move { score, tier, need: n, miss_ms: m });
        }
    }
    Ok(best)
}

/// `task` with tiers chosen so its tables' HBM need is at most `fill` of the devices' usable bytes
/// together (see the module doc); the task itself when it already fits or `mode` is [`TierMode::Hbm`].
/// `global_batch` and the host link price the misses that rank the options.
pub fn assign(task: &Task, mode: TierMode, fill: f64, global_batch: u64) -> Result<Task> {
    if mode == TierMode::Hbm {
        return Ok(task.clone());
    }
    let usable: u128 = task.usable_bytes()?.iter().map(|&b| u128::from(b)).sum();
    let budget = (usable as f64 * fill.clamp(0.0, 1.0)) as u128;
    let mut need: u128 = 0;
    for t in &task.tables {
        need += hbm_need(task, t)?;
    }
    if need <= budget {
        return Ok(task.clone());
    }
    let link = host_link_bw(task);
    // Per table, its current HBM need and miss time; the options are the cache shares below the current.
    let mut tables = task.tables.clone();
    let mut cur_need: Vec<u128> = Vec::with_capacity(tables.len());
    let mut cur_miss: Vec<f64> = Vec::with_capacity(tables.len());
    for t in &tables {
        cur_need.push(hbm_need(task, t)?);
        cur_miss.push(miss_ms(&PieceRef::whole(t, t.dim), global_batch, link));
    }
    // Each table's best next move (the first with the least added miss time per byte freed), kept
    // until that table moves: the others' moves do not change.
    let mut best: Vec<Option<Move>> = Vec::with_capacity(tables.len());
    for (i, t) in tables.iter().enumerate() {
        // Tables the user placed keep their tier.
        let fixed = task.tables[i].in_host_memory();
        best.push(if fixed { None } else { next_move(task, t, cur_need[i], cur_miss[i], global_batch, link)? });
    }
    while need > budget {
        // The first table with the least score (ties by table order, as a scan in order finds it).
        let mut pick: Option<usize> = None;
        for (i, m) in best.iter().enumerate() {
            if let Some(m) = m
                && pick.is_none_or(|p| best[p].as_ref().is_some_and(|b| m.score < b.score))
            {
                pick = Some(i);
            }
        }
        let Some(i) = pick else {
            return Err(Error::NoPlan {
                planner: "tiers".into(),
                reason: "even with every table in host memory without an HBM cache, the tables' buffers need more HBM than the devices' usable bytes".into(),
            });
        };
        let Some(m) = best[i].take() else { break };
        need = need - cur_need[i] + m.need;
        tables[i] = tables[i].clone().with_tier(m.tier);
        cur_need[i] = m.need;
        cur_miss[i] = m.miss_ms;
        best[i] = next_move(task, &tables[i], cur_need[i], cur_miss[i], global_batch, link)?;
    }
    let mut out = task.clone();
    out.tables = tables;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{ElementType, OptimizerState};

    fn table(bins: [f64; NUM_BINS]) -> TableSpec {
        TableSpec::new("t", "t".into(), 1_000_000, 64, 10.0, bins, ElementType::Fp32, OptimizerState::None).unwrap()
    }

    #[test]
    fn hit_rates_follow_the_bins() {
        // Every row accessed once: a cache of 20% of the rows serves 20% of the accesses.
        let mut flat = [0.0; NUM_BINS];
        flat[0] = 1.0;
        assert!((hit_rate(&table(flat), 0.2) - 0.2).abs() < 1e-12);
        // 10% of rows take 1.5·2^9 = 768 accesses, 90% one: the hottest 10% serve 768·0.1 / (76.8 + 0.9).
        let mut skew = [0.0; NUM_BINS];
        skew[10] = 0.1;
        skew[0] = 0.9;
        let want = 76.8 / (76.8 + 0.9);
        assert!((hit_rate(&table(skew), 0.1) - want).abs() < 1e-12);
        assert!((hit_rate(&table(skew), 1.0) - 1.0).abs() < 1e-12);
        // No lookups: nothing misses.
        assert_eq!(hit_rate(&table([0.0; NUM_BINS]), 0.01), 1.0);
    }

    #[test]
    fn misses_cost_two_row_transfers_over_the_host_link() {
        let mut flat = [0.0; NUM_BINS];
        flat[0] = 1.0;
        let t = table(flat).with_cache_load_factor(Some(0.25)).unwrap();
        let p = PieceRef::whole(&t, 64);
        // 1000 samples · 10 lookups · 75% misses · 2 · 256 bytes / 1e9 B/s.
        let want = 1000.0 * 10.0 * 0.75 * 2.0 * 256.0 / 1e9 * 1e3;
        assert!((miss_ms(&p, 1000, 1e9) - want).abs() < 1e-12);
        let hbm = table(flat);
        assert_eq!(miss_ms(&PieceRef::whole(&hbm, 64), 1000, 1e9), 0.0);
        assert!(table(flat).with_cache_load_factor(Some(0.0)).unwrap_err().to_string().contains("cache_load_factor"));
        assert!(table(flat).with_cache_load_factor(Some(1.5)).is_err());
        assert!(table(flat).with_cache_load_factor(Some(f64::NAN)).is_err());
    }
}
