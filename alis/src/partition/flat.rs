//! The flat partitioner (the crate's first): one level, no coarsening. Kept for comparison with the
//! multilevel one (`--partitioner flat`).
//!
//! Requests are hyperedges (nets) over rows (vertices); the objective is the mean fanout (connectivity λ of
//! each net) under a per-shard row cap. Two phases:
//!
//! 1. **Initialisation.** Vertices with a warm-start shard keep it. The others are placed in first-appearance
//!    order with the LDG streaming rule: shard `s` scores `(pins of v's nets already on s) · (1 − load_s/cap)`;
//!    the best shard with room wins, ties and all-zero scores go to the least loaded shard. Vertices on no net
//!    are placed last, into the room the others leave.
//! 2. **Refinement** by probabilistic-fanout local search (as in Social Hash Partitioner): each net's cost is
//!    `Σ_s 1 − (1−p)^{Φ(n,s)}` where `Φ(n,s)` is the number of the net's pins on shard `s`. With `p = 1` this is
//!    exactly the fanout; `p < 1` gives a smoother objective that rewards gathering pins even before a whole
//!    net can be moved. Moving `v` from `a` to `b` lowers the cost by `p · Σ_{n∋v} ((1−p)^{Φ(n,a)−1} −
//!    (1−p)^{Φ(n,b)})`. Vertices are visited in a seeded random order; a vertex moves to its best shard when
//!    the gain is positive and the shard is under the cap. A vertex whose improving shards are all full is
//!    remembered; after the sweep, vertices wanting `a → b` and `b → a` trade places pairwise (largest gains
//!    first, each swap re-evaluated exactly and kept only if the pair gains), so refinement still works when
//!    the cap binds everywhere. Sweeps stop when nothing moves or after `max_iters`.
//!
//! Pin counts Φ are a dense `nets × S` array; the partitioner only ever sees one window (ALIS) or the
//! replayed history (full re-partition), never the whole row universe.

use rand::Rng;
use rand::seq::SliceRandom;

use super::{Hypergraph, PartitionParams, PartitionStats, UNASSIGNED};

/// Partitions `hg` into `params.shards` shards (parameters validated by the caller). `init[v]` is the
/// warm-start shard of `v` or [`UNASSIGNED`]. Returns the shard of every vertex. Net weights scale each net's
/// part of a gain.
pub(super) fn partition<R: Rng>(
    hg: &Hypergraph,
    init: &[u16],
    params: &PartitionParams,
    rng: &mut R,
) -> (Vec<u16>, PartitionStats) {
    let s_count = params.shards;
    let caps: Vec<usize> = (0..s_count).map(|s| params.caps.get(s).copied().unwrap_or(0)).collect();
    let n_nets = hg.n_nets();
    let mut st = State {
        part: vec![UNASSIGNED; hg.n_vertices],
        load: vec![0usize; s_count],
        phi: vec![0u32; n_nets * s_count],
        s_count,
    };
    for (v, &s) in init.iter().enumerate().take(hg.n_vertices) {
        if (s as usize) < s_count {
            st.assign(hg, v, s as usize);
        }
    }
    // Streaming (LDG) placement of the vertices without a warm start.
    let mut score = vec![0f64; s_count];
    // Vertices on no net carry no co-location signal: they go last, into the room the others leave.
    let connected = (0..hg.n_vertices).filter(|&v| !hg.nets_of(v).is_empty());
    let isolated = (0..hg.n_vertices).filter(|&v| hg.nets_of(v).is_empty());
    for v in connected.chain(isolated) {
        if st.part[v] != UNASSIGNED {
            continue;
        }
        score.fill(0.0);
        for &n in hg.nets_of(v) {
            let w = f64::from(hg.net_weight(n as usize));
            for (sc, &c) in score.iter_mut().zip(st.net_row(n)) {
                *sc += w * f64::from(c);
            }
        }
        let load = &st.load;
        let mut best: Option<(usize, f64)> = None;
        for s in 0..s_count {
            if load[s] >= caps[s] {
                continue;
            }
            let sc = score[s] * (1.0 - load[s] as f64 / caps[s] as f64);
            let better = match best {
                None => true,
                Some((b, bs)) => sc > bs || (sc == bs && load[s] < load[b]),
            };
            if better {
                best = Some((s, sc));
            }
        }
        // Every shard at its cap can only happen when Σ caps < n; fall back to the shard with the most room.
        let s = best.map_or_else(|| most_room(load, &caps), |(s, _)| s);
        st.assign(hg, v, s);
    }
    // Probabilistic-fanout refinement.
    let p = params.p_fanout.clamp(1e-6, 1.0);
    let max_net = (0..n_nets).map(|n| hg.net(n).len()).max().unwrap_or(0);
    let qpow: Vec<f64> = (0..=max_net + 1).map(|k| (1.0 - p).powi(i32::try_from(k).unwrap_or(i32::MAX))).collect();
    let mut order: Vec<u32> = (0..hg.n_vertices as u32).collect();
    let mut stats = PartitionStats::default();
    let mut pen = vec![0f64; s_count];
    let mut wants: Vec<(u16, u16, f64, u32)> = Vec::new();
    for _ in 0..params.max_iters {
        stats.sweeps += 1;
        order.shuffle(rng);
        let mut moved = 0;
        wants.clear();
        for &v in &order {
            let v = v as usize;
            let nets = hg.nets_of(v);
            if nets.is_empty() {
                continue;
            }
            let a = st.part[v] as usize;
            let mut base = 0.0;
            pen.fill(0.0);
            for &n in nets {
                let row = st.net_row(n);
                let w = f64::from(hg.net_weight(n as usize));
                base += w * qpow[row[a] as usize - 1];
                for (pe, &c) in pen.iter_mut().zip(row) {
                    *pe += w * qpow[c as usize];
                }
            }
            let mut best: Option<(usize, f64)> = None;
            let mut best_any: Option<(usize, f64)> = None;
            for b in 0..s_count {
                if b == a {
                    continue;
                }
                let gain = base - pen[b];
                if gain > 1e-9 && best_any.is_none_or(|(_, g)| gain > g) {
                    best_any = Some((b, gain));
                }
                if st.load[b] >= caps[b] {
                    continue;
                }
                if gain > 1e-9 && best.is_none_or(|(_, g)| gain > g) {
                    best = Some((b, gain));
                }
            }
            // Every improving shard is full: remember the wish for the swap phase.
            if best.is_none()
                && let Some((b, g)) = best_any
            {
                wants.push((a as u16, b as u16, g, v as u32));
            }
            if let Some((b, _)) = best {
                st.apply(hg, v, a, b);
                moved += 1;
            }
        }
        moved += swap_wishes(hg, &mut wants, &qpow, &mut st);
        stats.moves += moved;
        if moved == 0 {
            break;
        }
    }
    (st.part, stats)
}

/// The state of a partition run: every vertex's shard, the shard loads, and the pin counts Φ (`nets × S`).
struct State {
    part: Vec<u16>,
    load: Vec<usize>,
    phi: Vec<u32>,
    s_count: usize,
}

impl State {
    /// Φ of net `n` on every shard.
    fn net_row(&self, n: u32) -> &[u32] {
        &self.phi[n as usize * self.s_count..(n as usize + 1) * self.s_count]
    }

    /// Puts the unplaced `v` on `s`.
    fn assign(&mut self, hg: &Hypergraph, v: usize, s: usize) {
        self.part[v] = s as u16;
        self.load[s] += 1;
        for &n in hg.nets_of(v) {
            self.phi[n as usize * self.s_count + s] += 1;
        }
    }

    /// Objective gain (without the constant factor p) of moving `v` from `a` to `b`.
    fn gain(&self, hg: &Hypergraph, qpow: &[f64], v: usize, a: usize, b: usize) -> f64 {
        let mut g = 0.0;
        for &n in hg.nets_of(v) {
            let row = self.net_row(n);
            g += f64::from(hg.net_weight(n as usize)) * (qpow[row[a] as usize - 1] - qpow[row[b] as usize]);
        }
        g
    }

    fn apply(&mut self, hg: &Hypergraph, v: usize, a: usize, b: usize) {
        self.part[v] = b as u16;
        self.load[a] -= 1;
        self.load[b] += 1;
        for &n in hg.nets_of(v) {
            self.phi[n as usize * self.s_count + a] -= 1;
            self.phi[n as usize * self.s_count + b] += 1;
        }
    }
}

/// Partners tried per swap candidate.
const SWAP_TRIES: usize = 8;

/// Pairwise swaps between full shards (as in Social Hash Partitioner): a vertex that wants `a → b` but finds
/// `b` full trades places with one that wants `b → a`, largest recorded gains first. Each swap is re-evaluated
/// exactly against the current state (earlier swaps change the gains) and kept only when the pair's combined
/// gain is positive, so loads never change and the objective never worsens. Returns the vertices moved.
fn swap_wishes(hg: &Hypergraph, wants: &mut [(u16, u16, f64, u32)], qpow: &[f64], m: &mut State) -> usize {
    // By direction, then by decreasing gain (ties by vertex, for determinism).
    wants.sort_unstable_by(|x, y| (x.0, x.1).cmp(&(y.0, y.1)).then(y.2.total_cmp(&x.2)).then(x.3.cmp(&y.3)));
    let range = |a: u16, b: u16| {
        let lo = wants.partition_point(|w| (w.0, w.1) < (a, b));
        let hi = wants.partition_point(|w| (w.0, w.1) <= (a, b));
        lo..hi
    };
    let mut moved = 0;
    let mut start = 0;
    while start < wants.len() {
        let (a, b) = (wants[start].0, wants[start].1);
        let forward = range(a, b);
        start = forward.end;
        if a > b {
            continue;
        }
        let backward = range(b, a);
        let (a, b) = (usize::from(a), usize::from(b));
        let partners = &wants[backward];
        let mut used = vec![false; partners.len()];
        for fw in &wants[forward] {
            let u = fw.3 as usize;
            if usize::from(m.part[u]) != a {
                continue;
            }
            let gu = m.gain(hg, qpow, u, a, b);
            m.apply(hg, u, a, b);
            // The first of the next few unused partners that makes the pair worth it (u's move may have
            // removed the reason for a partner's wish, e.g. when they share a request).
            let found = partners
                .iter()
                .enumerate()
                .filter(|&(k, bw)| !used[k] && usize::from(m.part[bw.3 as usize]) == b)
                .take(SWAP_TRIES)
                .find(|&(_, bw)| gu + m.gain(hg, qpow, bw.3 as usize, b, a) > 1e-9)
                .map(|(k, _)| k);
            if let Some(k) = found {
                used[k] = true;
                m.apply(hg, partners[k].3 as usize, b, a);
                moved += 2;
            } else {
                m.apply(hg, u, b, a);
            }
        }
    }
    moved
}

/// Index of the shard with the most room under its cap (lowest index on ties; room may be negative).
fn most_room(load: &[usize], caps: &[usize]) -> usize {
    let room = |s: usize| caps[s] as i64 - load[s] as i64;
    (0..load.len()).fold(0, |best, s| if room(s) > room(best) { s } else { best })
}

#[cfg(test)]
mod tests {
    use rand::rngs::ChaCha8Rng;
    use rand::{RngExt, SeedableRng};

    /// The flat partitioner's settings with `caps` (one shard each) and `max_iters` sweeps.
    fn flat_params(caps: Vec<usize>, max_iters: usize) -> PartitionParams {
        PartitionParams { shards: caps.len(), caps, max_iters, p_fanout: 0.5, partitioner: Partitioner::Flat }
    }

    use super::*;
    use crate::partition::{Partitioner, mean_net_fanout};

    /// Four disjoint cliques of 8 rows, each requested many times: the optimum is fanout 1 with one clique per
    /// shard, which a random start is far from.
    fn cliques() -> (usize, Vec<Vec<u32>>) {
        let mut nets = Vec::new();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for _ in 0..200 {
            let c = rng.random_range(0..4u32);
            let mut net: Vec<u32> = (0..8).map(|i| c * 8 + i).filter(|_| rng.random::<f64>() < 0.6).collect();
            net.dedup();
            nets.push(net);
        }
        (32, nets)
    }

    #[test]
    fn refinement_finds_the_planted_partition_from_a_bad_start() {
        let (n, nets) = cliques();
        let hg = Hypergraph::new(n, nets.iter().map(Vec::as_slice)).unwrap();
        // Round-robin warm start: every clique spread over all four shards.
        let init: Vec<u16> = (0..n).map(|v| (v % 4) as u16).collect();
        let params = flat_params(vec![9; 4], 20);
        let before = mean_net_fanout(&hg, &init);
        let (part, stats) = partition(&hg, &init, &params, &mut ChaCha8Rng::seed_from_u64(1));
        let after = mean_net_fanout(&hg, &part);
        assert!(before > 3.0, "{before}");
        assert!(after < 1.3, "fanout {before} -> {after}, {stats:?}");
        let mut load = [0usize; 4];
        for &s in &part {
            load[s as usize] += 1;
        }
        assert!(load.iter().all(|&l| l <= 9), "{load:?}");
    }

    #[test]
    fn uneven_caps_are_each_respected_and_let_a_group_gather() {
        // One group of 8 rows always requested together, starting 5 on shard 0 and one on each other shard.
        // A lone row gains most by joining shard 0 (it removes a shard from the net and joins the largest
        // group), so wherever shard 0 has room the whole group gathers there, in any visit order.
        let nets: Vec<Vec<u32>> = (0..50).map(|_| (0..8).collect()).collect();
        let hg = Hypergraph::new(8, nets.iter().map(Vec::as_slice)).unwrap();
        let init: Vec<u16> = vec![0, 0, 0, 0, 0, 1, 2, 3];
        let loads = |part: &[u16]| {
            let mut load = [0usize; 4];
            for &s in part {
                load[s as usize] += 1;
            }
            load
        };
        for seed in 0..8 {
            let roomy = flat_params(vec![8, 3, 3, 3], 20);
            let (part, _) = partition(&hg, &init, &roomy, &mut ChaCha8Rng::seed_from_u64(seed));
            assert_eq!(loads(&part), [8, 0, 0, 0], "seed {seed}: {part:?}");
            // Shard 0 full at 5: the cap holds, and the three lone rows still gather elsewhere.
            let tight = PartitionParams { caps: vec![5, 3, 3, 3], ..roomy };
            let (part, _) = partition(&hg, &init, &tight, &mut ChaCha8Rng::seed_from_u64(seed));
            let load = loads(&part);
            assert!(load.iter().zip(&tight.caps).all(|(l, c)| l <= c), "seed {seed}: {load:?}");
            assert_eq!(load[0], 5, "seed {seed}: {load:?}");
            assert!((mean_net_fanout(&hg, &part) - 2.0).abs() < 1e-12, "seed {seed}: {part:?}");
        }
    }

    #[test]
    fn full_shards_still_trade_rows_by_swaps() {
        // Two pairs always requested together, each split across two shards that are both at their cap:
        // no single move is legal, one swap puts each pair on its own shard.
        let nets: Vec<Vec<u32>> = (0..10).flat_map(|_| [vec![0, 1], vec![2, 3]]).collect();
        let hg = Hypergraph::new(4, nets.iter().map(Vec::as_slice)).unwrap();
        let init: Vec<u16> = vec![0, 1, 0, 1];
        for seed in 0..4 {
            let params = flat_params(vec![2, 2], 4);
            let (part, stats) = partition(&hg, &init, &params, &mut ChaCha8Rng::seed_from_u64(seed));
            assert!((mean_net_fanout(&hg, &part) - 1.0).abs() < 1e-12, "seed {seed}: {part:?} {stats:?}");
            assert_eq!(part.iter().filter(|&&s| s == 0).count(), 2, "seed {seed}: {part:?}");
        }
    }

    #[test]
    fn streaming_init_respects_cap_and_groups_neighbours() {
        let (n, nets) = cliques();
        let hg = Hypergraph::new(n, nets.iter().map(Vec::as_slice)).unwrap();
        let init = vec![UNASSIGNED; n];
        let params = flat_params(vec![8; 4], 0);
        let (part, _) = partition(&hg, &init, &params, &mut ChaCha8Rng::seed_from_u64(1));
        let mut load = [0usize; 4];
        for &s in &part {
            load[s as usize] += 1;
        }
        assert_eq!(load, [8, 8, 8, 8]);
        assert!(mean_net_fanout(&hg, &part) < 2.5);
    }
}
