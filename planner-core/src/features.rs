//! Table feature schemas of the seed papers, defined once with their normalisation, so the
//! collector, the trainer and the planner cannot drift apart.
//!
//! * [`FeatureSchema::NeuroShard20`]: `dim, pooling_factor, row, bin_0..bin_16`, each z-scored with the
//!   mean and standard deviation over the augmented pool (856 tables × dims {4..128}); std + 1e-6.
//!   Statistics use the population standard deviation (ddof = 0).
//! * [`FeatureSchema::DreamShard21`]: `dim, row, pooling_factor, size, bin_0..bin_16`; `row`,
//!   `pooling_factor` and `size` are z-scored within the task, `dim` and the bins stay raw (SPEC section 7).

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::pool::{AUGMENT_DIMS, dlrm_pool};
use crate::table::{NUM_BINS, TableSpec};

/// Number of NeuroShard features.
pub const NEUROSHARD_LEN: usize = 3 + NUM_BINS;
/// Number of DreamShard/AutoShard features.
pub const DREAMSHARD_LEN: usize = 4 + NUM_BINS;
/// Added to every standard deviation before dividing.
pub const STD_EPS: f64 = 1e-6;

/// A feature schema: names, order and normalisation of the per-table feature vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FeatureSchema {
    /// NeuroShard's 20 features, pool z-scored.
    NeuroShard20,
    /// DreamShard's / AutoShard's 21 features, task z-scored.
    DreamShard21,
}

impl FeatureSchema {
    /// Feature names in order.
    #[must_use]
    pub fn names(self) -> Vec<String> {
        let head: &[&str] = match self {
            Self::NeuroShard20 => &["dim", "pooling_factor", "row"],
            Self::DreamShard21 => &["dim", "row", "pooling_factor", "size"],
        };
        head.iter().map(|s| (*s).to_string()).chain((0..NUM_BINS).map(|k| format!("bin_{k}"))).collect()
    }

    /// Vector length.
    #[must_use]
    #[allow(clippy::len_without_is_empty)] // a schema is never empty
    pub fn len(self) -> usize {
        match self {
            Self::NeuroShard20 => NEUROSHARD_LEN,
            Self::DreamShard21 => DREAMSHARD_LEN,
        }
    }
}

/// Raw (unnormalised) NeuroShard features of a piece of `table` with `dim` columns.
#[must_use]
pub fn neuroshard_raw(table: &TableSpec, dim: u32) -> [f64; NEUROSHARD_LEN] {
    let mut f = [0.0; NEUROSHARD_LEN];
    f[0] = f64::from(dim);
    f[1] = table.pooling_factor;
    f[2] = table.rows as f64;
    f[3..].copy_from_slice(&table.bins);
    f
}

/// Per-feature mean and standard deviation (the latter already + [`STD_EPS`]), applied after an optional
/// `ln(1 + x)` of some features.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Normalisation {
    /// Means, one per feature (of the logged value for a feature in `log1p`).
    pub mean: Vec<f64>,
    /// Standard deviations + eps, one per feature.
    pub std: Vec<f64>,
    /// Features taken as `ln(1 + x)` before the z-score (indices; empty in NeuroShard's own scheme).
    /// Row counts span 100 to 12.5 million in the pool: z-scored raw, a 100-row and a 100,000-row table
    /// differ by 0.03 standard deviations though one fits a core's cache and the other does not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log1p: Vec<usize>,
}

impl Normalisation {
    /// z-scores `raw` in place order: `(x' - mean) / std` with `x' = ln(1 + x)` for the features in
    /// `log1p`, `x` otherwise.
    #[must_use]
    pub fn apply(&self, raw: &[f64]) -> Vec<f32> {
        raw.iter()
            .enumerate()
            .zip(&self.mean)
            .zip(&self.std)
            .map(|(((j, x), m), s)| {
                let x = if self.log1p.contains(&j) { x.max(0.0).ln_1p() } else { *x };
                ((x - m) / s) as f32
            })
            .collect()
    }

    /// Statistics of a set of feature rows.
    #[must_use]
    pub fn fit(rows: &[Vec<f64>]) -> Self {
        Self::fit_logged(rows, &[])
    }

    /// Statistics of a set of feature rows, the features in `log1p` taken as `ln(1 + x)`.
    #[must_use]
    pub fn fit_logged(rows: &[Vec<f64>], log1p: &[usize]) -> Self {
        let n = rows.len().max(1) as f64;
        let width = rows.first().map_or(0, Vec::len);
        let value = |r: &[f64], j: usize| if log1p.contains(&j) { r[j].max(0.0).ln_1p() } else { r[j] };
        let mean: Vec<f64> = (0..width).map(|j| rows.iter().map(|r| value(r, j)).sum::<f64>() / n).collect();
        let std = (0..width)
            .map(|j| (rows.iter().map(|r| (value(r, j) - mean[j]).powi(2)).sum::<f64>() / n).sqrt() + STD_EPS)
            .collect();
        Self { mean, std, log1p: log1p.to_vec() }
    }
}

/// The features [`neuroshard_pool_normalisation_logged`] logs: pooling factor and rows.
pub const LOGGED_FEATURES: [usize; 2] = [1, 2];

/// The augmented pool's raw NeuroShard features (856 tables × {4, …, 128}).
fn pool_rows() -> Result<Vec<Vec<f64>>> {
    let pool = dlrm_pool()?;
    let mut rows = Vec::with_capacity(pool.len() * AUGMENT_DIMS.len());
    for t in pool {
        for &dim in &AUGMENT_DIMS {
            let mut f = vec![f64::from(dim), t.pooling_factor, t.rows as f64];
            f.extend_from_slice(&t.bins);
            rows.push(f);
        }
    }
    Ok(rows)
}

/// NeuroShard's normalisation: statistics over the augmented DLRM pool.
pub fn neuroshard_pool_normalisation() -> Result<&'static Normalisation> {
    static NORM: OnceLock<Normalisation> = OnceLock::new();
    if let Some(n) = NORM.get() {
        return Ok(n);
    }
    let rows = pool_rows()?;
    Ok(NORM.get_or_init(|| Normalisation::fit(&rows)))
}

/// The same statistics with pooling factor and rows taken as `ln(1 + x)` ([`LOGGED_FEATURES`]): what the
/// trainer uses unless asked for NeuroShard's own scheme.
pub fn neuroshard_pool_normalisation_logged() -> Result<&'static Normalisation> {
    static NORM: OnceLock<Normalisation> = OnceLock::new();
    if let Some(n) = NORM.get() {
        return Ok(n);
    }
    let rows = pool_rows()?;
    Ok(NORM.get_or_init(|| Normalisation::fit_logged(&rows, &LOGGED_FEATURES)))
}

/// DreamShard/AutoShard features of every table of a task (one row per table), with `row`,
/// `pooling_factor` and `size` z-scored within the task.
#[must_use]
pub fn dreamshard_task_features(tables: &[(&TableSpec, u32)]) -> Vec<[f32; DREAMSHARD_LEN]> {
    let raw: Vec<[f64; 3]> =
        tables.iter().map(|(t, dim)| [t.rows as f64, t.pooling_factor, t.piece_bytes(*dim) as f64]).collect();
    let norm = Normalisation::fit(&raw.iter().map(|r| r.to_vec()).collect::<Vec<_>>());
    tables
        .iter()
        .zip(&raw)
        .map(|((t, dim), r)| {
            let z = norm.apply(r);
            let mut f = [0.0f32; DREAMSHARD_LEN];
            f[0] = *dim as f32;
            f[1..4].copy_from_slice(&z);
            for (k, b) in t.bins.iter().enumerate() {
                f[4 + k] = *b as f32;
            }
            f
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_normalisation_has_expected_shape_and_values() {
        let n = neuroshard_pool_normalisation().unwrap();
        assert_eq!(n.mean.len(), NEUROSHARD_LEN);
        // dims {4,8,16,32,64,128} uniformly: mean 42, population std ≈ 43.3128.
        assert!((n.mean[0] - 42.0).abs() < 1e-9);
        assert!((n.std[0] - 43.312_816).abs() < 1e-5, "{}", n.std[0]);
        let pf_mean = dlrm_pool().unwrap().iter().map(|t| t.pooling_factor).sum::<f64>() / 856.0;
        assert!((n.mean[1] - pf_mean).abs() < 1e-9);
        assert_eq!(FeatureSchema::NeuroShard20.names().len(), 20);
        assert_eq!(FeatureSchema::DreamShard21.names()[3], "size");
    }

    #[test]
    fn dreamshard_features_are_task_zscored() {
        let pool = dlrm_pool().unwrap();
        let tables: Vec<TableSpec> = (0..10)
            .map(|i| pool[i * 7].at_dim(format!("t{i}"), 16, crate::table::ElementType::Fp16).unwrap())
            .collect();
        let refs: Vec<(&TableSpec, u32)> = tables.iter().map(|t| (t, 16)).collect();
        let f = dreamshard_task_features(&refs);
        let mean_row: f32 = f.iter().map(|x| x[1]).sum::<f32>() / 10.0;
        assert!(mean_row.abs() < 1e-5);
        assert!(f.iter().all(|x| x[0] == 16.0));
    }
}
