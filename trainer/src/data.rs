//! Reading collector datasets (`.jsonl` or `.jsonl.gz`) and measured plans (`measure-plan --out`) into
//! training samples, through planner-core's record types and feature schema (the trainer cannot drift
//! from the planner).

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

    /// How many compute samples carry a reference-kernel reading.
    #[must_use]
    pub fn samples_with_reading(&self) -> usize {
        self.compute.iter().filter(|s| s.reference_ms.is_some()).count()
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
    let mut measured = Vec::new();
    for p in paths {
        let text = read_text(p)?;
        hasher.update(text.as_bytes());
        if let Some(m) = measured_plans(p, &text, norm)? {
            measured.push(m);
        } else {
            reader.add(&p.display().to_string(), &text)?;
        }
    }
    let records = reader.into_records();
    let hardware = match (records.first(), measured.first()) {
        (Some(r), _) => r.hardware.clone(),
        (None, Some(m)) => m.hardware.clone(),
        (None, None) => bail!("datasets {paths:?} hold no records"),
    };
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
                let features = features(&pieces, norm);
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
    for m in &measured {
        if m.hardware.fingerprint != hardware.fingerprint {
            bail!(
                "{} was measured on {:?} but the first dataset on {:?}: train one profile per hardware",
                m.path,
                m.hardware.fingerprint,
                hardware.fingerprint
            );
        }
        if *batch_size.get_or_insert(m.batch_size) != m.batch_size {
            bail!("{} has batch size {} but earlier compute samples {batch_size:?}", m.path, m.batch_size);
        }
    }
    for m in measured {
        compute.extend(m.sets);
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

/// The normalised features of a set's pieces (each table at the piece's dim, the rows it holds), one row
/// per piece.
fn features(pieces: &[(TableSpec, u64)], norm: &Normalisation) -> Vec<Vec<f32>> {
    pieces.iter().map(|(t, rows)| norm.apply(&piece_raw(&PieceRef { table: t, dim: t.dim, rows: *rows }))).collect()
}

/// The device sets of one `shardplan.measured-plans/v1` document as compute samples.
struct MeasuredSets {
    path: String,
    hardware: planner_core::dataset::Hardware,
    batch_size: u32,
    /// One sample per distinct set: its pieces, the median over rounds of its forward + backward time,
    /// and the median of the reference-kernel readings taken after it (the document's `reference_ms` when
    /// it recorded none per set).
    sets: Vec<ComputeSample>,
}

/// Reads `text` as a measured-plans document (`shardplan-collect measure-plan --out`), or returns `None`
/// when it is not one (a dataset's JSON lines). Every device set of every measured plan is a compute
/// sample: its pieces from the plan file (found beside the document by name, else where the document
/// recorded it) and its measured compute (the median over the rounds of the set's fused forward +
/// backward). A set that several plans of the document share was timed once and counts once.
fn measured_plans(path: &Path, text: &str, norm: &Normalisation) -> Result<Option<MeasuredSets>> {
    use planner_core::document::{MEASURED_SCHEMA, MeasuredPlans, PlanDocument};
    let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else { return Ok(None) };
    if value.get("schema").and_then(|s| s.as_str()) != Some(MEASURED_SCHEMA) {
        return Ok(None);
    }
    let doc = MeasuredPlans::from_json(text).with_context(|| format!("reading {}", path.display()))?;
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let mut seen = std::collections::BTreeSet::new();
    let mut sets = Vec::new();
    for (i, m) in doc.plans.iter().enumerate() {
        let recorded = Path::new(&m.plan);
        let beside = recorded.file_name().map(|n| dir.join(n));
        let plan_path = match beside.filter(|b| b.is_file()) {
            Some(b) => b,
            None if recorded.is_file() => recorded.to_path_buf(),
            None => bail!(
                "{}: plans[{i}].plan = {:?} is neither beside the document nor at that path",
                path.display(),
                m.plan
            ),
        };
        let plan_text =
            std::fs::read_to_string(&plan_path).with_context(|| format!("reading {}", plan_path.display()))?;
        let (pdoc, plan) =
            PlanDocument::from_json(&plan_text).with_context(|| format!("parsing {}", plan_path.display()))?;
        let n = pdoc.task.devices.count();
        if m.measured.devices.len() != n {
            bail!(
                "{}: plans[{i}] measured {} devices but its plan {} has {n}",
                path.display(),
                m.measured.devices.len(),
                plan_path.display()
            );
        }
        for (d, idx) in plan.pieces_by_device(n).iter().enumerate() {
            if idx.is_empty() {
                continue;
            }
            let pieces: Vec<(TableSpec, u64)> = idx
                .iter()
                .map(|&k| {
                    let piece = &plan.pieces()[k];
                    let mut table = pdoc.task.tables[piece.table_id].clone();
                    let rows = piece.row_count(table.rows);
                    table.dim = piece.dim;
                    (table, rows)
                })
                .collect();
            let target_ms = m.measured.devices[d].compute_ms;
            if !(target_ms.is_finite() && target_ms > 0.0) {
                bail!("{}: plans[{i}] device {d} has compute_ms = {target_ms}: a positive time", path.display());
            }
            // A set is its pieces: table, width and rows (a row piece by its range: two ranges of one
            // size see different lookups).
            let mut key: Vec<String> = idx
                .iter()
                .map(|&k| {
                    let piece = &plan.pieces()[k];
                    let rows = piece.rows.map(|r| (r.offset, r.count));
                    format!("{}:{}:{rows:?}", pdoc.task.tables[piece.table_id].name, piece.dim)
                })
                .collect();
            key.sort();
            if !seen.insert(key) {
                continue;
            }
            let readings: Vec<f64> = m
                .round_device_reference_ms
                .iter()
                .filter_map(|r| r.get(d).copied())
                .filter(|x| x.is_finite() && *x > 0.0)
                .collect();
            // The readings taken after this set, else the run's own median reading (documents measured
            // before per-set readings were recorded): the speed the judge scales the same plans by.
            let reference = if readings.is_empty() {
                doc.reference_ms.filter(|x| x.is_finite() && *x > 0.0)
            } else {
                Some(planner_core::dataset::median(&readings))
            };
            let features = features(&pieces, norm);
            sets.push(ComputeSample { pieces, features, target_ms, reference_ms: reference });
        }
    }
    if sets.is_empty() {
        bail!("{} holds no measured device set", path.display());
    }
    Ok(Some(MeasuredSets {
        path: path.display().to_string(),
        hardware: doc.hardware,
        batch_size: doc.batch_size,
        sets,
    }))
}

/// A table's identity independent of its dim (rows, pooling factor, bins), for unseen-table checks.
#[must_use]
pub fn table_identity(t: &TableSpec) -> Vec<u64> {
    let mut v = vec![t.rows, t.pooling_factor.to_bits()];
    v.extend(t.bins.iter().map(|b| b.to_bits()));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use planner_core::dataset::{BackendKind, Hardware, Protocol};
    use planner_core::document::{MEASURED_SCHEMA, MeasuredPlan, MeasuredPlans, PlanDocument};
    use planner_core::{AnalyticalModel, CostDefinition, Devices, ElementType, OptimizerState, Piece, Plan, Task};

    fn table(name: &str, rows: u64, dim: u32) -> TableSpec {
        TableSpec::new(
            "t",
            name.into(),
            rows,
            dim,
            3.0,
            [0.0; planner_core::table::NUM_BINS],
            ElementType::Fp32,
            OptimizerState::None,
        )
        .unwrap()
    }

    /// Writes two plans of one task and a measured-plans document of them (recorded under another folder,
    /// as a bench run elsewhere records them); device `d` of plan `p` measured `compute[p][d]` ms.
    fn fixture(dir: &Path, fingerprint: &str, compute: [[f64; 3]; 2]) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        let task = Task::new(
            vec![table("a", 1000, 16), table("b", 500, 8), table("c", 200, 8)],
            Devices::uniform(3, 1 << 30).unwrap(),
        )
        .unwrap();
        // Both plans put the first half of `a`'s rows with `b` on device 0: one set, timed once.
        let plans = [
            vec![
                Piece::row_range(0, 16, 0, 0, 500),
                Piece::cols(1, 0, 8, 0),
                Piece::row_range(0, 16, 1, 500, 500),
                Piece::cols(2, 0, 8, 2),
            ],
            vec![
                Piece::row_range(0, 16, 0, 0, 500),
                Piece::cols(1, 0, 8, 0),
                Piece::row_range(0, 16, 1, 500, 500),
                Piece::cols(2, 0, 8, 1),
            ],
        ];
        let model = AnalyticalModel::default();
        let mut measured = Vec::new();
        for (p, pieces) in plans.into_iter().enumerate() {
            let plan = Plan::new(&task, pieces).unwrap();
            let report = planner_core::evaluate(&task, &plan, &model, CostDefinition::NeuroShard).unwrap();
            let mut timed = report.clone();
            for (d, dev) in timed.devices.iter_mut().enumerate() {
                dev.compute_ms = compute[p][d];
            }
            let name = format!("task0_p{p}.plan.json");
            let doc = PlanDocument::new("hand", 0, task.clone(), &plan, report.clone());
            std::fs::write(dir.join(&name), serde_json::to_string(&doc).unwrap()).unwrap();
            measured.push(MeasuredPlan {
                plan: format!("elsewhere/{name}"),
                planner: "hand".into(),
                predicted: report,
                measured: timed,
                round_costs_ms: vec![1.0, 1.0],
                round_devices_ms: Vec::new(),
                round_device_reference_ms: vec![vec![2.0, 2.0, 2.0], vec![4.0, 4.0, 0.0]],
                cost_cv: 0.0,
            });
        }
        let doc = MeasuredPlans {
            schema: MEASURED_SCHEMA.into(),
            hardware: Hardware {
                backend: BackendKind::Cpu,
                fingerprint: fingerprint.into(),
                devices: vec!["cpu".into()],
                software: "test".into(),
            },
            batch_size: 512,
            seed: 1,
            protocol: Protocol { warmup: 1, reps: 3, cache_flush: false, rounds: 1 },
            rounds: 2,
            comm: "measured".into(),
            reference_ms: Some(3.0),
            plans: measured,
        };
        let path = dir.join("task0.measured.json");
        std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
        path
    }

    /// A sample as the test compares it: pieces as (table, dim, rows), target ms, reference ms.
    type Sample = (Vec<(String, u32, u64)>, f64, Option<f64>);

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("shardplan-data-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_measured_plans_document_gives_one_sample_per_distinct_device_set() {
        let dir = scratch("measured");
        let path = fixture(&dir, "cpu:test", [[1.5, 2.5, 0.5], [1.5, 3.0, 0.0]]);
        let loaded = load(&[path], normalisation(true).unwrap()).unwrap();
        // Plan 0: three sets; plan 1: its device 0 is plan 0's (counted once), device 1 new, device 2 empty.
        let got: Vec<Sample> = loaded
            .compute
            .iter()
            .map(|s| (s.pieces.iter().map(|(t, r)| (t.name.clone(), t.dim, *r)).collect(), s.target_ms, s.reference_ms))
            .collect();
        let set = |v: &[(&str, u32, u64)]| v.iter().map(|(n, d, r)| ((*n).to_string(), *d, *r)).collect::<Vec<_>>();
        assert_eq!(
            got,
            vec![
                (set(&[("a", 16, 500), ("b", 8, 500)]), 1.5, Some(3.0)),
                (set(&[("a", 16, 500)]), 2.5, Some(3.0)),
                (set(&[("c", 8, 200)]), 0.5, Some(2.0)),
                (set(&[("a", 16, 500), ("c", 8, 200)]), 3.0, Some(3.0)),
            ]
        );
        assert_eq!(loaded.batch_size, 512);
        assert_eq!(loaded.compute[0].features.len(), 2);
        assert_eq!(loaded.reference_ms(), Some(3.0));
    }

    /// Rewrites the fixture's document without per-set readings, with `reference_ms` as its run's reading.
    fn without_set_readings(path: &Path, reference_ms: Option<f64>) {
        let mut doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        for p in doc["plans"].as_array_mut().unwrap() {
            p["round_device_reference_ms"] = serde_json::json!([]);
        }
        match reference_ms {
            Some(r) => doc["reference_ms"] = serde_json::json!(r),
            None => drop(doc.as_object_mut().unwrap().remove("reference_ms")),
        }
        std::fs::write(path, serde_json::to_string(&doc).unwrap()).unwrap();
    }

    #[test]
    fn sets_without_their_own_reading_take_the_runs_and_a_mix_has_no_reference_speed() {
        // Without per-set readings every set takes the run's median reading.
        let dir = scratch("run-reading");
        let path = fixture(&dir, "cpu:test", [[1.5, 2.5, 0.5], [1.5, 3.0, 0.0]]);
        without_set_readings(&path, Some(5.0));
        let loaded = load(&[path], normalisation(true).unwrap()).unwrap();
        assert!(loaded.compute.iter().all(|s| s.reference_ms == Some(5.0)));
        assert_eq!(loaded.reference_ms(), Some(5.0));
        // With no reading at all: no reference speed (trained on the times as measured).
        let bare = scratch("no-reading");
        let bare_path = fixture(&bare, "cpu:test", [[1.5, 2.5, 0.5], [1.5, 3.0, 0.0]]);
        without_set_readings(&bare_path, None);
        let loaded = load(std::slice::from_ref(&bare_path), normalisation(true).unwrap()).unwrap();
        assert_eq!(loaded.reference_ms(), None);
        // A document with readings beside one without: no one reference speed (a note says so).
        let with = scratch("with-reading");
        let with_path = fixture(&with, "cpu:test", [[1.5, 2.5, 0.5], [1.5, 3.0, 0.0]]);
        let loaded = load(&[with_path, bare_path], normalisation(true).unwrap()).unwrap();
        assert_eq!(loaded.reference_ms(), None);
        assert_eq!((loaded.samples_with_reading(), loaded.compute.len()), (4, 8));
        for d in [dir, bare, with] {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    #[test]
    fn measured_plans_are_refused_with_the_file_and_field_named() {
        let dir = scratch("measured-bad");
        let path = fixture(&dir, "cpu:test", [[1.5, 2.5, 0.5], [1.5, -1.0, 0.0]]);
        let e = format!("{:#}", load(&[path], normalisation(true).unwrap()).err().unwrap());
        assert!(e.contains("plans[1] device 1 has compute_ms = -1"), "{e}");

        let path = fixture(&dir, "cpu:test", [[1.5, 2.5, 0.5], [1.5, 3.0, 0.0]]);
        std::fs::remove_file(dir.join("task0_p1.plan.json")).unwrap();
        let e = format!("{:#}", load(&[path], normalisation(true).unwrap()).err().unwrap());
        assert!(e.contains("plans[1].plan = \"elsewhere/task0_p1.plan.json\" is neither beside"), "{e}");

        // One profile per hardware: a document from another machine than the datasets before it.
        let other = scratch("measured-other");
        let a = fixture(&dir, "cpu:test", [[1.5, 2.5, 0.5], [1.5, 3.0, 0.0]]);
        let b = fixture(&other, "cpu:other", [[1.5, 2.5, 0.5], [1.5, 3.0, 0.0]]);
        let e = format!("{:#}", load(&[a, b], normalisation(true).unwrap()).err().unwrap());
        assert!(e.contains("\"cpu:other\"") && e.contains("one profile per hardware"), "{e}");
    }
}
