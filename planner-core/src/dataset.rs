//! Cost datasets: the JSON Lines records the collector writes and the trainer reads (SPEC section 4).
//!
//! One line = one self-contained [`CostRecord`]: schema version, the hardware that measured it, the
//! backend, batch size, dtype, the full feature record of every table (not pool indices), every timed
//! repetition and their median. The collector appends one line per sample and flushes it, so a
//! killed run leaves at most one truncated last line: [`complete_prefix_len`] finds where the intact
//! part ends so the writer can cut the rest before resuming.
//!
//! Readers go through [`parse_dataset`], which refuses records of another schema version and, unless
//! asked to mix, records measured on different hardware than the first one: a cost model trained on
//! two machines at once predicts neither. A dataset of several files goes through [`DatasetReader`]
//! (`shardplan-collect check` and the trainer alike), which also refuses a sample measured twice.

use serde::{Deserialize, Serialize};

use crate::cost::PieceRef;
use crate::cost::neural::piece_raw;
use crate::error::{Error, Result};
use crate::features::FeatureSchema;
use crate::plan::RowRange;
use crate::table::{ElementType, TableInput, TableSpec};

/// Schema tag of every dataset record.
pub const DATASET_SCHEMA: &str = "shardplan.costs/v1";

/// The most samples one collection run may ask for: ten million, weeks of timing on any backend.
/// A run lists the indices it still owes before its first sample, so a larger count would be an
/// allocation the size of the count (`--samples 1e12`: 8 TB) rather than a run.
pub const MAX_RUN_SAMPLES: u64 = 10_000_000;

/// Which backend measured a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// CPU threads (a CPU profile: useful to exercise the pipeline, not a GPU stand-in).
    Cpu,
    /// NVIDIA GPUs through CUDA and NCCL.
    Cuda,
}

impl BackendKind {
    /// Lower-case name, as on the command line.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Cuda => "cuda",
        }
    }
}

/// The hardware a record was measured on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hardware {
    /// Backend used.
    pub backend: BackendKind,
    /// Stable identity: records with different fingerprints come from different hardware or software
    /// stacks and are not mixed unless the reader asks to.
    pub fingerprint: String,
    /// Device names (one per device used; the CPU model for the CPU backend).
    pub devices: Vec<String>,
    /// Driver / runtime versions or the thread count, free text for humans.
    pub software: String,
}

/// How a sample was timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Protocol {
    /// Untimed runs before the timed ones.
    pub warmup: u32,
    /// Timed runs per round (each kept in the record).
    pub reps: u32,
    /// Whether the cache was flushed before every timed run (device L2 on CUDA, last-level cache on CPU).
    pub cache_flush: bool,
    /// Rounds the sample was timed in, at different moments (`shardplan-collect --rounds`): its timings
    /// hold `reps` runs of every round, in round order, and their median is over all of them. Absent in
    /// records of one round.
    #[serde(default = "one_round", skip_serializing_if = "is_one_round")]
    pub rounds: u32,
}

/// The rounds of a record that does not say (every record before `--rounds` existed).
fn one_round() -> u32 {
    1
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
fn is_one_round(rounds: &u32) -> bool {
    *rounds == 1
}

impl Protocol {
    /// Timed runs a record of this protocol holds per quantity: `reps × rounds` (saturating; validation
    /// refuses a count that does not match its timings).
    #[must_use]
    pub fn timed_runs(&self) -> usize {
        (self.reps as usize).saturating_mul(self.rounds as usize)
    }
}

/// Every timed repetition of one quantity and their median.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timings {
    /// Each repetition, in run order, in milliseconds.
    pub reps_ms: Vec<f64>,
    /// Median of `reps_ms` (mean of the two middle values for an even count).
    pub median_ms: f64,
}

impl Timings {
    /// Timings from repetitions; the median is computed here so it always matches them.
    #[must_use]
    pub fn from_reps(reps_ms: Vec<f64>) -> Self {
        let median_ms = median(&reps_ms);
        Self { reps_ms, median_ms }
    }
}

/// Median of `values` (NaN for an empty slice; mean of the two middle values for an even count).
#[must_use]
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { f64::midpoint(v[n / 2 - 1], v[n / 2]) }
}

/// One piece of a compute sample: its table's full record, the rows it holds, and its raw feature
/// vector. A column piece is recorded as its table at the piece's dim; a row-wise piece as the whole
/// table (all its rows, its pooling factor) plus `rows`, the contiguous range it holds. Its lookups are
/// the table's lookups that fall in that range, so hot rows stay where they are.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableRecord {
    /// The table as a validated-on-read record (rows, dim = the piece's columns, pooling factor, bins, dtype).
    pub table: TableInput,
    /// The rows of a row-wise piece; absent for a piece holding every row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<RowRange>,
    /// Raw (unnormalised) features in the order of [`CostRecord::feature_schema`], as a cost model
    /// computes them for this piece ([`piece_raw`]).
    pub features: Vec<f64>,
    /// Lookups the piece actually served in the measured batch, when recorded (row-wise pieces).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lookups: Option<u64>,
}

impl TableRecord {
    /// The record of `table` (its whole dim, every row).
    #[must_use]
    pub fn new(table: &TableSpec) -> Self {
        Self::piece(table, None, None)
    }

    /// The record of a piece of `table` at `table.dim` columns holding `rows` (all rows when `None`),
    /// which served `lookups` lookups when known.
    #[must_use]
    pub fn piece(table: &TableSpec, rows: Option<RowRange>, lookups: Option<u64>) -> Self {
        let rows = rows.filter(|r| r.count < table.rows);
        let count = rows.map_or(table.rows, |r| r.count);
        let features = piece_raw(&PieceRef { table, dim: table.dim, rows: count }).to_vec();
        Self { table: TableInput::from(table), rows, features, lookups }
    }

    /// The validated table and the number of rows of the piece (`index` names it in errors).
    pub fn validated(&self, index: usize) -> Result<(TableSpec, u64)> {
        let table = self.table.clone().validate(index)?;
        let count = match self.rows {
            None => table.rows,
            Some(r) => {
                let end = r.offset.checked_add(r.count);
                if r.count == 0 || end.is_none_or(|e| e > table.rows) {
                    return Err(Error::field(
                        format!("table {index} (`{}`)", table.name),
                        "rows",
                        format!("{}..+{}", r.offset, r.count),
                        format!("a non-empty range inside the table's {} rows", table.rows),
                    ));
                }
                r.count
            }
        };
        Ok((table, count))
    }
}

/// What a record measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Measurement {
    /// One fused forward + backward (with SGD update) over a set of tables on one device.
    Compute {
        /// The tables of the set.
        tables: Vec<TableRecord>,
        /// Forward (lookup + sum pooling).
        fwd: Timings,
        /// Backward (gradient + fused SGD update).
        bwd: Timings,
        /// Forward + backward of the same repetition.
        total: Timings,
    },
    /// Forward and backward all-to-all of pooled outputs across devices.
    Comm {
        /// Dims of the tables on each device.
        device_dims: Vec<Vec<u32>>,
        /// Sum of each device's dims.
        dim_sums: Vec<u64>,
        /// Start delay of each device for the forward exchange, ms (min 0).
        delays_ms: Vec<f64>,
        /// Forward all-to-all time of each device (elapsed minus its delay).
        fw: Vec<Timings>,
        /// Backward all-to-all time of each device (no delays).
        bw: Vec<Timings>,
    },
}

/// Which collection run a record belongs to (checked on resume, kept for provenance).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunInfo {
    /// Base seed; sample `i` uses `task_seed(seed, i)`.
    pub seed: u64,
    /// Where the tables came from: `dlrm_t856` or `file:<name>#<fnv64 of its bytes>`.
    pub pool: String,
    /// This shard's index.
    pub shard_index: u32,
    /// Number of shards; the shard owns global indices `i` with `i % shard_count == shard_index`.
    pub shard_count: u32,
    /// How sets were drawn (`spec`: SPEC section 4's 1..=15 tables; `mixed`: also plan-like sets with
    /// column and row pieces, single large tables and sets near the cap; `requests:<file>#<hash>`:
    /// the sets a file asked for). Absent in records written before samplers were named (= `spec`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampler: Option<String>,
}

/// One self-contained line of a cost dataset.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostRecord {
    /// Always [`DATASET_SCHEMA`].
    pub schema: String,
    /// Global sample index within the run (unique across shards).
    pub sample_index: u64,
    /// The run.
    pub run: RunInfo,
    /// The hardware.
    pub hardware: Hardware,
    /// Bags per table (samples in the batch).
    pub batch_size: u32,
    /// Weight element type.
    pub dtype: ElementType,
    /// Feature schema of `tables[].features`.
    pub feature_schema: FeatureSchema,
    /// Timing protocol.
    pub protocol: Protocol,
    /// What was measured.
    pub measurement: Measurement,
    /// The machine's state while the sample was timed, when the collector watched it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Conditions>,
}

/// How quiet the machine was while a sample was timed (the collector's contention guard).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conditions {
    /// Share of the machine's CPU time spent by other processes, percent.
    pub other_busy_pct: f64,
    /// Share of the machine's CPU time stolen by the hypervisor, percent.
    pub steal_pct: f64,
    /// Median time of the reference kernel right after the sample over its baseline, taken when the run
    /// started (1 = undisturbed).
    pub reference_ratio: f64,
    /// That reading itself, ms (absent where no reference kernel ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_ms: Option<f64>,
    /// Measurements of this sample thrown away as disturbed before this one was kept.
    pub retries: u32,
}

/// Schema tag of a set-request line.
pub const SET_REQUEST_SCHEMA: &str = "shardplan.set-request/v1";

/// One set of pieces a caller asks the collector to measure on one device (`shardplan-collect sets`):
/// a JSON line `{"schema", "key", "pieces"}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetRequest {
    /// Always [`SET_REQUEST_SCHEMA`].
    pub schema: String,
    /// The caller's name for the set (kept for provenance; need not be unique).
    pub key: String,
    /// The pieces fused on the device.
    pub pieces: Vec<PieceRequest>,
}

/// One piece of a [`SetRequest`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PieceRequest {
    /// The table at the piece's dim (all its rows, its pooling factor and bins).
    pub table: TableInput,
    /// The rows of a row-wise piece; absent for every row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<RowRange>,
    /// Seed of the table's lookups: pieces of one table share it, so they see the same lookups.
    pub lookup_seed: u64,
}

impl SetRequest {
    /// Validates a request (schema tag, at least one piece, every table and row range), returning the
    /// pieces as (table, rows, lookup seed).
    pub fn validate(&self, context: &str) -> Result<Vec<(TableSpec, Option<RowRange>, u64)>> {
        if self.schema != SET_REQUEST_SCHEMA {
            return Err(Error::field(
                context,
                "schema",
                format!("{:?}", self.schema),
                format!("{SET_REQUEST_SCHEMA:?}"),
            ));
        }
        if self.pieces.is_empty() {
            return Err(Error::field(context, "pieces", 0, "at least one piece"));
        }
        self.pieces
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let record = TableRecord { table: p.table.clone(), rows: p.rows, features: Vec::new(), lookups: None };
                let (table, _) = record
                    .validated(i)
                    .map_err(|e| Error::Parse { context: format!("{context}: pieces[{i}]"), message: e.to_string() })?;
                Ok((table, record.rows.filter(|r| r.count < record.table.rows), p.lookup_seed))
            })
            .collect()
    }
}

impl CostRecord {
    /// `"compute"` or `"comm"`.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self.measurement {
            Measurement::Compute { .. } => "compute",
            Measurement::Comm { .. } => "comm",
        }
    }

    /// Validates one parsed record: schema tag, table records, repetition counts and medians.
    pub fn validate(&self, context: &str) -> Result<()> {
        if self.schema != DATASET_SCHEMA {
            return Err(Error::field(
                context,
                "schema",
                format!("{:?}", self.schema),
                format!("{DATASET_SCHEMA:?} (this reader does not convert other dataset versions)"),
            ));
        }
        if self.batch_size == 0 {
            return Err(Error::field(context, "batch_size", 0, "a positive integer"));
        }
        if self.protocol.rounds == 0 {
            return Err(Error::field(context, "protocol.rounds", 0, "a positive integer"));
        }
        if self.protocol.reps == 0 {
            return Err(Error::field(context, "protocol.reps", 0, "a positive integer"));
        }
        let check_timings = |field: &str, t: &Timings| -> Result<()> {
            if t.reps_ms.len() != self.protocol.timed_runs() || t.reps_ms.iter().any(|x| !x.is_finite() || *x < 0.0) {
                return Err(Error::field(
                    context,
                    field,
                    format!("{} repetitions", t.reps_ms.len()),
                    format!(
                        "{} finite non-negative repetitions (protocol.reps × protocol.rounds)",
                        self.protocol.timed_runs()
                    ),
                ));
            }
            if (median(&t.reps_ms) - t.median_ms).abs() > 1e-9 * t.median_ms.abs().max(1.0) {
                return Err(Error::field(context, format!("{field}.median_ms"), t.median_ms, "the median of reps_ms"));
            }
            Ok(())
        };
        match &self.measurement {
            Measurement::Compute { tables, fwd, bwd, total } => {
                if tables.is_empty() {
                    return Err(Error::field(context, "tables", 0, "at least one table"));
                }
                for (i, t) in tables.iter().enumerate() {
                    t.validated(i).map_err(|e| Error::Parse {
                        context: format!("{context}: tables[{i}]"),
                        message: e.to_string(),
                    })?;
                    if t.features.len() != self.feature_schema.len() {
                        return Err(Error::field(
                            context,
                            format!("tables[{i}].features"),
                            format!("{} values", t.features.len()),
                            format!("{} values ({:?})", self.feature_schema.len(), self.feature_schema),
                        ));
                    }
                }
                check_timings("fwd", fwd)?;
                check_timings("bwd", bwd)?;
                check_timings("total", total)?;
            }
            Measurement::Comm { device_dims, dim_sums, delays_ms, fw, bw } => {
                let d = device_dims.len();
                if d == 0 || dim_sums.len() != d || delays_ms.len() != d || fw.len() != d || bw.len() != d {
                    return Err(Error::field(
                        context,
                        "device_dims/dim_sums/delays_ms/fw/bw",
                        format!("lengths {d}/{}/{}/{}/{}", dim_sums.len(), delays_ms.len(), fw.len(), bw.len()),
                        "one entry per device, at least one device",
                    ));
                }
                for (r, dims) in device_dims.iter().enumerate() {
                    let sum: u64 = dims.iter().map(|&x| u64::from(x)).sum();
                    if sum != dim_sums[r] {
                        return Err(Error::field(
                            context,
                            format!("dim_sums[{r}]"),
                            dim_sums[r],
                            format!("{sum}, the sum of device_dims[{r}]"),
                        ));
                    }
                }
                for (r, t) in fw.iter().enumerate() {
                    check_timings(&format!("fw[{r}]"), t)?;
                }
                for (r, t) in bw.iter().enumerate() {
                    check_timings(&format!("bw[{r}]"), t)?;
                }
            }
        }
        Ok(())
    }
}

/// Length in bytes of the intact part of a dataset text: every line that ends with `\n`. A last line
/// without its newline was cut by a kill (the writer emits line and newline in one write and flushes),
/// so it is not part of the intact prefix even if it happens to parse.
#[must_use]
pub fn complete_prefix_len(text: &str) -> usize {
    text.rfind('\n').map_or(0, |i| i + 1)
}

/// How [`parse_dataset`] treats records from different hardware.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HardwarePolicy {
    /// Every record must have the hardware fingerprint of the first one.
    #[default]
    Single,
    /// Accept records from any hardware (the caller groups them itself).
    Mix,
}

/// Parses and validates a dataset (JSON Lines). `source` names it in errors; blank lines are skipped.
/// A truncated last line is refused with a hint to resume (which repairs it) or cut it.
pub fn parse_dataset(source: &str, text: &str, policy: HardwarePolicy) -> Result<Vec<CostRecord>> {
    Ok(parse_lines(source, text, policy)?.into_iter().map(|(_, r)| r).collect())
}

/// [`parse_dataset`] with every record's 1-based line number.
fn parse_lines(source: &str, text: &str, policy: HardwarePolicy) -> Result<Vec<(usize, CostRecord)>> {
    let intact = complete_prefix_len(text);
    if !text[intact..].trim().is_empty() {
        let line = text[..intact].lines().count() + 1;
        return Err(Error::Parse {
            context: format!("{source} line {line}"),
            message: "the last line is truncated (the run was killed mid-write); resume the run with --resume, \
                      which repairs it, or delete that line"
                .into(),
        });
    }
    let mut records: Vec<(usize, CostRecord)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let context = format!("{source} line {}", i + 1);
        let schema = serde_json::from_str::<serde_json::Value>(line)
            .map_err(|e| Error::Parse { context: context.clone(), message: e.to_string() })?
            .get("schema")
            .and_then(|s| s.as_str().map(str::to_owned));
        if schema.as_deref() != Some(DATASET_SCHEMA) {
            return Err(Error::field(
                &context,
                "schema",
                format!("{schema:?}"),
                format!("{DATASET_SCHEMA:?} (this reader does not convert other dataset versions)"),
            ));
        }
        let record: CostRecord = serde_json::from_str(line)
            .map_err(|e| Error::Parse { context: context.clone(), message: e.to_string() })?;
        record.validate(&context)?;
        if policy == HardwarePolicy::Single
            && let Some((_, first)) = records.first()
        {
            same_hardware(&context, first, &record)?;
        }
        records.push((i + 1, record));
    }
    Ok(records)
}

/// Refuses `record` (at `context`) unless it was measured on the hardware of `first`: records from
/// different hardware are mixed only under [`HardwarePolicy::Mix`].
fn same_hardware(context: &str, first: &CostRecord, record: &CostRecord) -> Result<()> {
    if first.hardware.fingerprint == record.hardware.fingerprint {
        return Ok(());
    }
    Err(Error::field(
        context,
        "hardware.fingerprint",
        format!("{:?}", record.hardware.fingerprint),
        format!(
            "{:?} like the first record: records from different hardware are not mixed unless asked to",
            first.hardware.fingerprint
        ),
    ))
}

/// The identity of a measured sample: two records with one key measured the same sample (a file given
/// twice, or two runs appending to one output). A record without a sampler name was drawn by `spec`.
#[must_use]
pub fn sample_key(r: &CostRecord) -> String {
    format!(
        "{} sample {} (seed {}, pool {:?}, sampler {:?}, hardware {:?})",
        r.kind(),
        r.sample_index,
        r.run.seed,
        r.run.pool,
        r.run.sampler.as_deref().unwrap_or("spec"),
        r.hardware.fingerprint
    )
}

/// Reads the files of one dataset through one set of checks: each file as [`parse_dataset`] does, the
/// hardware policy across files too, and every sample ([`sample_key`]) at most once; a repeated one is
/// refused naming its file and line, its key and where it was first seen.
#[derive(Debug, Clone)]
pub struct DatasetReader {
    policy: HardwarePolicy,
    records: Vec<CostRecord>,
    /// Every key seen, with the file and line of its record.
    seen: std::collections::BTreeMap<String, String>,
}

impl DatasetReader {
    /// An empty dataset read under `policy`.
    #[must_use]
    pub fn new(policy: HardwarePolicy) -> Self {
        Self { policy, records: Vec::new(), seen: std::collections::BTreeMap::new() }
    }

    /// Adds the records of one file's `text`; `source` names the file in errors.
    pub fn add(&mut self, source: &str, text: &str) -> Result<()> {
        for (line, record) in parse_lines(source, text, self.policy)? {
            let context = format!("{source} line {line}");
            if self.policy == HardwarePolicy::Single
                && let Some(first) = self.records.first()
            {
                same_hardware(&context, first, &record)?;
            }
            let key = sample_key(&record);
            if let Some(first) = self.seen.get(&key) {
                return Err(Error::Parse {
                    context,
                    message: format!(
                        "duplicate record: {key} was already read at {first}; a dataset holds every sample once \
                         (was a file given twice, or written by two runs at once?)"
                    ),
                });
            }
            self.seen.insert(key, context);
            self.records.push(record);
        }
        Ok(())
    }

    /// The records read so far, in file and line order.
    #[must_use]
    pub fn records(&self) -> &[CostRecord] {
        &self.records
    }

    /// The records read, in file and line order.
    #[must_use]
    pub fn into_records(self) -> Vec<CostRecord> {
        self.records
    }
}

/// FNV-1a 64-bit hash: a stable fingerprint of bytes (table files, kernel sources), the same on every
/// platform and Rust version, unlike `std`'s hasher.
#[must_use]
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::dlrm_pool;

    fn record(index: u64, fingerprint: &str) -> CostRecord {
        let t = dlrm_pool().unwrap()[3].at_dim("t3".into(), 16, ElementType::Fp32).unwrap();
        CostRecord {
            schema: DATASET_SCHEMA.into(),
            sample_index: index,
            run: RunInfo { seed: 1, pool: "dlrm_t856".into(), shard_index: 0, shard_count: 1, sampler: None },
            hardware: Hardware {
                backend: BackendKind::Cpu,
                fingerprint: fingerprint.into(),
                devices: vec!["cpu".into()],
                software: String::new(),
            },
            batch_size: 16,
            dtype: ElementType::Fp32,
            feature_schema: FeatureSchema::NeuroShard20,
            protocol: Protocol { warmup: 1, reps: 3, cache_flush: false, rounds: 1 },
            measurement: Measurement::Compute {
                tables: vec![TableRecord::new(&t)],
                fwd: Timings::from_reps(vec![1.0, 3.0, 2.0]),
                bwd: Timings::from_reps(vec![1.0, 1.0, 1.0]),
                total: Timings::from_reps(vec![2.0, 4.0, 3.0]),
            },
            conditions: None,
        }
    }

    fn lines(records: &[CostRecord]) -> String {
        records.iter().map(|r| serde_json::to_string(r).unwrap() + "\n").collect()
    }

    #[test]
    fn the_reader_refuses_a_sample_read_twice_naming_file_line_and_key() {
        let mut reader = DatasetReader::new(HardwarePolicy::Single);
        reader.add("a.jsonl", &lines(&[record(0, "x"), record(1, "x")])).unwrap();
        // Another sampler draws other sets: the same index is another sample.
        let mut mixed = record(1, "x");
        mixed.run.sampler = Some("mixed".into());
        reader.add("b.jsonl", &lines(&[mixed])).unwrap();
        assert_eq!(reader.records().len(), 3);
        // The same file given twice repeats sample 0 on its first line.
        let e = reader.clone().add("a-again.jsonl", &lines(&[record(0, "x")])).unwrap_err().to_string();
        assert!(e.starts_with("a-again.jsonl line 1: duplicate record: compute sample 0 (seed 1"), "{e}");
        assert!(e.contains("already read at a.jsonl line 1"), "{e}");
        // A repeat within one file (two runs appending to one output) names its own line.
        let e = DatasetReader::new(HardwarePolicy::Single)
            .add("c.jsonl", &lines(&[record(0, "x"), record(1, "x"), record(0, "x")]))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("c.jsonl line 3: duplicate record: compute sample 0") && e.contains("c.jsonl line 1"),
            "{e}"
        );
        // Hardware is checked across files unless mixing is asked for.
        let e = reader.clone().add("d.jsonl", &lines(&[record(7, "y")])).unwrap_err().to_string();
        assert!(e.contains("d.jsonl line 1") && e.contains("hardware.fingerprint"), "{e}");
        // And within one file, naming the line that differs.
        let e = DatasetReader::new(HardwarePolicy::Single)
            .add("e.jsonl", &lines(&[record(0, "x"), record(1, "y")]))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("e.jsonl line 2") && e.contains("hardware.fingerprint"), "{e}");
        let mut mix = DatasetReader::new(HardwarePolicy::Mix);
        mix.add("a", &lines(&[record(0, "x")])).unwrap();
        mix.add("d", &lines(&[record(0, "y")])).unwrap();
        assert_eq!(mix.into_records().len(), 2);
    }

    #[test]
    fn round_trips_and_validates() {
        let text = lines(&[record(0, "a"), record(1, "a")]);
        let back = parse_dataset("d", &text, HardwarePolicy::Single).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[1].sample_index, 1);
        assert_eq!(back[0].kind(), "compute");
        let Measurement::Compute { fwd, .. } = &back[0].measurement else { panic!("compute") };
        assert_eq!(fwd.median_ms, 2.0);
    }

    #[test]
    fn rounds_multiply_the_runs_a_record_holds() {
        // One round is written as before rounds existed, and a record without the field reads as one round.
        let text = lines(&[record(0, "a")]);
        assert!(!text.contains("rounds"));
        assert_eq!(parse_dataset("d", &text, HardwarePolicy::Single).unwrap()[0].protocol.rounds, 1);
        // Two rounds of three runs: six runs per quantity, their median the sample.
        let mut r = record(0, "a");
        r.protocol.rounds = 2;
        let e = parse_dataset("d", &lines(&[r.clone()]), HardwarePolicy::Single).unwrap_err().to_string();
        assert!(e.contains("3 repetitions") && e.contains("6 finite") && e.contains("protocol.rounds"), "{e}");
        r.measurement = Measurement::Compute {
            tables: match &r.measurement {
                Measurement::Compute { tables, .. } => tables.clone(),
                Measurement::Comm { .. } => unreachable!(),
            },
            fwd: Timings::from_reps(vec![1.0, 3.0, 2.0, 5.0, 4.0, 6.0]),
            bwd: Timings::from_reps(vec![1.0; 6]),
            total: Timings::from_reps(vec![2.0, 4.0, 3.0, 6.0, 5.0, 7.0]),
        };
        let text = lines(&[r.clone()]);
        assert!(text.contains("\"rounds\":2"));
        let back = parse_dataset("d", &text, HardwarePolicy::Single).unwrap();
        let Measurement::Compute { total, .. } = &back[0].measurement else { panic!("compute") };
        assert_eq!(total.median_ms, 4.5);
        r.protocol.rounds = 0;
        let e = parse_dataset("d", &lines(&[r]), HardwarePolicy::Single).unwrap_err().to_string();
        assert!(e.contains("protocol.rounds") && e.contains("line 1"), "{e}");
    }

    #[test]
    fn refuses_other_schema_and_mixed_hardware_unless_asked() {
        let mut old = record(0, "a");
        old.schema = "shardplan.costs/v0".into();
        let e = parse_dataset("d", &lines(&[old]), HardwarePolicy::Single).unwrap_err().to_string();
        assert!(e.contains("`schema`") && e.contains("v0") && e.contains("line 1"), "{e}");

        let text = lines(&[record(0, "gpu-a"), record(1, "gpu-b")]);
        let e = parse_dataset("d", &text, HardwarePolicy::Single).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("gpu-b") && e.contains("gpu-a"), "{e}");
        assert_eq!(parse_dataset("d", &text, HardwarePolicy::Mix).unwrap().len(), 2);
    }

    #[test]
    fn detects_a_truncated_last_line() {
        let full = lines(&[record(0, "a"), record(1, "a")]);
        let cut = &full[..full.len() - 10];
        let e = parse_dataset("d", cut, HardwarePolicy::Single).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("truncated"), "{e}");
        let keep = complete_prefix_len(cut);
        assert_eq!(parse_dataset("d", &cut[..keep], HardwarePolicy::Single).unwrap().len(), 1);
        // A whole record without its newline is still a cut line: the writer always ends lines.
        assert_eq!(complete_prefix_len(&full[..full.len() - 1]), keep);
    }

    #[test]
    fn refuses_a_median_that_does_not_match_its_reps() {
        let mut r = record(0, "a");
        if let Measurement::Compute { fwd, .. } = &mut r.measurement {
            fwd.median_ms = 9.0;
        }
        let e = parse_dataset("d", &lines(&[r]), HardwarePolicy::Single).unwrap_err().to_string();
        assert!(e.contains("fwd.median_ms"), "{e}");
    }

    #[test]
    fn refuses_a_record_of_no_timed_runs() {
        // `reps` 0 (of any rounds) asks for no runs: the median of none is NaN, so the median check
        // cannot refuse whatever `median_ms` the record claims. It is refused by name instead.
        let mut r = record(0, "a");
        r.protocol.reps = 0;
        r.protocol.rounds = 3;
        if let Measurement::Compute { fwd, bwd, total, .. } = &mut r.measurement {
            for t in [fwd, bwd, total] {
                *t = Timings { reps_ms: Vec::new(), median_ms: 5.0 };
            }
        }
        let e = parse_dataset("d", &lines(&[r]), HardwarePolicy::Single).unwrap_err().to_string();
        assert!(e.contains("protocol.reps") && e.contains("line 1"), "{e}");
    }

    #[test]
    fn median_and_hash_are_stable() {
        assert_eq!(median(&[3.0, 1.0, 2.0, 10.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
