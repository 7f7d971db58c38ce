//! The memory-terms compute model: a device's compute time as a non-negative sum of what its pieces
//! make the memory system do, one fitted cost per unit of each.
//!
//! An embedding-bag step reads, for every lookup, one row of `dim` elements and adds it into a bag, and
//! its backward pass writes the gradient into every distinct row it touched. What that costs depends on
//! how many *distinct* rows a batch touches (each one is brought in from memory once, cache line by cache
//! line) far more than on the row count of the table: a table of 3 million rows whose lookups all fall on
//! a few hundred hot rows runs from cache. The learned profiles see the table only through its
//! 20 NeuroShard features, and a table whose access counts sit in bins where the training data had almost
//! none (z-scores of 10–20) is priced by extrapolation; this model computes the physical quantity
//! directly from the same statistics, so it cannot extrapolate in that way.
//!
//! Per piece, at a batch of `B` bags (the profile's measured batch):
//!
//! | term | unit | what it counts |
//! |---|---|---|
//! | `piece` | 1 | one kernel launch and its bookkeeping, per piece |
//! | `lookups` | 10⁵ lookups | `L = pooling factor × B` (a row piece: the piece's share of the lookups) |
//! | `lookup_columns` | 10⁷ elements | `L × dim`: elements summed into bags and gradients spread back |
//! | `row_lines` | 10⁵ cache lines | `D × ⌈dim × bytes / 64⌉`: the distinct rows' cache lines, read and written once |
//! | `row_lines_beyond_llc` | 10⁵ cache lines | the same, for a piece larger than the last-level cache |
//! | `rows` | 10⁵ rows | `D`: per distinct row (gathering the unique rows, the update's index work) |
//!
//! `D`, the distinct rows a batch of `B` touches, comes from the access bins (SPEC section 3): bin `k`
//! holds the share of a table's distinct accessed rows whose count in a batch of 65,536 samples lies in
//! `(2^(k−1), 2^k]` (bin 0: one access; bin 16: more than 32,768). A 65,536-sample batch then touches
//! `D₆₅ = pooling × 65,536 / Σ bₖ cₖ` distinct rows (`cₖ` the middle of bin `k`'s range), and a row with
//! `cₖ` accesses there is touched by a batch of `B` with probability `1 − exp(−cₖ B / 65,536)` (Poisson),
//! so `D = Σ bₖ D₆₅ (1 − exp(−cₖ B / 65,536))`, at most the piece's rows and its lookups. A row piece
//! keeps the table's bins with its share of the lookups (the same assumption the learned models make).
//!
//! The set's compute is the sum over its pieces of `Σ coefficient × term`: additive, so lower bounds and
//! searches price a set exactly from its pieces. The coefficients are fitted by the trainer
//! (`shardplan-train fit-terms`, non-negative least squares on relative error) on the profile's own
//! measured sets and stored in its card (`compute_terms`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::card::SplitMetrics;
use super::incremental::{FIXED_SCALE, IncrementalCompute, to_fixed};
use super::{CostModel, NeuralModel, PieceRef};
use crate::error::{Error, Result};
use crate::table::NUM_BINS;

/// The terms, in the order of [`piece_terms`] and of a card's coefficients.
pub const TERM_NAMES: [&str; TERM_COUNT] =
    ["piece", "lookups", "lookup_columns", "row_lines", "row_lines_beyond_llc", "rows"];

/// Number of terms.
pub const TERM_COUNT: usize = 6;

/// Samples per batch at which the access bins are defined (SPEC section 3).
pub const BIN_BATCH: f64 = 65_536.0;

/// Bytes of a cache line.
pub const LINE_BYTES: u64 = 64;

/// The middle of bin `k`'s access-count range: 1 for bin 0, `0.75 × 2^k` for `(2^(k−1), 2^k]`, and
/// `1.5 × 32,768` for the open last bin.
#[must_use]
pub fn bin_count_mid(k: usize) -> f64 {
    match k {
        0 => 1.0,
        k if k + 1 < NUM_BINS => 0.75 * f64::from(1u32 << k),
        _ => 1.5 * 32_768.0,
    }
}

/// Expected distinct rows of `piece` touched by a batch of `batch` bags (see the module docs); 0 for a
/// piece without lookups.
#[must_use]
pub fn distinct_rows(piece: &PieceRef<'_>, batch: u32) -> f64 {
    let pooling = piece.pooling_factor();
    let bins = &piece.table.bins;
    let mean_count: f64 = bins.iter().enumerate().map(|(k, b)| b * bin_count_mid(k)).sum();
    let lookups = pooling * f64::from(batch);
    if !(mean_count > 0.0 && lookups > 0.0 && pooling.is_finite()) {
        return 0.0;
    }
    let d65 = pooling * BIN_BATCH / mean_count;
    let share = f64::from(batch) / BIN_BATCH;
    let d: f64 = bins.iter().enumerate().map(|(k, b)| b * d65 * -(-bin_count_mid(k) * share).exp_m1()).sum();
    d.min(piece.rows as f64).min(lookups).max(0.0)
}

/// The terms of one piece at a batch of `batch` bags, on a machine whose last-level cache holds
/// `llc_bytes` (order: [`TERM_NAMES`]).
#[must_use]
pub fn piece_terms(piece: &PieceRef<'_>, batch: u32, llc_bytes: u64) -> [f64; TERM_COUNT] {
    let elem = piece.table.dtype.bytes();
    let row_bytes = u64::from(piece.dim).saturating_mul(elem);
    let lines = row_bytes.div_ceil(LINE_BYTES) as f64;
    let lookups = piece.pooling_factor() * f64::from(batch);
    // fp16 and int8 rows enter at the fp32 width of the same bytes, as in the learned models.
    let columns = row_bytes as f64 / 4.0;
    let d = distinct_rows(piece, batch);
    let beyond = piece.rows.saturating_mul(row_bytes) > llc_bytes;
    [1.0, lookups / 1e5, lookups * columns / 1e7, d * lines / 1e5, if beyond { d * lines / 1e5 } else { 0.0 }, d / 1e5]
}

/// A profile's fitted memory-terms model (the card's `compute_terms`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TermsCard {
    /// Cost per unit of each term, ms, by name ([`TERM_NAMES`], all of them, each finite and ≥ 0).
    pub coefficients: BTreeMap<String, f64>,
    /// Last-level cache of the measured machine, bytes (the `row_lines_beyond_llc` threshold).
    pub llc_bytes: u64,
    /// How the coefficients were fitted (method, samples, the training split).
    pub fitted_on: String,
    /// Accuracy per split (`terms/random/train`, `…/val`, `…/test`), on the profile's compute split.
    pub metrics: BTreeMap<String, SplitMetrics>,
}

impl TermsCard {
    /// The coefficients in [`TERM_NAMES`] order; refuses a card that lacks one, has an unknown one, or
    /// holds a negative or non-finite value, or a zero cache size.
    pub fn coefficients(&self, profile: &str) -> Result<[f64; TERM_COUNT]> {
        let mismatch = |what: &str, expected: String, found: String| {
            Err(Error::ModelSchemaMismatch { model: profile.into(), what: what.into(), expected, found })
        };
        let names: Vec<&str> = self.coefficients.keys().map(String::as_str).collect();
        let mut want: Vec<&str> = TERM_NAMES.to_vec();
        want.sort_unstable();
        if names != want {
            return mismatch("compute_terms coefficients", want.join(","), names.join(","));
        }
        let mut out = [0.0; TERM_COUNT];
        for (o, name) in out.iter_mut().zip(TERM_NAMES) {
            let v = self.coefficients[name];
            if !(v.is_finite() && v >= 0.0) {
                return mismatch(
                    &format!("compute_terms coefficient `{name}`"),
                    "finite and >= 0".into(),
                    v.to_string(),
                );
            }
            *o = v;
        }
        if self.llc_bytes == 0 {
            return mismatch("compute_terms llc_bytes", "> 0".into(), "0".into());
        }
        Ok(out)
    }

    /// The relative standard deviation of the model's error on held-out sets, from its validation MAPE
    /// as for the learned model ([`super::card::error_sd_from`]).
    #[must_use]
    pub fn error_sd(&self) -> Option<f64> {
        super::card::error_sd_from(&self.metrics, "terms/random/val")
    }
}

/// The fitted model, ready to price pieces.
#[derive(Debug, Clone, PartialEq)]
pub struct Terms {
    coefficients: [f64; TERM_COUNT],
    batch: u32,
    llc_bytes: u64,
}

impl Terms {
    /// The model of `card` at the profile's measured `batch`.
    pub fn new(card: &TermsCard, batch: u32, profile: &str) -> Result<Self> {
        Ok(Self { coefficients: card.coefficients(profile)?, batch, llc_bytes: card.llc_bytes })
    }

    /// The compute time of one piece, ms.
    #[must_use]
    pub fn piece_ms(&self, piece: &PieceRef<'_>) -> f64 {
        piece_terms(piece, self.batch, self.llc_bytes).iter().zip(&self.coefficients).map(|(t, c)| t * c).sum()
    }

    /// The compute time of a set: the sum of its pieces' times, ms.
    #[must_use]
    pub fn set_ms(&self, set: &[PieceRef<'_>]) -> f64 {
        set.iter().map(|p| self.piece_ms(p)).sum()
    }
}

/// A profile priced by its memory-terms model: compute from [`Terms`], comm (and the batch and speed the
/// times are for) from the profile itself. Named `terms:<profile>`.
pub struct TermsModel {
    base: NeuralModel,
    terms: Terms,
    plan_sd: Option<f64>,
    /// The terms model's own validation error ([`CostModel::measured_error_sd`]).
    error_sd: Option<f64>,
}

impl TermsModel {
    /// `base`'s profile priced by its card's `compute_terms`; refused for a card without them. With
    /// `expected_max`, plans are priced at the expected slowest device under the terms model's own
    /// validation error ([`crate::cost::expected_max_ms`]).
    pub fn new(base: NeuralModel, expected_max: bool) -> Result<Self> {
        let card = base.card();
        let Some(tc) = &card.compute_terms else {
            return Err(Error::field(
                format!("cost model `{}`", card.name),
                "compute_terms",
                true,
                "false: the profile's card has no fitted memory-terms model (`shardplan-train fit-terms` adds one)",
            ));
        };
        let terms = Terms::new(tc, card.compute.batch_size, &card.name)?;
        let error_sd = tc.error_sd();
        let plan_sd = if expected_max {
            Some(error_sd.ok_or_else(|| {
                Error::field(
                    format!("cost model `{}`", card.name),
                    "expected_max",
                    true,
                    "false: the card's memory-terms model records no validation error (`terms/random/val`)",
                )
            })?)
        } else {
            None
        };
        Ok(Self { base, terms, plan_sd, error_sd })
    }

    /// The fixed-point time of one piece (the unit every set sum is kept in).
    fn piece_fixed(&self, piece: &PieceRef<'_>) -> Result<i64> {
        to_fixed(&self.base.card().name, self.terms.piece_ms(piece))
    }
}

impl CostModel for TermsModel {
    fn name(&self) -> String {
        let comm = if self.base.has_comm_fallback() { "+analytical-comm" } else { "" };
        let emax = if self.plan_sd.is_some() { "+expected-max" } else { "" };
        format!("terms:{}{emax}{comm}", self.base.card().name)
    }

    fn compute_ms(&self, set: &[PieceRef<'_>]) -> Result<f64> {
        let mut sum = 0i64;
        for p in set {
            sum += self.piece_fixed(p)?;
        }
        Ok(sum as f64 / FIXED_SCALE)
    }

    fn incremental(&self) -> Option<&dyn IncrementalCompute> {
        Some(self)
    }

    fn reference_speed(&self) -> Option<(String, f64)> {
        self.base.reference_speed()
    }

    fn measured_on(&self) -> Option<&serde_json::Value> {
        self.base.measured_on()
    }

    fn global_batch(&self) -> Option<u64> {
        self.base.global_batch()
    }

    fn exchange_bytes_per_dim(&self) -> Option<f64> {
        self.base.exchange_bytes_per_dim()
    }

    fn plan_error_sd(&self) -> Option<f64> {
        self.plan_sd
    }

    fn measured_error_sd(&self) -> Option<f64> {
        self.error_sd
    }

    fn compute_is_additive(&self) -> bool {
        true
    }

    fn forget_memo(&self) {
        self.base.forget_memo();
    }

    fn bw_comm_ms(&self, dims: &[f64]) -> Result<Vec<f64>> {
        self.base.bw_comm_ms(dims)
    }

    fn fw_comm_ms(&self, dims: &[f64], delays_ms: &[f64]) -> Result<Vec<f64>> {
        self.base.fw_comm_ms(dims, delays_ms)
    }
}

impl IncrementalCompute for TermsModel {
    fn vector_len(&self) -> usize {
        1
    }

    fn piece_vectors(&self, pieces: &[PieceRef<'_>]) -> Result<Vec<f64>> {
        Ok(pieces.iter().map(|p| self.terms.piece_ms(p)).collect())
    }

    fn head_ms(&self, sum: &[i64]) -> f64 {
        sum.first().map_or(0.0, |&s| s as f64 / FIXED_SCALE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{ElementType, OptimizerState, TableSpec};

    fn table(rows: u64, dim: u32, pooling: f64, bins: [f64; NUM_BINS]) -> TableSpec {
        TableSpec::new("t", "t".into(), rows, dim, pooling, bins, ElementType::Fp32, OptimizerState::None).unwrap()
    }

    fn piece(t: &TableSpec, dim: u32, rows: u64) -> PieceRef<'_> {
        PieceRef { table: t, dim, rows }
    }

    fn bin(k: usize) -> [f64; NUM_BINS] {
        let mut b = [0.0; NUM_BINS];
        b[k] = 1.0;
        b
    }

    #[test]
    fn rows_touched_once_are_all_distinct_and_hot_rows_are_few() {
        // Every row accessed once in 65,536 samples: a batch of 4,096 touches each with probability
        // 1 − e^(−1/16), and there are pooling × 65,536 of them.
        let t = table(10_000_000, 32, 2.0, bin(0));
        let d = distinct_rows(&piece(&t, 32, t.rows), 4096);
        let want = 2.0 * 65_536.0 * -(-1.0f64 / 16.0).exp_m1();
        assert!((d - want).abs() < 1e-6, "{d} vs {want}");
        assert!(d <= 2.0 * 4096.0);
        // All accesses on rows with 2,048–4,096 accesses: about pooling × 65,536 / 3,072 rows, each
        // touched by any batch of 4,096.
        let hot = table(3_000_000, 128, 22.0, bin(12));
        let d = distinct_rows(&piece(&hot, 128, hot.rows), 4096);
        assert!((d - 22.0 * 65_536.0 / 3072.0).abs() / d < 0.01, "{d}");
        // A table without lookups touches nothing; a piece never touches more rows than it has.
        let none = table(1000, 8, 0.0, [0.0; NUM_BINS]);
        assert_eq!(distinct_rows(&piece(&none, 8, 1000), 4096), 0.0);
        let small = table(100, 8, 50.0, bin(0));
        assert_eq!(distinct_rows(&piece(&small, 8, 100), 4096), 100.0);
    }

    #[test]
    fn terms_follow_the_piece() {
        let t = table(1_000_000, 64, 10.0, bin(1));
        let whole = piece_terms(&piece(&t, 64, t.rows), 4096, 32 << 20);
        assert_eq!(whole[0], 1.0);
        assert!((whole[1] - 10.0 * 4096.0 / 1e5).abs() < 1e-12);
        assert!((whole[2] - 10.0 * 4096.0 * 64.0 / 1e7).abs() < 1e-9);
        // 64 fp32 columns are 4 cache lines; the table (256 MB) is beyond a 32 MiB cache.
        assert!((whole[3] - 4.0 * whole[5]).abs() < 1e-12);
        assert_eq!(whole[3], whole[4]);
        // A column half: same lookups, half the columns, half the lines, still beyond the cache.
        let half = piece_terms(&piece(&t, 32, t.rows), 4096, 32 << 20);
        assert_eq!(half[1], whole[1]);
        assert!((half[2] - whole[2] / 2.0).abs() < 1e-12);
        assert!((half[3] - whole[3] / 2.0).abs() < 1e-12);
        // A row quarter: a quarter of the lookups and of the distinct rows.
        let quarter = piece_terms(&piece(&t, 64, t.rows / 4), 4096, 32 << 20);
        assert!((quarter[1] - whole[1] / 4.0).abs() < 1e-12);
        assert!((quarter[5] - whole[5] / 4.0).abs() < 1e-9);
        // A cache larger than the table: nothing beyond it.
        assert_eq!(piece_terms(&piece(&t, 64, t.rows), 4096, 1 << 40)[4], 0.0);
        // fp16 rows: half the bytes, so half the fp32 columns and lines.
        let h = TableSpec { dtype: ElementType::Fp16, ..t.clone() };
        let fp16 = piece_terms(&piece(&h, 64, h.rows), 4096, 32 << 20);
        assert!((fp16[2] - whole[2] / 2.0).abs() < 1e-9);
        assert!((fp16[3] - whole[3] / 2.0).abs() < 1e-9);
    }

    fn card(coefficients: &[f64]) -> TermsCard {
        TermsCard {
            coefficients: TERM_NAMES.iter().zip(coefficients).map(|(n, c)| ((*n).to_string(), *c)).collect(),
            llc_bytes: 32 << 20,
            fitted_on: "test".into(),
            metrics: BTreeMap::new(),
        }
    }

    #[test]
    fn a_set_costs_the_sum_of_its_pieces() {
        let c = card(&[0.1, 0.5, 1.5, 1.5, 1.5, 0.8]);
        let m = Terms::new(&c, 4096, "p").unwrap();
        let a = table(1_000_000, 64, 10.0, bin(1));
        let b = table(5000, 16, 3.0, bin(4));
        let (pa, pb) = (piece(&a, 64, a.rows), piece(&b, 16, b.rows));
        let sum = m.piece_ms(&pa) + m.piece_ms(&pb);
        assert!((m.set_ms(&[pa, pb]) - sum).abs() < 1e-12);
        assert_eq!(m.set_ms(&[]), 0.0);
        assert!(m.piece_ms(&pa) > m.piece_ms(&pb));
    }

    #[test]
    fn cards_with_missing_negative_or_unknown_coefficients_are_refused() {
        let ok = card(&[0.1, 0.5, 1.5, 1.5, 1.5, 0.8]);
        assert!(ok.coefficients("p").is_ok());
        let neg = card(&[0.1, -0.5, 1.5, 1.5, 1.5, 0.8]);
        assert!(neg.coefficients("p").unwrap_err().to_string().contains("lookups"));
        let nan = card(&[0.1, 0.5, f64::NAN, 1.5, 1.5, 0.8]);
        assert!(nan.coefficients("p").unwrap_err().to_string().contains("lookup_columns"));
        let mut missing = ok.clone();
        missing.coefficients.remove("rows");
        assert!(missing.coefficients("p").unwrap_err().to_string().contains("compute_terms coefficients"));
        let mut extra = ok.clone();
        extra.coefficients.insert("bogus".into(), 1.0);
        assert!(extra.coefficients("p").is_err());
        let zero = TermsCard { llc_bytes: 0, ..ok };
        assert!(zero.coefficients("p").unwrap_err().to_string().contains("llc_bytes"));
    }

    #[test]
    fn the_embedded_cpu_profile_prices_sets_incrementally_and_hot_rows_cheaply() {
        use crate::cost::ModelChoice;
        use crate::cost::incremental::to_fixed;
        let m = ModelChoice { compute_terms: true, ..ModelChoice::new("cpu-epyc-2t") }.build().unwrap();
        let inc = m.incremental().expect("additive, so incremental");
        assert_eq!(inc.vector_len(), 1);
        let devices = crate::task::Devices::uniform(4, 4 << 30).unwrap();
        let task = crate::task::sample_task(devices, 64, Some(24), 7, 0).unwrap();
        let pieces: Vec<PieceRef<'_>> =
            task.tables.iter().map(|t| PieceRef { table: t, dim: t.dim, rows: t.rows }).collect();
        for set in [&pieces[..1], &pieces[..5], &pieces[3..24]] {
            let vectors = inc.piece_vectors(set).unwrap();
            let sum: i64 = vectors.iter().map(|v| to_fixed("t", *v).unwrap()).sum();
            assert_eq!(inc.head_ms(&[sum]), m.compute_ms(set).unwrap());
        }
        // The same 3 million rows and 22 lookups per bag: all on a few hundred hot rows (bins 12–14, as
        // the pool's table 387), or each on a row touched once. The hot table runs from cache.
        let mut hot_bins = [0.0; NUM_BINS];
        hot_bins[12] = 0.12;
        hot_bins[13] = 0.81;
        hot_bins[14] = 0.07;
        let hot = table(2_982_258, 128, 22.45, hot_bins);
        let cold = table(2_982_258, 128, 22.45, bin(0));
        let (h, c) = (
            m.compute_ms(&[piece(&hot, 128, hot.rows)]).unwrap(),
            m.compute_ms(&[piece(&cold, 128, cold.rows)]).unwrap(),
        );
        assert!(h > 0.0 && h < 0.5 * c, "hot {h} ms, cold {c} ms");
    }
}
