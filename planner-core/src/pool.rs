//! The built-in pool: statistics of the 856 tables of Meta's synthetic DLRM dataset, embedded in the
//! crate, and the augmented pool (every table at every dimension) the seeds sample from.

use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::table::{ElementType, NUM_BINS, OptimizerState, TableSpec};

/// The embedded CSV (provenance in `data/README.md`).
pub const DLRM_T856_CSV: &str = include_str!("../data/dlrm_t856_table_stats.csv");

/// Dimensions of the augmented pool (SPEC section 2).
pub const AUGMENT_DIMS: [u32; 6] = [4, 8, 16, 32, 64, 128];

/// Statistics of one pool table (no dimension: that is chosen when a task is sampled).
#[derive(Debug, Clone, PartialEq)]
pub struct PoolTable {
    /// Index in the pool (0..856).
    pub table_id: usize,
    /// Row count.
    pub rows: u64,
    /// Mean lookups per sample.
    pub pooling_factor: f64,
    /// Access-distribution bins.
    pub bins: [f64; NUM_BINS],
}

impl PoolTable {
    /// This table at a dimension, named `name`.
    pub fn at_dim(&self, name: String, dim: u32, dtype: ElementType) -> Result<TableSpec> {
        TableSpec::new(
            &format!("pool table {}", self.table_id),
            name,
            self.rows,
            dim,
            self.pooling_factor,
            self.bins,
            dtype,
            OptimizerState::None,
        )
    }
}

/// The 856 DLRM tables, parsed once from the embedded CSV.
pub fn dlrm_pool() -> Result<&'static [PoolTable]> {
    static POOL: OnceLock<Result<Vec<PoolTable>>> = OnceLock::new();
    match POOL.get_or_init(|| parse_pool_csv(DLRM_T856_CSV)) {
        Ok(v) => Ok(v),
        Err(e) => Err(e.clone()),
    }
}

/// Parses a pool CSV in the shared format (`table_id,row,pooling_factor,bin_0..bin_16`).
pub fn parse_pool_csv(text: &str) -> Result<Vec<PoolTable>> {
    let tables = crate::input::parse_tables_csv(text, Some(4))?;
    let pool: Vec<PoolTable> = tables
        .into_iter()
        .enumerate()
        .map(|(table_id, t)| PoolTable { table_id, rows: t.rows, pooling_factor: t.pooling_factor, bins: t.bins })
        .collect();
    if pool.is_empty() {
        return Err(Error::field("pool", "tables", 0, "at least one table"));
    }
    Ok(pool)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_pool_matches_its_provenance_checks() {
        let pool = dlrm_pool().unwrap();
        assert_eq!(pool.len(), 856);
        let indices: f64 = pool.iter().map(|t| t.pooling_factor).sum::<f64>() * 65_536.0;
        assert!((indices - 887_017_990.0).abs() < 100.0, "{indices}");
        assert_eq!(pool.iter().filter(|t| t.pooling_factor == 0.0).count(), 36);
        let over = pool.iter().filter(|t| t.rows * 128 * 4 > 4 * crate::units::GIB).count();
        assert_eq!(over, 37);
        assert_eq!(pool.iter().filter(|t| t.rows == 100).count(), 128);
    }
}
