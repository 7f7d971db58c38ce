//! Reading collector datasets (`.jsonl` or `.jsonl.gz`) into training samples, through
//! planner-core's record types and feature schema (the trainer cannot drift from the planner).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use planner_core::TableSpec;
use planner_core::cost::PieceRef;
use planner_core::cost::neural::piece_raw;
use planner_core::dataset::{DatasetReader, HardwarePolicy, Measurement};
use planner_core::features::{Normalisation, neuroshard_pool_normalisation, neuroshard_pool_normalisation_logged};

/// The compute features' normalisation: the pool's statistics, with pooling factor and rows logged
/// when `logged` (the default for new profiles), or NeuroShard's plain z-score.
pub fn normalisation(logged: bool) -> Result<&'static Normalisation> {
    Ok(if logged { neuroshard_pool_normalisation_logged()? } else { neuroshard_pool_normalisation()? })
}
use sha2::{Digest, Sha256};

/// One compute measurement: a set of pieces and its fused forward + backward time.
pub struct ComputeSample {
    /// The pieces (validated): each one's table at the piece's dim, and the rows it holds (the table's
    /// row count for a piece holding every row).
    pub pieces: Vec<(TableSpec, u64)>,
    /// Normalised NeuroShard features, one row per table.
    pub features: Vec<Vec<f32>>,
    /// Median forward + backward time, ms (at the reference speed once [`Loaded::normalise_speed`] ran).
    pub target_ms: f64,
    /// The collector's reference-kernel reading right after the sample, ms, when recorded.
    pub reference_ms: Option<f64>,
}

impl ComputeSample {
    /// The pieces as a cost model sees them.
    #[must_use]
    pub fn piece_refs(&self) -> Vec<PieceRef<'_>> {
        self.pieces.iter().map(|(t, rows)| PieceRef { table: t, dim: t.dim, rows: *rows }).collect()
    }
}

impl Loaded {
    /// The reference speed of the compute samples: the median of their reference readings, when every
    /// sample has one.
    #[must_use]
    pub fn reference_ms(&self) -> Option<f64> {
        let refs: Option<Vec<f64>> = self.compute.iter().map(|s| s.reference_ms).collect();
        refs.filter(|r| !r.is_empty()).map(|r| planner_core::dataset::median(&r))
    }

    /// Expresses every compute sample's time at the reference speed `reference_ms`: `time × reference /
    /// the reading taken after it`. Refuses data with a sample that has no reading.
    pub fn normalise_speed(&mut self, reference_ms: f64) -> Result<()> {
        for (i, s) in self.compute.iter_mut().enumerate() {
            let Some(r) = s.reference_ms else {
                bail!(
                    "compute sample {i} has no reference-kernel reading: measure it again or train without speed normalisation"
                );
            };
            s.target_ms *= reference_ms / r;
        }
        Ok(())
    }
}

/// One comm measurement on D devices.
pub struct CommSample {
    /// Per-device dim sums.
    pub dims: Vec<f64>,
    /// Per-device forward start delays, ms.
    pub delays_ms: Vec<f64>,
    /// Median forward all-to-all per device, ms.
    pub fw_ms: Vec<f64>,
    /// Median backward all-to-all per device, ms.
    pub bw_ms: Vec<f64>,
}

/// Everything read from a set of dataset files.
pub struct Loaded {
    /// Compute samples in file order.
    pub compute: Vec<ComputeSample>,
    /// Comm samples per device count.
    pub comm: BTreeMap<usize, Vec<CommSample>>,
    /// The hardware record of the first sample (all share its fingerprint).
    pub hardware: serde_json::Value,
    /// Batch size of the compute samples.
    pub batch_size: u32,
    /// File names.
    pub files: Vec<String>,
    /// SHA-256 over the files' (uncompressed) bytes, in order.
    pub sha256: String,
}

/// Reads a dataset file, decompressing `.gz`.
pub fn read_text(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("reading dataset {}", path.display()))?;
    if path.extension().is_some_and(|e| e == "gz") {
        let mut s = String::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_string(&mut s)
            .with_context(|| format!("decompressing {}", path.display()))?;
        Ok(s)
    } else {
        String::from_utf8(bytes).with_context(|| format!("dataset {} is not UTF-8", path.display()))
    }
}

/// Loads and validates datasets; all records must come from one hardware fingerprint. Features are
/// normalised with `norm` (see [`normalisation`]).
pub fn load(paths: &[PathBuf], norm: &Normalisation) -> Result<Loaded> {
    if paths.is_empty() {
        bail!("no dataset given");
    }
    let mut hasher = Sha256::new();
    // The checks `shardplan-collect check` makes: one hardware, every sample once.
    let mut reader = DatasetReader::new(HardwarePolicy::Single);
    for p in paths {
        let text = read_text(p)?;
        hasher.update(text.as_bytes());
        reader.add(&p.display().to_string(), &text)?;
    }
    let records = reader.into_records();
    let Some(first) = records.first() else { bail!("datasets {paths:?} hold no records") };
    let hardware = first.hardware.clone();
    let mut batch_size = None;
    let mut compute = Vec::new();
    let mut comm: BTreeMap<usize, Vec<CommSample>> = BTreeMap::new();
    for (i, r) in records.iter().enumerate() {
        if r.hardware.fingerprint != hardware.fingerprint {
            bail!(
                "record {i} was measured on {:?} but the first on {:?}: train one profile per hardware",
                r.hardware.fingerprint,
                hardware.fingerprint
            );
        }
        match &r.measurement {
            Measurement::Compute { tables, total, .. } => {
                if *batch_size.get_or_insert(r.batch_size) != r.batch_size {
                    bail!("record {i} has batch size {} but earlier compute records {batch_size:?}", r.batch_size);
                }
                let pieces: Vec<(TableSpec, u64)> = tables
                    .iter()
                    .enumerate()
                    .map(|(k, t)| t.validated(k))
                    .collect::<planner_core::Result<_>>()
                    .with_context(|| format!("compute record {i}"))?;
                let features = pieces
                    .iter()
                    .map(|(t, rows)| norm.apply(&piece_raw(&PieceRef { table: t, dim: t.dim, rows: *rows })))
                    .collect();
                let reference_ms = r.conditions.and_then(|c| c.reference_ms).filter(|x| x.is_finite() && *x > 0.0);
                compute.push(ComputeSample { pieces, features, target_ms: total.median_ms, reference_ms });
            }
            Measurement::Comm { dim_sums, delays_ms, fw, bw, .. } => {
                comm.entry(dim_sums.len()).or_default().push(CommSample {
                    dims: dim_sums.iter().map(|d| *d as f64).collect(),
                    delays_ms: delays_ms.clone(),
                    fw_ms: fw.iter().map(|t| t.median_ms).collect(),
                    bw_ms: bw.iter().map(|t| t.median_ms).collect(),
                });
            }
        }
    }
    Ok(Loaded {
        compute,
        comm,
        hardware: serde_json::to_value(&hardware)?,
        batch_size: batch_size.unwrap_or(0),
        files: paths
            .iter()
            .map(|p| p.file_name().map_or_else(String::new, |f| f.to_string_lossy().into_owned()))
            .collect(),
        sha256: hasher.finalize().iter().fold(String::new(), |mut s, b| {
            use std::fmt::Write as _;
            let _ = write!(s, "{b:02x}");
            s
        }),
    })
}

/// A table's identity independent of its dim (rows, pooling factor, bins), for unseen-table checks.
#[must_use]
pub fn table_identity(t: &TableSpec) -> Vec<u64> {
    let mut v = vec![t.rows, t.pooling_factor.to_bits()];
    v.extend(t.bins.iter().map(|b| b.to_bits()));
    v
}
