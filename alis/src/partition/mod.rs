//! Hypergraph partitioning of rows under per-shard caps: the partitioner behind the `static`, `direct`,
//! `full` strategies and ALIS's light incremental step.
//!
//! Requests are nets (hyperedges) over rows (vertices); the objective is the connectivity
//! `km1 = Σ_e w(e)·(λ(e) − 1)`, λ = shards a net touches, so the mean fanout of the nets is `1 + km1/|nets|`
//! for unit weights. Three partitioners, chosen by [`Partitioner`]:
//!
//! - [`Partitioner::Multilevel`] (default, `multilevel.rs`, `refine.rs`, `hg.rs`): heavy-net coarsening,
//!   recursive multilevel bisection of the coarsest hypergraph (a portfolio of seeded tries, the best kept),
//!   then label propagation and FM refinement with a gain cache at every level on the way up. The standard
//!   multilevel route of `hMETIS`, `KaHyPar` and Mt-KaHyPar, written for this crate: no hypergraph partitioner for
//!   the connectivity objective exists as a pure-Rust crate that builds for wasm32, and the C++ ones would bring
//!   threads, a C++ toolchain and I/O into a sans-IO core. Integer gains throughout, seeded, no threads.
//! - [`Partitioner::Deep`]: the same, with deep multilevel initial partitioning (one hierarchy coarsened to
//!   a bisection's size; groups of blocks split on the way up) instead of recursive multilevel bisection.
//!   About a quarter less time on the benchmark hypergraphs at the same 5% bound to Mt-KaHyPar; a warm start
//!   (ALIS's light step) runs as in `Multilevel`.
//! - [`Partitioner::Flat`] (`flat.rs`): the first partitioner of this crate, kept for comparison: LDG streaming
//!   initialisation, probabilistic-fanout local search and pairwise swaps between full shards.
//!
//! Rows on no net (requests of one row, or rows of other windows) carry no co-location signal: every
//! partitioner sets them aside and place them last, into the room the others leave (a warm-start shard is
//! kept while it has room).

mod flat;
mod hg;
mod multilevel;
mod refine;

use std::fmt;
use std::str::FromStr;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::AlisError;

/// Sentinel for "no warm-start shard".
pub const UNASSIGNED: u16 = u16::MAX;

/// Most shards a partition may have (the crate's limit on S).
pub const MAX_SHARDS: usize = 4096;

/// A hypergraph in compressed form: weighted nets (requests) over local vertex ids `0..n_vertices`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hypergraph {
    n_vertices: usize,
    net_offsets: Vec<usize>,
    pins: Vec<u32>,
    net_weights: Vec<u32>,
    vtx_offsets: Vec<usize>,
    vtx_nets: Vec<u32>,
}

impl Hypergraph {
    /// Builds the hypergraph from nets of weight 1 given as lists of distinct vertex ids `< n_vertices`.
    /// Nets with a single pin are dropped: they cost fanout 1 wherever the row is.
    pub fn new<'a>(n_vertices: usize, nets: impl IntoIterator<Item = &'a [u32]>) -> Result<Self, AlisError> {
        Self::with_weights(n_vertices, nets.into_iter().map(|n| (n, 1)))
    }

    /// Builds the hypergraph from `(pins, weight)` nets. Nets with a single pin or weight 0 are dropped.
    /// Refuses a pin `≥ n_vertices`, a pin repeated within a net, more than `u32::MAX` vertices, and net
    /// weights whose sum exceeds `i64::MAX` (gains are summed in `i64`).
    pub fn with_weights<'a>(
        n_vertices: usize,
        nets: impl IntoIterator<Item = (&'a [u32], u32)>,
    ) -> Result<Self, AlisError> {
        if n_vertices > u32::MAX as usize {
            return Err(AlisError::InvalidParam {
                field: "n_vertices",
                value: n_vertices.to_string(),
                allowed: format!("0..={}", u32::MAX),
            });
        }
        let mut net_offsets = vec![0];
        let mut pins: Vec<u32> = Vec::new();
        let mut net_weights = Vec::new();
        let mut degree = vec![0usize; n_vertices];
        // `mark[v]` = 1 + the index of the last net that held v, to find repeated pins in O(pins).
        let mut mark = vec![0usize; n_vertices];
        let mut total_weight: u64 = 0;
        for (i, (net, w)) in nets.into_iter().enumerate() {
            for &v in net {
                let Some(m) = mark.get_mut(v as usize) else {
                    return Err(AlisError::InvalidParam {
                        field: "nets",
                        value: format!("net {i}: pin {v}"),
                        allowed: format!("vertex ids < n_vertices = {n_vertices}"),
                    });
                };
                if *m == i + 1 {
                    return Err(AlisError::InvalidParam {
                        field: "nets",
                        value: format!("net {i}: pin {v} repeated"),
                        allowed: "distinct vertex ids within a net".into(),
                    });
                }
                *m = i + 1;
            }
            if net.len() < 2 || w == 0 {
                continue;
            }
            total_weight =
                total_weight.checked_add(u64::from(w)).filter(|&t| i64::try_from(t).is_ok()).ok_or_else(|| {
                    AlisError::InvalidParam {
                        field: "net_weights",
                        value: format!("sum above {} at net {i}", i64::MAX),
                        allowed: format!("a sum of net weights <= {}", i64::MAX),
                    }
                })?;
            for &v in net {
                degree[v as usize] += 1;
            }
            pins.extend_from_slice(net);
            net_offsets.push(pins.len());
            net_weights.push(w);
        }
        let mut vtx_offsets = Vec::with_capacity(n_vertices + 1);
        vtx_offsets.push(0);
        let mut acc = 0usize;
        for d in &degree {
            acc += d;
            vtx_offsets.push(acc);
        }
        let mut fill = vtx_offsets.clone();
        let mut vtx_nets = vec![0u32; pins.len()];
        for n in 0..net_offsets.len() - 1 {
            for &v in &pins[net_offsets[n]..net_offsets[n + 1]] {
                vtx_nets[fill[v as usize]] = n as u32;
                fill[v as usize] += 1;
            }
        }
        Ok(Hypergraph { n_vertices, net_offsets, pins, net_weights, vtx_offsets, vtx_nets })
    }

    /// Number of vertices.
    #[must_use]
    pub fn n_vertices(&self) -> usize {
        self.n_vertices
    }

    /// Number of nets kept (at least two pins, positive weight).
    #[must_use]
    pub fn n_nets(&self) -> usize {
        self.net_offsets.len() - 1
    }

    /// Number of pins of the kept nets.
    #[must_use]
    pub fn n_pins(&self) -> usize {
        self.pins.len()
    }

    /// Pins of net `n`.
    #[must_use]
    pub fn net(&self, n: usize) -> &[u32] {
        &self.pins[self.net_offsets[n]..self.net_offsets[n + 1]]
    }

    /// Weight of net `n`.
    #[must_use]
    pub fn net_weight(&self, n: usize) -> u32 {
        self.net_weights[n]
    }

    /// Nets of vertex `v`.
    fn nets_of(&self, v: usize) -> &[u32] {
        &self.vtx_nets[self.vtx_offsets[v]..self.vtx_offsets[v + 1]]
    }
}

/// Which partitioner runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Partitioner {
    /// Multilevel: coarsening, recursive bisection, label propagation and FM at every level.
    #[default]
    Multilevel,
    /// Multilevel with deep initial partitioning: one hierarchy, groups of blocks split on the way up
    /// instead of a recursive bisection that coarsens every bisection again (`docs/ALIS.md`).
    Deep,
    /// The flat local search (LDG initialisation, probabilistic-fanout moves, swaps).
    Flat,
}

/// Names of the partitioners, as [`Partitioner`]'s `FromStr` reads them.
pub const PARTITIONER_NAMES: [&str; 3] = ["multilevel", "deep", "flat"];

impl fmt::Display for Partitioner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Partitioner::Multilevel => "multilevel",
            Partitioner::Deep => "deep",
            Partitioner::Flat => "flat",
        })
    }
}

impl FromStr for Partitioner {
    type Err = AlisError;
    fn from_str(s: &str) -> Result<Self, AlisError> {
        match s {
            "multilevel" => Ok(Partitioner::Multilevel),
            "deep" => Ok(Partitioner::Deep),
            "flat" => Ok(Partitioner::Flat),
            other => Err(AlisError::InvalidParam {
                field: "partitioner",
                value: other.to_string(),
                allowed: PARTITIONER_NAMES.join(", "),
            }),
        }
    }
}

/// Partitioner settings.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionParams {
    /// Number of shards S (1..=[`MAX_SHARDS`]).
    pub shards: usize,
    /// Maximum rows of this partition per shard, one entry per shard, summing to at least the vertex count. A
    /// full re-partition gives every shard the same cap; an incremental one gives each shard what the global
    /// cap leaves after the rows it keeps.
    pub caps: Vec<usize>,
    /// Refinement effort: flat, the local-search sweeps; multilevel, the FM passes per level (0: label
    /// propagation only). At most 1000.
    pub max_iters: usize,
    /// Probability p of the flat partitioner's probabilistic-fanout objective, in (0, 1].
    pub p_fanout: f64,
    /// Which partitioner runs.
    pub partitioner: Partitioner,
}

impl PartitionParams {
    /// Checks the settings against a hypergraph of `n_vertices` and a warm start of `init_len` entries;
    /// the error names the field, its value and the allowed range.
    pub fn validate(&self, n_vertices: usize, init_len: usize) -> Result<(), AlisError> {
        let bad = |field: &'static str, value: String, allowed: String| {
            Err(AlisError::InvalidParam { field, value, allowed })
        };
        if !(1..=MAX_SHARDS).contains(&self.shards) {
            return bad("shards", self.shards.to_string(), format!("1..={MAX_SHARDS}"));
        }
        if self.caps.len() != self.shards {
            return bad("caps", format!("{} entries", self.caps.len()), format!("one per shard ({})", self.shards));
        }
        let room = self.caps.iter().fold(0u128, |a, &c| a + c as u128);
        if room < n_vertices as u128 {
            return bad("caps", format!("sum {room}"), format!(">= the vertex count {n_vertices}"));
        }
        if self.max_iters > 1000 {
            return bad("max_iters", self.max_iters.to_string(), "0..=1000".into());
        }
        if !(self.p_fanout > 0.0 && self.p_fanout <= 1.0) {
            return bad("p_fanout", self.p_fanout.to_string(), "(0, 1]".into());
        }
        if init_len != n_vertices {
            return bad("init", format!("{init_len} entries"), format!("one per vertex ({n_vertices})"));
        }
        Ok(())
    }
}

/// What a partition run did (for tests and reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PartitionStats {
    /// Flat: refinement sweeps run. Multilevel: 0.
    pub sweeps: usize,
    /// Flat: vertex moves made by refinement. Multilevel: 0.
    pub moves: usize,
}

/// Partitions `hg` into `params.shards` shards under `params.caps`. `init[v]` is the warm-start shard of `v`
/// or [`UNASSIGNED`]; the multilevel partitioner refines the warm start (it is never made worse when it
/// respects the caps), the flat one keeps it as its starting point. Returns the shard of every vertex; every
/// shard holds at most its cap. Deterministic for a given `rng` state.
pub fn partition<R: Rng>(
    hg: &Hypergraph,
    init: &[u16],
    params: &PartitionParams,
    rng: &mut R,
) -> Result<(Vec<u16>, PartitionStats), AlisError> {
    params.validate(hg.n_vertices, init.len())?;
    check_init(init, params.shards, false)?;
    Ok(match params.partitioner {
        Partitioner::Flat => flat::partition(hg, init, params, rng),
        Partitioner::Multilevel | Partitioner::Deep => {
            (partition_multilevel(hg, init, params, Start::Fresh, rng), PartitionStats::default())
        }
    })
}

/// Improves a complete placement `init` (every vertex on a shard) of `hg` by a V-cycle across shards: `hg` is
/// coarsened as for a fresh partition (a cluster may join vertices of different shards), every cluster
/// starts on the shard holding most of its vertices, and the partition is refined on the way up, so a group
/// of vertices that `init` splits between shards can move as one ([`partition`]'s warm start clusters
/// within shards, and moves such a group row by row, if at all). Returns `init` itself unless the cycle
/// lowers [`km1`] within the caps. With the flat partitioner, [`partition`] from `init`. Deterministic for a
/// given `rng` state.
pub fn vcycle<R: Rng>(
    hg: &Hypergraph,
    init: &[u16],
    params: &PartitionParams,
    rng: &mut R,
) -> Result<(Vec<u16>, PartitionStats), AlisError> {
    let Some(part) = from_complete_start(hg, init, params, Start::VCycle, rng)? else {
        return partition(hg, init, params, rng);
    };
    let mut load = vec![0usize; params.shards];
    for &s in init {
        load[s as usize] += 1;
    }
    let init_fits = load.iter().zip(&params.caps).all(|(l, c)| l <= c);
    let keep_init = init_fits && km1(hg, init) <= km1(hg, &part);
    Ok((if keep_init { init.to_vec() } else { part }, PartitionStats::default()))
}

/// Refuses a start whose shard is out of range (or, when it must be `complete`, [`UNASSIGNED`]), naming the
/// vertex.
fn check_init(init: &[u16], shards: usize, complete: bool) -> Result<(), AlisError> {
    let allowed = |s: u16| (s as usize) < shards || (!complete && s == UNASSIGNED);
    match init.iter().enumerate().find(|&(_, &s)| !allowed(s)) {
        Some((v, &s)) => Err(AlisError::InvalidParam {
            field: "init",
            value: format!("vertex {v}: shard {s}"),
            allowed: if complete {
                format!("0..{shards} (a complete placement)")
            } else {
                format!("0..{shards} or UNASSIGNED")
            },
        }),
        None => Ok(()),
    }
}

/// Polishes a complete placement `init` (every vertex on a shard) of `hg` at the finest level only: rounds of
/// label propagation (boundary vertices in random order to the shard with room where they gain, as in the
/// multilevel refinement), no coarsening and no FM: a vertex moves only where it lowers [`km1`] by itself
/// (or, at no loss, gathers a net's pins). Rebalances first if a shard is over its cap. Cheaper and gentler than
/// [`vcycle`]: what ALIS's aggregate step ends with under `polish` (docs/ALIS.md). With the flat
/// partitioner, [`partition`] from `init`. Deterministic for a given `rng` state.
pub fn polish<R: Rng>(
    hg: &Hypergraph,
    init: &[u16],
    params: &PartitionParams,
    rng: &mut R,
) -> Result<(Vec<u16>, PartitionStats), AlisError> {
    match from_complete_start(hg, init, params, Start::Polish, rng)? {
        Some(part) => Ok((part, PartitionStats::default())),
        None => partition(hg, init, params, rng),
    }
}

/// What [`vcycle`] and [`polish`] share: `params` and a complete `init` validated, then the multilevel
/// partitioner from `init` as `start` says; `None` with the flat partitioner (the caller runs [`partition`]).
fn from_complete_start<R: Rng>(
    hg: &Hypergraph,
    init: &[u16],
    params: &PartitionParams,
    start: Start,
    rng: &mut R,
) -> Result<Option<Vec<u16>>, AlisError> {
    params.validate(hg.n_vertices, init.len())?;
    check_init(init, params.shards, true)?;
    Ok((params.partitioner != Partitioner::Flat).then(|| partition_multilevel(hg, init, params, start, rng)))
}

/// How [`partition_multilevel`] treats its warm start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// A fresh multilevel partition, refining the warm start where there is one.
    Fresh,
    /// A V-cycle across shards from the warm start ([`vcycle`]).
    VCycle,
    /// Label propagation from the warm start at the finest level ([`polish`]). Vertices without a shard
    /// (a fresh partition's rows on negligible nets only) are first placed beside their nets: each, in
    /// index order, to the shard with room holding most of its nets' weight.
    Polish,
}

/// [`partition`] with a ChaCha8 generator seeded with `seed` (for callers without a generator of their own).
pub fn partition_seeded(
    hg: &Hypergraph,
    init: &[u16],
    params: &PartitionParams,
    seed: u64,
) -> Result<(Vec<u16>, PartitionStats), AlisError> {
    use rand::SeedableRng;
    partition(hg, init, params, &mut rand::rngs::ChaCha8Rng::seed_from_u64(seed))
}

/// A net weighing at most `1/NEGLIGIBLE` of the heaviest is negligible; a fresh partition leaves such nets out,
/// lightest first, while together they weigh at most `1/NEGLIGIBLE` of all nets ([`negligible_nets`]).
const NEGLIGIBLE: u128 = 1000;

/// The nets a fresh partition leaves out (`true`: kept), or `None` when it keeps them all: nets weighing at
/// most `1/NEGLIGIBLE` of the heaviest, lightest first (ties by index), while their summed weight stays
/// within `1/NEGLIGIBLE` of all nets'. A decayed history (`full --full-decay`) is such a hypergraph: the
/// windows long past weigh next to nothing, yet their rows and nets are most of it, and partitioned with the
/// rest they take the room and the coarse levels that the recent nets need. Nets of equal weight (every
/// unweighted hypergraph) are never left out.
fn negligible_nets(hg: &Hypergraph) -> Option<Vec<bool>> {
    let w = &hg.net_weights;
    let heaviest = u128::from(w.iter().copied().max()?);
    let total: u128 = w.iter().map(|&x| u128::from(x)).sum();
    let mut light: Vec<usize> = (0..w.len()).filter(|&e| u128::from(w[e]) * NEGLIGIBLE <= heaviest).collect();
    light.sort_by_key(|&e| (w[e], e));
    let mut keep = vec![true; w.len()];
    let mut left_out = 0u128;
    for e in light {
        left_out += u128::from(w[e]);
        if left_out * NEGLIGIBLE > total {
            break;
        }
        keep[e] = false;
    }
    keep.contains(&false).then_some(keep)
}

/// The multilevel partitioner on the vertices with nets (from `init` as `start` says); the others fill the
/// room left. A fresh partition without a warm start leaves [`negligible_nets`] out; then the rows only they
/// hold are placed beside their nets where there is room, and the whole is polished with every net
/// ([`polish`]'s label propagation). A warm start keeps every net: it is never made worse.
fn partition_multilevel<R: Rng>(
    hg: &Hypergraph,
    init: &[u16],
    params: &PartitionParams,
    start: Start,
    rng: &mut R,
) -> Vec<u16> {
    let fresh = start == Start::Fresh && init.iter().all(|&s| s == UNASSIGNED);
    match fresh.then(|| negligible_nets(hg)).flatten() {
        Some(keep) => {
            let mut part = partition_nets(hg, init, params, start, Some(&keep), rng);
            // The rows only negligible nets hold are placed again, beside their nets, by the polish.
            for (v, p) in part.iter_mut().enumerate() {
                if !hg.nets_of(v).is_empty() && !on_a_kept_net(hg, Some(&keep), v) {
                    *p = UNASSIGNED;
                }
            }
            partition_nets(hg, &part, params, Start::Polish, None, rng)
        }
        None => partition_nets(hg, init, params, start, None, rng),
    }
}

/// Whether vertex `v` is on a net that `keep` marks (any net when `None`).
fn on_a_kept_net(hg: &Hypergraph, keep: Option<&[bool]>, v: usize) -> bool {
    hg.nets_of(v).iter().any(|&e| keep.is_none_or(|kp| kp[e as usize]))
}

/// [`partition_multilevel`] on the nets `keep` marks (all when `None`): vertices on none of them are placed
/// last, into the room left.
fn partition_nets<R: Rng>(
    hg: &Hypergraph,
    init: &[u16],
    params: &PartitionParams,
    start: Start,
    keep: Option<&[bool]>,
    rng: &mut R,
) -> Vec<u16> {
    let k = params.shards;
    let n = hg.n_vertices;
    let on_a_net = |v: usize| on_a_kept_net(hg, keep, v);
    let mut part = vec![UNASSIGNED; n];
    let mut load = vec![0u64; k];
    // Isolated vertices with a warm start keep it while it has room; their room is not the others'.
    for v in 0..n {
        let s = init[v];
        if !on_a_net(v) && s != UNASSIGNED && load[s as usize] < params.caps[s as usize] as u64 {
            part[v] = s;
            load[s as usize] += 1;
        }
    }
    let connected: Vec<u32> = (0..n as u32).filter(|&v| on_a_net(v as usize)).collect();
    let mut local = vec![u32::MAX; n];
    for (i, &v) in connected.iter().enumerate() {
        local[v as usize] = i as u32;
    }
    let mut net_off = Vec::with_capacity(hg.n_nets() + 1);
    net_off.push(0);
    let mut pins = Vec::with_capacity(hg.n_pins());
    let mut nw = Vec::with_capacity(hg.n_nets());
    for e in (0..hg.n_nets()).filter(|&e| keep.is_none_or(|kp| kp[e])) {
        pins.extend(hg.net(e).iter().map(|&v| local[v as usize]));
        net_off.push(pins.len());
        nw.push(i64::from(hg.net_weights[e]));
    }
    let nc = connected.len();
    let fine = hg::Hg::build(vec![1; nc], net_off, pins, nw);
    // Identity contraction: sorts pins and merges parallel nets (repeated requests) into one weighted net.
    let identity: Vec<u32> = (0..nc as u32).collect();
    let fine = fine.contract(&identity, nc);
    let caps: Vec<u64> = params.caps.iter().zip(&load).map(|(&c, &l)| (c as u64).saturating_sub(l)).collect();
    let warm: Vec<u16> = connected.iter().map(|&v| init[v as usize]).collect();
    let warm = warm.iter().any(|&s| s != UNASSIGNED).then_some(warm);
    let settings = multilevel::Settings {
        deep: params.partitioner == Partitioner::Deep,
        ..multilevel::Settings::standard(params.max_iters.div_ceil(2))
    };
    let free = connected.len().abs_diff(n) as u64 - load.iter().sum::<u64>();
    let sub = match warm.as_deref() {
        Some(warm) if start == Start::VCycle => multilevel::vcycle(&fine, &caps, warm, &settings, rng),
        Some(warm) if start == Start::Polish => {
            let lp_only = multilevel::Settings { fm_passes: 0, ..settings };
            let complete = if warm.contains(&UNASSIGNED) {
                multilevel::complete_warm_start(&fine, params.shards, warm, &caps)
            } else {
                warm.to_vec()
            };
            multilevel::refine(&fine, params.shards, complete, &caps, &lp_only, rng).0
        }
        warm => multilevel::multilevel(&fine, &caps, free, warm, &settings, rng),
    };
    for (i, &v) in connected.iter().enumerate() {
        part[v as usize] = sub[i];
        load[sub[i] as usize] += 1;
    }
    for p in &mut part {
        if *p == UNASSIGNED {
            let s = most_room(&load, &params.caps);
            *p = s as u16;
            load[s] += 1;
        }
    }
    part
}

/// Index of the shard with the most room under its cap (lowest index on ties; room may be negative).
fn most_room(load: &[u64], caps: &[usize]) -> usize {
    let room = |s: usize| caps[s] as i128 - i128::from(load[s]);
    (0..load.len()).fold(0, |best, s| if room(s) > room(best) { s } else { best })
}

/// Index of the least loaded shard (lowest index on ties).
pub(crate) fn least_loaded(load: &[usize]) -> usize {
    let mut best = 0;
    for (s, &l) in load.iter().enumerate() {
        if l < load[best] {
            best = s;
        }
    }
    best
}

/// Mean fanout of `hg`'s nets under `part`, unweighted (nets with one pin are not stored and not counted).
#[must_use]
pub fn mean_net_fanout(hg: &Hypergraph, part: &[u16]) -> f64 {
    if hg.n_nets() == 0 {
        return 1.0;
    }
    let mut seen: Vec<u16> = Vec::new();
    let total: usize = (0..hg.n_nets()).map(|n| connectivity(hg, n, part, &mut seen)).sum();
    total as f64 / hg.n_nets() as f64
}

/// The shards net `n` touches under `part` (`seen` is scratch space).
fn connectivity(hg: &Hypergraph, n: usize, part: &[u16], seen: &mut Vec<u16>) -> usize {
    seen.clear();
    for &v in hg.net(n) {
        let s = part[v as usize];
        if !seen.contains(&s) {
            seen.push(s);
        }
    }
    seen.len()
}

/// The connectivity objective `Σ_e w(e)·(λ(e) − 1)` of `part` on `hg` (Mt-KaHyPar's and `KaHyPar`'s "km1").
#[must_use]
pub fn km1(hg: &Hypergraph, part: &[u16]) -> u64 {
    let mut seen: Vec<u16> = Vec::new();
    let mut total = 0u64;
    for n in 0..hg.n_nets() {
        let lambda = connectivity(hg, n, part, &mut seen) as u64;
        total = total.saturating_add(u64::from(hg.net_weights[n]) * (lambda - 1));
    }
    total
}

#[cfg(test)]
mod tests {
    use rand::rngs::ChaCha8Rng;
    use rand::{RngExt, SeedableRng};

    use super::*;

    fn params(shards: usize, caps: Vec<usize>) -> PartitionParams {
        params_with(Partitioner::Multilevel, shards, caps)
    }

    fn params_with(partitioner: Partitioner, shards: usize, caps: Vec<usize>) -> PartitionParams {
        PartitionParams { shards, caps, max_iters: 8, p_fanout: 0.5, partitioner }
    }

    /// The multilevel partitioners: every property below holds for both.
    const MULTILEVEL: [Partitioner; 2] = [Partitioner::Multilevel, Partitioner::Deep];

    fn loads(part: &[u16], shards: usize) -> Vec<usize> {
        let mut load = vec![0; shards];
        for &s in part {
            load[s as usize] += 1;
        }
        load
    }

    /// `groups` groups of `size` rows; every net picks 2–6 rows of one group, or with probability `noise` of
    /// any group. Without noise the planted partition (one group per shard) cuts nothing.
    fn planted(seed: u64, groups: u32, size: u32, nets: usize, noise: f64) -> (usize, Vec<Vec<u32>>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let n = (groups * size) as usize;
        let mut out = Vec::new();
        for _ in 0..nets {
            let g = rng.random_range(0..groups);
            let len = rng.random_range(2..7usize);
            let mut net: Vec<u32> = Vec::new();
            while net.len() < len {
                let v = if rng.random::<f64>() < noise {
                    rng.random_range(0..n as u32)
                } else {
                    g * size + rng.random_range(0..size)
                };
                if !net.contains(&v) {
                    net.push(v);
                }
            }
            out.push(net);
        }
        (n, out)
    }

    #[test]
    fn finds_the_planted_partition_of_a_clustered_hypergraph() {
        // Groups of 60 rows, caps of 63: the only partitions that cut nothing put one group on each shard.
        // Sixteen groups make the deep partitioner split groups of blocks at a coarser level too; six, groups
        // of three blocks.
        for p in MULTILEVEL {
            for (groups, seed) in [(4, 0), (4, 1), (4, 2), (6, 3), (16, 4)] {
                let (n, nets) = planted(seed, groups, 60, 150 * groups as usize, 0.0);
                let k = groups as usize;
                let hg = Hypergraph::new(n, nets.iter().map(Vec::as_slice)).unwrap();
                let (part, _) =
                    partition_seeded(&hg, &vec![UNASSIGNED; n], &params_with(p, k, vec![63; k]), seed).unwrap();
                assert_eq!(km1(&hg, &part), 0, "{p}, {groups} groups, seed {seed}");
                for g in 0..k {
                    let first = part[g * 60];
                    assert!(part[g * 60..(g + 1) * 60].iter().all(|&s| s == first), "{p} seed {seed}: group {g} split");
                }
            }
        }
    }

    #[test]
    fn with_noise_it_is_no_worse_than_the_planted_partition() {
        for (p, seed) in MULTILEVEL.into_iter().flat_map(|p| (0..3).map(move |s| (p, s))) {
            let (n, nets) = planted(seed + 10, 8, 40, 900, 0.03);
            let hg = Hypergraph::new(n, nets.iter().map(Vec::as_slice)).unwrap();
            let planted: Vec<u16> = (0..n).map(|v| (v / 40) as u16).collect();
            let (part, _) = partition_seeded(&hg, &vec![UNASSIGNED; n], &params_with(p, 8, vec![42; 8]), seed).unwrap();
            let (got, want) = (km1(&hg, &part), km1(&hg, &planted));
            assert!(got <= want, "{p} seed {seed}: {got} > {want}");
            assert!(loads(&part, 8).iter().all(|&l| l <= 42));
        }
    }

    #[test]
    fn never_breaks_a_cap_even_uneven_or_without_slack() {
        // Random hypergraphs (noise 1: no structure), caps with no slack at all, uneven caps, and a shard with
        // no room; isolated rows (the last 30) fill what is left.
        for seed in 0..4 {
            let (n, nets) = planted(seed + 20, 1, 200, 500, 1.0);
            let hg = Hypergraph::new(n + 30, nets.iter().map(Vec::as_slice)).unwrap();
            for (p, caps) in MULTILEVEL.into_iter().flat_map(|p| {
                [vec![58; 4], vec![100, 60, 40, 30], vec![0, 120, 60, 50], vec![80, 0, 40, 40, 40, 30], vec![230]]
                    .map(move |c| (p, c))
            }) {
                let shards = caps.len();
                let (part, _) =
                    partition_seeded(&hg, &vec![UNASSIGNED; n + 30], &params_with(p, shards, caps.clone()), seed)
                        .unwrap();
                let load = loads(&part, shards);
                assert!(load.iter().zip(&caps).all(|(l, c)| l <= c), "{p} seed {seed}: {load:?} over {caps:?}");
                assert_eq!(load.iter().sum::<usize>(), n + 30);
            }
        }
    }

    #[test]
    fn is_deterministic_for_a_seed() {
        let (n, nets) = planted(5, 6, 50, 700, 0.1);
        let hg = Hypergraph::new(n, nets.iter().map(Vec::as_slice)).unwrap();
        for p in MULTILEVEL {
            let run =
                |seed| partition_seeded(&hg, &vec![UNASSIGNED; n], &params_with(p, 6, vec![53; 6]), seed).unwrap().0;
            assert_eq!(run(3), run(3), "{p}");
            // Another seed takes other random choices (the visit orders differ), so the result may differ; it
            // is still a valid partition.
            assert_eq!(run(4).len(), n);
        }
    }

    /// Every group of 60 rows split in two halves over shards `g` and `g + 1` (mod `k`): each shard holds
    /// 60 rows, so the caps (63) hold, and every group's nets cross two shards.
    fn split_groups_start(k: usize) -> Vec<u16> {
        (0..k * 60).map(|v| ((v / 60 + (v % 60) / 30) % k) as u16).collect()
    }

    #[test]
    fn a_vcycle_moves_groups_that_the_start_splits() {
        // From a start that splits every group over two shards, the cycle gathers each group on one shard (a
        // cycle that returned its start, or broke the caps, fails here).
        for p in MULTILEVEL {
            for (k, seed) in [(4usize, 0u64), (8, 1), (16, 2)] {
                let (n, nets) = planted(seed + 40, k as u32, 60, 150 * k, 0.0);
                let hg = Hypergraph::new(n, nets.iter().map(Vec::as_slice)).unwrap();
                let init = split_groups_start(k);
                let params = params_with(p, k, vec![63; k]);
                let run = || vcycle(&hg, &init, &params, &mut ChaCha8Rng::seed_from_u64(seed)).unwrap().0;
                let part = run();
                assert_eq!(km1(&hg, &part), 0, "{p}, {k} shards: km1 {} from {}", km1(&hg, &part), km1(&hg, &init));
                assert!(loads(&part, k).iter().all(|&l| l <= 63));
                assert_eq!(run(), part, "{p}: deterministic for a seed");
            }
        }
    }

    #[test]
    fn a_vcycle_never_returns_worse_than_its_start() {
        for (p, seed) in MULTILEVEL.into_iter().flat_map(|p| (0..3).map(move |s| (p, s))) {
            let (n, nets) = planted(seed + 50, 8, 40, 900, 0.3);
            let hg = Hypergraph::new(n, nets.iter().map(Vec::as_slice)).unwrap();
            let init: Vec<u16> = (0..n).map(|v| (v / 40) as u16).collect();
            let (part, _) =
                vcycle(&hg, &init, &params_with(p, 8, vec![42; 8]), &mut ChaCha8Rng::seed_from_u64(seed)).unwrap();
            assert!(km1(&hg, &part) <= km1(&hg, &init), "{p} seed {seed}");
            assert!(loads(&part, 8).iter().all(|&l| l <= 42));
        }
    }

    #[test]
    fn a_vcycle_needs_a_complete_start() {
        let (n, nets) = planted(60, 4, 60, 600, 0.0);
        let hg = Hypergraph::new(n, nets.iter().map(Vec::as_slice)).unwrap();
        let mut init = split_groups_start(4);
        init[7] = UNASSIGNED;
        let e = vcycle(&hg, &init, &params(4, vec![63; 4]), &mut ChaCha8Rng::seed_from_u64(0))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("init") && e.contains("vertex 7"), "{e}");
    }

    #[test]
    fn a_polish_only_lowers_km1_keeps_the_caps_and_needs_a_complete_start() {
        for (p, seed) in MULTILEVEL.into_iter().flat_map(|p| (0..3).map(move |s| (p, s))) {
            let (n, nets) = planted(seed + 70, 4, 50, 600, 0.2);
            let hg = Hypergraph::new(n, nets.iter().map(Vec::as_slice)).unwrap();
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            // The planted groups with rows swapped at random: a polish must gather many of them back.
            let mut init: Vec<u16> = (0..n).map(|v| (v / 50) as u16).collect();
            for _ in 0..60 {
                let (a, b) = (rng.random_range(0..n), rng.random_range(0..n));
                init.swap(a, b);
            }
            let prm = params_with(p, 4, vec![52; 4]);
            let (part, _) = polish(&hg, &init, &prm, &mut ChaCha8Rng::seed_from_u64(seed)).unwrap();
            let (before, after) = (km1(&hg, &init), km1(&hg, &part));
            assert!(after < before, "{p} seed {seed}: {after} not below {before}");
            assert!(loads(&part, 4).iter().all(|&l| l <= 52), "{p} seed {seed}");
            let again = polish(&hg, &init, &prm, &mut ChaCha8Rng::seed_from_u64(seed)).unwrap().0;
            assert_eq!(part, again, "deterministic for a seed");
        }
        let (n, nets) = planted(60, 4, 60, 600, 0.0);
        let hg = Hypergraph::new(n, nets.iter().map(Vec::as_slice)).unwrap();
        let mut init = split_groups_start(4);
        init[9] = UNASSIGNED;
        let e = polish(&hg, &init, &params(4, vec![63; 4]), &mut ChaCha8Rng::seed_from_u64(0))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("init") && e.contains("vertex 9"), "{e}");
    }

    #[test]
    fn a_warm_start_is_never_made_worse() {
        for seed in 0..4 {
            let (n, nets) = planted(seed + 30, 4, 50, 500, 0.2);
            let hg = Hypergraph::new(n, nets.iter().map(Vec::as_slice)).unwrap();
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            // A feasible warm start: the planted groups with a few rows swapped at random.
            let mut init: Vec<u16> = (0..n).map(|v| (v / 50) as u16).collect();
            for _ in 0..40 {
                let (a, b) = (rng.random_range(0..n), rng.random_range(0..n));
                init.swap(a, b);
            }
            let caps = vec![52; 4];
            let (part, _) = partition_seeded(&hg, &init, &params(4, caps), seed).unwrap();
            assert!(km1(&hg, &part) <= km1(&hg, &init), "seed {seed}: {} > {}", km1(&hg, &part), km1(&hg, &init));
            assert!(loads(&part, 4).iter().all(|&l| l <= 52));
        }
    }

    #[test]
    fn bad_input_is_refused_by_name() {
        let msg = |r: Result<Hypergraph, AlisError>| r.err().map(|e| e.to_string()).unwrap_or_default();
        let e = msg(Hypergraph::new(3, [&[0u32, 3][..]]));
        assert!(e.contains("nets") && e.contains("pin 3") && e.contains("n_vertices = 3"), "{e}");
        let e = msg(Hypergraph::new(3, [&[1u32, 2, 1][..]]));
        assert!(e.contains("repeated"), "{e}");
        let hg = Hypergraph::new(4, [&[0u32, 1][..], &[2, 3][..]]).unwrap();
        let run = |init: &[u16], p: &PartitionParams| {
            partition_seeded(&hg, init, p, 0).err().map(|e| e.to_string()).unwrap_or_default()
        };
        let e = run(&[UNASSIGNED; 4], &params(2, vec![1, 2]));
        assert!(e.contains("caps") && e.contains("sum 3") && e.contains(">= the vertex count 4"), "{e}");
        let e = run(&[UNASSIGNED; 4], &params(2, vec![4]));
        assert!(e.contains("caps") && e.contains("1 entries"), "{e}");
        let e = run(&[UNASSIGNED; 3], &params(2, vec![2, 2]));
        assert!(e.contains("init") && e.contains("3 entries"), "{e}");
        let e = run(&[0, 1, 2, 0], &params(2, vec![2, 2]));
        assert!(e.contains("init") && e.contains("vertex 2: shard 2"), "{e}");
        let e = run(&[UNASSIGNED; 4], &params(0, vec![]));
        assert!(e.contains("shards") && e.contains("1..=4096"), "{e}");
        assert!("kahypar".parse::<Partitioner>().is_err());
        assert_eq!("flat".parse::<Partitioner>().ok(), Some(Partitioner::Flat));
    }

    #[test]
    fn parallel_nets_count_by_weight() {
        // The same request twice weighs as much as one request of weight 2.
        let twice = Hypergraph::new(3, [&[0u32, 1][..], &[0, 1][..], &[1, 2][..]]).unwrap();
        let weighted = Hypergraph::with_weights(3, [(&[0u32, 1][..], 2), (&[1, 2][..], 1)]).unwrap();
        for part in [[0u16, 1, 1], [0, 0, 1], [0, 1, 0]] {
            assert_eq!(km1(&twice, &part), km1(&weighted, &part));
        }
        let hg = Hypergraph::with_weights(4, [(&[0u32, 1][..], 5), (&[1, 2][..], 1), (&[2, 3][..], 5)]).unwrap();
        let (part, _) = partition_seeded(&hg, &[UNASSIGNED; 4], &params(2, vec![2, 2]), 1).unwrap();
        assert_eq!(km1(&hg, &part), 1, "{part:?}");
    }

    #[test]
    fn negligible_nets_are_the_lightest_within_a_thousandth_of_the_weight() {
        // Equal weights: nothing is negligible, however many nets.
        let (n, nets) = planted(0, 4, 20, 200, 0.1);
        assert_eq!(negligible_nets(&Hypergraph::new(n, nets.iter().map(Vec::as_slice)).unwrap()), None);
        // Ten nets of 100,000, one of 101 (above a thousandth of the heaviest), twenty of 100: together
        // 1,002,101, so the light nets left out may weigh 1,002. Lightest first, ties by index: ten of the twenty.
        let mut weighted: Vec<(Vec<u32>, u32)> = (0..10).map(|i| (vec![i, i + 1], 100_000)).collect();
        weighted.push((vec![0, 5], 101));
        weighted.extend((0..20).map(|i| (vec![i, i + 2], 100)));
        let hg = Hypergraph::with_weights(30, weighted.iter().map(|(p, w)| (p.as_slice(), *w))).unwrap();
        let keep = negligible_nets(&hg).expect("some nets are negligible");
        let left_out: Vec<usize> = (0..keep.len()).filter(|&e| !keep[e]).collect();
        assert_eq!(left_out, (11..21).collect::<Vec<_>>());
    }

    #[test]
    fn a_decayed_history_is_partitioned_for_its_recent_nets() {
        // Four planted groups of 60 rows on heavy nets (recent windows), noise over all 280 rows on nets a
        // thousand times lighter (old windows): 40 rows are on light nets only. The light nets are left out,
        // the rows they alone hold are placed beside their nets afterwards, and the polish over every net
        // keeps the caps.
        let (_, heavy) = planted(3, 4, 60, 600, 0.0);
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let light: Vec<Vec<u32>> = (0..400)
            .map(|_| {
                let a = rng.random_range(0..280u32);
                let b = (a + rng.random_range(1..280u32)) % 280;
                vec![a, b]
            })
            .collect();
        let nets = heavy.iter().map(|p| (p.as_slice(), 1000)).chain(light.iter().map(|p| (p.as_slice(), 1)));
        let hg = Hypergraph::with_weights(280, nets).unwrap();
        assert!(
            negligible_nets(&hg).is_some_and(|keep| keep[..600].iter().all(|&k| k) && !keep[600..].contains(&true))
        );
        let planted_part: Vec<u16> =
            (0..280).map(|v| if v < 240 { (v / 60) as u16 } else { ((v - 240) / 10) as u16 }).collect();
        for p in MULTILEVEL {
            for seed in 0..3 {
                let (part, _) =
                    partition_seeded(&hg, &[UNASSIGNED; 280], &params_with(p, 4, vec![72; 4]), seed).unwrap();
                assert!(loads(&part, 4).iter().all(|&l| l <= 72), "{p} seed {seed}: {:?}", loads(&part, 4));
                for g in 0..4 {
                    let first = part[g * 60];
                    assert!(part[g * 60..(g + 1) * 60].iter().all(|&s| s == first), "{p} seed {seed}: group {g} split");
                }
                assert!(km1(&hg, &part) <= km1(&hg, &planted_part), "{p} seed {seed}");
            }
        }
    }
}
