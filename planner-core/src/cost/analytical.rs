//! The analytical cost model: TorchRec's `EmbeddingPerfEstimator` for table-wise, column-wise and
//! row-wise shards on HBM with fused kernels (`torchrec/distributed/planner/shard_estimators.py`,
//! `_get_tw_sharding_perf`, `_get_rw_sharding_perf`, and constants.py). It needs no training and is
//! the default until a trained profile is shipped.
//!
//! For a piece of `d` columns of a table with pooling factor `pf`, global batch `B`:
//! ```text
//! input_read   = ceil(B · pf · 8)                     # int64 indices (BIGINT_DTYPE)
//! lookup       = B · pf · max(d, 32) · elem_bytes     # kernel reads at least 32 columns
//! output_write = B · d · out_bytes
//! penalty      = 1 if d >= 128, 1.15 if 64 <= d < 128, 1.75 if d < 64   # FULL/HALF/QUARTER block
//! fwd_compute  = (input_read + lookup + output_write) · penalty / hbm_bw
//! bwd_compute  = 2 · fwd_compute                       # BWD_COMPUTE_MULTIPLIER, fused optimizer
//! fwd_comm     = B · d · a2a_bytes / comm_bw           # all-to-all of pooled outputs
//! bwd_comm     = B · d · a2a_bytes / comm_bw           # all-to-all of their gradients
//! ```
//! A row-wise piece serving a fraction `f` of the table's rows (TorchRec: `f = 1/W`) reads its share of
//! the indices and rows but writes partial sums for the whole batch, which a reduce-scatter combines:
//! ```text
//! input_read   = ceil(B · pf · f · 8)
//! lookup       = B · pf · f · d · elem_bytes          # no 32-column minimum in TorchRec's row-wise formula
//! output_write = B · d · out_bytes
//! fwd_compute  = (input_read + lookup + output_write) / hbm_bw      # no block penalty either
//! bwd_compute  = 2 · fwd_compute + B · d · out_bytes · 2.455 / hbm_bw   # + BATCHED_COPY_PERF_FACTOR copy
//! fwd_comm, bwd_comm: B · d · a2a_bytes / comm_bw     # reduce-scatter / all-gather of the pooled outputs
//! ```
//! TorchRec books the batched copy under backward comms; it is HBM traffic, so it is counted here as
//! backward compute. Its comm volume equals a table-wise piece's, so comm stays a function of the
//! per-device dim sums (a row-wise piece counts its full dim).
//!
//! TorchRec multiplies its per-rank batch (512 by default) by the world size; we use the global batch
//! directly (65,536, the seeds' protocol). A device's compute is the sum over its pieces (TorchRec
//! has no fusion effect), its comm depends on its dim sum only, and start delays are ignored.

use serde::{Deserialize, Serialize};

use super::{ComputeSplit, CostModel, IncrementalCompute, PieceRef};
use crate::error::{Error, Result};
use crate::table::ElementType;

const GIB_F: f64 = (1u64 << 30) as f64;

/// TorchRec `BIGINT_DTYPE`: bytes per input index.
pub const INPUT_INDEX_BYTES: f64 = 8.0;
/// TorchRec `FULL_BLOCK_EMB_DIM`.
pub const FULL_BLOCK_EMB_DIM: u32 = 128;
/// TorchRec `HALF_BLOCK_PENALTY` (64 <= dim < 128).
pub const HALF_BLOCK_PENALTY: f64 = 1.15;
/// TorchRec `QUARTER_BLOCK_PENALTY` (dim < 64).
pub const QUARTER_BLOCK_PENALTY: f64 = 1.75;
/// TorchRec `BWD_COMPUTE_MULTIPLIER`.
pub const BWD_COMPUTE_MULTIPLIER: f64 = 2.0;
/// Minimum columns a lookup reads (TorchRec: "minimum embedding dim is set to 32 due to kernel usage").
pub const MIN_LOOKUP_DIM: u32 = 32;
/// TorchRec `BATCHED_COPY_PERF_FACTOR`: the backward copy of a row-wise shard's output gradients.
pub const BATCHED_COPY_PERF_FACTOR: f64 = 2.455;
/// The seeds' global batch.
pub const DEFAULT_GLOBAL_BATCH: u64 = 65_536;

/// Bandwidths of one device type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HardwareProfile {
    /// Short name (`torchrec`, `h100`, ...).
    pub name: String,
    /// Device memory bandwidth used by lookups.
    pub hbm_bw_bytes_per_s: f64,
    /// Bandwidth of the all-to-all between devices.
    pub comm_bw_bytes_per_s: f64,
    /// Fixed time of one all-to-all, ms (launch and synchronisation; 0 in TorchRec's estimator).
    #[serde(default)]
    pub comm_latency_ms: f64,
    /// Whether only the share of a device's output that leaves it, `(W − 1) / W` over `W` devices,
    /// crosses the link (how NCCL's all-to-all bus bandwidth is defined). TorchRec's estimator counts
    /// the whole output (`false`).
    #[serde(default)]
    pub comm_remote_share: bool,
}

impl HardwareProfile {
    /// TorchRec's defaults: `HBM_MEM_BW` 897 GiB/s, `INTRA_NODE_BANDWIDTH` 600 GiB/s.
    #[must_use]
    pub fn torchrec_default() -> Self {
        Self {
            name: "torchrec".into(),
            hbm_bw_bytes_per_s: 897.0 * GIB_F,
            comm_bw_bytes_per_s: 600.0 * GIB_F,
            comm_latency_ms: 0.0,
            comm_remote_share: false,
        }
    }

    /// Built-in profiles: `torchrec` (TorchRec's constants and formula), `h100` (SXM: 3.35 TB/s HBM3;
    /// all-to-all inside one host over `NVLink` 4 at the 370 GB/s bus bandwidth NCCL reaches on it, with
    /// a 10 µs floor), `h100-ib` (the same GPUs with every peer on another host: one 400 Gb/s NDR NIC per
    /// GPU at 48 GB/s, 25 µs floor), `a100` (SXM 80 GB: 2.04 TB/s, `NVLink` 3 at 300 GB/s per
    /// direction), `rtx2080ti` (the NeuroShard testbed: 616 GB/s `GDDR6`, `PCIe` 3.0 x16 at 16 GB/s per
    /// direction). The `h100` figures are NCCL's published ones (`docs/COST_MODELS.md`, "Comm"); the
    /// others are datasheet peaks. A measured profile is always better.
    pub fn builtin(name: &str) -> Result<Self> {
        let (hbm, comm, latency_ms, remote) = match name {
            "torchrec" => return Ok(Self::torchrec_default()),
            "h100" => (3.35e12, 370e9, 0.010, true),
            "h100-ib" => (3.35e12, 48e9, 0.025, true),
            "a100" => (2.039e12, 300e9, 0.0, false),
            "rtx2080ti" => (616e9, 16e9, 0.0, false),
            _ => {
                return Err(Error::field(
                    "hardware",
                    "profile",
                    format!("{name:?}"),
                    format!("one of {}", Self::BUILTIN.join(", ")),
                ));
            }
        };
        Ok(Self {
            name: name.into(),
            hbm_bw_bytes_per_s: hbm,
            comm_bw_bytes_per_s: comm,
            comm_latency_ms: latency_ms,
            comm_remote_share: remote,
        })
    }

    /// Names accepted by [`HardwareProfile::builtin`].
    pub const BUILTIN: &'static [&'static str] = &["torchrec", "h100", "h100-ib", "a100", "rtx2080ti"];
}

/// TorchRec's perf estimator as a [`CostModel`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnalyticalModel {
    /// Bandwidths.
    pub hardware: HardwareProfile,
    /// Global batch size (samples per step over all devices).
    pub global_batch: u64,
    /// Bytes per element of the pooled outputs and of the all-to-all (TorchRec: the output dtype; fp32).
    pub a2a_bytes: f64,
}

impl Default for AnalyticalModel {
    fn default() -> Self {
        Self { hardware: HardwareProfile::torchrec_default(), global_batch: DEFAULT_GLOBAL_BATCH, a2a_bytes: 4.0 }
    }
}

impl AnalyticalModel {
    /// A model for `hardware` with the seeds' batch.
    pub fn new(hardware: HardwareProfile, global_batch: u64) -> Result<Self> {
        for (field, v) in
            [("hbm_bw_bytes_per_s", hardware.hbm_bw_bytes_per_s), ("comm_bw_bytes_per_s", hardware.comm_bw_bytes_per_s)]
        {
            if !v.is_finite() || v <= 0.0 {
                return Err(Error::field("hardware", field, v, "a positive bandwidth"));
            }
        }
        if !hardware.comm_latency_ms.is_finite() || hardware.comm_latency_ms < 0.0 {
            return Err(Error::field("hardware", "comm_latency_ms", hardware.comm_latency_ms, "a finite time >= 0"));
        }
        if global_batch == 0 {
            return Err(Error::field("analytical model", "global_batch", 0, "at least 1"));
        }
        Ok(Self { hardware, global_batch, a2a_bytes: 4.0 })
    }

    /// TorchRec's block-usage penalty for a shard of `dim` columns.
    #[must_use]
    pub fn block_penalty(dim: u32) -> f64 {
        if dim >= FULL_BLOCK_EMB_DIM {
            1.0
        } else if dim >= 64 {
            HALF_BLOCK_PENALTY
        } else {
            QUARTER_BLOCK_PENALTY
        }
    }

    fn out_bytes(piece: &PieceRef<'_>) -> f64 {
        match piece.table.dtype {
            ElementType::Int8 => 4.0,
            t => t.bytes() as f64,
        }
    }

    /// Forward compute of one piece, ms (table-/column-wise, or row-wise when the piece holds some rows).
    #[must_use]
    pub fn piece_fwd_ms(&self, piece: &PieceRef<'_>) -> f64 {
        let b = self.global_batch as f64;
        let elem = piece.table.dtype.bytes() as f64;
        let output_write = b * f64::from(piece.dim) * Self::out_bytes(piece);
        if piece.is_row_split() {
            let lookups = b * piece.pooling_factor();
            let input_read = (lookups * INPUT_INDEX_BYTES).ceil();
            let lookup = lookups * f64::from(piece.dim) * elem;
            return (input_read + lookup + output_write) / self.hardware.hbm_bw_bytes_per_s * 1e3;
        }
        let lookups = b * piece.table.pooling_factor;
        let input_read = (lookups * INPUT_INDEX_BYTES).ceil();
        let lookup = lookups * f64::from(piece.dim.max(MIN_LOOKUP_DIM)) * elem;
        (input_read + lookup + output_write) * Self::block_penalty(piece.dim) / self.hardware.hbm_bw_bytes_per_s * 1e3
    }

    /// Backward compute of one piece, ms: [`BWD_COMPUTE_MULTIPLIER`] × forward, plus the batched copy of
    /// a row-wise piece's output gradients.
    #[must_use]
    pub fn piece_bwd_ms(&self, piece: &PieceRef<'_>) -> f64 {
        let mut bwd = self.piece_fwd_ms(piece) * BWD_COMPUTE_MULTIPLIER;
        if piece.is_row_split() {
            let out = self.global_batch as f64 * f64::from(piece.dim) * Self::out_bytes(piece);
            bwd += out * BATCHED_COPY_PERF_FACTOR / self.hardware.hbm_bw_bytes_per_s * 1e3;
        }
        bwd
    }

    fn comm_ms(&self, dims: &[f64]) -> Vec<f64> {
        let w = dims.len() as f64;
        let share = if self.hardware.comm_remote_share { (w - 1.0).max(0.0) / w.max(1.0) } else { 1.0 };
        let per_dim = self.global_batch as f64 * self.a2a_bytes * share / self.hardware.comm_bw_bytes_per_s * 1e3;
        // One device alone exchanges nothing; otherwise every all-to-all pays the fixed time.
        let latency = if dims.len() > 1 { self.hardware.comm_latency_ms } else { 0.0 };
        dims.iter().map(|d| latency + d * per_dim).collect()
    }
}

/// A piece's vector is its single cost; the head is the identity (compute is additive).
impl IncrementalCompute for AnalyticalModel {
    fn vector_len(&self) -> usize {
        1
    }

    fn piece_vectors(&self, pieces: &[PieceRef<'_>]) -> Result<Vec<f64>> {
        Ok(pieces.iter().map(|p| self.piece_fwd_ms(p) + self.piece_bwd_ms(p)).collect())
    }

    fn head_ms(&self, sum: &[i64]) -> f64 {
        sum.first().map_or(0.0, |&s| s as f64 / super::incremental::FIXED_SCALE)
    }
}

impl CostModel for AnalyticalModel {
    fn incremental(&self) -> Option<&dyn IncrementalCompute> {
        Some(self)
    }

    fn compute_is_additive(&self) -> bool {
        true
    }

    fn global_batch(&self) -> Option<u64> {
        Some(self.global_batch)
    }

    fn exchange_bytes_per_dim(&self) -> Option<f64> {
        Some(self.global_batch as f64 * self.a2a_bytes)
    }

    fn name(&self) -> String {
        format!("analytical:{}", self.hardware.name)
    }

    fn compute_ms(&self, set: &[PieceRef<'_>]) -> Result<f64> {
        Ok(set.iter().map(|p| self.piece_fwd_ms(p) + self.piece_bwd_ms(p)).sum())
    }

    fn compute_split(&self, set: &[PieceRef<'_>]) -> Result<Option<ComputeSplit>> {
        let fwd_ms: f64 = set.iter().map(|p| self.piece_fwd_ms(p)).sum();
        let bwd_ms: f64 = set.iter().map(|p| self.piece_bwd_ms(p)).sum();
        Ok(Some(ComputeSplit { fwd_ms, bwd_ms }))
    }

    fn bw_comm_ms(&self, dims: &[f64]) -> Result<Vec<f64>> {
        Ok(self.comm_ms(dims))
    }

    fn fw_comm_ms(&self, dims: &[f64], _delays_ms: &[f64]) -> Result<Vec<f64>> {
        Ok(self.comm_ms(dims))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{NUM_BINS, OptimizerState, TableSpec};

    fn table(dim: u32, pf: f64) -> TableSpec {
        TableSpec::new("t", "t".into(), 1000, dim, pf, [0.0; NUM_BINS], ElementType::Fp32, OptimizerState::None)
            .unwrap()
    }

    #[test]
    fn hand_computed_piece_cost() {
        // B = 65,536, pf = 10, d = 64, fp32, TorchRec bandwidths:
        // (65,536·10·8 + 65,536·10·64·4 + 65,536·64·4) · 1.15 / (897 GiB/s) · 1e3 ms.
        let m = AnalyticalModel::default();
        let t = table(64, 10.0);
        let bytes = 65_536.0 * 10.0 * 8.0 + 65_536.0 * 10.0 * 64.0 * 4.0 + 65_536.0 * 64.0 * 4.0;
        let expected = bytes * 1.15 / (897.0 * GIB_F) * 1e3;
        let got = m.piece_fwd_ms(&PieceRef::whole(&t, 64));
        assert!((got - expected).abs() < 1e-12, "{got} vs {expected}");
        assert!((m.compute_ms(&[PieceRef::whole(&t, 64)]).unwrap() - 3.0 * expected).abs() < 1e-12);
    }

    #[test]
    fn small_dims_read_32_columns_and_pay_the_quarter_penalty() {
        let m = AnalyticalModel::default();
        let t = table(16, 4.0);
        let a = m.piece_fwd_ms(&PieceRef::whole(&t, 16));
        let b = m.piece_fwd_ms(&PieceRef::whole(&t, 8));
        // The lookup term is the same (max(d, 32)); only the output term shrinks.
        assert!(a > b && a < 1.1 * b);
        assert_eq!(AnalyticalModel::block_penalty(128), 1.0);
        assert_eq!(AnalyticalModel::block_penalty(64), 1.15);
        assert_eq!(AnalyticalModel::block_penalty(32), 1.75);
    }

    /// The calibrated `h100` preset: only the remote share of the output crosses `NVLink`, at 370 GB/s,
    /// plus a 10 µs floor; one device alone pays nothing.
    #[test]
    fn the_h100_all_to_all_counts_the_remote_share_and_a_floor() {
        let m = AnalyticalModel::new(HardwareProfile::builtin("h100").unwrap(), 65_536).unwrap();
        let c = m.bw_comm_ms(&[128.0, 0.0, 64.0, 64.0]).unwrap();
        let bytes = 65_536.0 * 128.0 * 4.0 * 3.0 / 4.0;
        assert!((c[0] - (0.010 + bytes / 370e9 * 1e3)).abs() < 1e-12, "{c:?}");
        assert!((c[1] - 0.010).abs() < 1e-15);
        assert_eq!(m.bw_comm_ms(&[128.0]).unwrap(), vec![0.0]);
        let ib = AnalyticalModel::new(HardwareProfile::builtin("h100-ib").unwrap(), 65_536).unwrap();
        // Between hosts the same exchange is about 7× slower (48 vs 370 GB/s, a 25 µs floor).
        let between = ib.bw_comm_ms(&[128.0, 0.0, 64.0, 64.0]).unwrap();
        assert!((between[0] - (0.025 + bytes / 48e9 * 1e3)).abs() < 1e-12, "{between:?}");
        assert!(between[0] > 5.0 * c[0]);
    }

    #[test]
    fn comm_is_linear_in_dim_sum() {
        let m = AnalyticalModel::default();
        let c = m.bw_comm_ms(&[0.0, 64.0, 128.0]).unwrap();
        assert_eq!(c[0], 0.0);
        assert!((c[2] - 2.0 * c[1]).abs() < 1e-12);
        assert!(HardwareProfile::builtin("tpu").unwrap_err().to_string().contains("\"tpu\""));
    }

    #[test]
    fn hand_computed_row_wise_piece() {
        // Table of 1000 rows, pf 10, d 64, split into 250-row pieces (f = 1/4), B = 65,536:
        // fwd = (ceil(65,536·10/4·8) + 65,536·10/4·64·4 + 65,536·64·4) / (897 GiB/s), no block penalty;
        // bwd = 2·fwd + 65,536·64·4·2.455 / (897 GiB/s).
        let m = AnalyticalModel::default();
        let t = table(64, 10.0);
        let piece = PieceRef { table: &t, dim: 64, rows: 250 };
        assert!(piece.is_row_split() && (piece.pooling_factor() - 2.5).abs() < 1e-15);
        let out = 65_536.0 * 64.0 * 4.0;
        let fwd = (65_536.0 * 2.5 * 8.0 + 65_536.0 * 2.5 * 64.0 * 4.0 + out) / (897.0 * GIB_F) * 1e3;
        let bwd = 2.0 * fwd + out * 2.455 / (897.0 * GIB_F) * 1e3;
        assert!((m.piece_fwd_ms(&piece) - fwd).abs() < 1e-12);
        assert!((m.piece_bwd_ms(&piece) - bwd).abs() < 1e-12);
        let split = m.compute_split(&[piece]).unwrap().unwrap();
        assert!((split.fwd_ms + split.bwd_ms - m.compute_ms(&[piece]).unwrap()).abs() < 1e-12);
        // Four row pieces cost more compute in total than the whole table (each writes the whole
        // batch's outputs), but each one far less than the whole table.
        let whole = m.compute_ms(&[PieceRef::whole(&t, 64)]).unwrap();
        let quarter = m.compute_ms(&[piece]).unwrap();
        assert!(quarter < whole && 4.0 * quarter > whole / 1.15);
        assert_eq!(t.block_bytes(piece.rows, piece.dim), 250 * 64 * 4);
    }
}
