//! The baseline row-sharding strategies: hash, range, static one-shot, direct (the latest window from scratch),
//! periodic full re-partition and greedy incremental.

use std::ops::Range;

use rand::SeedableRng;
use rand::rngs::ChaCha8Rng;

use super::{Scored, Strategy, StrategyConfig};
use crate::AlisError;
use crate::partition::{Hypergraph, PartitionParams, UNASSIGNED, partition};
use crate::placement::Placement;
use crate::stream::Stream;
use crate::weights::SparseWeights;

/// `id mod S`: new rows go to their hash shard (spilling only when the cap binds); rows never move.
pub(super) struct HashStrategy {
    pub(super) placement: Placement,
}

impl Strategy for HashStrategy {
    fn name(&self) -> &'static str {
        "hash"
    }
    fn update(&mut self, stream: &Stream, window: Range<usize>) -> Result<(), AlisError> {
        self.placement.grow_hash(stream, stream.rows_known_after(window.end));
        Ok(())
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
pub(super) struct RangeStrategy {
    pub(super) placement: Placement,
    pub(super) bounds: Option<Vec<(u32, u64)>>,
}

impl Strategy for RangeStrategy {
    fn name(&self) -> &'static str {
        "range"
    }
    fn update(&mut self, stream: &Stream, window: Range<usize>) -> Result<(), AlisError> {
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
        Ok(())
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
pub enum Scope {
    /// The first window only, once (`static`); later rows are placed by hash.
    First,
    /// The latest window, every update (`direct`: the paper's direct sharding, ALIS without its history).
    Latest,
    /// All requests so far, every `full_every` updates (`full`).
    All,
}

/// What a from-scratch partition of `scope` reads at the update on `window` (requests `window` of `stream`,
/// all earlier ones observed before): the hypergraph over every row known after the window (dense row ids;
/// rows none of its requests touch are isolated vertices placed into the room left) and the partition
/// settings, every shard capped at `⌈(1+ε)·rows/S⌉`. The one definition `static`, `direct` and `full` and
/// the comparison dump (`shardplan dynamic --dump-dir`) partition.
pub fn scope_partition_input(
    stream: &Stream,
    scope: Scope,
    window: Range<usize>,
    cfg: &StrategyConfig,
) -> Result<(Hypergraph, PartitionParams), AlisError> {
    let read = if scope == Scope::Latest { window.clone() } else { 0..window.end };
    requests_partition_input(stream, read, window.end, cfg)
}

/// The hypergraph of requests `read` over every row known after request `known_after` (rows they do not
/// touch are isolated vertices), with every shard capped at `⌈(1+ε)·rows/S⌉`: what [`scope_partition_input`]
/// builds for a scope, and ALIS's global step for its last windows.
pub(super) fn requests_partition_input(
    stream: &Stream,
    read: Range<usize>,
    known_after: usize,
    cfg: &StrategyConfig,
) -> Result<(Hypergraph, PartitionParams), AlisError> {
    cfg.validate()?;
    let rows = stream.rows_known_after(known_after);
    let hg = Hypergraph::new(rows, read.map(|i| stream.request(i)))?;
    Ok((hg, capped_params(cfg, rows)))
}

/// The partition settings of a fresh partition of `rows` rows: every shard capped at `⌈(1+ε)·rows/S⌉`.
fn capped_params(cfg: &StrategyConfig, rows: usize) -> PartitionParams {
    let cap = Placement::new(cfg.shards, cfg.epsilon).cap_for(rows);
    cfg.partition_params(vec![cap; cfg.shards])
}

/// Weight of a request of the latest window in a decayed history (`full_decay < 1`): older windows weigh
/// `full_decay^age` of it, rounded, never below 1. Large enough that a weight rounds by less than 0.01% at
/// a tenth of the latest window's, small enough that a million requests' weights sum far below `i64::MAX`.
const DECAYED_NET_SCALE: f64 = 65_536.0;

/// The hypergraph of all requests before `known_after` (over every row known then, every shard capped as in
/// [`requests_partition_input`]), each request weighted by its window's age: requests from `starts[i]` on
/// (window starts in increasing order, the latest last) are `starts.len() − 1 − i` windows old, earlier ones
/// as old as the first window. Weights are `⌊DECAYED_NET_SCALE · decay^age⌉ ≥ 1`; `decay^age` is computed by
/// repeated multiplication, so the weights are the same on every target. What `full` with `full_decay < 1`
/// partitions, and the comparison dump writes for it. Refuses `known_after` beyond the stream and `starts`
/// that are not increasing or not before `known_after`.
pub fn decayed_partition_input(
    stream: &Stream,
    starts: &[usize],
    known_after: usize,
    cfg: &StrategyConfig,
) -> Result<(Hypergraph, PartitionParams), AlisError> {
    cfg.validate()?;
    if known_after > stream.n_requests() {
        return Err(AlisError::InvalidParam {
            field: "known_after",
            value: known_after.to_string(),
            allowed: format!("0..={} (the stream's requests)", stream.n_requests()),
        });
    }
    if let Some(i) = (0..starts.len()).find(|&i| starts[i] >= known_after || (i > 0 && starts[i] <= starts[i - 1])) {
        return Err(AlisError::InvalidParam {
            field: "starts",
            value: format!("entry {i}: {}", starts[i]),
            allowed: format!("increasing window starts below known_after = {known_after}"),
        });
    }
    let rows = stream.rows_known_after(known_after);
    let mut weights = Vec::with_capacity(starts.len());
    let mut w = DECAYED_NET_SCALE;
    for _ in starts {
        weights.push(w.round().max(1.0) as u32);
        w *= cfg.full_decay;
    }
    weights.reverse();
    let oldest = weights.first().copied().unwrap_or(1);
    let weight_of = |i: usize| match starts.partition_point(|&s| s <= i) {
        0 => oldest,
        j => weights[j - 1],
    };
    let hg = Hypergraph::with_weights(rows, (0..known_after).map(|i| (stream.request(i), weight_of(i))))?;
    Ok((hg, capped_params(cfg, rows)))
}

/// Partitions of all known rows from scratch: static one-shot, direct (latest window) or periodic full
/// re-partition. Rows the scope's requests do not touch are placed last, into the room left.
pub(super) struct FullStrategy {
    cfg: StrategyConfig,
    placement: Placement,
    scope: Scope,
    updates: usize,
    rng: ChaCha8Rng,
    /// The first request of every window seen (`full` with `full_decay < 1`: the windows' ages).
    starts: Vec<usize>,
}

impl FullStrategy {
    pub(super) fn new(cfg: StrategyConfig, placement: Placement, scope: Scope) -> Self {
        FullStrategy { rng: ChaCha8Rng::seed_from_u64(cfg.seed), cfg, placement, scope, updates: 0, starts: Vec::new() }
    }

    /// Whether this is `full` with a decayed history.
    fn decayed(&self) -> bool {
        self.scope == Scope::All && self.cfg.full_decay < 1.0
    }
}

impl Strategy for FullStrategy {
    fn name(&self) -> &'static str {
        match self.scope {
            Scope::First => "static",
            Scope::Latest => "direct",
            Scope::All => "full",
        }
    }
    fn update(&mut self, stream: &Stream, window: Range<usize>) -> Result<(), AlisError> {
        let rows = stream.rows_known_after(window.end);
        let due = match self.scope {
            Scope::First => self.updates == 0,
            Scope::Latest => true,
            Scope::All => self.updates.is_multiple_of(self.cfg.full_every),
        };
        self.updates += 1;
        if self.decayed() {
            self.starts.push(window.start);
        }
        if !due {
            self.placement.grow_hash(stream, rows);
            return Ok(());
        }
        let (hg, params) = if self.decayed() {
            decayed_partition_input(stream, &self.starts, window.end, &self.cfg)?
        } else {
            scope_partition_input(stream, self.scope, window, &self.cfg)?
        };
        let (part, _) = partition(&hg, &vec![UNASSIGNED; rows], &params, &mut self.rng)?;
        // Rows seen for the first time live at their hash shard until now: the renaming counts them there.
        self.placement.grow_hash(stream, rows);
        let part = relabel(&part, self.placement.as_slice(), self.cfg.shards);
        self.placement.set_all(part);
        Ok(())
    }
    fn placement(&self) -> &Placement {
        &self.placement
    }
    fn state_bytes(&self) -> usize {
        self.placement.heap_bytes() + self.starts.capacity() * std::mem::size_of::<usize>()
    }
}

/// Renames the shards of a fresh partition to maximise the rows that stay where they are (greedy matching on
/// the overlap matrix, largest overlap first, ties by index): shard labels of a fresh partition are
/// arbitrary, and a real system would not move rows just to rename shards.
pub(super) fn relabel(new: &[u16], old: &[u16], s_count: usize) -> Vec<u16> {
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

/// Greedy incremental: every row of a request votes for the current shards of its co-requested rows
/// (weight `1/(|r|−1)` per neighbour) into a decayed sparse W; touched rows go to argmax W under the cap.
pub(super) struct GreedyStrategy {
    pub(super) cfg: StrategyConfig,
    pub(super) placement: Placement,
    pub(super) weights: SparseWeights,
}

impl Strategy for GreedyStrategy {
    fn name(&self) -> &'static str {
        "greedy"
    }
    fn update(&mut self, stream: &Stream, window: Range<usize>) -> Result<(), AlisError> {
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
        Ok(())
    }
    fn placement(&self) -> &Placement {
        &self.placement
    }
    fn state_bytes(&self) -> usize {
        self.placement.heap_bytes() + self.weights.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::RawRequest;

    #[test]
    fn a_decayed_history_weighs_every_window_by_its_age() {
        // Six requests of two rows each; windows start at requests 2 and 4, so requests 0–1 are older than
        // the first window and weigh what it weighs.
        let raw = (0..6u64)
            .map(|i| RawRequest { request_id: i, time: i as f64, row_ids: vec![2 * i, 2 * i + 1], table_ids: None })
            .collect();
        let s = Stream::from_raw(raw, 1).unwrap_or_else(|e| panic!("{e}"));
        let cfg = StrategyConfig { shards: 2, full_decay: 0.5, ..StrategyConfig::default() };
        let (hg, params) = decayed_partition_input(&s, &[2, 4], 6, &cfg).unwrap_or_else(|e| panic!("{e}"));
        let weights: Vec<u32> = (0..hg.n_nets()).map(|n| hg.net_weight(n)).collect();
        assert_eq!(weights, [32_768, 32_768, 32_768, 32_768, 65_536, 65_536]);
        assert_eq!(hg.n_vertices(), 12);
        assert_eq!(params.caps, vec![Placement::new(2, cfg.epsilon).cap_for(12); 2]);
        // A weight never rounds to 0 (a net of weight 0 would be dropped), however old its window.
        let starts: Vec<usize> = (0..6).collect();
        let cfg = StrategyConfig { full_decay: 0.01, ..cfg };
        let (hg, _) = decayed_partition_input(&s, &starts, 6, &cfg).unwrap_or_else(|e| panic!("{e}"));
        let weights: Vec<u32> = (0..hg.n_nets()).map(|n| hg.net_weight(n)).collect();
        assert_eq!(weights, [1, 1, 1, 7, 655, 65_536]);
        // Windows out of order, or past the requests read, are refused by name.
        let msg = |starts: &[usize], known_after| {
            decayed_partition_input(&s, starts, known_after, &cfg).err().map(|e| e.to_string()).unwrap_or_default()
        };
        let e = msg(&[4, 2], 6);
        assert!(e.contains("starts") && e.contains("entry 1: 2"), "{e}");
        assert!(msg(&[2, 6], 6).contains("entry 1: 6"));
        assert!(msg(&[2], 7).contains("known_after = 7"));
    }
}
