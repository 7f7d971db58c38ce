//! Incremental set compute: a cost model whose set cost is a function of a *sum* of per-piece vectors
//! ([`IncrementalCompute`]) lets a search price "device set + one piece" by adding two vectors and
//! running a small head, instead of one model call over the whole set.
//!
//! Sums are kept in fixed point ([`FIXED_SCALE`] steps, `i64`), so that they are exact and independent
//! of the order pieces were added in: the cost of a set is then a pure function of the multiset of its
//! pieces, whichever way a search reached it, and a set-cost cache can never change a result. The
//! resolution (2^-24 per component) is far below the f32 precision the learned models compute in.

use super::PieceRef;
use crate::error::{Error, Result};

/// Fixed-point steps per unit of a summed vector component.
pub const FIXED_SCALE: f64 = (1u64 << 24) as f64;

/// Largest magnitude accepted for one component of a piece vector: sums of 2^16 pieces stay far from
/// `i64` overflow.
pub const MAX_COMPONENT: f64 = (1u64 << 30) as f64;

/// A cost model whose set compute is `head(Σ vector(piece))`.
pub trait IncrementalCompute {
    /// Length of a piece vector.
    fn vector_len(&self) -> usize;
    /// Vectors of `pieces`, row-major `[pieces.len(), vector_len]`.
    fn piece_vectors(&self, pieces: &[PieceRef<'_>]) -> Result<Vec<f64>>;
    /// Compute time, ms, of a set whose vectors sum to `sum`, in fixed point ([`to_fixed`]; empty set:
    /// all zeros).
    fn head_ms(&self, sum: &[i64]) -> f64;
    /// [`IncrementalCompute::head_ms`] of `sum + extra` (element-wise, same lengths), `scratch` being
    /// as long: how a search prices "set + one piece". A model may override it to skip storing the sum;
    /// the value must be the same.
    fn head_ms_with(&self, sum: &[i64], extra: &[i64], scratch: &mut [i64]) -> f64 {
        for ((s, a), b) in scratch.iter_mut().zip(sum).zip(extra) {
            *s = a + b;
        }
        self.head_ms(scratch)
    }
}

/// One component in fixed point; `model` names the model in the error for an out-of-range value.
pub fn to_fixed(model: &str, v: f64) -> Result<i64> {
    if !v.is_finite() || v.abs() > MAX_COMPONENT {
        return Err(Error::CostModel {
            model: model.into(),
            message: format!("piece vector component {v} outside ±{MAX_COMPONENT}"),
        });
    }
    Ok((v * FIXED_SCALE).round() as i64)
}

/// A fixed-point sum back as floats.
#[must_use]
pub fn from_fixed(sum: &[i64]) -> Vec<f64> {
    sum.iter().map(|&s| s as f64 / FIXED_SCALE).collect()
}

/// Adds `v` into `acc` (same length).
pub fn add_into(acc: &mut [i64], v: &[i64]) {
    for (a, b) in acc.iter_mut().zip(v) {
        *a += b;
    }
}

/// Subtracts `v` from `acc` (same length).
pub fn sub_from(acc: &mut [i64], v: &[i64]) {
    for (a, b) in acc.iter_mut().zip(v) {
        *a -= b;
    }
}
