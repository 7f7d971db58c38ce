//! Embedding tables: validated specs, element types and optimizer state.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Number of access-distribution bins (SPEC section 2): bin k counts distinct accessed rows whose
/// access count in one batch falls in (2^(k-1), 2^k], bin 0 = (0,1], bin 16 = > 32,768.
pub const NUM_BINS: usize = 17;

/// Element type of a table's weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ElementType {
    /// 4-byte float (the NeuroShard protocol).
    #[default]
    Fp32,
    /// 2-byte float (the DreamShard and AutoShard protocols).
    Fp16,
    /// 1-byte integer (quantised tables).
    Int8,
}

impl ElementType {
    /// Bytes per weight element.
    #[must_use]
    pub fn bytes(self) -> u64 {
        match self {
            Self::Fp32 => 4,
            Self::Fp16 => 2,
            Self::Int8 => 1,
        }
    }

    /// Parses `fp32`, `fp16` or `int8` (case-insensitive); `field` names the input in the error.
    pub fn parse(context: &str, field: &str, text: &str) -> Result<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "fp32" | "float32" | "float" => Ok(Self::Fp32),
            "fp16" | "float16" | "half" => Ok(Self::Fp16),
            "int8" => Ok(Self::Int8),
            _ => Err(Error::field(context, field, format!("{text:?}"), "one of fp32, fp16, int8")),
        }
    }
}

/// Optimizer state kept next to a table's weights (it counts towards device memory).
///
/// State is kept in fp32 whatever the weight type, as FBGEMM's fused optimizers do by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerState {
    /// Plain SGD: no state (the seeds' setting).
    #[default]
    None,
    /// Row-wise Adagrad: one fp32 accumulator per row.
    RowwiseAdagrad,
    /// Adam: two fp32 moments per weight.
    Adam,
}

impl OptimizerState {
    /// State bytes for a piece of `rows` × `dim`.
    #[must_use]
    pub fn state_bytes(self, rows: u64, dim: u32) -> u64 {
        match self {
            Self::None => 0,
            Self::RowwiseAdagrad => rows * 4,
            Self::Adam => 2 * rows * u64::from(dim) * 4,
        }
    }

    /// Parses `none`, `rowwise_adagrad` or `adam`; `field` names the input in the error.
    pub fn parse(context: &str, field: &str, text: &str) -> Result<Self> {
        match text.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "" | "none" | "sgd" => Ok(Self::None),
            "rowwise_adagrad" | "row_wise_adagrad" => Ok(Self::RowwiseAdagrad),
            "adam" => Ok(Self::Adam),
            _ => Err(Error::field(context, field, format!("{text:?}"), "one of none, rowwise_adagrad, adam")),
        }
    }
}

/// Where a table's weights live: TorchRec's compute kernels for an embedding-bag table (`crate::tier`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Tier {
    /// In HBM (TorchRec's `fused` kernel).
    #[default]
    Hbm,
    /// In host DRAM behind an HBM cache holding this share of its rows, in (0, 1] (`fused_uvm_caching`
    /// with its `cache_load_factor`).
    Cached(f64),
    /// In host DRAM with no cache: every lookup crosses the device–host link (`fused_uvm`).
    Host,
}

/// TorchRec's default cache share of a `fused_uvm_caching` table (`UVM_CACHING_RATIO`).
pub const DEFAULT_CACHE_LOAD_FACTOR: f64 = 0.2;

impl Tier {
    /// TorchRec's compute kernel for it (`fused`, `fused_uvm_caching`, `fused_uvm`).
    #[must_use]
    pub fn kernel_name(self) -> &'static str {
        match self {
            Self::Hbm => "fused",
            Self::Cached(_) => "fused_uvm_caching",
            Self::Host => "fused_uvm",
        }
    }

    /// The HBM cache's share of the rows (`None` in HBM and without a cache).
    #[must_use]
    pub fn cache_load_factor(self) -> Option<f64> {
        match self {
            Self::Cached(c) => Some(c),
            Self::Hbm | Self::Host => None,
        }
    }

    /// Share of the rows served from HBM: `None` for a table in HBM, the cache share when cached, 0 in
    /// host memory without a cache.
    #[must_use]
    pub fn hbm_row_share(self) -> Option<f64> {
        match self {
            Self::Hbm => None,
            Self::Cached(c) => Some(c),
            Self::Host => Some(0.0),
        }
    }

    /// Reads a table record's `compute_kernel` and `cache_load_factor` (`context` names the record):
    /// `fused` or nothing is HBM (with no cache share), a cache share alone or `fused_uvm_caching` is
    /// cached (at TorchRec's 0.2 when no share is given), `fused_uvm` takes no share.
    pub fn from_fields(context: &str, kernel: Option<&str>, cache_load_factor: Option<f64>) -> Result<Self> {
        if let Some(c) = cache_load_factor.filter(|c| !(c.is_finite() && *c > 0.0 && *c <= 1.0)) {
            return Err(Error::field(
                context,
                "cache_load_factor",
                c,
                "a fraction in (0, 1] (the share of its rows the HBM cache holds)",
            ));
        }
        match (kernel, cache_load_factor) {
            (None | Some("fused"), None) => Ok(Self::Hbm),
            (None | Some("fused_uvm_caching"), Some(c)) => Ok(Self::Cached(c)),
            (Some("fused_uvm_caching"), None) => Ok(Self::Cached(DEFAULT_CACHE_LOAD_FACTOR)),
            (Some("fused_uvm"), None) => Ok(Self::Host),
            (Some(k @ ("fused" | "fused_uvm")), Some(c)) => Err(Error::field(
                context,
                "cache_load_factor",
                c,
                format!("absent with compute_kernel {k:?} (only fused_uvm_caching has an HBM cache)"),
            )),
            (Some(k), _) => Err(Error::field(
                context,
                "compute_kernel",
                format!("{k:?}"),
                "one of fused (HBM), fused_uvm_caching (host memory behind an HBM cache), fused_uvm (host memory)",
            )),
        }
    }
}

/// A validated embedding table. Construct it with [`TableSpec::new`] (or deserialize a
/// [`TableInput`] and call [`TableInput::validate`]); every instance satisfies the invariants
/// checked there. It serializes as its [`TableInput`].
#[derive(Debug, Clone, PartialEq)]
pub struct TableSpec {
    /// Unique name within a task.
    pub name: String,
    /// Number of rows (hash size).
    pub rows: u64,
    /// Embedding dimension (columns); a positive multiple of 4.
    pub dim: u32,
    /// Mean lookups per sample (bag length).
    pub pooling_factor: f64,
    /// Access-distribution bins (fractions; all zero for a table with no lookups).
    pub bins: [f64; NUM_BINS],
    /// Weight element type.
    pub dtype: ElementType,
    /// Optimizer state stored with the weights.
    pub optimizer: OptimizerState,
    /// Where the table lives (`crate::tier`): set by the user, or by the tier choice when the tables do
    /// not fit in HBM.
    pub tier: Tier,
}

/// Largest accepted dimension: well above any real embedding table, small enough that sizes cannot
/// overflow `u64` together with `MAX_ROWS`.
pub const MAX_DIM: u32 = 1 << 16;
/// Longest accepted table name, in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Largest accepted row count (2^40).
pub const MAX_ROWS: u64 = 1 << 40;
/// Largest accepted pooling factor (mean lookups per sample): far above the pool's (at most about 200)
/// and long sequence features', small enough that every lookup count a cost model derives stays finite
/// and in range.
pub const MAX_POOLING_FACTOR: f64 = 10_000.0;

impl TableSpec {
    /// Validates and builds a table spec. `context` says where the record came from for errors.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        context: &str,
        name: String,
        rows: u64,
        dim: u32,
        pooling_factor: f64,
        bins: [f64; NUM_BINS],
        dtype: ElementType,
        optimizer: OptimizerState,
    ) -> Result<Self> {
        if name.trim().is_empty() {
            return Err(Error::field(context, "name", "\"\"", "a non-empty name"));
        }
        if name.len() > MAX_NAME_BYTES || name.chars().any(char::is_control) {
            // Shown escaped: the name is printed in reports and terminals.
            return Err(Error::field(
                context,
                "name",
                format!("{:?}", name.chars().take(80).collect::<String>()),
                format!("at most {MAX_NAME_BYTES} bytes of text without control characters"),
            ));
        }
        if rows == 0 || rows > MAX_ROWS {
            return Err(Error::field(context, "rows", rows, format!("an integer in 1..={MAX_ROWS}")));
        }
        if dim == 0 || !dim.is_multiple_of(4) || dim > MAX_DIM {
            return Err(Error::field(context, "dim", dim, format!("a positive multiple of 4, at most {MAX_DIM}")));
        }
        if !pooling_factor.is_finite() || !(0.0..=MAX_POOLING_FACTOR).contains(&pooling_factor) {
            return Err(Error::field(
                context,
                "pooling_factor",
                pooling_factor,
                format!("a number in 0..={MAX_POOLING_FACTOR}"),
            ));
        }
        for (k, &b) in bins.iter().enumerate() {
            if !b.is_finite() || !(0.0..=1.0 + 1e-9).contains(&b) {
                return Err(Error::field(context, format!("bin_{k}"), b, "a fraction in [0, 1]"));
            }
        }
        let sum: f64 = bins.iter().sum();
        if sum != 0.0 && (sum - 1.0).abs() > 1e-3 {
            return Err(Error::field(
                context,
                "bins",
                format!("sum {sum:.6}"),
                "fractions summing to 1 (or all 0 for a table with no lookups), within 1e-3",
            ));
        }
        Ok(Self { name, rows, dim, pooling_factor, bins, dtype, optimizer, tier: Tier::Hbm })
    }

    /// The same table in host DRAM with an HBM cache of `cache_load_factor` of its rows (`None`: in HBM);
    /// a fraction outside (0, 1] is refused naming the table.
    pub fn with_cache_load_factor(self, cache_load_factor: Option<f64>) -> Result<Self> {
        let tier = Tier::from_fields(&format!("table `{}`", shown_name(&self.name)), None, cache_load_factor)?;
        Ok(self.with_tier(tier))
    }

    /// The same table in `tier` (a cache share is taken as valid: [`Tier::from_fields`] checks input).
    #[must_use]
    pub fn with_tier(mut self, tier: Tier) -> Self {
        self.tier = tier;
        self
    }

    /// The HBM cache's share of its rows (`None` in HBM, and in host memory without a cache).
    #[must_use]
    pub fn cache_load_factor(&self) -> Option<f64> {
        self.tier.cache_load_factor()
    }

    /// Whether the table lives in host DRAM (behind an HBM cache or not).
    #[must_use]
    pub fn in_host_memory(&self) -> bool {
        self.tier != Tier::Hbm
    }

    /// Bytes of one piece of this table with `dim` columns (all rows): weights plus optimizer state. A
    /// size (features, sort keys, the weights rule); whether a piece fits a device is for
    /// [`crate::memory`] to say, under the task's rule.
    #[must_use]
    pub fn piece_bytes(&self, dim: u32) -> u64 {
        self.block_bytes(self.rows, dim)
    }

    /// Bytes of a block of `rows` rows and `dim` columns of this table (a row-wise piece): weights plus
    /// optimizer state.
    #[must_use]
    pub fn block_bytes(&self, rows: u64, dim: u32) -> u64 {
        rows * u64::from(dim) * self.dtype.bytes() + self.optimizer.state_bytes(rows, dim)
    }

    /// Bytes of the whole table.
    #[must_use]
    pub fn size_bytes(&self) -> u64 {
        self.piece_bytes(self.dim)
    }
}

/// A table as written in a JSON input (the unvalidated first stage of parsing).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableInput {
    /// Unique name; defaults to `t<index>` when absent.
    #[serde(default)]
    pub name: Option<String>,
    /// Number of rows.
    pub rows: u64,
    /// Embedding dimension.
    pub dim: u32,
    /// Mean lookups per sample.
    pub pooling_factor: f64,
    /// 17 access-distribution bins; when absent, every row is taken as accessed once (all mass in bin 0).
    #[serde(default)]
    pub bins: Option<Vec<f64>>,
    /// `fp32` (default), `fp16` or `int8`.
    #[serde(default)]
    pub dtype: ElementType,
    /// `none` (default), `rowwise_adagrad` or `adam`.
    #[serde(default)]
    pub optimizer: OptimizerState,
    /// Host DRAM with an HBM cache of this share of the rows (absent: HBM unless `compute_kernel` says
    /// otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_load_factor: Option<f64>,
    /// TorchRec's compute kernel: `fused` (HBM, the default), `fused_uvm_caching` (host memory behind an
    /// HBM cache of `cache_load_factor`, 0.2 when absent), `fused_uvm` (host memory, no cache).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_kernel: Option<String>,
}

/// A table name as error messages show it: as written, or escaped (`\u{1b}`) when it holds control
/// characters, so a name cannot drive the terminal that prints the refusal.
#[must_use]
pub fn shown_name(name: &str) -> String {
    if name.chars().any(char::is_control) { name.escape_debug().to_string() } else { name.to_string() }
}

impl TableInput {
    /// Validates the record; `index` is its position in the input, used for the default name and errors.
    pub fn validate(self, index: usize) -> Result<TableSpec> {
        let name = self.name.unwrap_or_else(|| format!("t{index}"));
        let context = format!("table {index} (`{}`)", shown_name(&name));
        let bins = bins_from_slice(&context, self.bins.as_deref(), self.pooling_factor)?;
        let tier = Tier::from_fields(&context, self.compute_kernel.as_deref(), self.cache_load_factor)?;
        Ok(TableSpec::new(&context, name, self.rows, self.dim, self.pooling_factor, bins, self.dtype, self.optimizer)?
            .with_tier(tier))
    }
}

impl From<&TableSpec> for TableInput {
    fn from(t: &TableSpec) -> Self {
        Self {
            name: Some(t.name.clone()),
            rows: t.rows,
            dim: t.dim,
            pooling_factor: t.pooling_factor,
            bins: Some(t.bins.to_vec()),
            dtype: t.dtype,
            optimizer: t.optimizer,
            cache_load_factor: t.tier.cache_load_factor(),
            // A cache share says `fused_uvm_caching` by itself; `fused` is the default.
            compute_kernel: (t.tier == Tier::Host).then(|| Tier::Host.kernel_name().to_string()),
        }
    }
}

impl Serialize for TableSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        TableInput::from(self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for TableSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let input = TableInput::deserialize(d)?;
        let name = input.name.clone();
        input.validate(0).map_err(|e| {
            serde::de::Error::custom(match name {
                Some(_) => e.to_string(),
                None => format!("{e} (tables inside a plan must carry their name)"),
            })
        })
    }
}

/// Turns an optional bin list into the fixed array; absent bins mean "each accessed row once".
pub(crate) fn bins_from_slice(context: &str, bins: Option<&[f64]>, pooling_factor: f64) -> Result<[f64; NUM_BINS]> {
    let mut out = [0.0; NUM_BINS];
    match bins {
        Some(b) if b.len() == NUM_BINS => out.copy_from_slice(b),
        Some(b) => {
            return Err(Error::field(
                context,
                "bins",
                format!("{} values", b.len()),
                format!("exactly {NUM_BINS} values"),
            ));
        }
        None if pooling_factor > 0.0 => out[0] = 1.0,
        None => {}
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(rows: u64, dim: u32, pf: f64) -> Result<TableSpec> {
        let mut bins = [0.0; NUM_BINS];
        bins[0] = 1.0;
        TableSpec::new("test", "t".into(), rows, dim, pf, bins, ElementType::Fp32, OptimizerState::None)
    }

    #[test]
    fn rejects_bad_fields_naming_them() {
        for (res, field) in [
            (table(0, 4, 1.0), "rows"),
            (table(10, 6, 1.0), "dim"),
            (table(10, 0, 1.0), "dim"),
            (table(10, 4, -1.0), "pooling_factor"),
            (table(10, 4, f64::NAN), "pooling_factor"),
            (table(10, 4, 1e20), "pooling_factor"),
            (
                TableSpec::new(
                    "t",
                    "a\u{1b}[31mred".into(),
                    10,
                    4,
                    1.0,
                    [0.0; NUM_BINS],
                    ElementType::Fp32,
                    OptimizerState::None,
                ),
                "name",
            ),
            (table(10, 4, 10_000.5), "pooling_factor"),
        ] {
            let msg = res.unwrap_err().to_string();
            assert!(msg.contains(&format!("`{field}`")), "{msg}");
        }
    }

    #[test]
    fn tiers_are_read_from_the_kernel_and_the_cache_share() {
        let read = |json: &str| serde_json::from_str::<TableInput>(json).unwrap().validate(0);
        let base = r#""rows": 10, "dim": 4, "pooling_factor": 1"#;
        assert_eq!(read(&format!("{{{base}}}")).unwrap().tier, Tier::Hbm);
        assert_eq!(read(&format!(r#"{{{base}, "cache_load_factor": 0.3}}"#)).unwrap().tier, Tier::Cached(0.3));
        assert_eq!(
            read(&format!(r#"{{{base}, "compute_kernel": "fused_uvm_caching"}}"#)).unwrap().tier,
            Tier::Cached(DEFAULT_CACHE_LOAD_FACTOR)
        );
        let host = read(&format!(r#"{{{base}, "compute_kernel": "fused_uvm"}}"#)).unwrap();
        assert_eq!((host.tier, host.in_host_memory(), host.cache_load_factor()), (Tier::Host, true, None));
        // It writes back as it was read.
        let again: TableSpec = serde_json::from_str(&serde_json::to_string(&host).unwrap()).unwrap();
        assert_eq!(again, host);
        for (json, field, value) in [
            (r#""cache_load_factor": 0"#, "cache_load_factor", "0"),
            (r#""cache_load_factor": 1.5"#, "cache_load_factor", "1.5"),
            (r#""compute_kernel": "fused_uvm", "cache_load_factor": 0.5"#, "cache_load_factor", "0.5"),
            (r#""compute_kernel": "fused", "cache_load_factor": 0.5"#, "cache_load_factor", "0.5"),
            (r#""compute_kernel": "ssd""#, "compute_kernel", "\"ssd\""),
        ] {
            let e = read(&format!("{{{base}, {json}}}")).unwrap_err().to_string();
            assert!(e.contains(&format!("`{field}` = {value}")) && e.contains("table 0"), "{json}: {e}");
        }
    }

    #[test]
    fn sizes_include_optimizer_state() {
        let mut t = table(1000, 64, 2.0).unwrap();
        assert_eq!(t.size_bytes(), 1000 * 64 * 4);
        t.optimizer = OptimizerState::RowwiseAdagrad;
        assert_eq!(t.size_bytes(), 1000 * 64 * 4 + 1000 * 4);
        t.optimizer = OptimizerState::Adam;
        t.dtype = ElementType::Fp16;
        assert_eq!(t.piece_bytes(32), 1000 * 32 * 2 + 2 * 1000 * 32 * 4);
    }

    #[test]
    fn bins_must_sum_to_one_or_zero() {
        let mut bins = [0.0; NUM_BINS];
        bins[0] = 0.5;
        let e = TableSpec::new("x", "t".into(), 1, 4, 1.0, bins, ElementType::Fp32, OptimizerState::None);
        assert!(e.unwrap_err().to_string().contains("bins"));
        let zero = TableSpec::new("x", "t".into(), 1, 4, 0.0, [0.0; NUM_BINS], ElementType::Fp32, OptimizerState::None);
        assert!(zero.is_ok());
    }

    #[test]
    fn json_input_rejects_unknown_fields() {
        let e = serde_json::from_str::<TableInput>(r#"{"rows": 1, "dim": 4, "pooling_factor": 1, "colour": 3}"#);
        assert!(e.unwrap_err().to_string().contains("colour"));
    }
}
