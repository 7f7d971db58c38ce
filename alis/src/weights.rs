//! The sparse global weight matrix W: per row, at most `k` (shard, weight) slots instead of a dense row of
//! `S` floats.
//!
//! Memory is `rows · k · (2 + 4)` bytes (a `u16` shard and an `f32` weight per slot, stored as two flat
//! arrays), independent of `S`; the dense matrix of the paper costs `rows · S · 4` bytes.
//!
//! Age decay is applied lazily: instead of multiplying every weight by `decay` each window (O(rows)), new
//! increments are multiplied by a global scale `decay^-t`, and everything is rescaled once the scale grows
//! large. Comparisons within a row are unaffected by the common factor.
//!
//! When a row already holds `k` shards and a new shard gets weight, the new weight replaces the lightest slot
//! only if it is heavier; otherwise it is dropped. The heavy shards of a row (the only ones that can win the
//! argmax) are therefore kept exactly, and the error on a dropped shard is below the row's lightest slot.

use crate::AlisError;

/// Sentinel shard value of an empty slot.
const EMPTY: u16 = u16::MAX;
/// Rescale all weights once the lazy decay scale passes this value (well below `f32::MAX`).
const RESCALE_AT: f64 = 1e18;

/// Sparse top-k weight matrix over rows and shards with lazy exponential age decay.
#[derive(Debug, Clone)]
pub struct SparseWeights {
    k: usize,
    shards: Vec<u16>,
    weights: Vec<f32>,
    decay: f64,
    scale: f64,
}

impl SparseWeights {
    /// An empty matrix with `k` slots per row and per-window age decay `decay` in (0, 1].
    pub fn new(k: usize, decay: f64) -> Result<Self, AlisError> {
        if !(1..=64).contains(&k) {
            return Err(AlisError::InvalidParam { field: "top_k", value: k.to_string(), allowed: "1..=64".into() });
        }
        if !(decay > 0.0 && decay <= 1.0) {
            return Err(AlisError::InvalidParam { field: "decay", value: decay.to_string(), allowed: "(0, 1]".into() });
        }
        Ok(SparseWeights { k, shards: Vec::new(), weights: Vec::new(), decay, scale: 1.0 })
    }

    /// Slots per row.
    #[must_use]
    pub fn k(&self) -> usize {
        self.k
    }

    /// Number of rows covered.
    #[must_use]
    pub fn rows(&self) -> usize {
        self.shards.len() / self.k
    }

    /// Grows the matrix to cover `rows` rows (new rows are empty).
    pub fn ensure_rows(&mut self, rows: usize) {
        if rows * self.k > self.shards.len() {
            self.shards.resize(rows * self.k, EMPTY);
            self.weights.resize(rows * self.k, 0.0);
        }
    }

    /// Ages all weights by one window (multiplies them by `decay`, lazily).
    pub fn age(&mut self) {
        self.scale /= self.decay;
        if self.scale > RESCALE_AT {
            let f = (1.0 / self.scale) as f32;
            for w in &mut self.weights {
                *w *= f;
            }
            self.scale = 1.0;
        }
    }

    /// Adds `delta` (in current-window units) to `W[row, shard]`.
    pub fn add(&mut self, row: u32, shard: u16, delta: f64) {
        let base = row as usize * self.k;
        let d = (delta * self.scale) as f32;
        let slots = base..base + self.k;
        let mut lightest = base;
        for i in slots {
            if self.shards[i] == shard {
                self.weights[i] += d;
                return;
            }
            if self.shards[i] == EMPTY {
                self.shards[i] = shard;
                self.weights[i] = d;
                return;
            }
            if self.weights[i] < self.weights[lightest] {
                lightest = i;
            }
        }
        if d > self.weights[lightest] {
            self.shards[lightest] = shard;
            self.weights[lightest] = d;
        }
    }

    /// The non-empty (shard, weight) slots of `row`, weights in current-window units.
    pub fn row(&self, row: u32) -> impl Iterator<Item = (u16, f64)> + '_ {
        let base = row as usize * self.k;
        let inv = 1.0 / self.scale;
        (base..base + self.k)
            .filter(move |&i| self.shards[i] != EMPTY)
            .map(move |i| (self.shards[i], f64::from(self.weights[i]) * inv))
    }

    /// Heap bytes held (the memory formula: `rows · k · 6`).
    #[must_use]
    pub fn heap_bytes(&self) -> usize {
        self.shards.capacity() * std::mem::size_of::<u16>() + self.weights.capacity() * std::mem::size_of::<f32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row_sorted(w: &SparseWeights, r: u32) -> Vec<(u16, f64)> {
        let mut v: Vec<_> = w.row(r).collect();
        v.sort_by_key(|x| x.0);
        v
    }

    #[test]
    fn keeps_heaviest_slots_and_decays_lazily() {
        let mut w = SparseWeights::new(2, 0.5).unwrap_or_else(|e| panic!("{e}"));
        w.ensure_rows(2);
        w.add(1, 3, 1.0);
        w.add(1, 4, 2.0);
        // Full row: a lighter newcomer is dropped, a heavier one replaces the lightest slot.
        w.add(1, 5, 0.5);
        assert_eq!(row_sorted(&w, 1).iter().map(|x| x.0).collect::<Vec<_>>(), vec![3, 4]);
        w.add(1, 6, 1.5);
        assert_eq!(row_sorted(&w, 1).iter().map(|x| x.0).collect::<Vec<_>>(), vec![4, 6]);
        w.age();
        let r = row_sorted(&w, 1);
        assert!((r[0].1 - 1.0).abs() < 1e-6 && (r[1].1 - 0.75).abs() < 1e-6, "{r:?}");
        assert_eq!(w.row(0).count(), 0);
        // Many windows of ageing trigger rescaling without losing relative order.
        for _ in 0..200 {
            w.age();
        }
        w.add(1, 4, 1.0);
        let r = row_sorted(&w, 1);
        assert!((r[0].1 - 1.0).abs() < 1e-6 && r[1].1 < 1e-20, "{r:?}");
    }

    #[test]
    fn rejects_bad_parameters() {
        assert!(SparseWeights::new(0, 0.5).is_err());
        assert!(SparseWeights::new(4, 0.0).is_err());
        assert!(SparseWeights::new(4, 1.5).is_err());
    }
}
