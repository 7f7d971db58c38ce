//! Device memory: how many bytes a piece of a table takes on a device, and how many bytes of a device
//! pieces may take — the one place where memory is computed, under a named [`MemoryRule`].
//!
//! Every fit decision (planners, refinement, bounds, what-if, [`crate::evaluate`]'s report) goes
//! through [`Task::block_memory`](crate::Task::block_memory), [`Task::usable_bytes`](crate::Task::usable_bytes)
//! and [`plan_usage`], which read the task's rule; sizes used as features or sort keys stay the tables'
//! own byte counts ([`TableSpec::size_bytes`]).
//!
//! Two rules:
//! * [`MemoryRule::Weights`] — the seed papers' rule: a piece costs its weights plus shardplan's optimizer
//!   state ([`TableSpec::block_bytes`]), and the whole cap is usable.
//! * [`MemoryRule::TorchRec`] — TorchRec 1.9.2's `HeuristicalStorageReservation` and
//!   `EmbeddingStorageEstimator` for training with fused HBM kernels ([`TorchRecMemory`]). Per device,
//!   `usable = int((1 − reserved_fraction) · cap) − dense_bytes − kjt` with
//!   `kjt = ceil(Σ_t pf_t · B · 8) · kjt_copies` (the int64 input indices of a per-rank batch `B`, kept in
//!   `kjt_copies` copies: 2 pipelined batches × 10 internal copies). Per piece of `rows × cols` in a world
//!   of `W` devices, with `bi = pf · B` and `bo = min(1, pf) · B`:
//!   `tensor = rows · cols · elem`, optimizer = `ceil(tensor · m)` (TorchRec's multiplier `m`: SGD 0,
//!   Adam 2, row-wise Adagrad 1/dim), input = `ceil(bi · W · 8)` and output = `ceil(bo · W · cols · elem)`
//!   for a piece of whole rows (table-wise and column-wise shards); a row-range piece (row-wise shard)
//!   reads `ceil(bi / W · W · 8)` input bytes. Floating-point operations follow TorchRec's order, so the
//!   numbers equal TorchRec's to the byte (`tests/fixtures/torchrec/`).
//!
//! A piece's layout comes from the plan: a piece holding fewer rows than its table is a row-wise shard,
//! any other piece (a whole table or a column block) a table- or column-wise shard. (TorchRec can
//! place a row-wise table whose only non-empty shard holds every row — a one-row table; shardplan's plan
//! calls that piece unsplit and counts it as table-wise.)
//!
//! Arithmetic never wraps: sums are taken in `u128` or checked, and a count past `u64` is
//! [`Error::ByteOverflow`] naming the value.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::plan::Plan;
use crate::table::{OptimizerState, TableSpec, Tier};
use crate::task::{Devices, Task};
use crate::units::{format_bytes, format_bytes_exact};

/// TorchRec's `heuristical_storage_reservation_percentage` default.
pub const DEFAULT_RESERVED_FRACTION: f64 = 0.15;
/// TorchRec's `BATCH_SIZE`: the default per-rank batch.
pub const DEFAULT_BATCH_PER_RANK: u64 = 512;
/// `HeuristicalStorageReservation`'s input-index multiplier: 2 pipelined batches × 10 internal copies.
pub const DEFAULT_KJT_COPIES: u64 = 20;
/// TorchRec's `BIGINT_DTYPE`: bytes per input index (int64).
pub const INDEX_BYTES: u64 = 8;

/// The parameters of TorchRec's memory accounting ([`MemoryRule::TorchRec`]); defaults are TorchRec's.
/// Build it with [`TorchRecMemory::new`]: every instance is valid.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TorchRecMemory {
    reserved_fraction: f64,
    dense_bytes: u64,
    batch_per_rank: u64,
    kjt_copies: u64,
}

impl Default for TorchRecMemory {
    fn default() -> Self {
        Self {
            reserved_fraction: DEFAULT_RESERVED_FRACTION,
            dense_bytes: 0,
            batch_per_rank: DEFAULT_BATCH_PER_RANK,
            kjt_copies: DEFAULT_KJT_COPIES,
        }
    }
}

impl TorchRecMemory {
    /// Validates the parameters: `reserved_fraction` in `[0, 1)` (share of every cap kept back),
    /// `dense_bytes` reserved per device for dense parameters (TorchRec: 6 × the non-embedding parameter
    /// bytes; 0 for a bare `EmbeddingBagCollection`), `batch_per_rank` ≥ 1 (samples per device and step),
    /// `kjt_copies` copies of a batch's input indices kept per device.
    pub fn new(reserved_fraction: f64, dense_bytes: u64, batch_per_rank: u64, kjt_copies: u64) -> Result<Self> {
        let ctx = "torchrec memory rule";
        if !reserved_fraction.is_finite() || !(0.0..1.0).contains(&reserved_fraction) {
            return Err(Error::field(ctx, "reserved_fraction", reserved_fraction, "a fraction in [0, 1)"));
        }
        if batch_per_rank == 0 {
            return Err(Error::field(ctx, "batch_per_rank", 0, "at least 1 sample"));
        }
        Ok(Self { reserved_fraction, dense_bytes, batch_per_rank, kjt_copies })
    }

    /// Share of every cap kept back (TorchRec: 0.15).
    #[must_use]
    pub fn reserved_fraction(&self) -> f64 {
        self.reserved_fraction
    }

    /// Bytes reserved per device for dense parameters.
    #[must_use]
    pub fn dense_bytes(&self) -> u64 {
        self.dense_bytes
    }

    /// Samples per device and step (TorchRec's `BATCH_SIZE`, 512).
    #[must_use]
    pub fn batch_per_rank(&self) -> u64 {
        self.batch_per_rank
    }

    /// Copies of a batch's input indices reserved per device (20).
    #[must_use]
    pub fn kjt_copies(&self) -> u64 {
        self.kjt_copies
    }

    /// `(bi, bo)`: a table's lookups and pooled outputs per rank and step, as TorchRec computes them
    /// (`input_lengths = [pf]`, `num_poolings = [1.0]`, `batch_sizes = [B]`).
    #[must_use]
    pub fn batch_lookups(&self, table: &TableSpec) -> (f64, f64) {
        let b = self.batch_per_rank as f64;
        (table.pooling_factor * 1.0 * b, table.pooling_factor.min(1.0) * 1.0 * b)
    }

    /// Bytes of the input indices every device keeps for the task's tables: `ceil(Σ pf · B · 8) · kjt_copies`.
    pub fn kjt_bytes(&self, tables: &[TableSpec]) -> Result<u64> {
        let b = self.batch_per_rank as f64;
        let inputs = tables.iter().fold(0.0, |acc, t| acc + t.pooling_factor * b);
        let one = ceil_bytes("the input indices of one batch", inputs * INDEX_BYTES as f64)?;
        one.checked_mul(self.kjt_copies).ok_or_else(|| Error::ByteOverflow {
            context: format!("{} copies of the input indices of one batch", self.kjt_copies),
            value_bytes: (u128::from(one) * u128::from(self.kjt_copies)).to_string(),
        })
    }

    /// A device of `cap_bytes` after the reservation (`HeuristicalStorageReservation.reserve`), given the
    /// task's [`TorchRecMemory::kjt_bytes`].
    pub fn device(&self, cap_bytes: u64, kjt_bytes: u64) -> Result<DeviceMemory> {
        // TorchRec's `int((1 - percentage) * hbm)`; the float may round above a cap near 2^64.
        let kept = (((1.0 - self.reserved_fraction) * cap_bytes as f64) as u64).min(cap_bytes);
        let reserved = u128::from(cap_bytes - kept) + u128::from(self.dense_bytes) + u128::from(kjt_bytes);
        let reserved_bytes = u64::try_from(reserved).map_err(|_| Error::ByteOverflow {
            context: "the torchrec rule's reservation of one device".into(),
            value_bytes: reserved.to_string(),
        })?;
        Ok(DeviceMemory { cap_bytes, reserved_bytes, usable_bytes: cap_bytes.saturating_sub(reserved_bytes) })
    }

    /// What a reservation is made of, for messages.
    fn reservation_parts(&self, kjt_bytes: u64) -> String {
        format!(
            "{}% of the cap, {} of dense parameters, {} of input indices ({} copies of a {}-sample batch)",
            self.reserved_fraction * 100.0,
            format_bytes_exact(self.dense_bytes),
            format_bytes_exact(kjt_bytes),
            self.kjt_copies,
            self.batch_per_rank
        )
    }

    /// The storage of one shard of `rows × cols` of `table` laid out as `layout` in a world of `world`
    /// devices (`calculate_shard_storages` for training, no pipeline), with the compute kernel of the
    /// table's tier: `fused` (HBM), `fused_uvm_caching` or `fused_uvm` (weights in host DRAM).
    pub fn shard(&self, table: &TableSpec, layout: Layout, rows: u64, cols: u64, world: usize) -> Result<PieceMemory> {
        let context = || format!("a {rows} x {cols} shard of table `{}`", table.name);
        let (bi, bo) = self.batch_lookups(table);
        let w = world as f64;
        let elem = table.dtype.bytes();
        let tensor = u128::from(elem) * u128::from(rows) * u128::from(cols);
        let tensor_bytes = u64::try_from(tensor)
            .map_err(|_| Error::ByteOverflow { context: context(), value_bytes: tensor.to_string() })?;
        // `_get_optimizer_multipler` on the unsharded tensor's shape: row-wise Adagrad keeps one
        // element per row in the weights' dtype.
        let multiplier = match table.optimizer {
            OptimizerState::None => 0.0,
            OptimizerState::Adam => 2.0,
            OptimizerState::RowwiseAdagrad => 1.0 / f64::from(table.dim),
        };
        let optimizer_of =
            |t: u64| if multiplier == 0.0 { Ok(0) } else { ceil_bytes(&context(), t as f64 * multiplier) };
        let (input_bytes, output_bytes) = match layout {
            // An empty row-wise shard (more ranks than rows) reads and writes nothing.
            Layout::Rows | Layout::HostRows(_) if rows == 0 || cols == 0 => (0, 0),
            _ => {
                let input = match layout {
                    Layout::Columns => bi * w * INDEX_BYTES as f64,
                    Layout::Rows => bi / w * w * INDEX_BYTES as f64,
                    Layout::HostRows(local) => bi / local as f64 * w * INDEX_BYTES as f64,
                };
                (ceil_bytes(&context(), input)?, ceil_bytes(&context(), bo * w * cols as f64 * elem as f64)?)
            }
        };
        let in_hbm = PieceMemory { input_bytes, output_bytes, ..PieceMemory::default() };
        // `_calculate_tensor_sizes` of a storage the whole table would take, for this shard:
        // `ceil(storage · rows · cols / (table rows · dim))` in Python's arithmetic.
        let shard_of = |storage: u128| {
            python_ceil_div(
                storage * u128::from(rows) * u128::from(cols),
                u128::from(table.rows) * u128::from(table.dim),
            )
            .and_then(|b| u64::try_from(b).ok())
            .ok_or_else(|| Error::ByteOverflow { context: context(), value_bytes: format!("{storage} (whole table)") })
        };
        let whole = u128::from(elem) * u128::from(table.rows) * u128::from(table.dim);
        match table.tier {
            Tier::Hbm => {
                Ok(PieceMemory { weights_bytes: tensor_bytes, optimizer_bytes: optimizer_of(tensor_bytes)?, ..in_hbm })
            }
            // `fused_uvm`: the weights and optimizer state live in host DRAM; HBM holds the buffers only.
            Tier::Host => {
                let host = shard_of(whole)?;
                Ok(PieceMemory { host_bytes: host.saturating_add(optimizer_of(host)?), ..in_hbm })
            }
            // `fused_uvm_caching`: the weights and optimizer state live in host DRAM; HBM holds
            // `round(table bytes · clf)` (Python's round, half to even) shared out by the shard's share
            // of the table, its optimizer state, and the cache's auxiliary state, `rows · (4 + 16 · clf)`.
            Tier::Cached(clf) => {
                let hbm_storage = (whole as f64 * clf).round_ties_even();
                let weights_bytes = shard_of(hbm_storage as u128)?;
                let host = shard_of(whole)?;
                Ok(PieceMemory {
                    weights_bytes,
                    optimizer_bytes: optimizer_of(weights_bytes)?,
                    cache_state_bytes: ceil_bytes(&context(), rows as f64 * (4.0 + clf * 16.0))?,
                    host_bytes: host.saturating_add(optimizer_of(host)?),
                    ..in_hbm
                })
            }
        }
    }
}

/// How TorchRec lays out one table's pieces (a plan's table group, sorted), as its estimators tell
/// shards apart: column pieces or the whole table are [`Layout::Columns`]; row pieces are
/// [`Layout::Rows`] (row-wise) — or [`Layout::HostRows`] (table-row-wise) when the task has several hosts
/// and the pieces lie on one host's ranks in rank order, past host 0 or cut as TorchRec cuts a table over
/// one host. The TorchRec export, TorchRec's pricing of a plan and [`plan_usage`] all read a plan this way.
#[must_use]
pub fn group_layout(task: &Task, group: &[crate::plan::Piece]) -> Layout {
    let Some(first) = group.first().filter(|p| p.rows.is_some()) else { return Layout::Columns };
    let world = task.devices.count();
    let local = task.devices_per_host().max(1);
    let host = first.device / local;
    let on_one_host =
        world > local && group.len() <= local && group.iter().enumerate().all(|(k, p)| p.device == host * local + k);
    if on_one_host {
        let rows = task.tables.get(first.table_id).map_or(0, |t| t.rows);
        let sizes: Vec<u64> = group.iter().map(|p| p.row_count(rows)).collect();
        let mut host_split = row_split(rows, &vec![1; local]);
        host_split.retain(|&r| r > 0);
        if host > 0 || sizes == host_split {
            return Layout::HostRows(local);
        }
    }
    Layout::Rows
}

/// TorchRec's row counts per rank (`_calculate_rw_shard_sizes_and_offsets`: `ceil(rows / n)` each, the
/// remainder on the last non-empty rank), or in proportion to the HBM caps when they differ (the
/// uneven variant TorchRec uses with a custom topology).
#[must_use]
pub fn row_split(rows: u64, caps: &[u64]) -> Vec<u64> {
    let n = caps.len();
    if n == 0 {
        return Vec::new();
    }
    if caps.iter().all(|&c| c == caps[0]) {
        let block = (rows as f64 / n as f64).ceil() as u64;
        if block == 0 {
            return vec![0; n];
        }
        let last_rank = rows / block;
        let last_block = rows - block * last_rank;
        (0..n as u64)
            .map(|r| match r.cmp(&last_rank) {
                std::cmp::Ordering::Less => block,
                std::cmp::Ordering::Equal => last_block,
                std::cmp::Ordering::Greater => 0,
            })
            .collect()
    } else {
        let total: u128 = caps.iter().map(|&c| u128::from(c)).sum();
        let mut done = 0;
        let mut out: Vec<u64> = caps[..n - 1]
            .iter()
            .map(|&c| {
                let r = (rows as f64 * (c as f64 / total as f64)) as u64;
                done += r;
                r
            })
            .collect();
        out.push(rows.saturating_sub(done));
        out
    }
}

/// `math.ceil(num / den)` as Python computes it for integers: the quotient correctly rounded to a
/// double, then its ceiling. It differs from the exact ceiling when the quotient is a hair above an
/// integer, which TorchRec's storage estimate then rounds away. `None` when `den` is 0 or the result
/// passes 2^53 (where no byte count of a real table lies).
#[must_use]
pub fn python_ceil_div(num: u128, den: u128) -> Option<u128> {
    if den == 0 {
        return None;
    }
    let (q, r) = (num / den, num % den);
    if q >= 1 << 53 {
        return None;
    }
    if r == 0 {
        return Some(q);
    }
    if q == 0 {
        return Some(1);
    }
    // q has `b` ≤ 53 bits; doubles next to it are 2^(b−53) apart, so q + r/den rounds to q when r/den
    // is below half that spacing, 2^(b−54) (a tie goes to the even one: q, unless b = 53 and q is odd).
    let b = 128 - q.leading_zeros();
    let scaled = r << (54 - b);
    Some(match scaled.cmp(&den) {
        std::cmp::Ordering::Less => q,
        std::cmp::Ordering::Equal if b < 53 || q % 2 == 0 => q,
        _ => q + 1,
    })
}

impl<'de> Deserialize<'de> for TorchRecMemory {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            #[serde(default)]
            reserved_fraction: Option<f64>,
            #[serde(default)]
            dense_bytes: Option<u64>,
            #[serde(default)]
            batch_per_rank: Option<u64>,
            #[serde(default)]
            kjt_copies: Option<u64>,
        }
        let r = Raw::deserialize(d)?;
        let x = Self::default();
        Self::new(
            r.reserved_fraction.unwrap_or(x.reserved_fraction),
            r.dense_bytes.unwrap_or(x.dense_bytes),
            r.batch_per_rank.unwrap_or(x.batch_per_rank),
            r.kjt_copies.unwrap_or(x.kjt_copies),
        )
        .map_err(serde::de::Error::custom)
    }
}

/// How a piece is cut, as TorchRec's storage estimator tells shards apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// All rows of some columns: a whole table (table-wise shard) or a column block (column-wise shard).
    Columns,
    /// A range of rows of all columns (row-wise shard).
    Rows,
    /// A range of rows of all columns, the table split over the `usize` devices of one host
    /// (TorchRec's table-row-wise shard: each reads the lookups of its host's share of the batch).
    HostRows(usize),
}

/// How device memory is counted: what a piece costs and how much of a cap pieces may use.
///
/// JSON: `{"rule": "weights"}` or `{"rule": "torchrec", "reserved_fraction": 0.15, "dense_bytes": 0,
/// "batch_per_rank": 512, "kjt_copies": 20}` (every torchrec field optional, defaults as shown).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
#[serde(tag = "rule")]
pub enum MemoryRule {
    /// The seed papers' rule: weights plus optimizer state against the whole cap.
    #[default]
    #[serde(rename = "weights")]
    Weights,
    /// TorchRec 1.9.2's reservation and storage estimates (training, fused HBM kernels).
    #[serde(rename = "torchrec")]
    TorchRec(TorchRecMemory),
}

/// Names of the rules, as written in JSON and on command lines.
pub const RULE_NAMES: [&str; 2] = ["weights", "torchrec"];

impl MemoryRule {
    /// TorchRec's rule with TorchRec's defaults.
    #[must_use]
    pub fn torchrec() -> Self {
        Self::TorchRec(TorchRecMemory::default())
    }

    /// A rule from its name (`weights` or `torchrec`) and the torchrec parameters that were given (the
    /// others take TorchRec's defaults); parameters given with the `weights` rule are refused by name.
    pub fn from_parts(
        name: &str,
        reserved_fraction: Option<f64>,
        dense_bytes: Option<u64>,
        batch_per_rank: Option<u64>,
        kjt_copies: Option<u64>,
    ) -> Result<Self> {
        let ctx = "memory rule";
        match name {
            "weights" => {
                let given = [
                    ("reserved_fraction", reserved_fraction.map(|v| v.to_string())),
                    ("dense_bytes", dense_bytes.map(|v| v.to_string())),
                    ("batch_per_rank", batch_per_rank.map(|v| v.to_string())),
                    ("kjt_copies", kjt_copies.map(|v| v.to_string())),
                ];
                match given.into_iter().find_map(|(f, v)| v.map(|v| (f, v))) {
                    Some((field, value)) => Err(Error::field(
                        ctx,
                        field,
                        value,
                        "absent: the weights rule reserves nothing (use the torchrec rule)",
                    )),
                    None => Ok(Self::Weights),
                }
            }
            "torchrec" => {
                let d = TorchRecMemory::default();
                Ok(Self::TorchRec(TorchRecMemory::new(
                    reserved_fraction.unwrap_or(d.reserved_fraction),
                    dense_bytes.unwrap_or(d.dense_bytes),
                    batch_per_rank.unwrap_or(d.batch_per_rank),
                    kjt_copies.unwrap_or(d.kjt_copies),
                )?))
            }
            _ => Err(Error::field(ctx, "rule", format!("{name:?}"), format!("one of {}", RULE_NAMES.join(", ")))),
        }
    }

    /// The rule's name (`weights`, `torchrec`).
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::Weights => "weights",
            Self::TorchRec(_) => "torchrec",
        }
    }

    /// One line naming the rule and its parameters.
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Self::Weights => "weights (weights + optimizer state against the whole cap; the seed papers' rule)".into(),
            Self::TorchRec(m) => format!(
                "torchrec ({}% of every cap reserved, {} of dense parameters, input indices of a {}-sample batch x {}, input/output buffers per piece; TorchRec 1.9.2)",
                m.reserved_fraction * 100.0,
                format_bytes(m.dense_bytes),
                m.batch_per_rank,
                m.kjt_copies
            ),
        }
    }

    /// The memory of a piece of `rows` rows and `dim` columns of `table` in a world of `world` devices
    /// (a piece with fewer rows than its table is a row-range piece).
    pub fn piece(&self, table: &TableSpec, rows: u64, dim: u32, world: usize) -> Result<PieceMemory> {
        let layout = if rows < table.rows { Layout::Rows } else { Layout::Columns };
        self.piece_in(table, layout, rows, dim, world)
    }

    /// [`MemoryRule::piece`] for a piece laid out as `layout` (what [`group_layout`] says of its table's
    /// pieces; the weights rule counts every layout alike).
    pub fn piece_in(
        &self,
        table: &TableSpec,
        layout: Layout,
        rows: u64,
        dim: u32,
        world: usize,
    ) -> Result<PieceMemory> {
        if rows > table.rows {
            return Err(Error::field(
                format!("a piece of table `{}`", table.name),
                "rows",
                rows,
                format!("at most the table's {}", table.rows),
            ));
        }
        if dim > table.dim {
            return Err(Error::field(
                format!("a piece of table `{}`", table.name),
                "dim",
                dim,
                format!("at most the table's {}", table.dim),
            ));
        }
        match self {
            // Within the table's bounds (rows ≤ 2^40, dim ≤ 2^16) neither term can overflow.
            Self::Weights => {
                let weights = rows * u64::from(dim) * table.dtype.bytes();
                let optimizer = table.optimizer.state_bytes(rows, dim);
                Ok(match table.tier.hbm_row_share() {
                    None => {
                        PieceMemory { weights_bytes: weights, optimizer_bytes: optimizer, ..PieceMemory::default() }
                    }
                    // In host DRAM; the HBM cache (if any) holds `clf` of the weights and their optimizer
                    // state.
                    Some(clf) => PieceMemory {
                        weights_bytes: (weights as f64 * clf).ceil() as u64,
                        optimizer_bytes: (optimizer as f64 * clf).ceil() as u64,
                        host_bytes: weights + optimizer,
                        ..PieceMemory::default()
                    },
                })
            }
            Self::TorchRec(m) => m.shard(table, layout, rows, u64::from(dim), world),
        }
    }

    /// Every device after the rule's reservation. A reservation larger than a cap is reported (see
    /// [`DeviceMemory::reservation_fits`]), not refused: [`MemoryRule::usable_bytes`] refuses it.
    pub fn devices(&self, tables: &[TableSpec], devices: &Devices) -> Result<Vec<DeviceMemory>> {
        let caps = devices.mem_cap_bytes();
        match self {
            Self::Weights => {
                Ok(caps.iter().map(|&c| DeviceMemory { cap_bytes: c, reserved_bytes: 0, usable_bytes: c }).collect())
            }
            Self::TorchRec(m) => {
                let kjt = m.kjt_bytes(tables)?;
                caps.iter().map(|&c| m.device(c, kjt)).collect()
            }
        }
    }

    /// Bytes pieces may use on every device; [`Error::ReservationExceedsCap`] when the reservation alone
    /// exceeds a device's cap.
    pub fn usable_bytes(&self, tables: &[TableSpec], devices: &Devices) -> Result<Vec<u64>> {
        let memory = self.devices(tables, devices)?;
        if let Some((device, d)) = memory.iter().enumerate().find(|(_, d)| !d.reservation_fits()) {
            let why = match self {
                Self::Weights => String::new(),
                Self::TorchRec(m) => m.reservation_parts(m.kjt_bytes(tables)?),
            };
            return Err(Error::ReservationExceedsCap {
                device,
                rule: self.name().into(),
                reserved_bytes: d.reserved_bytes,
                cap_bytes: d.cap_bytes,
                why,
            });
        }
        Ok(memory.iter().map(|d| d.usable_bytes).collect())
    }
}

impl<'de> Deserialize<'de> for MemoryRule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            rule: String,
            #[serde(default)]
            reserved_fraction: Option<f64>,
            #[serde(default)]
            dense_bytes: Option<u64>,
            #[serde(default)]
            batch_per_rank: Option<u64>,
            #[serde(default)]
            kjt_copies: Option<u64>,
        }
        let r = Raw::deserialize(d)?;
        Self::from_parts(&r.rule, r.reserved_fraction, r.dense_bytes, r.batch_per_rank, r.kjt_copies)
            .map_err(serde::de::Error::custom)
    }
}

/// The bytes one piece takes, term by term.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PieceMemory {
    /// Its weights.
    pub weights_bytes: u64,
    /// Its optimizer state.
    pub optimizer_bytes: u64,
    /// Input buffers (the indices of its lookups).
    pub input_bytes: u64,
    /// Output buffers (its pooled outputs).
    pub output_bytes: u64,
    /// A cached table's HBM cache state (index map and LRU state; TorchRec's
    /// `_calculate_cache_aux_state_sizes`); 0 in HBM.
    #[serde(default)]
    pub cache_state_bytes: u64,
    /// Host DRAM it takes (a cached table's weights and optimizer state; 0 in HBM). Not part of
    /// [`PieceMemory::total_bytes`], which counts HBM.
    #[serde(default)]
    pub host_bytes: u64,
}

impl PieceMemory {
    /// The sum of the HBM terms; [`Error::ByteOverflow`] past `u64`.
    pub fn total_bytes(&self) -> Result<u64> {
        let sum = u128::from(self.weights_bytes)
            + u128::from(self.optimizer_bytes)
            + u128::from(self.input_bytes)
            + u128::from(self.output_bytes)
            + u128::from(self.cache_state_bytes);
        u64::try_from(sum).map_err(|_| Error::ByteOverflow {
            context: "the memory of one piece".into(),
            value_bytes: sum.to_string(),
        })
    }

    /// Input plus output buffers.
    #[must_use]
    pub fn buffer_bytes(&self) -> u128 {
        u128::from(self.input_bytes) + u128::from(self.output_bytes)
    }
}

/// One device under a rule: its cap, what the rule reserves on it and what is left for pieces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DeviceMemory {
    /// The cap.
    pub cap_bytes: u64,
    /// Bytes the rule keeps back (may exceed the cap: see [`DeviceMemory::reservation_fits`]).
    pub reserved_bytes: u64,
    /// Bytes pieces may use: `cap − reserved`, 0 when the reservation exceeds the cap.
    pub usable_bytes: u64,
}

impl DeviceMemory {
    /// Whether the reservation leaves anything of the cap (it is at most the cap).
    #[must_use]
    pub fn reservation_fits(&self) -> bool {
        self.reserved_bytes <= self.cap_bytes
    }
}

/// A device's memory in a report: the terms of its pieces, the reservation and what is usable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DeviceMemoryReport {
    /// Weights of its pieces.
    pub weights_bytes: u64,
    /// Optimizer state of its pieces.
    pub optimizer_bytes: u64,
    /// Input and output buffers of its pieces.
    pub buffer_bytes: u64,
    /// HBM cache state of its cached pieces (counted with the other terms against its usable bytes).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_state_bytes: u64,
    /// Host DRAM its cached pieces take (weights and optimizer state in host memory; counted against
    /// its host's DRAM, not its HBM).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub host_bytes: u64,
    /// Bytes the rule reserves on it.
    pub reserved_bytes: u64,
    /// Bytes its pieces may use (cap − reserved; 0 when the reservation exceeds the cap).
    pub usable_bytes: u64,
}

impl DeviceMemoryReport {
    /// The weights rule's breakdown of a device of `cap_bytes` holding `tables` whole (each table standing
    /// for one piece), for reports built outside [`crate::evaluate`], such as measurements (sums
    /// saturate at `u64::MAX`).
    #[must_use]
    pub fn weights_rule(tables: &[TableSpec], cap_bytes: u64) -> Self {
        let mut out = Self { usable_bytes: cap_bytes, ..Self::default() };
        for t in tables {
            out.weights_bytes = out.weights_bytes.saturating_add(t.rows * u64::from(t.dim) * t.dtype.bytes());
            out.optimizer_bytes = out.optimizer_bytes.saturating_add(t.optimizer.state_bytes(t.rows, t.dim));
        }
        out
    }

    /// Weights + optimizer state + buffers + cache state: the HBM bytes counted against
    /// [`DeviceMemoryReport::usable_bytes`].
    pub fn placed_bytes(&self) -> Result<u64> {
        let sum = u128::from(self.weights_bytes)
            + u128::from(self.optimizer_bytes)
            + u128::from(self.buffer_bytes)
            + u128::from(self.cache_state_bytes);
        u64::try_from(sum).map_err(|_| Error::ByteOverflow {
            context: "the pieces of one device".into(),
            value_bytes: sum.to_string(),
        })
    }
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(x: &u64) -> bool {
    *x == 0
}

/// TorchRec's `DDR_CAP`: host memory per device when the task's topology does not say (128 GiB).
pub const DEFAULT_HOST_DRAM_PER_DEVICE: u64 = 128 * crate::units::GIB;

/// Host DRAM of every host of `task` (its topology's `host_dram_bytes`, else
/// [`DEFAULT_HOST_DRAM_PER_DEVICE`] per device), and its devices per host.
#[must_use]
pub fn host_dram(task: &Task) -> (Vec<u64>, usize) {
    let t = task.topology_or_single();
    let per_host = t.host_dram_bytes.unwrap_or_else(|| {
        DEFAULT_HOST_DRAM_PER_DEVICE.saturating_mul(u64::try_from(t.devices_per_host).unwrap_or(u64::MAX))
    });
    (vec![per_host; t.hosts], t.devices_per_host)
}

/// One line per host whose devices' cached pieces take more host DRAM than it has; empty when they
/// fit (always, without cached tables). `host_bytes` is per device, in device order.
#[must_use]
pub fn host_violations(task: &Task, host_bytes: &[u64]) -> Vec<String> {
    let (dram, per_host) = host_dram(task);
    host_bytes
        .chunks(per_host.max(1))
        .zip(&dram)
        .enumerate()
        .filter_map(|(h, (devices, &cap))| {
            let used = devices.iter().fold(0u64, |a, &b| a.saturating_add(b));
            (used > cap).then(|| {
                format!(
                    "host {h}: {} of cached tables in host memory, {} over its {} of DRAM",
                    format_bytes_exact(used),
                    format_bytes(used - cap),
                    format_bytes(cap)
                )
            })
        })
        .collect()
}

/// Every device's memory under `task`'s rule with `plan`'s pieces on it. Refuses nothing but byte
/// counts past `u64` ([`Error::ByteOverflow`] naming the device); whether the plan fits is for the
/// caller to compare (`placed_bytes` against `usable_bytes`, and the reservation against the cap).
pub fn plan_usage(task: &Task, plan: &Plan) -> Result<Vec<(DeviceMemory, DeviceMemoryReport)>> {
    let devices = task.device_memory()?;
    let mut sums = vec![[0u128; 5]; devices.len()];
    for group in plan.table_groups() {
        // Row pieces count as TorchRec lays them out (row-wise, or table-row-wise on one host), even a
        // single range holding every row (TorchRec's row split of a table with fewer rows than ranks).
        let layout = group_layout(task, group);
        for p in group {
            let table = task.tables.get(p.table_id).ok_or_else(|| {
                Error::InvalidPlan(format!(
                    "piece names table_id {} but the task has {} tables",
                    p.table_id,
                    task.tables.len()
                ))
            })?;
            let rows = p.row_count(table.rows);
            let m = match layout {
                Layout::Columns => task.block_memory(table, rows, p.dim)?,
                _ => task.memory.piece_in(table, layout, rows, p.dim, task.devices.count())?,
            };
            let Some(s) = sums.get_mut(p.device) else {
                return Err(Error::InvalidPlan(format!(
                    "a piece of table `{}` is on device {} but the task has {} devices",
                    table.name,
                    p.device,
                    devices.len()
                )));
            };
            s[0] += u128::from(m.weights_bytes);
            s[1] += u128::from(m.optimizer_bytes);
            s[2] += m.buffer_bytes();
            s[3] += u128::from(m.cache_state_bytes);
            s[4] += u128::from(m.host_bytes);
        }
    }
    devices
        .into_iter()
        .zip(sums)
        .enumerate()
        .map(|(d, (dm, [w, o, b, c, h]))| {
            let narrow = |what: &str, v: u128| {
                u64::try_from(v).map_err(|_| Error::ByteOverflow {
                    context: format!("the {what} of the pieces on device {d}"),
                    value_bytes: v.to_string(),
                })
            };
            let report = DeviceMemoryReport {
                weights_bytes: narrow("weights", w)?,
                optimizer_bytes: narrow("optimizer state", o)?,
                buffer_bytes: narrow("buffers", b)?,
                cache_state_bytes: narrow("cache state", c)?,
                host_bytes: narrow("host memory", h)?,
                reserved_bytes: dm.reserved_bytes,
                usable_bytes: dm.usable_bytes,
            };
            narrow("weights, optimizer state, buffers and cache state", w + o + b + c)?;
            Ok((dm, report))
        })
        .collect()
}

/// Why `device` does not fit under the memory rule named `rule`: its reservation exceeds its cap, or the
/// bytes placed on it exceed its usable bytes. `None` when it fits. The one wording of "does not fit",
/// for reports, planners and the export alike.
#[must_use]
pub fn violation(device: usize, dm: &DeviceMemory, placed_bytes: u64, rule: &str) -> Option<String> {
    let cap = format_bytes(dm.cap_bytes);
    if !dm.reservation_fits() {
        Some(format!(
            "device {device}: the {rule} memory rule reserves {}, more than its cap of {cap}",
            format_bytes_exact(dm.reserved_bytes)
        ))
    } else if placed_bytes > dm.usable_bytes && dm.reserved_bytes == 0 {
        Some(format!(
            "device {device}: {} placed, {} over its cap of {cap}",
            format_bytes_exact(placed_bytes),
            format_bytes(placed_bytes - dm.usable_bytes)
        ))
    } else if placed_bytes > dm.usable_bytes {
        Some(format!(
            "device {device}: {} placed, {} over its {} usable ({cap} cap less {} reserved by the {rule} memory rule)",
            format_bytes_exact(placed_bytes),
            format_bytes(placed_bytes - dm.usable_bytes),
            format_bytes(dm.usable_bytes),
            format_bytes(dm.reserved_bytes)
        ))
    } else {
        None
    }
}

/// Whether the task could fit at all: [`Error::TaskTooLarge`] when its tables' weights and optimizer
/// state alone exceed the usable memory of all its devices together. Those two terms never shrink when a
/// table is split (each piece keeps its share of the weights and its own optimizer state), so no plan
/// of any planner fits such a task; a command says this before naming any one table.
pub fn check_capacity(task: &Task) -> Result<()> {
    let mut need: u128 = 0;
    let mut host_need: u128 = 0;
    for t in &task.tables {
        let p = MemoryRule::Weights.piece(t, t.rows, t.dim, task.devices.count())?;
        need += u128::from(p.weights_bytes) + u128::from(p.optimizer_bytes);
        host_need += u128::from(p.host_bytes);
    }
    let (dram, _) = host_dram(task);
    let have: u128 = dram.iter().map(|&b| u128::from(b)).sum();
    if host_need > have {
        let narrow = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
        return Err(Error::HostMemoryTooSmall {
            need: format_bytes_exact(narrow(host_need)),
            hosts: dram.len(),
            have: format_bytes(narrow(have)),
        });
    }
    let memory = task.memory.devices(&task.tables, &task.devices)?;
    let usable: u128 = memory.iter().map(|d| u128::from(d.usable_bytes)).sum();
    if need <= usable {
        return Ok(());
    }
    let narrow = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
    let reserved: u128 = memory.iter().map(|d| u128::from(d.reserved_bytes)).sum();
    Err(Error::TaskTooLarge {
        tables: task.tables.len(),
        need: format_bytes_exact(narrow(need)),
        devices: memory.len(),
        usable: if reserved == 0 {
            format_bytes(narrow(usable))
        } else {
            format!(
                "{} ({} of caps less {} reserved by the {} memory rule)",
                format_bytes(narrow(usable)),
                format_bytes(narrow(usable + reserved)),
                format_bytes(narrow(reserved)),
                task.memory.name()
            )
        },
        hint: suggest_devices(narrow(need), &memory),
    })
}

/// [`check_capacity`] of `tiered`, the task `original` after tables moved to host memory: when the
/// moved tables overflow the hosts' DRAM and the original task overflows HBM, the refusal is the HBM one
/// (what the task needs and what would hold it) with the host DRAM it would take in host memory.
pub fn check_tiered_capacity(original: &Task, tiered: &Task) -> Result<()> {
    match check_capacity(tiered) {
        Err(Error::HostMemoryTooSmall { need: host_need, hosts, have }) => match check_capacity(original) {
            Err(Error::TaskTooLarge { tables, need, devices, usable, hint }) => Err(Error::TaskTooLarge {
                tables,
                need,
                devices,
                usable,
                hint: format!(
                    "{hint}; kept in host memory, they would need {host_need} of host DRAM, more than the {have} of {} (--host-dram)",
                    if hosts == 1 { "the 1 host".to_string() } else { format!("the {hosts} hosts") }
                ),
            }),
            _ => Err(Error::HostMemoryTooSmall { need: host_need, hosts, have }),
        },
        other => other,
    }
}

/// "at least N devices of this size" for a task that needs `need` bytes, or nothing when devices of this
/// size cannot hold it at any count we plan for.
fn suggest_devices(need: u64, memory: &[DeviceMemory]) -> String {
    let Some(largest) = memory.iter().map(|d| d.usable_bytes).max().filter(|&b| b > 0) else {
        return String::new();
    };
    let devices = need.div_ceil(largest);
    if usize::try_from(devices).is_ok_and(|d| d <= crate::task::MAX_DEVICES) {
        format!("; at least {devices} devices of {} usable, or more memory per device", format_bytes(largest))
    } else {
        format!("; give each device more memory than {}", format_bytes(largest))
    }
}

/// Every device of `plan` that does not fit under `task`'s rule, one line each ([`violation`]); empty
/// when the plan fits. Byte counts past `u64` are errors ([`plan_usage`]).
pub fn plan_violations(task: &Task, plan: &Plan) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let usage = plan_usage(task, plan)?;
    for (d, (dm, m)) in usage.iter().enumerate() {
        out.extend(violation(d, dm, m.placed_bytes()?, task.memory.name()));
    }
    out.extend(host_violations(task, &usage.iter().map(|(_, m)| m.host_bytes).collect::<Vec<_>>()));
    Ok(out)
}

/// Whether `need_bytes` more fit on a device holding `used_bytes` of `usable_bytes` (no overflow).
#[must_use]
pub fn fits(used_bytes: u64, need_bytes: u64, usable_bytes: u64) -> bool {
    used_bytes.checked_add(need_bytes).is_some_and(|b| b <= usable_bytes)
}

/// `ceil` of a non-negative byte count computed in floating point (TorchRec's `math.ceil`), refusing
/// what `u64` cannot hold.
fn ceil_bytes(context: &str, x: f64) -> Result<u64> {
    // 2^64 as a float: every finite value below it converts exactly after `ceil`.
    const LIMIT: f64 = 18_446_744_073_709_551_616.0;
    let c = x.ceil();
    if !c.is_finite() || c >= LIMIT {
        return Err(Error::ByteOverflow { context: context.into(), value_bytes: format!("{c:e}") });
    }
    Ok(c.max(0.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{ElementType, NUM_BINS};

    fn table(rows: u64, dim: u32, pf: f64, dtype: ElementType, optimizer: OptimizerState) -> TableSpec {
        let mut bins = [0.0; NUM_BINS];
        bins[0] = 1.0;
        TableSpec::new("test", "t".into(), rows, dim, pf, bins, dtype, optimizer).unwrap()
    }

    /// Checks that `result` is refused with a message naming every one of `needles`.
    fn check_refused<T: std::fmt::Debug>(result: Result<T>, needles: &[&str]) {
        let e = result.unwrap_err().to_string();
        for n in needles {
            assert!(e.contains(n), "`{e}` lacks `{n}`");
        }
    }

    #[test]
    fn python_division_rounds_the_quotient_before_its_ceiling() {
        // Exact quotients, and ceilings of ordinary ones.
        assert_eq!(python_ceil_div(12, 4), Some(3));
        assert_eq!(python_ceil_div(13, 4), Some(4));
        assert_eq!(python_ceil_div(1, 3), Some(1));
        assert_eq!(python_ceil_div(5, 0), None);
        // 2^40 + 1/2^20: within half a double's spacing (2^-13) of 2^40, so Python's `ceil(num / den)`
        // is 2^40, where the exact ceiling is 2^40 + 1.
        let den: u128 = 1 << 20;
        let num = (1u128 << 60) + 1;
        assert_eq!(python_ceil_div(num, den), Some(1 << 40));
        assert_eq!(((num as f64) / (den as f64)).ceil(), (1u64 << 40) as f64);
        // Just over half the spacing: rounded up.
        let num = (1u128 << 60) + (1 << 8);
        assert_eq!(python_ceil_div(num, den), Some((1 << 40) + 1));
    }

    #[test]
    fn validation_names_the_field_and_value() {
        // Why each case exists: every refusal of the torchrec parameters, and of the rule's JSON.
        check_refused(TorchRecMemory::new(1.0, 0, 512, 20), &["`reserved_fraction` = 1", "[0, 1)"]);
        check_refused(TorchRecMemory::new(-0.1, 0, 512, 20), &["`reserved_fraction` = -0.1"]);
        check_refused(TorchRecMemory::new(f64::NAN, 0, 512, 20), &["`reserved_fraction` = NaN"]);
        check_refused(TorchRecMemory::new(0.15, 0, 0, 20), &["`batch_per_rank` = 0", "at least 1"]);
        check_refused(
            MemoryRule::from_parts("hbm", None, None, None, None),
            &["`rule` = \"hbm\"", "weights, torchrec"],
        );
        check_refused(MemoryRule::from_parts("weights", Some(0.2), None, None, None), &["`reserved_fraction` = 0.2"]);
        check_refused(MemoryRule::from_parts("weights", None, None, Some(64), None), &["`batch_per_rank` = 64"]);
        let json = |s: &str| {
            serde_json::from_str::<MemoryRule>(s)
                .map_err(|e| Error::Parse { context: "rule".into(), message: e.to_string() })
        };
        check_refused(json(r#"{"rule": "torchrec", "reserved_fraction": 1.5}"#), &["`reserved_fraction` = 1.5"]);
        check_refused(json(r#"{"rule": "torchrec", "batch": 8}"#), &["batch"]);
        check_refused(json(r#"{"rule": "weights", "kjt_copies": 2}"#), &["`kjt_copies` = 2"]);
        check_refused(json(r#"{"reserved_fraction": 0.1}"#), &["rule"]);
        // Accepted: defaults fill what is absent, and a rule reads back as written.
        let r = json(r#"{"rule": "torchrec", "batch_per_rank": 1024}"#).unwrap();
        assert_eq!(r, MemoryRule::TorchRec(TorchRecMemory::new(0.15, 0, 1024, 20).unwrap()));
        assert_eq!(json(&serde_json::to_string(&r).unwrap()).unwrap(), r);
        assert_eq!(json(r#"{"rule": "weights"}"#).unwrap(), MemoryRule::Weights);
        assert_eq!(serde_json::to_string(&MemoryRule::Weights).unwrap(), r#"{"rule":"weights"}"#);
    }

    #[test]
    fn weights_rule_is_the_table_size_and_the_whole_cap() {
        for (dtype, optimizer) in [
            (ElementType::Fp32, OptimizerState::None),
            (ElementType::Fp16, OptimizerState::RowwiseAdagrad),
            (ElementType::Int8, OptimizerState::Adam),
        ] {
            let t = table(1000, 64, 2.0, dtype, optimizer);
            for (rows, dim) in [(1000, 64), (1000, 16), (250, 64)] {
                let m = MemoryRule::Weights.piece(&t, rows, dim, 4).unwrap();
                assert_eq!(m.total_bytes().unwrap(), t.block_bytes(rows, dim), "{dtype:?} {optimizer:?}");
                assert_eq!(m.buffer_bytes(), 0);
            }
        }
        let devices = Devices::new(vec![7, 1 << 40]).unwrap();
        assert_eq!(MemoryRule::Weights.usable_bytes(&[], &devices).unwrap(), vec![7, 1 << 40]);
    }

    #[test]
    fn torchrec_rule_by_hand() {
        // 1000 x 64 fp32, pf 2, Adam, B = 512, W = 4: bi = 1024, bo = 512.
        let t = table(1000, 64, 2.0, ElementType::Fp32, OptimizerState::Adam);
        let rule = MemoryRule::torchrec();
        let whole = rule.piece(&t, 1000, 64, 4).unwrap();
        let tensor = 1000 * 64 * 4;
        let input = 1024 * 4 * 8;
        assert_eq!(
            whole,
            PieceMemory {
                weights_bytes: tensor,
                optimizer_bytes: 2 * tensor,
                input_bytes: input,
                output_bytes: 512 * 4 * 64 * 4,
                ..PieceMemory::default()
            }
        );
        // A column half reads every index and writes half the outputs; a row quarter reads a quarter.
        let half = rule.piece(&t, 1000, 32, 4).unwrap();
        assert_eq!((half.weights_bytes, half.input_bytes, half.output_bytes), (tensor / 2, input, 512 * 4 * 32 * 4));
        let quarter = rule.piece(&t, 250, 64, 4).unwrap();
        assert_eq!((quarter.weights_bytes, quarter.input_bytes), (tensor / 4, 1024 * 8));
        // Row-wise Adagrad: one element per row in the weights' dtype (TorchRec), not an fp32 one.
        let ada = table(1000, 64, 2.0, ElementType::Fp16, OptimizerState::RowwiseAdagrad);
        assert_eq!(rule.piece(&ada, 1000, 64, 4).unwrap().optimizer_bytes, 1000 * 2);
        // Reservation: int(0.85 · 1e6) − ceil(2 · 512 · 8) · 20 − 1000 dense bytes.
        let m = TorchRecMemory::new(0.15, 1000, 512, 20).unwrap();
        let devices = Devices::new(vec![1_000_000, 2_000_000]).unwrap();
        let usable = MemoryRule::TorchRec(m).usable_bytes(std::slice::from_ref(&t), &devices).unwrap();
        assert_eq!(usable, vec![850_000 - 163_840 - 1000, 1_700_000 - 163_840 - 1000]);
        let d = m.device(1_000_000, 163_840).unwrap();
        assert_eq!(d.reserved_bytes + d.usable_bytes, d.cap_bytes);
    }

    #[test]
    fn a_reservation_larger_than_a_cap_is_refused_by_device() {
        let t = table(10, 4, 100.0, ElementType::Fp32, OptimizerState::None);
        // kjt = 100 · 512 · 8 · 20 = 8,192,000 bytes: device 1 (8 MB) cannot hold it, device 0 can.
        let devices = Devices::new(vec![100 << 20, 8_000_000]).unwrap();
        let rule = MemoryRule::torchrec();
        let memory = rule.devices(std::slice::from_ref(&t), &devices).unwrap();
        assert!(memory[0].reservation_fits() && !memory[1].reservation_fits());
        assert_eq!(memory[1].usable_bytes, 0);
        let e = rule.usable_bytes(std::slice::from_ref(&t), &devices).unwrap_err();
        assert!(matches!(e, Error::ReservationExceedsCap { device: 1, cap_bytes: 8_000_000, .. }), "{e}");
        assert!(e.to_string().contains("7.8 MiB (8,192,000 bytes) of input indices"), "{e}");
    }

    #[test]
    fn counts_past_u64_are_errors_naming_the_value() {
        // The largest table: 2^40 rows x 2^16 columns, fp32, Adam: 2^58 + 2^59 bytes, still countable.
        let t = table(1 << 40, 1 << 16, 1.0, ElementType::Fp32, OptimizerState::Adam);
        for rule in [MemoryRule::Weights, MemoryRule::torchrec()] {
            let m = rule.piece(&t, 1 << 40, 1 << 16, 2).unwrap();
            assert_eq!(m.weights_bytes + m.optimizer_bytes, (1 << 58) + (1 << 59));
        }
        // The largest pooling factor with a per-rank batch that makes one batch's input indices uncountable.
        let hot = table(10, 4, crate::table::MAX_POOLING_FACTOR, ElementType::Fp32, OptimizerState::None);
        let huge_batch = MemoryRule::TorchRec(TorchRecMemory::new(0.15, 0, 1 << 60, 20).unwrap());
        let e = huge_batch.piece(&hot, 10, 4, 2).unwrap_err();
        assert!(matches!(e, Error::ByteOverflow { .. }) && e.to_string().contains("shard of table `t`"), "{e}");
        let devices = Devices::uniform(2, u64::MAX).unwrap();
        assert!(matches!(
            huge_batch.usable_bytes(std::slice::from_ref(&hot), &devices),
            Err(Error::ByteOverflow { .. })
        ));
        // Dense bytes that push the reservation past u64 on a huge cap.
        let m = TorchRecMemory::new(0.5, u64::MAX, 512, 20).unwrap();
        assert!(matches!(m.device(u64::MAX, 0), Err(Error::ByteOverflow { .. })));
        // A cap near 2^64 rounds up as a float; with nothing reserved the whole cap stays usable.
        let zero = TorchRecMemory::new(0.0, 0, 512, 0).unwrap();
        assert_eq!(zero.device(u64::MAX - 1, 0).unwrap().usable_bytes, u64::MAX - 1);
    }

    #[test]
    fn piece_bounds_are_checked() {
        let t = table(100, 8, 1.0, ElementType::Fp32, OptimizerState::None);
        check_refused(MemoryRule::Weights.piece(&t, 101, 8, 2), &["`rows` = 101", "100"]);
        check_refused(MemoryRule::torchrec().piece(&t, 100, 16, 2), &["`dim` = 16", "8"]);
    }
}
