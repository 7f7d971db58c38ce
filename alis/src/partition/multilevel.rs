//! The multilevel partitioner: coarsen by heavy co-access, partition the coarsest hypergraph, then project
//! back level by level, refining at every level.
//!
//! - **Coarsening.** First a lossless step: vertices on exactly the same nets (a window's rows requested
//!   once, by the same request) are merged, up to a thirtieth of a block. Then heavy-net clustering, as
//!   Mt-KaHyPar's default: vertices are visited in a seeded random order; a vertex not yet in a cluster joins
//!   the neighbouring cluster of the highest rating `Σ_{e ∋ u, e ∩ C ≠ ∅} w(e)/(|e| − 1)` whose weight stays
//!   within `⌈W / (160·k)⌉` (ties to a cluster that is still a single vertex). A pass stops once the vertex
//!   count has shrunk 2.5-fold; coarsening stops at `160·k` vertices or when a pass shrinks the hypergraph by
//!   less than 1%. Contraction merges parallel nets into one weighted net. With a warm start, only vertices
//!   of the same block (or without one) are merged, so the warm start is a partition of every level.
//! - **Initial partitioning** of the coarsest hypergraph: the warm start where there is one (vertices without
//!   a block go greedily to the block with room they share most net weight with); otherwise recursive
//!   bisection, each bisection itself multilevel, its coarsest level bisected by a portfolio of seeded tries
//!   (greedy hypergraph growing to the side's proportional share or until the side is full, BFS growing,
//!   random) each refined, the best kept. A bisection gives each side its share of the final weight in
//!   proportion to its room, plus `1/d` of the room beyond (`d` = bisection levels left), so deeper bisections
//!   keep room to balance; the final weight counts the vertices on no net, which fill whatever room is left,
//!   so when the caps leave room one side may take a whole group of rows that is requested together.
//! - **Refinement** at every level ([`super::refine`]): rebalancing when a block is over its cap, label
//!   propagation, then FM passes until one gains nothing.

// The partitioning literature's names: v and u vertices, e a net, a and b (or t) blocks, k the block count,
// w weights, g gains. Spelt out, the gain formulas stop reading like the papers they come from.
#![allow(clippy::many_single_char_names)]

use std::collections::VecDeque;

use rand::seq::SliceRandom;
use rand::{Rng, RngExt};

use super::UNASSIGNED;
use super::hg::Hg;
use super::refine::PartState;

/// Coarsening stops at this many vertices per block (Mt-KaHyPar's contraction limit multiplier).
const CONTRACTION_PER_BLOCK: usize = 160;
/// Deep multilevel partitioning splits its groups of blocks once a level has this many vertices per group
/// (each half then gets at least 120, three quarters of a block's share at the contraction limit). Chosen on
/// the five hypergraph dumps of `docs/ALIS.md` against Mt-KaHyPar: splitting later (320 per group) left the
/// synthetic windows at S = 16 7.7% above it; splitting at the coarsest level, the MovieLens hypergraphs
/// up to 9.3%.
const DEEP_SPLIT_PER_GROUP: usize = 240;
/// A V-cycle across blocks ([`vcycle`]) coarsens to this many vertices per block (or two levels, if that
/// is more). Chosen on `docs/ALIS.md`'s MovieLens stream at S = 16: 20 per block (one more level) cost a
/// fifth more for the same fanout.
const VCYCLE_PER_BLOCK: usize = 40;
/// Nets with more pins than this do not rate clusters (their rating is tiny and costs a pass over them).
const RATING_NET_LIMIT: usize = 1000;

/// Settings of one multilevel run.
#[derive(Debug, Clone, Copy)]
pub(super) struct Settings {
    /// Label propagation rounds at the finest level.
    pub lp_rounds: usize,
    /// FM passes at the finest level (a pass that gains nothing ends them).
    pub fm_passes: usize,
    /// Label propagation rounds at the coarser levels.
    pub lp_coarse: usize,
    /// FM passes at the coarser levels.
    pub fm_coarse: usize,
    /// Moves without a new best after which an FM pass at the finest level stops.
    pub patience: usize,
    /// Moves without a new best after which an FM pass at a coarser level, or of a bisection try, stops.
    pub patience_coarse: usize,
    /// Seeded tries of the flat bisection on the coarsest level of a bisection.
    pub tries: usize,
    /// FM passes of each bisection try.
    pub try_fm: usize,
    /// Deep multilevel partitioning (more than two blocks, no warm start): one hierarchy coarsened to a
    /// bisection's size, blocks split on the way up ([`deep`]); otherwise recursive multilevel bisection.
    pub deep: bool,
}

impl Settings {
    /// The settings every strategy uses, with `fm_passes` FM passes at the finest level: four seeded
    /// bisection tries, label propagation (3 rounds at the finest level, 2 at coarser ones) and FM (one pass
    /// at coarser levels; 300 moves of patience at the finest level, 100 at coarser levels and in the
    /// bisection tries). Chosen on the hypergraphs of `docs/ALIS.md`'s streams against Mt-KaHyPar: more
    /// tries and passes bought little quality for their time, while patience at the finest level did (50 →
    /// 100 moves everywhere brought the worst cell from +7.7% to +4.6% of Mt-KaHyPar's km1 at about the same
    /// time, and 300 at the finest level the worst of 42 cells from +5.5% to +4.6% at 1.10× the time: a
    /// single row rarely gains alone, a run of moves lets FM carry a group of rows across; on a coarse level
    /// a vertex is already a group, and 300 moves there too cost more time for about the same km1).
    pub fn standard(fm_passes: usize) -> Self {
        Settings {
            lp_rounds: 3,
            fm_passes,
            lp_coarse: 2,
            fm_coarse: fm_passes.min(1),
            patience: 300,
            patience_coarse: 100,
            tries: 4,
            try_fm: 1,
            deep: false,
        }
    }

    /// These settings at a level coarser than the finest.
    fn coarse(&self) -> Self {
        Settings { lp_rounds: self.lp_coarse, fm_passes: self.fm_coarse, patience: self.patience_coarse, ..*self }
    }
}

/// Partitions `hg` into `caps.len()` blocks of at most `caps[b]` weight, starting from `init` (a block per
/// vertex or [`UNASSIGNED`]) when given.
/// `free` is the weight of vertices outside `hg` (on no net) that will fill the room left: recursive
/// bisection counts them when it shares the room between its sides.
pub(super) fn multilevel<R: Rng>(
    hg: &Hg,
    caps: &[u64],
    free: u64,
    init: Option<&[u16]>,
    s: &Settings,
    rng: &mut R,
) -> Vec<u16> {
    let k = caps.len();
    if hg.n() == 0 {
        return Vec::new();
    }
    if k == 1 {
        return vec![0; hg.n()];
    }
    if s.deep && k > 2 && init.is_none() {
        return deep(hg, caps, free, s, rng);
    }
    let (levels, maps, blocks) = coarsen(hg, k, CONTRACTION_PER_BLOCK * k, init, rng);
    let coarsest: &Hg = levels.last().unwrap_or(hg);
    let part = match &blocks {
        Some(b) => complete_warm_start(coarsest, k, b, caps),
        None if k == 2 => bisect(coarsest, caps, s, rng),
        None => recursive_bisection(coarsest, caps, coarsest.total_w.saturating_add(free), s, rng),
    };
    refine_up(hg, &levels, &maps, part, caps, s, rng)
}

/// Refines `part` (a block per vertex of the coarsest level) on every level of the hierarchy from the coarsest
/// to `hg`, projecting it down each level's map: the coarser levels with `s.lp_coarse` / `s.fm_coarse`, the
/// finest with `s`.
fn refine_up<R: Rng>(
    hg: &Hg,
    levels: &[Hg],
    maps: &[Vec<u32>],
    part: Vec<u16>,
    caps: &[u64],
    s: &Settings,
    rng: &mut R,
) -> Vec<u16> {
    let k = caps.len();
    let coarsest: &Hg = levels.last().unwrap_or(hg);
    let mid = s.coarse();
    let mut part = refine(coarsest, k, part, caps, if levels.is_empty() { s } else { &mid }, rng).0;
    for i in (0..levels.len()).rev() {
        let fine: &Hg = if i == 0 { hg } else { &levels[i - 1] };
        let projected: Vec<u16> = maps[i].iter().map(|&c| part[c as usize]).collect();
        part = refine(fine, k, projected, caps, if i == 0 { s } else { &mid }, rng).0;
    }
    part
}

/// A V-cycle across blocks from `init` (a block per vertex, or [`UNASSIGNED`]) into `caps.len()` blocks: `hg`
/// is coarsened as for a fresh partition, clusters free to join vertices of different blocks, to
/// [`VCYCLE_PER_BLOCK`] vertices per block or to a sixth of its vertices (about two levels), whichever is
/// more; every coarsest vertex starts in the block that holds most of its members' weight (vertices with
/// no block there join as in a warm start), and the partition is refined on every level on the way up.
/// The warm start of [`multilevel`] clusters within blocks only, so it can move a group of vertices to
/// another block only when the group already lies in one block; here a group the start splits between
/// blocks is one coarse vertex and moves as one. Costs a coarsening and a refinement, no initial
/// partitioning.
pub(super) fn vcycle<R: Rng>(hg: &Hg, caps: &[u64], init: &[u16], s: &Settings, rng: &mut R) -> Vec<u16> {
    let k = caps.len();
    if hg.n() == 0 {
        return Vec::new();
    }
    let limit = VCYCLE_PER_BLOCK.saturating_mul(k).max(hg.n() / 6);
    let (levels, maps, _) = coarsen(hg, k, limit, None, rng);
    // Every vertex's coarsest vertex, through the levels' maps.
    let mut coarse_of: Vec<u32> = (0..hg.n() as u32).collect();
    for map in &maps {
        for c in &mut coarse_of {
            *c = map[*c as usize];
        }
    }
    let coarsest: &Hg = levels.last().unwrap_or(hg);
    let mut weight_on = vec![0u64; coarsest.n() * k];
    for (v, &b) in init.iter().enumerate() {
        if b != UNASSIGNED {
            weight_on[coarse_of[v] as usize * k + b as usize] += hg.vw[v];
        }
    }
    // The block of most weight, ties to the lower block; none when no member has a block.
    let blocks: Vec<u16> = weight_on
        .chunks_exact(k)
        .map(|row| {
            let (b, &w) = row.iter().enumerate().fold((0, &0), |best, x| if x.1 > best.1 { x } else { best });
            if w == 0 { UNASSIGNED } else { b as u16 }
        })
        .collect();
    let part = complete_warm_start(coarsest, k, &blocks, caps);
    refine_up(hg, &levels, &maps, part, caps, s, rng)
}

/// The coarsening hierarchy of [`multilevel`] and [`deep`], down to `limit` vertices for `k` blocks: the
/// levels, each level's map from the finer one, and the warm start's blocks on the coarsest.
type Hierarchy = (Vec<Hg>, Vec<Vec<u32>>, Option<Vec<u16>>);

/// Coarsens `hg` for `k` blocks down to `limit` vertices: first the lossless step, vertices on exactly the
/// same nets (and in the same warm-start block) are interchangeable, so merging them changes no partition's
/// km1, only the balance granularity, and their merged weight is capped at `⌈W / (32·k)⌉` (a thirtieth of a
/// block at most); then heavy-net clustering, clusters capped at `⌈W / limit⌉`, until `limit` vertices or
/// a pass that shrinks by less than 1%. With `init`, only vertices of the same block merge.
fn coarsen<R: Rng>(hg: &Hg, k: usize, limit: usize, init: Option<&[u16]>, rng: &mut R) -> Hierarchy {
    let w_max = hg.total_w.div_ceil(limit as u64).max(1);
    let mut levels: Vec<Hg> = Vec::new();
    let mut maps: Vec<Vec<u32>> = Vec::new();
    let mut blocks: Option<Vec<u16>> = init.map(<[u16]>::to_vec);
    if hg.n() > CONTRACTION_PER_BLOCK * k / 2 {
        let w_id = hg.total_w.div_ceil(32 * k as u64).max(w_max);
        let (map, nc, coarse_blocks) = identical(hg, w_id, blocks.as_deref());
        if nc as u128 * 100 <= hg.n() as u128 * 95 {
            levels.push(hg.contract(&map, nc));
            maps.push(map);
            blocks = coarse_blocks;
        }
    }
    loop {
        let cur: &Hg = levels.last().unwrap_or(hg);
        let n = cur.n();
        if n <= limit {
            break;
        }
        let (map, nc, coarse_blocks) = cluster(cur, w_max, blocks.as_deref(), limit.max(n * 2 / 5), rng);
        // Less than 1% fewer vertices: coarsening has stalled.
        if nc as u128 * 100 > n as u128 * 99 {
            break;
        }
        levels.push(cur.contract(&map, nc));
        maps.push(map);
        blocks = coarse_blocks;
    }
    (levels, maps, blocks)
}

/// Rebalances, then label propagation and FM passes. Returns the partition, its km1 and its overload.
pub(super) fn refine<R: Rng>(
    hg: &Hg,
    k: usize,
    part: Vec<u16>,
    caps: &[u64],
    s: &Settings,
    rng: &mut R,
) -> (Vec<u16>, i64, u64) {
    refine_state(PartState::new(hg, k, part), caps, s, rng)
}

/// [`refine`] of a partition already in a state.
fn refine_state<R: Rng>(mut st: PartState<'_>, caps: &[u64], s: &Settings, rng: &mut R) -> (Vec<u16>, i64, u64) {
    st.rebalance(caps);
    st.label_propagation(caps, s.lp_rounds, rng);
    if st.has_cache() {
        for _ in 0..s.fm_passes {
            if st.fm(caps, s.patience, rng) <= 0 {
                break;
            }
        }
    }
    let (km1, over) = (st.km1(), st.overload(caps));
    (st.part, km1, over)
}

/// One pass of heavy-net clustering. `blocks` (a block or [`UNASSIGNED`] per vertex) restricts clusters to one
/// block. Stops joining once `target` clusters remain. Returns the cluster of every vertex (dense ids in order
/// of first member), the cluster count and the clusters' blocks.
#[inline(never)]
fn cluster<R: Rng>(
    hg: &Hg,
    w_max: u64,
    blocks: Option<&[u16]>,
    target: usize,
    rng: &mut R,
) -> (Vec<u32>, usize, Option<Vec<u16>>) {
    let n = hg.n();
    let mut rep: Vec<u32> = (0..n as u32).collect();
    let mut cw: Vec<u64> = hg.vw.clone();
    let mut single = vec![true; n];
    let mut blk: Option<Vec<u16>> = blocks.map(<[u16]>::to_vec);
    let mut rating = vec![0f64; n];
    let mut touched: Vec<u32> = Vec::new();
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.shuffle(rng);
    // Each net's rating w(e)/(|e| − 1), once per pass; 0 for nets too large to rate.
    let net_rating: Vec<f64> = (0..hg.m())
        .map(|e| {
            let size = hg.net_size(e);
            if size > RATING_NET_LIMIT { 0.0 } else { hg.nw[e] as f64 / (size - 1) as f64 }
        })
        .collect();
    let mut count = n;
    for &u in &order {
        if count <= target {
            break;
        }
        let u = u as usize;
        if !single[u] {
            continue;
        }
        for &e in hg.nets_of(u) {
            let r = net_rating[e as usize];
            if r != 0.0 {
                // u's own cluster (u itself: it is a single vertex) is rated too, and skipped below.
                rate(hg.net(e as usize), &rep, &mut rating, &mut touched, r);
            }
        }
        let mut best: Option<(f64, bool, usize)> = None;
        for &c in &touched {
            let c = c as usize;
            if c == u || cw[c] + hg.vw[u] > w_max {
                continue;
            }
            if let Some(b) = &blk
                && b[c] != b[u]
                && b[c] != UNASSIGNED
                && b[u] != UNASSIGNED
            {
                continue;
            }
            let r = rating[c];
            let better = match best {
                None => true,
                Some((br, bs, _)) => r > br || (r == br && single[c] && !bs),
            };
            if better {
                best = Some((r, single[c], c));
            }
        }
        for &c in &touched {
            rating[c as usize] = 0.0;
        }
        touched.clear();
        if let Some((_, _, c)) = best {
            rep[u] = c as u32;
            cw[c] += hg.vw[u];
            single[u] = false;
            single[c] = false;
            if let Some(b) = blk.as_mut()
                && b[c] == UNASSIGNED
            {
                b[c] = b[u];
            }
            count -= 1;
        }
    }
    let (map, id, next) = dense_ids(&rep);
    let coarse_blocks = blk.map(|b| {
        let mut cb = vec![UNASSIGNED; next as usize];
        for v in 0..n {
            if rep[v] as usize == v {
                cb[id[v] as usize] = b[v];
            }
        }
        cb
    });
    (map, next as usize, coarse_blocks)
}

/// Groups vertices with identical net lists (and warm-start blocks) into clusters of weight at most `w_id`.
/// Returns the cluster of every vertex (dense ids in order of first member), the count, and the clusters'
/// blocks.
fn identical(hg: &Hg, w_id: u64, blocks: Option<&[u16]>) -> (Vec<u32>, usize, Option<Vec<u16>>) {
    let n = hg.n();
    let key = |v: usize| {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ blocks.map_or(0, |b| u64::from(b[v]));
        for &e in hg.nets_of(v) {
            h ^= u64::from(e);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    };
    let mut keys: Vec<(u64, u32)> = (0..n).map(|v| (key(v), v as u32)).collect();
    keys.sort_unstable();
    let same = |a: usize, b: usize| hg.nets_of(a) == hg.nets_of(b) && blocks.is_none_or(|bl| bl[a] == bl[b]);
    let mut rep: Vec<u32> = (0..n as u32).collect();
    let mut i = 0;
    while i < keys.len() {
        let mut j = i + 1;
        while j < keys.len() && keys[j].0 == keys[i].0 {
            j += 1;
        }
        // Within a run of equal keys (vertices in increasing order), each vertex joins the open class of an
        // equal earlier vertex while the class has room; a full class closes and the vertex opens a new one.
        let mut open: Vec<(usize, u64)> = Vec::new();
        for &(_, v) in &keys[i..j] {
            let v = v as usize;
            let w = hg.vw[v];
            if let Some((r, cw)) = open.iter_mut().find(|(r, cw)| same(*r, v) && *cw + w <= w_id) {
                rep[v] = *r as u32;
                *cw += w;
            } else {
                open.retain(|(r, _)| !same(*r, v));
                open.push((v, w));
            }
        }
        i = j;
    }
    let (map, _, next) = dense_ids(&rep);
    let coarse_blocks = blocks.map(|b| {
        let mut cb = vec![UNASSIGNED; next as usize];
        for v in 0..n {
            cb[map[v] as usize] = b[v];
        }
        cb
    });
    (map, next as usize, coarse_blocks)
}

/// Dense cluster ids in order of first member, from every vertex's representative: the cluster of every
/// vertex, the id of every representative (`u32::MAX` for the others) and the cluster count.
fn dense_ids(rep: &[u32]) -> (Vec<u32>, Vec<u32>, u32) {
    let mut id = vec![u32::MAX; rep.len()];
    let mut map = vec![0u32; rep.len()];
    let mut next = 0u32;
    for (v, &r) in rep.iter().enumerate() {
        let r = r as usize;
        if id[r] == u32::MAX {
            id[r] = next;
            next += 1;
        }
        map[v] = id[r];
    }
    (map, id, next)
}

/// Adds `r` to the rating of the cluster of every pin of a net, recording clusters rated for the first time.
#[inline(never)]
fn rate(pins: &[u32], rep: &[u32], rating: &mut [f64], touched: &mut Vec<u32>, r: f64) {
    for &p in pins {
        let c = rep[p as usize];
        let x = &mut rating[c as usize];
        if *x == 0.0 {
            touched.push(c);
        }
        *x += r;
    }
}

/// The warm start on the coarsest level: vertices with a block keep it; the others, heaviest first (ties by
/// index), go to the block with room that holds most of their nets' weight (ties to the most room), or to the
/// block with the most room.
pub(super) fn complete_warm_start(hg: &Hg, k: usize, blocks: &[u16], caps: &[u64]) -> Vec<u16> {
    let mut part = blocks.to_vec();
    let mut load = vec![0u64; k];
    let mut on = vec![false; hg.m() * k];
    for (v, &b) in part.iter().enumerate() {
        if b != UNASSIGNED {
            load[b as usize] += hg.vw[v];
            for &e in hg.nets_of(v) {
                on[e as usize * k + b as usize] = true;
            }
        }
    }
    let mut todo: Vec<u32> = (0..hg.n() as u32).filter(|&v| part[v as usize] == UNASSIGNED).collect();
    todo.sort_by_key(|&v| (std::cmp::Reverse(hg.vw[v as usize]), v));
    let mut score = vec![0i64; k];
    for v in todo {
        let v = v as usize;
        score.fill(0);
        for &e in hg.nets_of(v) {
            for (t, sc) in score.iter_mut().enumerate() {
                if on[e as usize * k + t] {
                    *sc += hg.nw[e as usize];
                }
            }
        }
        let w = hg.vw[v];
        let room = |t: usize| caps[t].saturating_sub(load[t]);
        let fits = (0..k).filter(|&t| load[t] + w <= caps[t]);
        let b = fits
            .max_by(|&x, &y| score[x].cmp(&score[y]).then(room(x).cmp(&room(y))).then(y.cmp(&x)))
            .unwrap_or_else(|| (0..k).max_by(|&x, &y| room(x).cmp(&room(y)).then(y.cmp(&x))).unwrap_or(0));
        part[v] = b as u16;
        load[b] += w;
        for &e in hg.nets_of(v) {
            on[e as usize * k + b] = true;
        }
    }
    part
}

/// A group of final blocks `lo..hi` during deep multilevel partitioning: the weight it may hold (`cap`) and
/// its share of the final weight (`total`), as recursive bisection gives a side.
#[derive(Debug, Clone, Copy)]
struct Group {
    lo: usize,
    hi: usize,
    cap: u64,
    total: u64,
}

/// The room of `caps` together (saturating).
fn room(caps: &[u64]) -> u64 {
    caps.iter().fold(0u64, |a, &x| a.saturating_add(x))
}

/// How recursive bisection splits a group: the two halves of its blocks, each side's room and share.
fn split_group(g: Group, caps: &[u64]) -> [Group; 2] {
    let k = g.hi - g.lo;
    let mid = g.lo + k / 2;
    let (c0, c1) = (room(&caps[g.lo..mid]), room(&caps[mid..g.hi]));
    let d = ceil_log2(k);
    let room = u128::from(c0) + u128::from(c1);
    let share = |c: u64| (u128::from(g.total) * u128::from(c)).checked_div(room).map_or(0, |x| x as u64);
    let (t0, t1) = (share(c0), share(c1));
    [
        Group { lo: g.lo, hi: mid, cap: c0.min(t0 + c0.saturating_sub(t0) / d), total: t0 },
        Group { lo: mid, hi: g.hi, cap: c1.min(t1 + c1.saturating_sub(t1) / d), total: t1 },
    ]
}

/// Splits every group of more than one block in two by a flat bisection of its vertices (`part`: the group
/// of every vertex, renumbered in block order), then refines the groups together.
fn split_groups<R: Rng>(
    hg: &Hg,
    part: &mut Vec<u16>,
    groups: &mut Vec<Group>,
    caps: &[u64],
    s: &Settings,
    rng: &mut R,
) {
    let mut next: Vec<Group> = Vec::with_capacity(groups.len() * 2);
    let mut new_part = vec![0u16; hg.n()];
    for (gi, &g) in groups.iter().enumerate() {
        let (sub, ids) = hg.side(part, gi as u16);
        if g.hi - g.lo < 2 {
            for &v in &ids {
                new_part[v as usize] = next.len() as u16;
            }
            next.push(g);
            continue;
        }
        let halves = split_group(g, caps);
        let mut side_caps = [halves[0].cap, halves[1].cap];
        // Unreachable with caps that hold the hypergraph, kept for safety as in recursive bisection: never
        // ask a bisection for less room than the weight it must place.
        if u128::from(side_caps[0]) + u128::from(side_caps[1]) < u128::from(sub.total_w) {
            side_caps = halves.map(|h| room(&caps[h.lo..h.hi]));
        }
        let bip = if sub.n() == 0 { Vec::new() } else { bisect(&sub, &side_caps, s, rng) };
        for (i, &v) in ids.iter().enumerate() {
            new_part[v as usize] = (next.len() + bip[i] as usize) as u16;
        }
        next.extend(halves);
    }
    *groups = next;
    let group_caps: Vec<u64> = groups.iter().map(|g| g.cap).collect();
    *part = refine(hg, groups.len(), new_part, &group_caps, s, rng).0;
}

/// Deep multilevel partitioning (the scheme of `KaMinPar`, and of Mt-KaHyPar's deep multilevel mode) into
/// `caps.len() > 2` blocks: one hierarchy, coarsened as far as a bisection's (`2·160` vertices); the coarsest
/// level bisected; on the way up, every group of blocks bisected again (a flat portfolio on its vertices at
/// that level) once the level has [`DEEP_SPLIT_PER_GROUP`] vertices per group, and the groups refined
/// together at every level; at the finest level the groups left are split until each is one block. Recursive
/// bisection coarsens every bisection's hypergraph again; here each level is coarsened once.
fn deep<R: Rng>(hg: &Hg, caps: &[u64], free: u64, s: &Settings, rng: &mut R) -> Vec<u16> {
    let k = caps.len();
    let limit = CONTRACTION_PER_BLOCK * 2;
    let (levels, maps, _) = coarsen(hg, k, limit, None, rng);
    let mut groups = vec![Group { lo: 0, hi: k, cap: room(caps), total: hg.total_w.saturating_add(free) }];
    let mid = s.coarse();
    // Splits while the level has enough vertices per group: the coarsest level at least once, the finest
    // until every group is one block.
    let split = |h: &Hg, part: &mut Vec<u16>, groups: &mut Vec<Group>, finest: bool, rng: &mut R| {
        while groups.len() < k && (finest || groups.len() == 1 || h.n() >= DEEP_SPLIT_PER_GROUP * groups.len()) {
            split_groups(h, part, groups, caps, if finest { s } else { &mid }, rng);
        }
    };
    let coarsest: &Hg = levels.last().unwrap_or(hg);
    let mut part = vec![0u16; coarsest.n()];
    split(coarsest, &mut part, &mut groups, levels.is_empty(), rng);
    for i in (0..levels.len()).rev() {
        let fine: &Hg = if i == 0 { hg } else { &levels[i - 1] };
        let projected: Vec<u16> = maps[i].iter().map(|&c| part[c as usize]).collect();
        let group_caps: Vec<u64> = groups.iter().map(|g| g.cap).collect();
        part = refine(fine, groups.len(), projected, &group_caps, if i == 0 { s } else { &mid }, rng).0;
        split(fine, &mut part, &mut groups, i == 0, rng);
    }
    // Groups are kept in block order, one block each by now: a vertex's group is its block.
    debug_assert!(groups.iter().enumerate().all(|(i, g)| g.lo == i && g.hi == i + 1));
    part
}

/// `⌈log2 k⌉` for `k ≥ 1`.
fn ceil_log2(k: usize) -> u64 {
    u64::from(usize::BITS - (k.max(1) - 1).leading_zeros())
}

/// Recursive bisection into `caps.len() ≥ 2` blocks: a multilevel bisection into the first `k/2` blocks and
/// the rest, then each side on its own (its nets restricted to its pins). `total` is the weight the blocks
/// will hold in the end: the hypergraph's and the free vertices' that fill the room left. Each side may take
/// its share of `total` in proportion to its room plus `1/d` of the room beyond (`d` = bisection levels
/// left); free vertices go where the hypergraph's do not, so with room to spare one side may take all of it.
fn recursive_bisection<R: Rng>(hg: &Hg, caps: &[u64], total: u64, s: &Settings, rng: &mut R) -> Vec<u16> {
    let k = caps.len();
    if k <= 1 || hg.n() == 0 {
        return vec![0; hg.n()];
    }
    let k0 = k / 2;
    let halves = split_group(Group { lo: 0, hi: k, cap: room(caps), total }, caps);
    let side_caps = [halves[0].cap, halves[1].cap];
    // Unreachable with caps that hold the hypergraph (total ≥ its weight), kept for safety: never ask a
    // bisection for less room than the weight it must place.
    let side_caps = if u128::from(side_caps[0]) + u128::from(side_caps[1]) < u128::from(hg.total_w) {
        halves.map(|h| room(&caps[h.lo..h.hi]))
    } else {
        side_caps
    };
    let (t0, t1) = (halves[0].total, halves[1].total);
    let bip = multilevel(hg, &side_caps, 0, None, s, rng);
    let mut part = vec![0u16; hg.n()];
    for side in 0..2u16 {
        let (sub, ids) = hg.side(&bip, side);
        if ids.is_empty() {
            continue;
        }
        let (sub_caps, offset, t) = if side == 0 { (&caps[..k0], 0, t0) } else { (&caps[k0..], k0, t1) };
        let sp = recursive_bisection(&sub, sub_caps, sub.total_w.max(t), s, rng);
        for (i, &v) in ids.iter().enumerate() {
            part[v as usize] = (offset + sp[i] as usize) as u16;
        }
    }
    part
}

/// How a bisection try grows block 0.
#[derive(Debug, Clone, Copy)]
enum Grow {
    /// Greedy hypergraph growing: the vertex with the largest gain joins next.
    Greedy,
    /// Breadth-first from the seed.
    Bfs,
    /// A random order.
    Random,
}

/// The flat bisection portfolio: `s.tries` seeded tries, each grown and refined; the best (least overload,
/// then least km1) is kept.
fn bisect<R: Rng>(hg: &Hg, caps: &[u64], s: &Settings, rng: &mut R) -> Vec<u16> {
    let mut best: Option<(u64, i64, Vec<u16>)> = None;
    // Every try grows block 0 from everything in block 1: that state is built once and copied.
    let start = PartState::new(hg, 2, vec![1; hg.n()]);
    for t in 0..s.tries.max(1) {
        let (how, fill) = match t % 4 {
            0 => (Grow::Greedy, false),
            1 => (Grow::Greedy, true),
            2 => (Grow::Bfs, false),
            _ => (Grow::Random, false),
        };
        let grown = grow(start.clone(), caps, how, fill, rng);
        let s2 = Settings { fm_passes: s.try_fm, patience: s.patience_coarse, ..*s };
        let (part, km1, over) = refine_state(grown, caps, &s2, rng);
        if best.as_ref().is_none_or(|(bo, bk, _)| (over, km1) < (*bo, *bk)) {
            best = Some((over, km1, part));
        }
    }
    best.map_or_else(|| vec![0; hg.n()], |b| b.2)
}

/// Grows block 0 of `st` (every vertex in block 1) from random seeds until it holds its proportional share
/// `W·cap0/(cap0 + cap1)` of the weight, or with `fill` until it is full (when the caps leave room, a
/// lopsided bisection may cut nothing); everything else stays in block 1. Returns the grown state.
fn grow<'a, R: Rng>(mut st: PartState<'a>, caps: &[u64], how: Grow, fill: bool, rng: &mut R) -> PartState<'a> {
    let hg = st.hg;
    let n = hg.n();
    let total = u128::from(caps[0]) + u128::from(caps[1]);
    let target = if fill {
        caps[0]
    } else {
        (u128::from(hg.total_w) * u128::from(caps[0])).checked_div(total).map_or(0, |x| x as u64)
    };
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.shuffle(rng);
    if let Grow::Random = how {
        for &v in &order {
            if st.load[0] >= target {
                break;
            }
            if st.load[0] + hg.vw[v as usize] <= caps[0] {
                st.apply(v as usize, 0);
            }
        }
        return st;
    }
    // Seeds are taken in `order`; `next_seed` walks it.
    let mut next_seed = 0usize;
    // Keyed by gain alone: a move's gathering score is 0 outside label propagation.
    let mut heap: std::collections::BinaryHeap<(i64, u32, u32)> = std::collections::BinaryHeap::new();
    let mut affected: Vec<(u32, u16)> = Vec::new();
    let mut queue: VecDeque<u32> = VecDeque::new();
    let tie: Vec<u32> = (0..n).map(|_| rng.random::<u32>()).collect();
    let mut queued = vec![false; n];
    let fits = |st: &PartState, v: usize| st.part[v] == 1 && st.load[0] + hg.vw[v] <= caps[0];
    st.set_tracking(true);
    while st.load[0] < target {
        let pick = match how {
            Grow::Greedy => loop {
                let Some((g, _, v)) = heap.pop() else { break None };
                let v = v as usize;
                if !fits(&st, v) {
                    continue;
                }
                let g_now = st.best_move(v, caps).map_or(i64::MIN, |m| m.gain);
                if g_now == g {
                    break Some(v);
                }
                heap.push((g_now, tie[v], v as u32));
            },
            _ => loop {
                let Some(v) = queue.pop_front() else { break None };
                if fits(&st, v as usize) {
                    break Some(v as usize);
                }
            },
        };
        let v = if let Some(v) = pick {
            v
        } else {
            // A new seed: the next vertex of the random order still in block 1 that fits.
            while next_seed < n && !fits(&st, order[next_seed] as usize) {
                next_seed += 1;
            }
            if next_seed == n {
                break;
            }
            order[next_seed] as usize
        };
        st.apply(v, 0);
        st.swap_affected(&mut affected);
        for &(u, _) in &affected {
            let ui = u as usize;
            if st.part[ui] != 1 {
                continue;
            }
            match how {
                Grow::Greedy => {
                    if let Some(m) = st.best_move(ui, caps) {
                        heap.push((m.gain, tie[ui], u));
                    }
                }
                _ => {
                    if !queued[ui] {
                        queued[ui] = true;
                        queue.push_back(u);
                    }
                }
            }
        }
    }
    st.set_tracking(false);
    st
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceil_log2_counts_bisection_levels() {
        assert_eq!([1, 2, 3, 4, 5, 8, 9, 16].map(ceil_log2), [0, 1, 2, 2, 3, 3, 4, 4]);
    }

    #[test]
    fn warm_start_completion_respects_caps() {
        // Two nets over vertices 0..4; vertex 3 unassigned shares both nets with block 1, which is full.
        let hg = Hg::build(vec![1; 4], vec![0, 2, 4], vec![1, 3, 2, 3], vec![1, 1]);
        let part = complete_warm_start(&hg, 2, &[0, 1, 1, UNASSIGNED], &[3, 2]);
        assert_eq!(part, vec![0, 1, 1, 0]);
        let part = complete_warm_start(&hg, 2, &[0, 1, 1, UNASSIGNED], &[3, 3]);
        assert_eq!(part, vec![0, 1, 1, 1]);
    }
}
