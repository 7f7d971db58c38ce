//! Workloads: synthetic lookup indices that reproduce a table's statistics, and the random compute
//! and comm samples of SPEC section 4. Everything here is a pure function of a seeded RNG, so a sample
//! index always gives the same workload (on any shard, on resume, on any backend).
//!
//! The index generator is described in `docs/COLLECTOR.md` ("Synthetic indices"). In short: it builds
//! the multiset of per-row access counts first (how many distinct rows, how many of them in each of the
//! 17 bins, their counts spread log-uniformly inside each bin's range, adjusted so the counts add up to
//! exactly `round(batch × pooling_factor)`), maps the distinct rows onto the table by a random affine
//! permutation of `0..rows`, shuffles the lookups and cuts them into bags whose lengths are multinomial
//! (≈ Poisson around the pooling factor).

use anyhow::{Result, bail};
use planner_core::plan::RowRange;
use planner_core::pool::AUGMENT_DIMS;
use planner_core::table::{NUM_BINS, TableSpec};
use planner_core::task::task_seed;
use rand::{RngExt, SeedableRng, rngs::ChaCha8Rng};

/// Lookups of one table for one batch, in CSR form: bag `b` holds `indices[offsets[b]..offsets[b+1]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bags {
    /// `batch + 1` offsets into `indices`, starting at 0.
    pub offsets: Vec<u32>,
    /// Row ids, each `< rows`.
    pub indices: Vec<u32>,
}

impl Bags {
    /// Number of bags.
    #[must_use]
    pub fn batch(&self) -> usize {
        self.offsets.len() - 1
    }
}

/// Inclusive access-count range of bin `k` (bin 16 is open above; `None` there).
fn bin_range(k: usize) -> (u64, Option<u64>) {
    match k {
        0 => (1, Some(1)),
        16 => ((1 << 15) + 1, None),
        _ => ((1u64 << (k - 1)) + 1, Some(1u64 << k)),
    }
}

/// Upper end used to spread bin-16 counts (the bin is open above): 2^17 accesses, clipped to the lookups.
const BIN16_SPREAD_HI: u64 = 1 << 17;

/// The bins the generator aims at for `lookups` lookups: a bin whose smallest count exceeds the number
/// of lookups cannot hold a row, so its mass moves to the highest bin that can (only matters for small
/// batches; at 65,536 every pool table's bins are reachable).
#[must_use]
pub fn feasible_bins(bins: &[f64; NUM_BINS], lookups: u64) -> [f64; NUM_BINS] {
    let mut out = *bins;
    let top = (0..NUM_BINS).rev().find(|&k| bin_range(k).0 <= lookups).unwrap_or(0);
    for k in top + 1..NUM_BINS {
        out[top] += out[k];
        out[k] = 0.0;
    }
    out
}

fn spread_hi(k: usize, lookups: u64) -> u64 {
    let (lo, hi) = bin_range(k);
    hi.unwrap_or(BIN16_SPREAD_HI).min(lookups).max(lo)
}

/// Mean of counts spread log-uniformly over `[lo, hi]`.
fn log_uniform_mean(lo: u64, hi: u64) -> f64 {
    if hi <= lo {
        return lo as f64;
    }
    (hi - lo) as f64 / (hi as f64 / lo as f64).ln()
}

/// Splits `total` into parts proportional to `weights` (largest remainder; ties by index).
fn largest_remainder(total: u64, weights: &[f64]) -> Vec<u64> {
    let sum: f64 = weights.iter().sum();
    if sum <= 0.0 {
        return vec![0; weights.len()];
    }
    let exact: Vec<f64> = weights.iter().map(|w| total as f64 * w / sum).collect();
    let mut parts: Vec<u64> = exact.iter().map(|x| x.floor() as u64).collect();
    let mut left = total.saturating_sub(parts.iter().sum());
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())).then(a.cmp(&b)));
    for &i in order.iter().cycle() {
        if left == 0 {
            break;
        }
        if weights[i] > 0.0 {
            parts[i] += 1;
            left -= 1;
        }
    }
    parts
}

/// Access counts of the distinct rows (hottest bins first), summing to exactly `lookups`.
/// The batch size the pool's bins are defined at (SPEC section 2).
pub const BINS_BATCH: u32 = 65_536;

/// Access counts of the distinct rows of one batch of [`BINS_BATCH`] (hottest bins first), summing to
/// exactly `lookups`.
fn access_counts(rows: u64, bins: &[f64; NUM_BINS], lookups: u64) -> Vec<u64> {
    if lookups == 0 {
        return Vec::new();
    }
    let bins = if bins.iter().sum::<f64>() > 0.0 {
        feasible_bins(bins, lookups)
    } else {
        let mut b = [0.0; NUM_BINS];
        b[0] = 1.0;
        b
    };
    let mean: f64 = (0..NUM_BINS).map(|k| bins[k] * log_uniform_mean(bin_range(k).0, spread_hi(k, lookups))).sum();
    // Distinct rows: U ≈ lookups / mean count, moved to the nearest U whose rounded per-bin row counts
    // can hold exactly `lookups` inside their bins (at small batches a tiny hot-bin fraction rounds to
    // a whole row that alone could exceed the batch).
    let max_distinct = rows.min(lookups);
    let u0 = ((lookups as f64 / mean).round() as u64).clamp(1, max_distinct);
    let fits = |u: u64| {
        let n = largest_remainder(u, &bins);
        let lo: u64 = (0..NUM_BINS).map(|k| n[k] * bin_range(k).0).sum();
        let hi: u64 =
            (0..NUM_BINS).map(|k| n[k].saturating_mul(bin_range(k).1.unwrap_or(u64::MAX))).fold(0, u64::saturating_add);
        (lo..=hi).contains(&lookups)
    };
    // A bounded search: beyond a few thousand steps the rounding is not what is wrong.
    let distinct = (0..max_distinct.min(4096))
        .flat_map(|i| [u0.checked_add(i), u0.checked_sub(i)])
        .flatten()
        .find(|&u| (1..=max_distinct).contains(&u) && fits(u))
        .unwrap_or(u0);
    let per_bin = largest_remainder(distinct, &bins);
    // (count, bin) per row, hottest bin first.
    let mut counts: Vec<(u64, usize)> = Vec::with_capacity(distinct as usize);
    for k in (0..NUM_BINS).rev() {
        let (lo, hi) = (bin_range(k).0, spread_hi(k, lookups));
        let n = per_bin[k];
        for i in 0..n {
            let u = (i as f64 + 0.5) / n as f64;
            let c = (lo as f64 * (hi as f64 / lo as f64).powf(u)).round() as u64;
            counts.push((c.clamp(lo, hi), k));
        }
    }
    loop {
        let sum: u64 = counts.iter().map(|c| c.0).sum();
        if sum > lookups {
            let mut extra = sum - lookups;
            // Lower counts inside their bins, hottest first.
            for (c, k) in &mut counts {
                let room = (*c - bin_range(*k).0).min(extra);
                *c -= room;
                extra -= room;
            }
            if extra == 0 {
                break;
            }
            // Still too many lookups: at small batches the rounding of a tiny hot-bin fraction up to one
            // row can outweigh everything else. Drop the hottest row and balance again.
            counts.remove(0);
            continue;
        }
        let mut missing = lookups - sum;
        // Raise counts inside their bins, hottest first (bin 16 is open above).
        for (c, k) in &mut counts {
            let room = bin_range(*k).1.map_or(missing, |hi| hi - *c).min(missing);
            *c += room;
            missing -= room;
        }
        // Every row is full: add rows accessed once while the table has rows left, then spread the rest.
        let free_rows = rows.saturating_sub(counts.len() as u64).min(missing);
        counts.extend(std::iter::repeat_n((1, 0), free_rows as usize));
        missing -= free_rows;
        let n = counts.len() as u64;
        for (i, (c, _)) in counts.iter_mut().enumerate() {
            *c += missing / n + u64::from((i as u64) < missing % n);
        }
        break;
    }
    counts.into_iter().map(|(c, _)| c).filter(|&c| c > 0).collect()
}

/// `(row slot, count)` of the distinct rows of a batch of `batch` bags with exactly `lookups` lookups.
///
/// The bins describe a batch of [`BINS_BATCH`]; another batch size is that batch thinned (or scaled):
/// every full-batch count `c` becomes `c · batch / 65,536`, stochastically rounded, so a smaller batch
/// looks like a random sub-batch of a full one (hot rows stay the same rows, cold rows drop out).
/// The total is then nudged by single lookups on random accessed rows to exactly `lookups`.
fn batch_counts(table: &TableSpec, batch: u32, lookups: u64, rng: &mut ChaCha8Rng) -> Vec<(u64, u64)> {
    let full_lookups = (f64::from(BINS_BATCH) * table.pooling_factor).round() as u64;
    let full = access_counts(table.rows, &table.bins, full_lookups);
    if lookups == 0 {
        return Vec::new();
    }
    if batch == BINS_BATCH {
        return full.into_iter().enumerate().map(|(j, c)| (j as u64, c)).filter(|x| x.1 > 0).collect();
    }
    let f = f64::from(batch) / f64::from(BINS_BATCH);
    let mut scaled: Vec<(u64, u64)> = full
        .iter()
        .enumerate()
        .map(|(j, &c)| {
            let x = c as f64 * f;
            (j as u64, x.floor() as u64 + u64::from(rng.random::<f64>() < x.fract()))
        })
        .collect();
    let mut sum: u64 = scaled.iter().map(|x| x.1).sum();
    while sum != lookups {
        let k = rng.random_range(0..scaled.len());
        if sum < lookups {
            // Prefer rows the batch already touches; an empty batch so far takes any slot.
            if scaled[k].1 > 0 || sum == 0 {
                scaled[k].1 += 1;
                sum += 1;
            }
        } else if scaled[k].1 > 0 {
            scaled[k].1 -= 1;
            sum -= 1;
        }
    }
    scaled.retain(|x| x.1 > 0);
    scaled
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Generates one batch of lookups for `table` (see the module doc). `rows` must fit in `u32`.
pub fn generate_bags(table: &TableSpec, batch: u32, seed: u64) -> Result<Bags> {
    if table.rows > u64::from(u32::MAX) {
        bail!(
            "table `{}`: rows = {} is more than the generator's 32-bit row ids allow (4,294,967,295)",
            table.name,
            table.rows
        );
    }
    let lookups = (f64::from(batch) * table.pooling_factor).round() as u64;
    if lookups > u64::from(u32::MAX) {
        bail!(
            "table `{}`: batch {batch} × pooling_factor {} = {lookups} lookups, more than 32-bit offsets allow",
            table.name,
            table.pooling_factor
        );
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let counts = batch_counts(table, batch, lookups, &mut rng);
    let rows = table.rows;
    let a = loop {
        let a = if rows > 1 { rng.random_range(1..rows) } else { 1 };
        if gcd(a, rows) == 1 {
            break a;
        }
    };
    let c = rng.random_range(0..rows);
    let mut indices: Vec<u32> = Vec::with_capacity(lookups as usize);
    for &(j, n) in &counts {
        let row = ((u128::from(a) * u128::from(j) + u128::from(c)) % u128::from(rows)) as u32;
        indices.extend(std::iter::repeat_n(row, n as usize));
    }
    for i in (1..indices.len()).rev() {
        let j = rng.random_range(0..=i);
        indices.swap(i, j);
    }
    let mut lengths = vec![0u32; batch as usize];
    for _ in 0..indices.len() {
        lengths[rng.random_range(0..batch as usize)] += 1;
    }
    let mut offsets = Vec::with_capacity(batch as usize + 1);
    let mut acc = 0u32;
    offsets.push(0);
    for l in lengths {
        acc += l;
        offsets.push(acc);
    }
    Ok(Bags { offsets, indices })
}

/// One piece of a measured set: the table at the piece's dim, its rows, and its lookups' seed.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkPiece {
    /// The table at the piece's columns (all its rows, its pooling factor).
    pub table: TableSpec,
    /// The rows of a row-wise piece (`None`: every row).
    pub rows: Option<RowRange>,
    /// Seed of the table's lookups: pieces of one table share it.
    pub lookup_seed: u64,
}

impl WorkPiece {
    /// A piece holding every row of `table`.
    #[must_use]
    pub fn whole(table: TableSpec, lookup_seed: u64) -> Self {
        Self { table, rows: None, lookup_seed }
    }

    /// Identity of the workload: two pieces with the same key run the same kernel on the same lookups.
    pub fn key(&self) -> Result<String> {
        Ok(serde_json::to_string(&(&self.table, self.rows, self.lookup_seed))?)
    }

    /// The table as the kernels see it: the piece's own rows.
    #[must_use]
    pub fn kernel_table(&self) -> TableSpec {
        let mut t = self.table.clone();
        if let Some(r) = self.rows {
            t.rows = r.count;
        }
        t
    }

    /// Bytes of the piece's weights.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.table.block_bytes(self.rows.map_or(self.table.rows, |r| r.count), self.table.dim)
    }

    /// The piece's lookups for a batch of `batch` bags ([`piece_bags`]).
    pub fn bags(&self, batch: u32) -> Result<Bags> {
        piece_bags(&self.table, self.rows, batch, self.lookup_seed)
    }
}

/// The lookups of a piece of `table` holding `rows` (all rows when `None`): the table's own lookups
/// ([`generate_bags`] with `seed`, so every piece of one table sees the same batch) that fall in the
/// range, re-numbered from the range's first row. Bags keep their positions (a bag with no lookup in
/// the range is empty): a row-wise piece serves part of every bag and produces partial sums for the
/// whole batch. Hot rows stay the rows they are, so a range holding one very hot row serves far more
/// than its share of the lookups, as a real row-wise shard does.
pub fn piece_bags(table: &TableSpec, rows: Option<RowRange>, batch: u32, seed: u64) -> Result<Bags> {
    let whole = generate_bags(table, batch, seed)?;
    let Some(r) = rows.filter(|r| r.count < table.rows) else { return Ok(whole) };
    let end = r.offset.checked_add(r.count).filter(|&e| e <= table.rows);
    let Some(end) = end.filter(|_| r.count > 0) else {
        bail!("table `{}`: row range {}..+{} is not inside its {} rows", table.name, r.offset, r.count, table.rows);
    };
    let (lo, hi) = (r.offset as u32, end as u32);
    let mut offsets = Vec::with_capacity(whole.offsets.len());
    let mut indices = Vec::new();
    offsets.push(0u32);
    for b in 0..whole.batch() {
        let bag = &whole.indices[whole.offsets[b] as usize..whole.offsets[b + 1] as usize];
        indices.extend(bag.iter().filter(|&&i| (lo..hi).contains(&i)).map(|&i| i - lo));
        offsets.push(indices.len() as u32);
    }
    Ok(Bags { offsets, indices })
}

/// The 17 access bins of a batch of lookups (SPEC section 2): fraction of distinct accessed rows per
/// access-count bin. All zero without lookups.
#[cfg(test)]
#[must_use]
pub fn access_bins(indices: &[u32]) -> [f64; NUM_BINS] {
    let mut sorted = indices.to_vec();
    sorted.sort_unstable();
    let mut bins = [0.0; NUM_BINS];
    let mut distinct = 0u64;
    for run in sorted.chunk_by(|a, b| a == b) {
        let n = run.len() as u64;
        // Bin of count n: 0 for 1, k for (2^(k-1), 2^k], 16 above 2^15.
        let k = if n <= 1 { 0 } else { (64 - (n - 1).leading_zeros()) as usize }.min(NUM_BINS - 1);
        bins[k] += 1.0;
        distinct += 1;
    }
    if distinct > 0 {
        for b in &mut bins {
            *b /= distinct as f64;
        }
    }
    bins
}

/// A table candidate of an augmented pool: a base table at one of [`AUGMENT_DIMS`].
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The base table at this dim.
    pub table: TableSpec,
}

/// Every table of `base` at every augmented dim whose size fits `mem_cap_bytes`.
pub fn augmented_candidates(base: &[TableSpec], mem_cap_bytes: u64) -> Result<Vec<Candidate>> {
    if base.is_empty() {
        bail!("the table pool is empty: give a tables file with at least one table");
    }
    let mut out = Vec::new();
    for t in base {
        for &dim in &AUGMENT_DIMS {
            let mut table = t.clone();
            table.dim = dim;
            table.name = format!("{}@d{dim}", t.name);
            if table.size_bytes() <= mem_cap_bytes {
                out.push(Candidate { table });
            }
        }
    }
    if out.is_empty() {
        let smallest = base.iter().map(|t| t.piece_bytes(AUGMENT_DIMS[0])).min().unwrap_or(0);
        bail!(
            "no table of the pool fits the memory cap: --mem-cap = {mem_cap_bytes} bytes, the smallest table \
             (at dim {}) needs {smallest} bytes",
            AUGMENT_DIMS[0]
        );
    }
    Ok(out)
}

/// How compute sets are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Sampler {
    /// SPEC section 4: 1..=`max_tables` whole tables with replacement, redrawn until they fit the cap.
    Spec,
    /// Where plans live: a third SPEC sets, a third plan-like sets (up to 30 pieces, a third of them
    /// row-wise pieces of TorchRec's equal split into 2–16 ranges), and a third split between a single
    /// large table alone and sets filled to 70–100% of the cap.
    Mixed,
}

impl Sampler {
    /// The name recorded in a dataset's run.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Spec => "spec",
            Self::Mixed => "mixed",
        }
    }
}

/// Most pieces of a plan-like or filled set (TorchRec's plans put up to 25 pieces on one device).
pub const MAX_PLAN_LIKE_PIECES: usize = 30;

/// A row-wise piece of a table of `rows` rows as TorchRec splits it among `ways` ranks
/// (`ceil(rows / ways)` rows each, the last taking what is left): the range of rank `k`, or `None` when
/// that rank gets no rows.
#[must_use]
pub fn torchrec_row_range(rows: u64, ways: u64, k: u64) -> Option<RowRange> {
    let per = rows.div_ceil(ways.max(1));
    let offset = per.checked_mul(k)?;
    (offset < rows).then(|| RowRange { offset, count: per.min(rows - offset) })
}

/// Draws a compute sample from `seed` (SPEC section 4, or the mixed sampler): pieces whose weights fit
/// `mem_cap_bytes` together. Lookup seeds are per piece (every piece is a different table draw).
pub fn sample_set(
    candidates: &[Candidate],
    sampler: Sampler,
    max_tables: usize,
    mem_cap_bytes: u64,
    seed: u64,
) -> Result<Vec<WorkPiece>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let kind = match sampler {
        Sampler::Spec => 0,
        Sampler::Mixed => rng.random_range(0..6u32),
    };
    let draw = |rng: &mut ChaCha8Rng, k: usize, row_share: f64| -> WorkPiece {
        let mut t = candidates[rng.random_range(0..candidates.len())].table.clone();
        t.name = format!("{}#{k}", t.name);
        let lookup_seed = task_seed(seed, k);
        if row_share > 0.0 && rng.random::<f64>() < row_share && t.rows >= 2 {
            let ways = [2u64, 3, 4, 8, 16][rng.random_range(0..5usize)].min(t.rows);
            let part = rng.random_range(0..ways);
            let rows = torchrec_row_range(t.rows, ways, part);
            return WorkPiece { table: t, rows, lookup_seed };
        }
        WorkPiece::whole(t, lookup_seed)
    };
    let total = |set: &[WorkPiece]| set.iter().map(WorkPiece::bytes).fold(0u64, u64::saturating_add);
    for _ in 0..10_000 {
        let set: Vec<WorkPiece> = match kind {
            // SPEC sets.
            0 | 1 => {
                let n = rng.random_range(1..=max_tables.max(1));
                (0..n).map(|k| draw(&mut rng, k, 0.0)).collect()
            }
            // Plan-like sets: many pieces, a third of them row-wise.
            2 | 3 => {
                let n = rng.random_range(1..=MAX_PLAN_LIKE_PIECES);
                (0..n).map(|k| draw(&mut rng, k, 1.0 / 3.0)).collect()
            }
            // A single large table alone: among the candidates of at least a quarter of the cap.
            4 => {
                let big: Vec<&Candidate> =
                    candidates.iter().filter(|c| c.table.size_bytes() >= mem_cap_bytes / 4).collect();
                let pick = if big.is_empty() {
                    candidates.iter().max_by_key(|c| c.table.size_bytes()).map(|c| c.table.clone())
                } else {
                    Some(big[rng.random_range(0..big.len())].table.clone())
                };
                pick.map(|t| vec![WorkPiece::whole(t, task_seed(seed, 0))]).unwrap_or_default()
            }
            // Filled to 70–100% of the cap.
            _ => {
                let target = (mem_cap_bytes as f64 * rng.random_range(0.7..1.0)) as u64;
                let mut set = Vec::new();
                for k in 0..4 * MAX_PLAN_LIKE_PIECES {
                    if set.len() >= MAX_PLAN_LIKE_PIECES || total(&set) >= target {
                        break;
                    }
                    let p = draw(&mut rng, k, 1.0 / 3.0);
                    if total(&set).saturating_add(p.bytes()) <= mem_cap_bytes {
                        set.push(p);
                    }
                }
                set
            }
        };
        if !set.is_empty() && total(&set) <= mem_cap_bytes {
            return Ok(set);
        }
    }
    bail!(
        "could not draw a table set within --mem-cap = {mem_cap_bytes} bytes in 10,000 tries; raise --mem-cap or lower --max-tables"
    )
}

/// Smallest spread of start delays (ms) the log-uniform comm sampler draws.
pub const LOG_DELAY_MIN_MS: f64 = 0.05;

/// A comm sample: the dims on each device and the forward start delays.
#[derive(Debug, Clone, PartialEq)]
pub struct CommSample {
    /// Dims of the tables on each device.
    pub device_dims: Vec<Vec<u32>>,
    /// Start delay of each device, ms (minimum 0).
    pub delays_ms: Vec<f64>,
}

impl CommSample {
    /// Sum of each device's dims.
    #[must_use]
    pub fn dim_sums(&self) -> Vec<u64> {
        self.device_dims.iter().map(|d| d.iter().map(|&x| u64::from(x)).sum()).collect()
    }
}

/// Draws a comm sample for `devices` devices (SPEC section 4): 10..=59 dims from the augmented dims,
/// spread by a randomised greedy (descending; with probability p a random device, else the one with
/// the lowest dim sum; p uniform per sample), and start delays uniform in [0, diff) with diff ∈
/// [1, `max_delay_ms`) ms (SPEC: 20), shifted so the minimum is 0.
///
/// With `row_wise_max > 0`, each dim is instead, with probability q (uniform in [0, `row_wise_max`) per
/// sample), a row-wise table: a piece of its full dim on every device. TorchRec's plans place such pieces
/// on every device, and their devices' dim sums reach several times what the SPEC's spread gives
/// (1,536 against at most 592 at 8 devices, max dim 128). `row_wise_max = 0` draws exactly the SPEC's
/// samples.
///
/// With `log_delays`, diff is log-uniform in [[`LOG_DELAY_MIN_MS`], `max_delay_ms`) instead: a plan
/// whose devices a search has levelled starts its exchange within a millisecond or two, where eight
/// threads on two cores contend and exchange about twice as slowly as when their starts are spread
/// (measured: 0.8–1.1 ms against 0.5 predicted from uniform spreads of 1–60 ms).
#[must_use]
pub fn sample_comm(devices: usize, seed: u64, max_delay_ms: f64, row_wise_max: f64, log_delays: bool) -> CommSample {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n = rng.random_range(10..60usize);
    let mut dims: Vec<u32> = (0..n).map(|_| AUGMENT_DIMS[rng.random_range(0..AUGMENT_DIMS.len())]).collect();
    dims.sort_unstable_by(|a, b| b.cmp(a));
    let p: f64 = rng.random();
    // Drawn only when asked for, so that the SPEC's samples stay what they were for every seed.
    let q: f64 = if row_wise_max > 0.0 { rng.random_range(0.0..row_wise_max.min(1.0)) } else { 0.0 };
    let mut device_dims = vec![Vec::new(); devices];
    let mut sums = vec![0u64; devices];
    for d in dims {
        if q > 0.0 && rng.random::<f64>() < q {
            for (dd, s) in device_dims.iter_mut().zip(&mut sums) {
                dd.push(d);
                *s += u64::from(d);
            }
            continue;
        }
        let r = if rng.random::<f64>() < p {
            rng.random_range(0..devices)
        } else {
            (0..devices).min_by_key(|&r| (sums[r], r)).unwrap_or(0)
        };
        device_dims[r].push(d);
        sums[r] += u64::from(d);
    }
    let diff: f64 = if log_delays {
        (rng.random_range(LOG_DELAY_MIN_MS.ln()..max_delay_ms.max(1.0 + 1e-9).ln())).exp()
    } else {
        rng.random_range(1.0..max_delay_ms.max(1.0 + 1e-9))
    };
    let raw: Vec<f64> = (0..devices).map(|_| rng.random_range(0.0..diff)).collect();
    let min = raw.iter().copied().fold(f64::INFINITY, f64::min);
    CommSample { device_dims, delays_ms: raw.iter().map(|d| d - min).collect() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use planner_core::ElementType;
    use planner_core::pool::dlrm_pool;

    /// Bins of a count multiset (what `access_bins` gives for indices with these counts).
    fn bins_of_counts(counts: &[u64]) -> [f64; NUM_BINS] {
        let idx: Vec<u32> =
            counts.iter().enumerate().flat_map(|(j, &c)| std::iter::repeat_n(j as u32, c as usize)).collect();
        access_bins(&idx)
    }

    /// Regenerates the statistics of all 856 pool tables at the batch their bins are defined at
    /// (65,536) from the generator's per-row access counts — the indices repeat each distinct row
    /// exactly its count, which `generated_indices_carry_their_counts` checks on real index arrays.
    /// Tolerances:
    /// * lookups: exact, `round(65,536 × pooling_factor)` (the mean pooling factor is exact up to that rounding);
    /// * every bin: |Δ| ≤ 1/U + 0.01, U the distinct rows: per-bin row counts are a largest-remainder
    ///   rounding of U × bin (error < 1/U each) and the exact-sum adjustment can move a few rows across
    ///   a boundary only when a bin has no room (the 0.01);
    /// * distinct rows never exceed the table's rows.
    #[test]
    fn generator_reproduces_every_pool_table() {
        let pool = dlrm_pool().unwrap();
        let mut worst = (0.0f64, 0usize, 0usize);
        for (id, p) in pool.iter().enumerate() {
            let lookups = (65_536.0 * p.pooling_factor).round() as u64;
            let counts = access_counts(p.rows, &p.bins, lookups);
            assert_eq!(counts.iter().sum::<u64>(), lookups, "table {id}");
            assert!(counts.len() as u64 <= p.rows, "table {id}: {} distinct rows > {}", counts.len(), p.rows);
            let mut got = [0.0; NUM_BINS];
            for &c in &counts {
                got[if c <= 1 { 0 } else { (64 - (c - 1).leading_zeros()) as usize }.min(NUM_BINS - 1)] += 1.0;
            }
            let u = counts.len().max(1) as f64;
            for (k, (g, want)) in got.iter().zip(&p.bins).enumerate() {
                let d = (g / u - want).abs();
                if d > worst.0 {
                    worst = (d, id, k);
                }
                assert!(d <= 1.0 / u + 0.01, "table {id} bin {k}: got {} want {want} (U = {u})", g / u);
            }
        }
        eprintln!("largest bin deviation {:.5} (table {}, bin {})", worst.0, worst.1, worst.2);
    }

    #[test]
    fn generated_indices_carry_their_counts() {
        // Full-batch index arrays of a spread of tables (cold, hot, tiny): the bins re-derived from the
        // indices equal those of the counts, every index is a row of the table, bags cover every lookup.
        let pool = dlrm_pool().unwrap();
        for id in (0..pool.len()).step_by(107) {
            let t = pool[id].at_dim(format!("t{id}"), 4, ElementType::Fp32).unwrap();
            let bags = generate_bags(&t, BINS_BATCH, id as u64).unwrap();
            let lookups = (65_536.0 * t.pooling_factor).round() as u64;
            let counts = access_counts(t.rows, &t.bins, lookups);
            assert_eq!(access_bins(&bags.indices), bins_of_counts(&counts), "table {id}");
            assert!(bags.indices.iter().all(|&r| u64::from(r) < t.rows));
            assert_eq!(*bags.offsets.last().unwrap() as usize, bags.indices.len());
        }
    }

    /// Small batches (a thinned full batch), on every fifth pool table (the full-batch statistics of all
    /// 856 are checked above; this one only guards the thinning): the mean pooling factor stays exact up
    /// to rounding the lookups (|Δ| ≤ 0.5 / batch), indices stay in range, and a hot table keeps hot rows.
    #[test]
    fn small_batches_keep_pooling_factor_and_rows_for_every_pool_table() {
        let batch = 256u32;
        let pool = dlrm_pool().unwrap();
        for (id, p) in pool.iter().enumerate().step_by(5) {
            let t = p.at_dim(format!("t{id}"), 4, ElementType::Fp32).unwrap();
            let bags = generate_bags(&t, batch, 17 + id as u64).unwrap();
            assert_eq!(bags.batch(), batch as usize);
            let pf = bags.indices.len() as f64 / f64::from(batch);
            assert!(
                (pf - t.pooling_factor).abs() <= 0.5 / f64::from(batch) + 1e-12,
                "table {id}: pf {pf} vs {}",
                t.pooling_factor
            );
            assert!(bags.indices.iter().all(|&r| u64::from(r) < t.rows), "table {id}: index out of range");
            assert!(bags.offsets.windows(2).all(|w| w[0] <= w[1]));
        }
        let hot = pool.iter().find(|p| p.bins[16] > 0.0 && p.pooling_factor < 2.0).unwrap();
        let t = hot.at_dim("hot".into(), 4, ElementType::Fp32).unwrap();
        let bins = access_bins(&generate_bags(&t, 4096, 1).unwrap().indices);
        assert!(
            bins[8..].iter().sum::<f64>() > 0.0,
            "a sub-batch of a hot table still has rows accessed > 128 times: {bins:?}"
        );
    }

    #[test]
    fn full_batch_hot_table_keeps_its_high_bins() {
        // The hottest bins only exist at the real batch size: check one table that has them.
        let pool = dlrm_pool().unwrap();
        let (id, p) = pool.iter().enumerate().find(|(_, p)| p.bins[16] > 0.0 && p.pooling_factor < 2.0).unwrap();
        let t = p.at_dim("hot".into(), 4, ElementType::Fp32).unwrap();
        let bags = generate_bags(&t, 65_536, 5).unwrap();
        let got = access_bins(&bags.indices);
        for (k, (g, want)) in got.iter().zip(&t.bins).enumerate() {
            assert!((g - want).abs() < 0.01 + 1e-3, "table {id} bin {k}: {g} vs {want}");
        }
    }

    #[test]
    fn generation_is_deterministic_per_seed() {
        let t = dlrm_pool().unwrap()[10].at_dim("t".into(), 8, ElementType::Fp32).unwrap();
        assert_eq!(generate_bags(&t, 64, 1).unwrap(), generate_bags(&t, 64, 1).unwrap());
        assert_ne!(generate_bags(&t, 64, 1).unwrap(), generate_bags(&t, 64, 2).unwrap());
    }

    #[test]
    fn comm_samples_follow_the_protocol() {
        for s in 0..200 {
            let c = sample_comm(4, s, 20.0, 0.0, false);
            let n: usize = c.device_dims.iter().map(Vec::len).sum();
            assert!((10..60).contains(&n));
            assert!(c.delays_ms.contains(&0.0));
            assert!(c.delays_ms.iter().all(|&d| (0.0..20.0).contains(&d)));
            assert!(c.device_dims.iter().flatten().all(|d| AUGMENT_DIMS.contains(d)));
        }
    }

    #[test]
    fn row_wise_comm_samples_put_pieces_on_every_device() {
        // Off, the SPEC's samples are unchanged; on, some samples hold dims on every device, and their
        // devices' dim sums reach beyond anything the SPEC's spread gives.
        for s in 0..50 {
            assert_eq!(sample_comm(8, s, 20.0, 0.0, false), sample_comm(8, s, 20.0, 0.0, false));
        }
        let spec_max = (0..200).flat_map(|s| sample_comm(8, s, 20.0, 0.0, false).dim_sums()).max().unwrap();
        let rw_max = (0..200).flat_map(|s| sample_comm(8, s, 20.0, 1.0, false).dim_sums()).max().unwrap();
        assert!(rw_max > 2 * spec_max, "{rw_max} vs {spec_max}");
        for s in 0..200 {
            let c = sample_comm(8, s, 20.0, 1.0, false);
            assert!(c.device_dims.iter().flatten().all(|d| AUGMENT_DIMS.contains(d)));
            assert!(c.delays_ms.contains(&0.0));
        }
    }

    #[test]
    fn log_delays_cover_near_simultaneous_starts() {
        // The spread of a sample's delays: uniform in [1, 60) ms almost never leaves every device within
        // 2 ms of the first; log-uniform from 0.05 ms does so in about half of the samples.
        let spread = |log: bool, s: u64| {
            let c = sample_comm(8, s, 60.0, 0.0, log);
            assert!(c.delays_ms.iter().all(|&d| (0.0..60.0).contains(&d)));
            c.delays_ms.iter().copied().fold(0.0, f64::max)
        };
        let near = |log: bool| (0..400).filter(|&s| spread(log, s) < 2.0).count();
        assert!(near(false) < 20, "{}", near(false));
        assert!(near(true) > 60, "{}", near(true));
    }

    #[test]
    fn compute_sets_respect_the_memory_cap() {
        let pool: Vec<TableSpec> = dlrm_pool()
            .unwrap()
            .iter()
            .map(|p| p.at_dim(format!("t{}", p.table_id), 4, ElementType::Fp32).unwrap())
            .collect();
        let cap = 64 << 20;
        let c = augmented_candidates(&pool, cap).unwrap();
        for s in 0..50 {
            let set = sample_set(&c, Sampler::Spec, 15, cap, s).unwrap();
            assert!((1..=15).contains(&set.len()));
            assert!(set.iter().all(|p| p.rows.is_none()), "the SPEC sampler draws whole tables");
            assert!(set.iter().map(WorkPiece::bytes).sum::<u64>() <= cap);
        }
        let e = augmented_candidates(&pool, 16).unwrap_err().to_string();
        assert!(e.contains("--mem-cap = 16"), "{e}");
        assert!(augmented_candidates(&[], cap).unwrap_err().to_string().contains("empty"));
    }

    /// The mixed sampler covers what plans hold: row-wise pieces, sets of more than 15 pieces, a large
    /// table alone and sets near the cap; every set fits the cap.
    #[test]
    fn the_mixed_sampler_covers_where_plans_live() {
        let pool: Vec<TableSpec> = dlrm_pool()
            .unwrap()
            .iter()
            .map(|p| p.at_dim(format!("t{}", p.table_id), 4, ElementType::Fp32).unwrap())
            .collect();
        let cap = 1 << 30;
        let c = augmented_candidates(&pool, cap).unwrap();
        let sets: Vec<Vec<WorkPiece>> = (0..300).map(|s| sample_set(&c, Sampler::Mixed, 15, cap, s).unwrap()).collect();
        let bytes = |s: &[WorkPiece]| s.iter().map(WorkPiece::bytes).sum::<u64>();
        assert!(sets.iter().all(|s| !s.is_empty() && bytes(s) <= cap && s.len() <= MAX_PLAN_LIKE_PIECES));
        assert!(sets.iter().any(|s| s.iter().any(|p| p.rows.is_some())), "row-wise pieces");
        assert!(sets.iter().any(|s| s.len() > 15), "more pieces than the SPEC sampler draws");
        assert!(sets.iter().any(|s| s.len() == 1 && bytes(s) >= cap / 4), "a large table alone");
        assert!(sets.iter().any(|s| bytes(s) >= cap * 7 / 10), "sets near the cap");
        for p in sets.iter().flatten() {
            if let Some(r) = p.rows {
                assert!(r.count >= 1 && r.offset + r.count <= p.table.rows);
            }
        }
    }

    #[test]
    fn torchrec_row_ranges_cover_the_table() {
        for (rows, ways) in [(10u64, 4u64), (7, 3), (100, 16), (3, 8), (1, 2)] {
            let ranges: Vec<RowRange> = (0..ways).filter_map(|k| torchrec_row_range(rows, ways, k)).collect();
            let mut next = 0;
            for r in &ranges {
                assert_eq!(r.offset, next);
                assert!(r.count >= 1);
                next += r.count;
            }
            assert_eq!(next, rows, "{rows} rows in {ways} ways");
        }
    }

    /// A row-wise piece serves exactly the table's lookups inside its range, re-numbered, in the same
    /// bags; the pieces of a split together serve every lookup once.
    #[test]
    fn row_pieces_keep_the_tables_lookups() {
        let pool = dlrm_pool().unwrap();
        let p = pool.iter().find(|p| p.rows > 1000 && p.pooling_factor > 2.0).unwrap();
        let t = p.at_dim("t".into(), 16, ElementType::Fp32).unwrap();
        let whole = generate_bags(&t, 512, 9).unwrap();
        let ways = 4;
        let mut served = 0usize;
        for k in 0..ways {
            let r = torchrec_row_range(t.rows, ways, k).unwrap();
            let piece = piece_bags(&t, Some(r), 512, 9).unwrap();
            assert_eq!(piece.batch(), 512);
            assert!(piece.indices.iter().all(|&i| u64::from(i) < r.count));
            for b in 0..512 {
                let want: Vec<u32> = whole.indices[whole.offsets[b] as usize..whole.offsets[b + 1] as usize]
                    .iter()
                    .filter(|&&i| u64::from(i) >= r.offset && u64::from(i) < r.offset + r.count)
                    .map(|&i| i - r.offset as u32)
                    .collect();
                assert_eq!(&piece.indices[piece.offsets[b] as usize..piece.offsets[b + 1] as usize], want.as_slice());
            }
            served += piece.indices.len();
        }
        assert_eq!(served, whole.indices.len());
        assert_eq!(piece_bags(&t, None, 512, 9).unwrap(), whole);
        let bad = piece_bags(&t, Some(RowRange { offset: t.rows, count: 1 }), 512, 9).unwrap_err().to_string();
        assert!(bad.contains("row range"), "{bad}");
    }
}
