//! A k-way partition of one level and the moves that improve it under per-block caps, for the connectivity
//! objective `km1 = Σ_e w(e)·(λ(e) − 1)` (λ = blocks a net touches; the mean fanout is `1 + km1/|nets|`).
//!
//! Moving `v` from block `a` to `b` gains `Σ_{e∋v} w(e)·([Φ(e,a) = 1] − [Φ(e,b) = 0])` (Φ = pins of a net per
//! block), that is `benefit(v) − wsum(v) + conn(v, b)` with `benefit` the weight of v's nets where v is its
//! block's only pin, `wsum` the weight of all its nets and `conn(v, b)` the weight of its nets already on
//! `b`. A gain cache keeps `benefit` and `conn` per vertex and updates them by deltas when a net's pin count
//! on a block crosses 0, 1 or 2, so a gain costs O(1) and a move O(pins of the moved vertex's nets that
//! leave a block or reach a new one): where a count falls to 1 or rises to 2, the one pin whose `benefit`
//! changes is read from the XOR of the pin ids kept beside every count. All gains are integers: the result
//! is the same on every target.
//!
//! - [`PartState::label_propagation`]: rounds over the boundary vertices in random order, each moved to its best
//!   block with room when that gains.
//! - [`PartState::fm`]: one Fiduccia–Mattheyses pass: vertices leave a max-gain queue (best block with room),
//!   move even when the gain is negative, are locked, and their neighbours' gains updated; after a run of moves
//!   without a new best, the moves past the best prefix are undone, so a pass never makes things worse.
//! - [`PartState::rebalance`]: moves the least harmful vertices off blocks over their cap (a partition
//!   projected from a coarse level may be).

// The partitioning literature's names: v and u vertices, e a net, a and b (or t) blocks, k the block count,
// w weights, g gains. Spelt out, the gain formulas stop reading like the papers they come from.
#![allow(clippy::many_single_char_names)]

use std::collections::BinaryHeap;

use rand::Rng;
use rand::RngExt;
use rand::seq::SliceRandom;

use super::hg::Hg;

/// Largest gain cache (vertices × blocks entries, 8 bytes each): above it, gains are computed from the pin
/// counts on demand and refinement uses label propagation only.
const CACHE_ENTRIES: usize = 1 << 23;

/// A move of one vertex: its gain, its gathering score (the tie-break) and the target block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Move {
    pub gain: i64,
    pub gather: i64,
    pub to: u16,
}

impl Move {
    /// Whether making the move improves the partition: it gains, or gathers pins at no loss.
    pub fn improves(&self) -> bool {
        self.gain > 0 || (self.gain == 0 && self.gather > 0)
    }

    /// Priority key: gain, then gathering score (0 unless asked for).
    fn key(&self) -> (i64, i64) {
        (self.gain, self.gather)
    }
}

/// A net's pins on one block: how many, and the XOR of their ids.
#[derive(Debug, Clone, Copy, Default)]
struct Pins {
    count: u32,
    xor: u32,
}

/// Gain cache: per vertex `benefit`, `wsum` and `conn` per block.
#[derive(Debug, Clone)]
struct Cache {
    benefit: Vec<i64>,
    wsum: Vec<i64>,
    conn: Vec<i64>,
}

/// A partition of one level's hypergraph with its block loads and pin counts.
#[derive(Clone)]
pub(super) struct PartState<'a> {
    pub hg: &'a Hg,
    pub k: usize,
    pub part: Vec<u16>,
    pub load: Vec<u64>,
    /// Per net and block (`m × k`): the net's pins on the block, and the XOR of their ids (where a net has
    /// one pin left on a block, that pin, found without a pass over the net), side by side: a move updates
    /// both.
    phi: Vec<Pins>,
    /// Blocks every net touches.
    lambda: Vec<u32>,
    cache: Option<Cache>,
    /// (vertex, block) pairs whose gain a move raised (when `track` is on; block `k` = every block),
    /// deduplicated by `stamp` (one block per move can gain connectivity) and `stamp_all`.
    affected: Vec<(u32, u16)>,
    stamp: Vec<u32>,
    stamp_all: Vec<u32>,
    now: u32,
    track: bool,
    scratch: Vec<i64>,
}

impl<'a> PartState<'a> {
    /// The state of `part` (every entry `< k`) on `hg`.
    pub fn new(hg: &'a Hg, k: usize, part: Vec<u16>) -> Self {
        let mut load = vec![0u64; k];
        for (v, &b) in part.iter().enumerate() {
            load[b as usize] += hg.vw[v];
        }
        let mut phi = vec![Pins::default(); hg.m() * k];
        let mut lambda = vec![0u32; hg.m()];
        let mut cache = (hg.n().saturating_mul(k) <= CACHE_ENTRIES).then(|| Cache {
            benefit: vec![0; hg.n()],
            wsum: vec![0; hg.n()],
            conn: vec![0; hg.n() * k],
        });
        // One pass over the nets: a net's pin counts, then (its pins still in cache) its pins' gain terms.
        let mut blocks: Vec<usize> = Vec::with_capacity(k);
        for e in 0..hg.m() {
            let row = &mut phi[e * k..(e + 1) * k];
            let pins = hg.net(e);
            for &p in pins {
                let c = &mut row[part[p as usize] as usize];
                if c.count == 0 {
                    lambda[e] += 1;
                }
                c.count += 1;
                c.xor ^= p;
            }
            let Some(c) = cache.as_mut() else { continue };
            let w = hg.nw[e];
            blocks.clear();
            blocks.extend((0..k).filter(|&t| row[t].count > 0));
            for &u in pins {
                let u = u as usize;
                c.wsum[u] += w;
                if row[part[u] as usize].count == 1 {
                    c.benefit[u] += w;
                }
                let conn = &mut c.conn[u * k..(u + 1) * k];
                for &t in &blocks {
                    conn[t] += w;
                }
            }
        }
        PartState {
            hg,
            k,
            part,
            load,
            phi,
            lambda,
            cache,
            affected: Vec::new(),
            stamp: vec![0; hg.n()],
            stamp_all: vec![0; hg.n()],
            now: 0,
            track: false,
            scratch: vec![0; k],
        }
    }

    /// Turns the collection of affected vertices on or off.
    pub fn set_tracking(&mut self, on: bool) {
        self.track = on;
        self.affected.clear();
    }

    /// Swaps the (vertex, block) pairs whose gain the last move raised (tracking on; block `k` = every block)
    /// into `buf`, leaving `buf`'s old contents, whose memory the next move reuses, in their place.
    pub fn swap_affected(&mut self, buf: &mut Vec<(u32, u16)>) {
        std::mem::swap(&mut self.affected, buf);
    }

    /// Whether refinement may use FM (the gain cache exists).
    pub fn has_cache(&self) -> bool {
        self.cache.is_some()
    }

    /// The connectivity objective `Σ_e w(e)·(λ(e) − 1)`.
    pub fn km1(&self) -> i64 {
        (0..self.hg.m()).map(|e| self.hg.nw[e] * (i64::from(self.lambda[e]) - 1)).sum()
    }

    /// Load above the cap, summed over the blocks.
    pub fn overload(&self, caps: &[u64]) -> u64 {
        self.load.iter().zip(caps).map(|(&l, &c)| l.saturating_sub(c)).sum()
    }

    /// Whether `v` has a net touching more than one block: with the gain cache, whether its nets reach a
    /// block other than its own (O(k) instead of O(nets of `v`); net weights are positive).
    pub fn is_boundary(&self, v: usize) -> bool {
        match &self.cache {
            Some(c) => {
                let a = self.part[v] as usize;
                c.conn[v * self.k..(v + 1) * self.k].iter().enumerate().any(|(t, &w)| t != a && w > 0)
            }
            None => self.hg.nets_of(v).iter().any(|&e| self.lambda[e as usize] > 1),
        }
    }

    /// The gathering score of moving `v` from `a` to `t`: `Σ_{e∋v} w(e)·(Φ(e,t) − Φ(e,a) + 1)`, half the change
    /// of `Σ_e w(e)·Σ_b Φ(e,b)²`. Positive when `v` joins more of its nets' pins than it leaves: the
    /// tie-break among moves of equal gain (as the probabilistic-fanout objective of the flat partitioner, it
    /// rewards gathering a net's pins before the whole net can move), and a potential that keeps zero-gain
    /// moves from cycling.
    fn gather(&self, v: usize, a: usize, t: usize) -> i64 {
        let k = self.k;
        self.hg
            .nets_of(v)
            .iter()
            .map(|&e| {
                let row = &self.phi[e as usize * k..(e as usize + 1) * k];
                self.hg.nw[e as usize] * (i64::from(row[t].count) - i64::from(row[a].count) + 1)
            })
            .sum()
    }

    /// The best move of `v`: the block `t ≠ part[v]` with room for it (`load + w ≤ cap`) of the largest gain,
    /// ties to the most room, then the lowest index. `None` when no other block has room. O(k) with the
    /// gain cache.
    pub fn best_move(&mut self, v: usize, caps: &[u64]) -> Option<Move> {
        self.best_move_by(v, caps, false)
    }

    /// [`PartState::best_move`], except that when the best gain is zero the gathering score picks among the
    /// zero-gain blocks (O(pins of `v`) more per such block): label propagation's choice, which also moves at
    /// zero gain when that gathers pins.
    pub fn best_move_gathering(&mut self, v: usize, caps: &[u64]) -> Option<Move> {
        self.best_move_by(v, caps, true)
    }

    fn best_move_by(&mut self, v: usize, caps: &[u64], gathering: bool) -> Option<Move> {
        let k = self.k;
        let a = self.part[v] as usize;
        let w = self.hg.vw[v];
        let (benefit, wsum) = if let Some(c) = &self.cache {
            (c.benefit[v], c.wsum[v])
        } else {
            self.scratch.fill(0);
            let (mut benefit, mut wsum) = (0, 0);
            for &e in self.hg.nets_of(v) {
                let we = self.hg.nw[e as usize];
                let row = &self.phi[e as usize * k..(e as usize + 1) * k];
                wsum += we;
                if row[a].count == 1 {
                    benefit += we;
                }
                for (x, n) in self.scratch.iter_mut().zip(row) {
                    if n.count > 0 {
                        *x += we;
                    }
                }
            }
            (benefit, wsum)
        };
        let conn = match &self.cache {
            Some(c) => &c.conn[v * k..(v + 1) * k],
            None => &self.scratch[..],
        };
        let mut best: Option<(i64, i64, u64, usize)> = None;
        for t in 0..k {
            if t == a || self.load[t] + w > caps[t] {
                continue;
            }
            let g = benefit - wsum + conn[t];
            let room = caps[t] - self.load[t];
            if best.is_none_or(|b| (g, room) > (b.0, b.2)) {
                best = Some((g, 0, room, t));
            }
        }
        // At zero gain, the gathering score decides whether and where to move (positive gains move anyway,
        // negative ones never in label propagation). It towards a block none of v's nets touch is the same
        // for all of them.
        if gathering && best.is_some_and(|b| b.0 == 0) {
            let mut lone: Option<i64> = None;
            best = None;
            for t in 0..k {
                if t == a || self.load[t] + w > caps[t] || benefit - wsum + conn[t] != 0 {
                    continue;
                }
                let gather =
                    if conn[t] > 0 { self.gather(v, a, t) } else { *lone.get_or_insert_with(|| self.gather(v, a, t)) };
                let room = caps[t] - self.load[t];
                if best.is_none_or(|b| (gather, room) > (b.1, b.2)) {
                    best = Some((0, gather, room, t));
                }
            }
        }
        best.map(|(gain, gather, _, t)| Move { gain, gather, to: t as u16 })
    }

    /// The gain of moving `v` to `t` (ignoring caps).
    #[cfg(test)]
    fn gain_to(&mut self, v: usize, t: usize) -> i64 {
        let caps: Vec<u64> = (0..self.k).map(|s| if s == t { u64::MAX / 2 } else { 0 }).collect();
        self.best_move(v, &caps).map_or(0, |m| m.gain)
    }

    /// Records that the gain of `u` to block `t` (to every block when `t == k`) may have risen.
    fn raise(&mut self, u: u32, t: usize) {
        let stamp = if t == self.k { &mut self.stamp_all } else { &mut self.stamp };
        mark(stamp, self.now, &mut self.affected, u, t as u16);
    }

    /// Moves `v` to block `b`, updating loads, pin counts and the gain cache. With tracking on, `affected`
    /// collects the (vertex, block) pairs whose gain rose (block `k`: every block); gains that fell are left to
    /// the queues' lazy re-evaluation.
    pub fn apply(&mut self, v: usize, b: u16) {
        let (hg, k) = (self.hg, self.k);
        let a = self.part[v] as usize;
        let b = b as usize;
        self.part[v] = b as u16;
        self.load[a] -= hg.vw[v];
        self.load[b] += hg.vw[v];
        let track = self.track;
        if track {
            self.now = self.now.wrapping_add(1);
            if self.now == 0 {
                self.stamp.fill(0);
                self.stamp_all.fill(0);
                self.now = 1;
            }
            self.affected.clear();
        }
        for &e in hg.nets_of(v) {
            let e = e as usize;
            let we = hg.nw[e];
            let row = &mut self.phi[e * k..(e + 1) * k];
            row[a].count -= 1;
            row[a].xor ^= v as u32;
            row[b].count += 1;
            row[b].xor ^= v as u32;
            let (pa, pb, xa, xb) = (row[a].count, row[b].count, row[a].xor, row[b].xor);
            if pa == 0 {
                self.lambda[e] -= 1;
            }
            if pb == 1 {
                self.lambda[e] += 1;
            }
            let Some(c) = self.cache.as_mut() else {
                if track && (pa <= 1 || pb <= 2) {
                    for &u in hg.net(e) {
                        self.raise(u, k);
                    }
                }
                continue;
            };
            if pa == 0 {
                for &u in hg.net(e) {
                    c.conn[u as usize * k + a] -= we;
                }
            } else if pa == 1 {
                // The one pin left on a: its move now frees the net from a.
                c.benefit[xa as usize] += we;
                if track {
                    mark(&mut self.stamp_all, self.now, &mut self.affected, xa, k as u16);
                }
            }
            if pb == 1 {
                for &u in hg.net(e) {
                    c.conn[u as usize * k + b] += we;
                    if track && u as usize != v {
                        mark(&mut self.stamp, self.now, &mut self.affected, u, b as u16);
                    }
                }
            } else if pb == 2 {
                // The pin on b beside v no longer frees the net from b alone.
                c.benefit[(xb ^ v as u32) as usize] -= we;
            }
            c.benefit[v] += we * (i64::from(pb == 1) - i64::from(pa == 0));
        }
    }

    /// Rounds of label propagation: boundary vertices in random order, each moved to its best block with room
    /// when the move gains. Stops after `rounds` or a round without moves. Returns the moves made.
    pub fn label_propagation<R: Rng>(&mut self, caps: &[u64], rounds: usize, rng: &mut R) -> usize {
        let mut order: Vec<u32> =
            (0..self.hg.n() as u32).filter(|&v| !self.hg.nets_of(v as usize).is_empty()).collect();
        let mut total = 0;
        for _ in 0..rounds {
            order.shuffle(rng);
            let mut moved = 0;
            for &v in &order {
                let v = v as usize;
                if !self.is_boundary(v) {
                    continue;
                }
                if let Some(m) = self.best_move_gathering(v, caps)
                    && m.improves()
                {
                    self.apply(v, m.to);
                    moved += 1;
                }
            }
            total += moved;
            if moved == 0 {
                break;
            }
        }
        total
    }

    /// The cached gain of moving `v` to `t` (cache present).
    fn cached_gain(&self, v: usize, t: usize) -> i64 {
        match &self.cache {
            Some(c) => c.benefit[v] - c.wsum[v] + c.conn[v * self.k + t],
            None => i64::MIN,
        }
    }

    /// Queues every move of `v` to a block one of its nets touches (`Q`: a heap, or a list to heapify).
    fn queue_moves<Q: Extend<(i64, u32, u32)>>(&self, v: usize, tie: u32, heaps: &mut [Q]) {
        let Some(c) = &self.cache else { return };
        let a = self.part[v] as usize;
        for (t, heap) in heaps.iter_mut().enumerate() {
            if t != a && c.conn[v * self.k + t] > 0 {
                heap.extend([(self.cached_gain(v, t), tie, v as u32)]);
            }
        }
    }

    /// One k-way FM pass (needs the gain cache; without it, returns 0). Every boundary vertex is queued once
    /// per block its nets touch, in one max-gain queue per target block (random ties); the next move is the
    /// best head among the blocks with room for it, so a block that fills stops receiving and one that
    /// empties receives again. A queued gain found stale is re-queued with its current value. Moved vertices
    /// are locked; vertices whose gains a move changed are queued again. Moves stop after `patience` moves
    /// without a new best; the moves after the best prefix are undone. Returns the gain kept (≥ 0).
    pub fn fm<R: Rng>(&mut self, caps: &[u64], patience: usize, rng: &mut R) -> i64 {
        if self.cache.is_none() {
            return 0;
        }
        let (n, k) = (self.hg.n(), self.k);
        let mut locked = vec![false; n];
        let tie: Vec<u32> = (0..n).map(|_| rng.random::<u32>()).collect();
        // The first moves of every boundary vertex, heapified at once (O(n), not O(n log n) pushes). Keys end
        // in the vertex, so no two moves compare equal and the order of the pops is the keys' alone.
        let mut first: Vec<Vec<(i64, u32, u32)>> = vec![Vec::new(); k];
        for (v, &tv) in tie.iter().enumerate() {
            if self.is_boundary(v) {
                self.queue_moves(v, tv, &mut first);
            }
        }
        let mut heaps: Vec<BinaryHeap<(i64, u32, u32)>> = first.into_iter().map(BinaryHeap::from).collect();
        let mut moves: Vec<(u32, u16)> = Vec::new();
        let (mut cum, mut best, mut best_len) = (0i64, 0i64, 0usize);
        self.track = true;
        loop {
            // The best valid head among the blocks with room; stale heads are dropped or re-queued.
            let mut pick: Option<(i64, u32, usize)> = None;
            for t in 0..k {
                while let Some(&(g, tv, v)) = heaps[t].peek() {
                    let v = v as usize;
                    if locked[v] || self.part[v] as usize == t {
                        heaps[t].pop();
                        continue;
                    }
                    let g_now = self.cached_gain(v, t);
                    if g_now != g {
                        heaps[t].pop();
                        heaps[t].push((g_now, tv, v as u32));
                        continue;
                    }
                    if self.load[t] + self.hg.vw[v] <= caps[t] && pick.is_none_or(|(pg, pt, _)| (g, tv) > (pg, pt)) {
                        pick = Some((g, tv, t));
                    }
                    break;
                }
            }
            let Some((g, _, t)) = pick else { break };
            let Some((_, _, v)) = heaps[t].pop() else { break };
            let v = v as usize;
            let from = self.part[v];
            self.apply(v, t as u16);
            locked[v] = true;
            moves.push((v as u32, from));
            cum += g;
            if cum > best {
                best = cum;
                best_len = moves.len();
            } else if moves.len() - best_len > patience {
                break;
            }
            let affected = std::mem::take(&mut self.affected);
            for &(u, t) in &affected {
                let (u, t) = (u as usize, t as usize);
                if locked[u] {
                    continue;
                }
                if t == k {
                    self.queue_moves(u, tie[u], &mut heaps);
                } else if self.part[u] as usize != t {
                    heaps[t].push((self.cached_gain(u, t), tie[u], u as u32));
                }
            }
            self.affected = affected;
        }
        self.track = false;
        for &(v, from) in moves[best_len..].iter().rev() {
            self.apply(v as usize, from);
        }
        best
    }

    /// Moves vertices off blocks above their cap, each time the vertex whose best move with room loses least
    /// (ties to the lighter vertex). Returns whether every block is within its cap afterwards (a vertex heavier
    /// than every block's room cannot move; at the finest level all vertices weigh 1 and it always succeeds when
    /// the caps hold all vertices).
    pub fn rebalance(&mut self, caps: &[u64]) -> bool {
        if self.overload(caps) == 0 {
            return true;
        }
        let n = self.hg.n();
        let over = |st: &Self, v: usize| {
            let a = st.part[v] as usize;
            st.load[a] > caps[a]
        };
        let mut heap: BinaryHeap<((i64, i64), std::cmp::Reverse<u64>, u32)> = BinaryHeap::new();
        for v in 0..n {
            if over(self, v)
                && let Some(m) = self.best_move(v, caps)
            {
                heap.push((m.key(), std::cmp::Reverse(self.hg.vw[v]), v as u32));
            }
        }
        while let Some((kv, w, v)) = heap.pop() {
            let v = v as usize;
            if !over(self, v) {
                continue;
            }
            let Some(m) = self.best_move(v, caps) else {
                continue;
            };
            if m.key() != kv {
                heap.push((m.key(), w, v as u32));
                continue;
            }
            self.apply(v, m.to);
            if self.overload(caps) == 0 {
                return true;
            }
        }
        self.overload(caps) == 0
    }
}

/// Adds `(u, t)` to `affected` unless `stamp` shows `u` added already in move `now` (the stamps of the
/// vertices' single-block raises, or of their every-block raises).
fn mark(stamp: &mut [u32], now: u32, affected: &mut Vec<(u32, u16)>, u: u32, t: u16) {
    if stamp[u as usize] != now {
        stamp[u as usize] = now;
        affected.push((u, t));
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::ChaCha8Rng;

    use super::*;

    /// Brute-force gain of moving `v` to `b` from km1 before and after.
    fn brute_gain(hg: &Hg, k: usize, part: &[u16], v: usize, b: u16) -> i64 {
        let before = PartState::new(hg, k, part.to_vec()).km1();
        let mut p = part.to_vec();
        p[v] = b;
        before - PartState::new(hg, k, p).km1()
    }

    fn random_hg(seed: u64, n: usize, m: usize) -> Hg {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut off = vec![0];
        let mut pins = Vec::new();
        let mut nw = Vec::new();
        for _ in 0..m {
            let size = rng.random_range(2..6u32);
            let start = pins.len();
            while pins.len() - start < size as usize {
                let p = rng.random_range(0..n as u32);
                if !pins[start..].contains(&p) {
                    pins.push(p);
                }
            }
            off.push(pins.len());
            nw.push(i64::from(rng.random_range(1..4u32)));
        }
        Hg::build(vec![1; n], off, pins, nw)
    }

    #[test]
    fn cached_gains_stay_exact_through_moves() {
        // Random moves on a random weighted hypergraph: after each, every vertex's cached gain to every block
        // equals the brute-force km1 difference, and km1 drops by exactly the gain of the move.
        let hg = random_hg(5, 30, 60);
        let k = 4;
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let part: Vec<u16> = (0..30).map(|_| rng.random_range(0..k as u16)).collect();
        let mut st = PartState::new(&hg, k, part);
        assert!(st.has_cache());
        for _ in 0..40 {
            let v = rng.random_range(0..30usize);
            let b = rng.random_range(0..k as u16);
            if st.part[v] == b {
                continue;
            }
            let before = st.km1();
            let g = brute_gain(&hg, k, &st.part, v, b);
            st.apply(v, b);
            assert_eq!(before - st.km1(), g);
            for u in 0..30 {
                for t in 0..k {
                    if usize::from(st.part[u]) != t {
                        let g = st.gain_to(u, t);
                        assert_eq!(g, brute_gain(&hg, k, &st.part, u, t as u16), "vertex {u} to {t}");
                    }
                }
            }
        }
    }

    #[test]
    fn fm_never_worsens_and_respects_caps() {
        for seed in 0..6 {
            let hg = random_hg(seed, 40, 90);
            let k = 3;
            let caps = vec![15u64; k];
            let part: Vec<u16> = (0..40).map(|v| (v % 3) as u16).collect();
            let mut st = PartState::new(&hg, k, part);
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            for _ in 0..4 {
                let before = st.km1();
                let g = st.fm(&caps, 20, &mut rng);
                assert!(g >= 0);
                assert_eq!(before - st.km1(), g, "seed {seed}");
                assert!(st.load.iter().all(|&l| l <= 15), "seed {seed}: {:?}", st.load);
            }
        }
    }

    #[test]
    fn rebalance_empties_overloaded_blocks() {
        let hg = random_hg(3, 40, 80);
        let mut st = PartState::new(&hg, 4, vec![0; 40]);
        assert!(st.rebalance(&[11, 11, 11, 11]));
        assert!(st.load.iter().all(|&l| l <= 11), "{:?}", st.load);
    }
}
