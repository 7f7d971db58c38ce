//! A seeded synthetic request stream: power-law item popularity inside communities whose membership and
//! popularity drift, item churn, new ids, and one abrupt shift.
//!
//! Item ids are a creation counter (new items get larger ids, as in most id allocators), and each new item
//! joins a uniformly random community, so within a community the ids look random modulo S.

use rand::rngs::ChaCha8Rng;
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::AlisError;
use crate::stream::Stream;

/// Generator parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SyntheticParams {
    /// Seed of everything random.
    pub seed: u64,
    /// Number of communities.
    pub communities: usize,
    /// Items per community at the start.
    pub items_per_community: usize,
    /// Windows to generate.
    pub windows: usize,
    /// Requests per window.
    pub requests_per_window: usize,
    /// Fewest distinct rows in a request.
    pub min_rows: usize,
    /// Most distinct rows in a request.
    pub max_rows: usize,
    /// Zipf exponent of item popularity inside a community (0 = uniform).
    pub zipf: f64,
    /// Probability that a row of a request is drawn from a random other community.
    pub noise: f64,
    /// Fraction of each community's items that move to another community per window.
    pub drift: f64,
    /// Fraction of items retired per window.
    pub churn: f64,
    /// New items per window, as a fraction of the live items.
    pub new_items: f64,
    /// Standard deviation of the per-window random walk of each community's log-popularity.
    pub popularity_drift: f64,
    /// Window at which the abrupt shift happens (no shift if ≥ `windows`).
    pub shift_window: usize,
    /// Fraction of items reassigned to random communities at the shift.
    pub shift_fraction: f64,
}

impl Default for SyntheticParams {
    fn default() -> Self {
        SyntheticParams {
            seed: 0,
            communities: 64,
            items_per_community: 400,
            windows: 24,
            requests_per_window: 2000,
            min_rows: 4,
            max_rows: 16,
            zipf: 0.8,
            noise: 0.05,
            drift: 0.02,
            churn: 0.01,
            new_items: 0.02,
            popularity_drift: 0.1,
            shift_window: 12,
            shift_fraction: 0.5,
        }
    }
}

/// Most items (communities × items per community) and most requests (windows × requests per window) a
/// synthetic stream may have: what fits in memory on a laptop, checked before anything is allocated.
pub const MAX_SYNTHETIC_ITEMS: usize = 50_000_000;
/// See [`MAX_SYNTHETIC_ITEMS`].
pub const MAX_SYNTHETIC_REQUESTS: usize = 50_000_000;
/// Most distinct rows in one synthetic request.
pub const MAX_REQUEST_ROWS: usize = 100_000;

impl SyntheticParams {
    /// Checks every field; the error names the field, its value and the allowed range.
    pub fn validate(&self) -> Result<(), AlisError> {
        let bad = |field: &'static str, value: String, allowed: &str| {
            Err(AlisError::InvalidParam { field, value, allowed: allowed.to_string() })
        };
        let frac = |x: f64| (0.0..=1.0).contains(&x);
        if self.communities == 0 {
            return bad("communities", "0".into(), ">= 1");
        }
        if self.items_per_community == 0 {
            return bad("items_per_community", "0".into(), ">= 1");
        }
        if self.communities.checked_mul(self.items_per_community).is_none_or(|n| n > MAX_SYNTHETIC_ITEMS) {
            return bad(
                "communities x items_per_community",
                format!("{} x {}", self.communities, self.items_per_community),
                &format!("at most {MAX_SYNTHETIC_ITEMS} items"),
            );
        }
        if self.windows == 0 || self.requests_per_window == 0 {
            return bad(
                "windows/requests_per_window",
                format!("{}/{}", self.windows, self.requests_per_window),
                ">= 1",
            );
        }
        if self.windows.checked_mul(self.requests_per_window).is_none_or(|n| n > MAX_SYNTHETIC_REQUESTS) {
            return bad(
                "windows x requests_per_window",
                format!("{} x {}", self.windows, self.requests_per_window),
                &format!("at most {MAX_SYNTHETIC_REQUESTS} requests"),
            );
        }
        if self.max_rows > MAX_REQUEST_ROWS {
            return bad("max_rows", self.max_rows.to_string(), &format!("at most {MAX_REQUEST_ROWS}"));
        }
        if self.min_rows == 0 || self.max_rows < self.min_rows {
            return bad(
                "min_rows..max_rows",
                format!("{}..{}", self.min_rows, self.max_rows),
                "1 <= min_rows <= max_rows",
            );
        }
        if !(self.zipf >= 0.0 && self.zipf <= 5.0) {
            return bad("zipf", self.zipf.to_string(), "[0, 5]");
        }
        for (field, x) in [
            ("noise", self.noise),
            ("drift", self.drift),
            ("churn", self.churn),
            ("shift_fraction", self.shift_fraction),
        ] {
            if !frac(x) {
                return bad(field, x.to_string(), "[0, 1]");
            }
        }
        if !(self.new_items >= 0.0 && self.new_items <= 10.0) {
            return bad("new_items", self.new_items.to_string(), "[0, 10]");
        }
        if !(self.popularity_drift >= 0.0 && self.popularity_drift <= 5.0) {
            return bad("popularity_drift", self.popularity_drift.to_string(), "[0, 5]");
        }
        Ok(())
    }
}

/// Generates the stream (request time = request index).
#[allow(clippy::many_single_char_names)] // p, w, k, c, u, m follow the maths of the generator
pub fn generate(p: &SyntheticParams) -> Result<Stream, AlisError> {
    p.validate()?;
    let mut rng = ChaCha8Rng::seed_from_u64(p.seed);
    let c_count = p.communities;
    let mut next_id: u64 = 0;
    // members[c]: item ids of community c, in popularity rank order (rank 0 hottest).
    let mut members: Vec<Vec<u64>> = vec![Vec::new(); c_count];
    for _ in 0..c_count * p.items_per_community {
        let c = rng.random_range(0..c_count);
        members[c].push(next_id);
        next_id += 1;
    }
    let mut log_pop: Vec<f64> = (0..c_count).map(|_| rng.random::<f64>() - 0.5).collect();
    // Zipf prefix sums H(r) = Σ_{j<=r} j^-s, extended on demand.
    let mut harmonic: Vec<f64> = vec![0.0];
    let mut dense: std::collections::HashMap<u64, u32> = std::collections::HashMap::new();
    let mut row_keys: Vec<u64> = Vec::new();
    let mut offsets = vec![0usize];
    let mut pins: Vec<u32> = Vec::new();
    let mut req: Vec<u64> = Vec::new();
    for w in 0..p.windows {
        if w > 0 {
            evolve(p, w, &mut rng, &mut members, &mut log_pop, &mut next_id);
        }
        let max_size = members.iter().map(Vec::len).max().unwrap_or(0);
        while harmonic.len() <= max_size {
            let j = harmonic.len() as f64;
            let last = harmonic[harmonic.len() - 1];
            harmonic.push(last + j.powf(-p.zipf));
        }
        // Cumulative community popularity (empty communities get none).
        let mut cumulative: Vec<f64> = Vec::with_capacity(c_count);
        let mut total = 0.0;
        for (c, m) in members.iter().enumerate() {
            total += if m.is_empty() { 0.0 } else { log_pop[c].exp() };
            cumulative.push(total);
        }
        for _ in 0..p.requests_per_window {
            let u = rng.random::<f64>() * total;
            let home = cumulative.partition_point(|&x| x <= u).min(c_count - 1);
            let k = rng.random_range(p.min_rows..=p.max_rows);
            req.clear();
            let mut tries = 0;
            while req.len() < k && tries < 8 * k {
                tries += 1;
                let c = if rng.random::<f64>() < p.noise { rng.random_range(0..c_count) } else { home };
                let m = &members[c];
                if m.is_empty() {
                    continue;
                }
                let x = rng.random::<f64>() * harmonic[m.len()];
                let rank = harmonic[1..=m.len()].partition_point(|&h| h <= x).min(m.len() - 1);
                let id = m[rank];
                if !req.contains(&id) {
                    req.push(id);
                }
            }
            for &id in &req {
                let d = *dense.entry(id).or_insert_with(|| {
                    row_keys.push(id);
                    (row_keys.len() - 1) as u32
                });
                pins.push(d);
            }
            offsets.push(pins.len());
        }
    }
    let times = (0..offsets.len() - 1).map(|i| i as f64).collect();
    Ok(Stream::from_parts(offsets, pins, times, row_keys))
}

/// One window of drift, churn, new items, and the shift.
fn evolve(
    p: &SyntheticParams,
    w: usize,
    rng: &mut ChaCha8Rng,
    members: &mut [Vec<u64>],
    log_pop: &mut [f64],
    next_id: &mut u64,
) {
    let c_count = members.len();
    for lp in log_pop.iter_mut() {
        // Sum of two uniforms: a cheap bell-shaped step with the requested standard deviation.
        let z = (rng.random::<f64>() + rng.random::<f64>() - 1.0) * 6f64.sqrt();
        *lp += p.popularity_drift * z;
    }
    let shift = w == p.shift_window;
    let move_frac = if shift { p.shift_fraction } else { p.drift };
    let mut moving: Vec<(usize, u64)> = Vec::new();
    for (c, m) in members.iter_mut().enumerate() {
        let mut kept = Vec::with_capacity(m.len());
        for &id in m.iter() {
            let x = rng.random::<f64>();
            if x < p.churn {
                continue;
            }
            if x < p.churn + move_frac {
                moving.push((c, id));
            } else {
                kept.push(id);
            }
        }
        *m = kept;
    }
    let live: usize = members.iter().map(Vec::len).sum::<usize>() + moving.len();
    for (from, id) in moving {
        let mut to = rng.random_range(0..c_count);
        if c_count > 1 && to == from {
            to = (to + 1) % c_count;
        }
        let pos = rng.random_range(0..=members[to].len());
        members[to].insert(pos, id);
    }
    let n_new = (live as f64 * p.new_items).round() as usize;
    for _ in 0..n_new {
        let c = rng.random_range(0..c_count);
        let pos = rng.random_range(0..=members[c].len());
        members[c].insert(pos, *next_id);
        *next_id += 1;
    }
    if shift {
        // Popularity ranks are reshuffled too: what was hot is no longer.
        for m in members.iter_mut() {
            m.shuffle(rng);
        }
    }
}
