//! CPU backend: a real multi-threaded fused embedding-bag forward (sum pooling) and backward with a
//! fused SGD update over all tables of a set (fp32), and a real all-to-all among D worker threads.
//!
//! Threads: `std::thread::scope` with a static partition, not rayon. The backward gives every thread
//! a fixed range of rows of every table (it *owns* them), and that mapping must be the same in the
//! bucketing phase and in the update phase; a static partition says so directly, a work-stealing pool
//! would need the same partition on top. Scoped threads also borrow the weights without `Arc` or
//! `unsafe`, and spawning costs tens of microseconds against kernels of milliseconds.
//!
//! Duplicate indices: the forward only reads weights. The backward first buckets every lookup
//! `(row, bag)` by the thread that owns `row` (each producer scans its own bags), then each owner
//! applies `w[row] -= lr · grad[bag]` for all lookups of its rows, one after another. No two threads
//! ever write the same row, so repeated rows within or across bags are all applied, exactly once each
//! (the same result as summing the gradient per row first, up to float summation order).

use std::sync::{Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use planner_core::table::TableSpec;

use crate::workload::{Bags, CommSample};

/// SGD learning rate of the fused update (its value does not change the cost).
pub const LEARNING_RATE: f32 = 0.01;

/// A fused set of tables ready to run: weights, lookups and the output layout `[batch × Σ dims]`
/// (table `t` in columns `col_offsets[t]..col_offsets[t] + dims[t]`, as FBGEMM's TBE lays it out).
/// The weights are owned vectors ([`FusedSet::new`], for tests and references) or slices of a reusable
/// [`Arena`] ([`FusedSet::in_arena`], what the backend measures with).
#[derive(Debug)]
pub struct FusedSet<W = Vec<f32>> {
    /// Dim of each table.
    pub dims: Vec<usize>,
    /// First output column of each table.
    pub col_offsets: Vec<usize>,
    /// Σ dims: the width of an output row.
    pub total_dim: usize,
    /// Rows of each table.
    pub rows: Vec<usize>,
    /// Weights of each table, row-major `rows × dim`.
    pub weights: Vec<W>,
    /// Lookups of each table.
    pub bags: Vec<Bags>,
    /// Bags per table.
    pub batch: usize,
}

/// The shape of a set: dims, column offsets, rows and element counts per table; checks the bags.
struct Shape {
    dims: Vec<usize>,
    col_offsets: Vec<usize>,
    rows: Vec<usize>,
    lens: Vec<usize>,
    total_dim: usize,
    batch: usize,
}

fn shape(tables: &[TableSpec], bags: &[Bags]) -> Result<Shape> {
    if tables.is_empty() || tables.len() != bags.len() {
        bail!(
            "a fused set needs at least one table and one batch of lookups per table ({} tables, {} batches)",
            tables.len(),
            bags.len()
        );
    }
    let batch = bags[0].batch();
    let mut sh =
        Shape { dims: Vec::new(), col_offsets: Vec::new(), rows: Vec::new(), lens: Vec::new(), total_dim: 0, batch };
    for (table, b) in tables.iter().zip(bags) {
        if b.batch() != batch {
            bail!("table `{}` has {} bags, the set's batch is {batch}", table.name, b.batch());
        }
        if let Some(&i) = b.indices.iter().find(|&&i| u64::from(i) >= table.rows) {
            bail!("table `{}`: lookup of row {i} but the table has {} rows", table.name, table.rows);
        }
        let n =
            table.rows.checked_mul(u64::from(table.dim)).and_then(|n| usize::try_from(n).ok()).ok_or_else(|| {
                anyhow::anyhow!("table `{}` is too large for this machine's address space", table.name)
            })?;
        sh.lens.push(n);
        sh.dims.push(table.dim as usize);
        sh.rows.push(table.rows as usize);
        sh.col_offsets.push(sh.total_dim);
        sh.total_dim += table.dim as usize;
    }
    Ok(sh)
}

/// Deterministic small pseudo-random value in [-0.005, 0.005) from a counter (`SplitMix64`).
fn init_value(seed: u64, i: u64) -> f32 {
    let mut z = seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.01
}

/// Fills `buf` with [`init_value`]s on `threads` threads.
pub fn fill(buf: &mut [f32], seed: u64, threads: usize) {
    let chunk = buf.len().div_ceil(threads.max(1)).max(1 << 16);
    std::thread::scope(|s| {
        for (c, part) in buf.chunks_mut(chunk).enumerate() {
            s.spawn(move || {
                let base = (c * chunk) as u64;
                for (i, x) in part.iter_mut().enumerate() {
                    *x = init_value(seed, base + i as u64);
                }
            });
        }
    });
}

#[cfg(test)]
impl FusedSet<Vec<f32>> {
    /// Allocates and initialises the weights of `tables` (fp32) with `bags` as their lookups.
    pub fn new(tables: &[TableSpec], bags: Vec<Bags>, seed: u64, threads: usize) -> Result<Self> {
        let sh = shape(tables, &bags)?;
        let mut weights = Vec::new();
        for (t, (table, &n)) in tables.iter().zip(&sh.lens).enumerate() {
            let mut w = Vec::new();
            w.try_reserve_exact(n)
                .map_err(|_| anyhow::anyhow!("table `{}`: cannot allocate {} bytes of weights", table.name, n * 4))?;
            w.resize(n, 0.0);
            fill(&mut w, seed ^ (t as u64).wrapping_mul(0xA24B_AED4_963E_E407), threads);
            weights.push(w);
        }
        let Shape { dims, col_offsets, rows, total_dim, batch, .. } = sh;
        Ok(Self { dims, col_offsets, total_dim, rows, weights, bags, batch })
    }
}

impl<'a> FusedSet<&'a mut [f32]> {
    /// The set of `tables` with its weights in consecutive slices of `arena` (grown when too small;
    /// the values are whatever earlier sets left there: they do not change the cost of a lookup).
    pub fn in_arena(tables: &[TableSpec], bags: Vec<Bags>, arena: &'a mut Arena, threads: usize) -> Result<Self> {
        let sh = shape(tables, &bags)?;
        let weights = arena.slices(&sh.lens, threads)?;
        let Shape { dims, col_offsets, rows, total_dim, batch, .. } = sh;
        Ok(Self { dims, col_offsets, total_dim, rows, weights, bags, batch })
    }
}

/// Reusable weight memory: one anonymous mapping, advised for transparent huge pages, initialised once
/// and grown (never shrunk) when a set needs more. Reusing it means a measurement does not pay for
/// page faults and zeroing, and every set sees memory in the same state; huge pages keep TLB misses
/// from dominating random row reads the way 4 KiB pages do (a GPU's memory is mapped with large pages too).
#[derive(Debug, Default)]
pub struct Arena {
    map: Option<memmap2::MmapMut>,
}

/// Arena growth step: sizes are rounded up to this many bytes, so a run grows it a few times at most.
const ARENA_STEP_BYTES: usize = 256 << 20;

impl Arena {
    /// Bytes mapped now.
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.map.as_ref().map_or(0, |m| m.len())
    }

    /// Consecutive slices of `lens` floats each, growing the mapping when needed.
    pub fn slices(&mut self, lens: &[usize], threads: usize) -> Result<Vec<&mut [f32]>> {
        let floats = lens.iter().try_fold(0usize, |a, &n| a.checked_add(n));
        let bytes = floats
            .and_then(|f| f.checked_mul(4))
            .ok_or_else(|| anyhow::anyhow!("a set of {} tables overflows the address space", lens.len()))?;
        if bytes > self.bytes() {
            // Drop the old mapping first: holding both could need twice the memory.
            self.map = None;
            let size = bytes.div_ceil(ARENA_STEP_BYTES).max(1) * ARENA_STEP_BYTES;
            let mut map = memmap2::MmapOptions::new()
                .len(size)
                .map_anon()
                .map_err(|e| anyhow::anyhow!("cannot map {size} bytes for weights: {e}"))?;
            // Advice the kernel cannot follow (huge pages off) leaves 4 KiB pages; the fingerprint says which.
            let _ = map.advise(memmap2::Advice::HugePage);
            let all: &mut [f32] = bytemuck::try_cast_slice_mut(&mut map[..])
                .map_err(|e| anyhow::anyhow!("weight mapping is not f32-aligned: {e}"))?;
            fill(all, 0x5EED_A7E4, threads);
            self.map = Some(map);
        }
        let Some(map) = self.map.as_mut() else { bail!("the weight arena is not mapped") };
        let mut rest: &mut [f32] = bytemuck::try_cast_slice_mut(&mut map[..])
            .map_err(|e| anyhow::anyhow!("weight mapping is not f32-aligned: {e}"))?;
        let mut out = Vec::with_capacity(lens.len());
        for &n in lens {
            let (mine, tail) = rest.split_at_mut(n);
            out.push(mine);
            rest = tail;
        }
        Ok(out)
    }
}

/// Whether transparent huge pages can back an advised mapping (`enabled` is `always` or `madvise`).
#[must_use]
pub fn transparent_huge_pages_available() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|t| t.contains("[always]") || t.contains("[madvise]"))
}

/// Bytes the forward and the backward of a fused set touch (`docs/COLLECTOR.md`, "Effective
/// bandwidth"), 4-byte weights, indices and offsets, with `L` the lookups of a table, `d` its dim and
/// `n` the batch:
/// forward = sum over tables of 4·(L·d + L + n + 1 + n·d): a weight row read per lookup, indices,
/// offsets, output written; backward = sum over tables of 4·(L + n + 1 + n·d + 2·L·d): indices,
/// offsets, gradient read, a weight row read and written per lookup.
#[must_use]
pub fn bytes_touched(tables: &[TableSpec], bags: &[Bags]) -> (u64, u64) {
    let mut fwd = 0u64;
    let mut bwd = 0u64;
    for (t, b) in tables.iter().zip(bags) {
        let l = b.indices.len() as u64;
        let d = u64::from(t.dim);
        let n = b.batch() as u64;
        fwd += 4 * (l * d + l + n + 1 + n * d);
        bwd += 4 * (l + n + 1 + n * d + 2 * l * d);
    }
    (fwd, bwd)
}

/// Fused forward: `out[b, col_offsets[t]..][..dims[t]] = Σ_{i in bag b of t} weights[t][i]`.
/// `out` has `batch × total_dim` elements; bags are split evenly across `threads`.
pub fn forward<W: AsRef<[f32]> + Sync>(set: &FusedSet<W>, out: &mut [f32], threads: usize) {
    assert_eq!(out.len(), set.batch * set.total_dim, "output buffer shape is fixed by the set");
    let per = set.batch.div_ceil(threads.max(1)).max(1);
    let run = |b0: usize, chunk: &mut [f32]| {
        for (local, row_out) in chunk.chunks_exact_mut(set.total_dim).enumerate() {
            let b = b0 + local;
            for (t, bags) in set.bags.iter().enumerate() {
                let d = set.dims[t];
                let dst = &mut row_out[set.col_offsets[t]..set.col_offsets[t] + d];
                dst.fill(0.0);
                let w = set.weights[t].as_ref();
                for &i in &bags.indices[bags.offsets[b] as usize..bags.offsets[b + 1] as usize] {
                    let src = &w[i as usize * d..i as usize * d + d];
                    for (o, x) in dst.iter_mut().zip(src) {
                        *o += x;
                    }
                }
            }
        }
    };
    if threads <= 1 {
        run(0, out);
        return;
    }
    std::thread::scope(|s| {
        for (c, chunk) in out.chunks_mut(per * set.total_dim).enumerate() {
            s.spawn(move || run(c * per, chunk));
        }
    });
}

/// `(row, bag)` lookups bucketed by owner: `[table][owner]`.
type Buckets = Vec<Vec<Vec<(u32, u32)>>>;

/// Reusable buckets of the backward: `buckets[producer][table][owner]` holds `(row, bag)` pairs.
#[derive(Debug, Default)]
pub struct BackwardScratch {
    buckets: Vec<Buckets>,
}

/// First row owned by `owner` of `threads` in a table of `rows` rows: owner(r) = ⌊r·threads/rows⌋.
fn owner_start(owner: usize, rows: usize, threads: usize) -> usize {
    ((owner as u128 * rows as u128).div_ceil(threads as u128)) as usize
}

/// Fused backward with SGD: for every lookup of row `i` in bag `b` of table `t`,
/// `weights[t][i] -= lr · grad[b, col_offsets[t]..][..dims[t]]`. Correct under duplicate indices
/// (see the module doc).
pub fn backward_sgd<W: AsMut<[f32]>>(
    set: &mut FusedSet<W>,
    grad: &[f32],
    lr: f32,
    threads: usize,
    scratch: &mut BackwardScratch,
) {
    assert_eq!(grad.len(), set.batch * set.total_dim, "gradient buffer shape is fixed by the set");
    let threads = threads.max(1);
    let n_tables = set.bags.len();
    scratch.buckets.resize_with(threads, Vec::new);
    for p in &mut scratch.buckets {
        p.resize_with(n_tables, Vec::new);
        for t in p.iter_mut() {
            t.resize_with(threads, Vec::new);
            for o in t.iter_mut() {
                o.clear();
            }
        }
    }
    let per = set.batch.div_ceil(threads).max(1);
    // Phase 1: each producer buckets the lookups of its bags by owning thread.
    {
        let (bags, rows) = (&set.bags, &set.rows);
        let bucket_bags = |p: usize, mine: &mut Buckets| {
            let (b0, b1) = ((p * per).min(bags[0].batch()), ((p + 1) * per).min(bags[0].batch()));
            for (t, bag) in bags.iter().enumerate() {
                let r = rows[t] as u64;
                for b in b0..b1 {
                    for &i in &bag.indices[bag.offsets[b] as usize..bag.offsets[b + 1] as usize] {
                        let owner = (u64::from(i) * threads as u64 / r) as usize;
                        mine[t][owner].push((i, b as u32));
                    }
                }
            }
        };
        if threads == 1 {
            bucket_bags(0, &mut scratch.buckets[0]);
        } else {
            std::thread::scope(|s| {
                for (p, mine) in scratch.buckets.iter_mut().enumerate() {
                    s.spawn(move || bucket_bags(p, mine));
                }
            });
        }
    }
    // Phase 2: each owner applies the updates to its rows of every table.
    let mut per_owner: Vec<Vec<(usize, &mut [f32])>> = (0..threads).map(|_| Vec::with_capacity(n_tables)).collect();
    for (t, w) in set.weights.iter_mut().enumerate() {
        let (rows, d) = (set.rows[t], set.dims[t]);
        let mut rest: &mut [f32] = w.as_mut();
        for (o, slot) in per_owner.iter_mut().enumerate() {
            let (start, end) = (owner_start(o, rows, threads), owner_start(o + 1, rows, threads));
            let (mine, tail) = rest.split_at_mut((end - start) * d);
            slot.push((start, mine));
            rest = tail;
        }
    }
    let (buckets, dims, cols, total) = (&scratch.buckets, &set.dims, &set.col_offsets, set.total_dim);
    let apply = |o: usize, tables: Vec<(usize, &mut [f32])>| {
        for (t, (start, w)) in tables.into_iter().enumerate() {
            let d = dims[t];
            for producer in buckets {
                for &(i, b) in &producer[t][o] {
                    let local = (i as usize - start) * d;
                    let g = &grad[b as usize * total + cols[t]..b as usize * total + cols[t] + d];
                    for (x, gx) in w[local..local + d].iter_mut().zip(g) {
                        *x -= lr * gx;
                    }
                }
            }
        }
    };
    if threads == 1 {
        for (o, tables) in per_owner.into_iter().enumerate() {
            apply(o, tables);
        }
    } else {
        std::thread::scope(|s| {
            for (o, tables) in per_owner.into_iter().enumerate() {
                s.spawn(move || apply(o, tables));
            }
        });
    }
}

/// Reads one byte of every cache line of `buf` on `threads` threads, so that earlier data leaves the
/// caches. The buffer must have been written once (a never-written buffer maps the shared zero page and
/// evicts nothing). Reading, not writing, leaves clean lines behind: the timed run that follows does not
/// pay to write the flush buffer back.
pub fn flush_cache(buf: &[u8], threads: usize) {
    let part = buf.len().div_ceil(threads.max(1)).max(64);
    let sums: Vec<u8> = std::thread::scope(|s| {
        let handles: Vec<_> = buf
            .chunks(part)
            .map(|c| s.spawn(move || c.iter().step_by(64).fold(0u8, |a, &x| a.wrapping_add(x))))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(0)).collect()
    });
    std::hint::black_box(sums);
}

/// Forward and backward times of every timed repetition, ms.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ComputeTimes {
    /// Forward per timed repetition.
    pub fwd_ms: Vec<f64>,
    /// Backward per timed repetition.
    pub bwd_ms: Vec<f64>,
}

/// Runs `warmup` + `reps` forward+backward iterations and times the last `reps` (wall clock).
/// `flush` (if non-empty) is written before every iteration.
pub fn time_compute<W: AsRef<[f32]> + AsMut<[f32]> + Sync>(
    set: &mut FusedSet<W>,
    warmup: u32,
    reps: u32,
    threads: usize,
    flush: &[u8],
) -> ComputeTimes {
    let mut out = vec![0.0f32; set.batch * set.total_dim];
    let mut grad = vec![0.0f32; set.batch * set.total_dim];
    fill(&mut grad, 0x6772_6164, threads);
    let mut scratch = BackwardScratch::default();
    let mut times = ComputeTimes::default();
    for it in 0..warmup + reps {
        if !flush.is_empty() {
            flush_cache(flush, threads);
        }
        let t0 = Instant::now();
        forward(set, &mut out, threads);
        let t1 = Instant::now();
        backward_sgd(set, &grad, LEARNING_RATE, threads, &mut scratch);
        let t2 = Instant::now();
        std::hint::black_box(&out);
        if it >= warmup {
            times.fwd_ms.push((t1 - t0).as_secs_f64() * 1e3);
            times.bwd_ms.push((t2 - t1).as_secs_f64() * 1e3);
        }
    }
    times
}

/// Per-rank forward and backward all-to-all times of every timed repetition, ms.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CommTimes {
    /// `fw_ms[rank][rep]`.
    pub fw_ms: Vec<Vec<f64>>,
    /// `bw_ms[rank][rep]`.
    pub bw_ms: Vec<Vec<f64>>,
}

/// Receive side of one rank: a slot per sender and a count of arrived blocks.
struct Inbox {
    slots: Vec<Mutex<Vec<f32>>>,
    arrived: Mutex<usize>,
    ready: Condvar,
}

/// One all-to-all among `d` threads. Rank `r` sends `send_len(r, s)` floats to every rank `s`.
/// Every rank starts at `epoch + delay(r)`, where `epoch` is the earliest moment any rank left the
/// opening barrier, so a rank the OS schedules late is not credited with a shorter wait. Returns each
/// rank's time from that scheduled start to having received every block.
#[allow(clippy::too_many_arguments)]
fn exchange(
    d: usize,
    barrier: &Barrier,
    epoch: &Mutex<Option<Instant>>,
    inboxes: &[Inbox],
    sends: &[Vec<f32>],
    r: usize,
    delay: Duration,
    send_len: &dyn Fn(usize, usize) -> usize,
) -> f64 {
    barrier.wait();
    let left = Instant::now();
    if let Ok(mut e) = epoch.lock() {
        *e = Some(e.map_or(left, |e| e.min(left)));
    }
    barrier.wait();
    let Some(common) = epoch.lock().ok().and_then(|e| *e) else { return f64::NAN };
    let start = common + delay;
    let now = Instant::now();
    if start > now {
        std::thread::sleep(start - now);
    }
    let mut offset = 0;
    for (s, inbox) in inboxes.iter().enumerate() {
        let n = send_len(r, s);
        if let Ok(mut slot) = inbox.slots[r].lock() {
            slot[..n].copy_from_slice(&sends[r][offset..offset + n]);
        }
        offset += n;
        if let Ok(mut arrived) = inbox.arrived.lock() {
            *arrived += 1;
            inbox.ready.notify_all();
        }
    }
    if let Ok(mut arrived) = inboxes[r].arrived.lock() {
        while *arrived < d {
            match inboxes[r].ready.wait(arrived) {
                Ok(a) => arrived = a,
                Err(_) => return f64::NAN,
            }
        }
    }
    let end = Instant::now();
    // Every rank has read the epoch before this barrier opens, and none records the next one before the
    // leader has cleared it (the next exchange opens with a barrier the leader must reach too).
    if barrier.wait().is_leader()
        && let Ok(mut e) = epoch.lock()
    {
        *e = None;
    }
    if let Ok(mut arrived) = inboxes[r].arrived.lock() {
        *arrived = 0;
    }
    end.saturating_duration_since(start).as_secs_f64() * 1e3
}

/// Times the forward (with start delays) and backward all-to-all of `sample` among `d` threads, each
/// rank holding `batch / d` rows of the pooled output of its tables for every rank (SPEC section 4).
/// The forward time of rank r is measured from its scheduled start, the common epoch + its delay.
pub fn time_comm(sample: &CommSample, batch: usize, warmup: u32, reps: u32) -> Result<CommTimes> {
    let d = sample.device_dims.len();
    if d == 0 || batch < d {
        bail!("--batch-size = {batch} must be at least the device count {d}");
    }
    let rows = batch / d;
    let sums: Vec<usize> = sample.dim_sums().iter().map(|&x| x as usize).collect();
    // Forward: r sends rows × sums[r] to every s; backward: r sends rows × sums[s] to s.
    let fw_len = |r: usize, _s: usize| rows * sums[r];
    let bw_len = |_r: usize, s: usize| rows * sums[s];
    let make_inboxes = |len: &dyn Fn(usize, usize) -> usize| -> Vec<Inbox> {
        (0..d)
            .map(|s| Inbox {
                slots: (0..d).map(|r| Mutex::new(vec![0.0; len(r, s)])).collect(),
                arrived: Mutex::new(0),
                ready: Condvar::new(),
            })
            .collect()
    };
    let fw_in = make_inboxes(&fw_len);
    let bw_in = make_inboxes(&bw_len);
    let fw_send: Vec<Vec<f32>> = (0..d).map(|r| vec![1.0; (0..d).map(|s| fw_len(r, s)).sum()]).collect();
    let bw_send: Vec<Vec<f32>> = (0..d).map(|r| vec![1.0; (0..d).map(|s| bw_len(r, s)).sum()]).collect();
    let barrier = Barrier::new(d);
    let epoch = Mutex::new(None);
    let mut times = CommTimes { fw_ms: vec![Vec::new(); d], bw_ms: vec![Vec::new(); d] };
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..d)
            .map(|r| {
                let (fw_in, bw_in, fw_send, bw_send, barrier, epoch) =
                    (&fw_in, &bw_in, &fw_send, &bw_send, &barrier, &epoch);
                let delay = Duration::from_secs_f64(sample.delays_ms[r] / 1e3);
                s.spawn(move || {
                    let mut fw = Vec::new();
                    let mut bw = Vec::new();
                    for it in 0..warmup + reps {
                        let f = exchange(d, barrier, epoch, fw_in, fw_send, r, delay, &fw_len);
                        let b = exchange(d, barrier, epoch, bw_in, bw_send, r, Duration::ZERO, &bw_len);
                        if it >= warmup {
                            fw.push(f);
                            bw.push(b);
                        }
                    }
                    (fw, bw)
                })
            })
            .collect();
        for (r, h) in handles.into_iter().enumerate() {
            if let Ok((fw, bw)) = h.join() {
                times.fw_ms[r] = fw;
                times.bw_ms[r] = bw;
            }
        }
    });
    if times.fw_ms.iter().chain(&times.bw_ms).any(|v| v.len() != reps as usize || v.iter().any(|x| !x.is_finite())) {
        bail!("a CPU comm worker failed (poisoned lock or panic); no timings for this sample");
    }
    Ok(times)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::generate_bags;
    use planner_core::ElementType;
    use planner_core::pool::dlrm_pool;

    /// Plain loops: the definition of the operator.
    fn naive_forward(set: &FusedSet) -> Vec<f32> {
        let mut out = vec![0.0; set.batch * set.total_dim];
        for (t, bags) in set.bags.iter().enumerate() {
            let d = set.dims[t];
            for b in 0..set.batch {
                for &i in &bags.indices[bags.offsets[b] as usize..bags.offsets[b + 1] as usize] {
                    for c in 0..d {
                        out[b * set.total_dim + set.col_offsets[t] + c] += set.weights[t][i as usize * d + c];
                    }
                }
            }
        }
        out
    }

    /// Gradient summed per row first, then one update per row.
    fn naive_backward(set: &FusedSet, grad: &[f32], lr: f32) -> Vec<Vec<f32>> {
        let mut w = set.weights.clone();
        for (t, bags) in set.bags.iter().enumerate() {
            let d = set.dims[t];
            let mut acc = vec![0.0f32; set.rows[t] * d];
            for b in 0..set.batch {
                for &i in &bags.indices[bags.offsets[b] as usize..bags.offsets[b + 1] as usize] {
                    for c in 0..d {
                        acc[i as usize * d + c] += grad[b * set.total_dim + set.col_offsets[t] + c];
                    }
                }
            }
            for (x, a) in w[t].iter_mut().zip(&acc) {
                *x -= lr * a;
            }
        }
        w
    }

    fn close(a: &[f32], b: &[f32], rel: f32) -> bool {
        a.iter().zip(b).all(|(x, y)| (x - y).abs() <= rel * (x.abs().max(y.abs())) + 1e-6)
    }

    /// A small set mixing a tiny hot table (every row repeated in and across bags), a cold one and an
    /// empty one, so duplicates, empty bags and uneven owner ranges are all exercised.
    fn small_set(threads: usize) -> FusedSet {
        let pool = dlrm_pool().unwrap();
        let mut tables = Vec::new();
        let tiny = pool.iter().find(|p| p.rows == 100 && p.pooling_factor > 1.0).unwrap();
        tables.push(tiny.at_dim("tiny".into(), 8, ElementType::Fp32).unwrap());
        tables.push(pool[1].at_dim("cold".into(), 4, ElementType::Fp32).unwrap());
        tables[1].rows = tables[1].rows.min(5000);
        let empty = pool.iter().find(|p| p.pooling_factor == 0.0).unwrap();
        tables.push(empty.at_dim("empty".into(), 12, ElementType::Fp32).unwrap());
        let bags = tables.iter().enumerate().map(|(k, t)| generate_bags(t, 37, k as u64).unwrap()).collect();
        FusedSet::new(&tables, bags, 3, threads).unwrap()
    }

    #[test]
    fn forward_and_backward_match_the_naive_reference() {
        for threads in [1, 2, 3, 5] {
            let mut set = small_set(threads);
            assert!(set.bags[0].indices.len() > 100, "the tiny table must repeat rows");
            let want = naive_forward(&set);
            let mut out = vec![f32::NAN; set.batch * set.total_dim];
            forward(&set, &mut out, threads);
            assert!(close(&out, &want, 1e-5), "forward, {threads} threads");

            let mut grad = vec![0.0; out.len()];
            fill(&mut grad, 9, threads);
            let want_w = naive_backward(&set, &grad, 0.5);
            backward_sgd(&mut set, &grad, 0.5, threads, &mut BackwardScratch::default());
            for (t, (got, want)) in set.weights.iter().zip(&want_w).enumerate() {
                assert!(close(got, want, 1e-4), "backward table {t}, {threads} threads");
            }
        }
    }

    #[test]
    fn owner_ranges_cover_every_row_once() {
        for (rows, threads) in [(1, 4), (7, 3), (100, 2), (101, 5)] {
            assert_eq!(owner_start(0, rows, threads), 0);
            assert_eq!(owner_start(threads, rows, threads), rows);
            for r in 0..rows {
                let o = r * threads / rows;
                assert!(owner_start(o, rows, threads) <= r && r < owner_start(o + 1, rows, threads));
            }
        }
    }

    #[test]
    fn comm_exchange_times_every_rank() {
        let sample = CommSample { device_dims: vec![vec![4, 8], vec![16], vec![4]], delays_ms: vec![0.0, 2.0, 1.0] };
        let t = time_comm(&sample, 12, 1, 3).unwrap();
        assert_eq!(t.fw_ms.len(), 3);
        assert!(t.fw_ms.iter().chain(&t.bw_ms).all(|v| v.len() == 3 && v.iter().all(|&x| x >= 0.0)));
        // Rank 0 starts first and must wait for rank 1's block, which leaves 2 ms after the common epoch.
        assert!(t.fw_ms[0].iter().all(|&x| x >= 2.0), "{:?}", t.fw_ms[0]);
        assert!(time_comm(&sample, 2, 1, 1).is_err());
    }
}
