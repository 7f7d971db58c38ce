//! trainer: learns shardplan's cost models from collector datasets and exports them as ONNX graphs
//! with a model card (a *profile*) that planner-core loads through tract.
//!
//! Key types: [`ProfileOptions`] → [`train_profile`] → a profile directory (`card.json` + ONNX files);
//! [`net::ComputeNet`] (per-table encoder, masked sum, head — SPEC section 5) and [`net::Mlp`] (comm
//! models); [`train::train`] (seeded mini-batch Adam with best-validation weights and resumable
//! checkpoints); [`export`] (ONNX from tract's protobuf types).
//!
//! Why: candle gives reverse-mode autodiff with a small, stable API (and an LSTM for the RL policies);
//! features, normalisation and dataset records come from planner-core, so the trainer cannot drift
//! from the planner; after writing a profile the trainer loads it back through planner-core and checks
//! the ONNX graphs reproduce its own predictions.

pub mod adam;
pub mod autoshard;
pub mod bench;
pub mod data;
pub mod dreamshard;
pub mod export;
pub mod models;
pub mod net;
pub mod rl;
pub mod train;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use planner_core::cost::card::{CARD_SCHEMA, CommCard, ComputeCard, DatasetInfo, ModelCard, SplitMetrics};
use planner_core::cost::{AnalyticalModel, CostModel, NeuralModel, PieceRef};
use planner_core::features::{FeatureSchema, neuroshard_pool_normalisation};
use rand::{RngExt, SeedableRng, rngs::ChaCha8Rng};

use crate::data::{ComputeSample, Loaded, table_identity};
use crate::models::{CommModel, ComputeModel, Direction, metrics};
use crate::train::{TrainConfig, train};

/// What to train.
#[derive(Debug, Clone)]
pub struct ProfileOptions {
    /// Profile name.
    pub name: String,
    /// Compute (and optionally comm) datasets.
    pub datasets: Vec<PathBuf>,
    /// A dataset measured on tables disjoint from the training tables (unseen-table split).
    pub unseen: Vec<PathBuf>,
    /// Output directory.
    pub out: PathBuf,
    /// Training settings.
    pub train: TrainConfig,
    /// Resume from checkpoints in `out/checkpoints`.
    pub resume: bool,
    /// The command line, recorded in the card.
    pub command: String,
}

/// Summary of a trained profile.
pub struct ProfileOutcome {
    /// The card written.
    pub card: ModelCard,
    /// Largest |trainer − tract| difference seen when reloading the profile, ms.
    pub reload_max_abs_diff_ms: f64,
}

/// Every `.onnx` file of `dir`, by file name (a profile's or a policy's graphs).
pub fn onnx_files(dir: &Path) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut files = BTreeMap::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "onnx") {
            let name = p.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
            files.insert(name, std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?);
        }
    }
    Ok(files)
}

/// Seeded 80/10/10 split of `0..n`.
#[must_use]
pub fn split_80_10_10(n: usize, seed: u64) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let mut idx: Vec<usize> = (0..n).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5EED_5717);
    for i in (1..n).rev() {
        idx.swap(i, rng.random_range(0..=i));
    }
    let n_train = n * 8 / 10;
    let n_val = (n / 10).max(1).min(n.saturating_sub(n_train));
    let test = idx.split_off((n_train + n_val).min(n));
    let val = idx.split_off(n_train.min(idx.len()));
    (idx, val, test)
}

/// Analytical compute predictions (TorchRec's estimator at the dataset's batch) for samples.
fn analytical_predictions(samples: &[ComputeSample], batch: u32) -> Result<Vec<f64>> {
    let model = AnalyticalModel::new(planner_core::HardwareProfile::torchrec_default(), u64::from(batch))?;
    samples
        .iter()
        .map(|s| {
            let set: Vec<PieceRef<'_>> = s.tables.iter().map(|t| PieceRef::whole(t, t.dim)).collect();
            Ok(model.compute_ms(&set)?)
        })
        .collect()
}

fn pick(v: &[f64], idx: &[usize]) -> Vec<f64> {
    idx.iter().map(|&i| v[i]).collect()
}

/// Trains a whole profile, writes it to `opts.out`, reloads it through planner-core and checks it.
pub fn train_profile(opts: &ProfileOptions) -> Result<ProfileOutcome> {
    let data: Loaded = data::load(&opts.datasets)?;
    if data.compute.len() < 10 {
        bail!(
            "{} compute samples in {:?}: at least 10 are needed for an 80/10/10 split",
            data.compute.len(),
            opts.datasets
        );
    }
    let ckpt = opts.out.join("checkpoints");
    std::fs::create_dir_all(&opts.out).with_context(|| format!("creating {}", opts.out.display()))?;
    let mut compute_metrics = BTreeMap::new();

    // Compute model, random split.
    let (tr, va, te) = split_80_10_10(data.compute.len(), opts.train.seed);
    let model = ComputeModel { net: net::ComputeNet::new(opts.train.seed)?, data: &data.compute };
    let outcome = train(&model, "compute", &tr, &va, &opts.train, Some(&ckpt), opts.resume)?;
    let targets: Vec<f64> = data.compute.iter().map(|s| s.target_ms).collect();
    let all: Vec<usize> = (0..data.compute.len()).collect();
    let pred = model.predict(&all)?;
    let analytical = analytical_predictions(&data.compute, data.batch_size)?;
    // The analytical model assumes TorchRec's HBM bandwidth; calibrate one scale on the training split
    // (least squares through the origin) so the comparison is about shape, not units.
    let (num, den) =
        tr.iter().fold((0.0, 0.0), |(n, d), &i| (n + analytical[i] * targets[i], d + analytical[i].powi(2)));
    let scale = if den > 0.0 { num / den } else { 1.0 };
    let calibrated: Vec<f64> = analytical.iter().map(|a| a * scale).collect();
    for (split, idx) in [("train", &tr), ("val", &va), ("test", &te)] {
        compute_metrics.insert(format!("neural/random/{split}"), metrics(&pick(&pred, idx), &pick(&targets, idx)));
        compute_metrics.insert(
            format!("analytical-calibrated/random/{split}"),
            metrics(&pick(&calibrated, idx), &pick(&targets, idx)),
        );
    }
    compute_metrics.insert(
        "training/best-epoch".into(),
        SplitMetrics { samples: outcome.best_epoch, mse: outcome.best_val_mse, mae: 0.0, mape_pct: 0.0 },
    );

    // Unseen tables: a dataset measured on tables the training data never contains.
    if opts.unseen.is_empty() {
        return finish_profile(opts, &model.net, &data, compute_metrics, &pred, &all);
    }
    let unseen = data::load(&opts.unseen)?;
    if unseen.hardware.get("fingerprint") != data.hardware.get("fingerprint") {
        bail!("the unseen-table dataset was measured on other hardware than the training data");
    }
    let seen: std::collections::HashSet<Vec<u64>> =
        tr.iter().flat_map(|&i| data.compute[i].tables.iter().map(table_identity)).collect();
    // A pool can hold statistically identical tables (e.g. many 100-row tables with one lookup per
    // bag) in both halves; a sample with such a table is not about unseen tables, so it is left out.
    let total_unseen = unseen.compute.len();
    let (unseen_samples, shared): (Vec<_>, Vec<_>) =
        unseen.compute.into_iter().partition(|s| s.tables.iter().all(|t| !seen.contains(&table_identity(t))));
    if unseen_samples.is_empty() {
        bail!(
            "every one of the {} unseen-table samples has a table identical to one in the training split; collect it from disjoint tables",
            shared.len()
        );
    }
    if !shared.is_empty() {
        eprintln!(
            "unseen-table metrics: {} of {} samples left out (a table identical to a training table)",
            shared.len(),
            total_unseen
        );
    }
    let m = ComputeModel { net: model.net, data: &unseen_samples };
    let idx: Vec<usize> = (0..unseen_samples.len()).collect();
    let t: Vec<f64> = unseen_samples.iter().map(|s| s.target_ms).collect();
    compute_metrics.insert("neural/unseen/test".into(), metrics(&m.predict(&idx)?, &t));
    let a: Vec<f64> = analytical_predictions(&unseen_samples, unseen.batch_size)?.iter().map(|x| x * scale).collect();
    compute_metrics.insert("analytical-calibrated/unseen/test".into(), metrics(&a, &t));
    finish_profile(opts, &m.net, &data, compute_metrics, &pred, &all)
}

/// Trains comm models, writes every graph and the card, then reloads and checks the profile.
fn finish_profile(
    opts: &ProfileOptions,
    net: &net::ComputeNet,
    data: &Loaded,
    compute_metrics: BTreeMap<String, SplitMetrics>,
    pred: &[f64],
    all: &[usize],
) -> Result<ProfileOutcome> {
    let ckpt = opts.out.join("checkpoints");
    let doc = format!("shardplan profile {}; see card.json", opts.name);
    let enc = net.encoder.export()?;
    let head = net.head.export()?;
    let dataset = DatasetInfo { files: data.files.clone(), sha256: data.sha256.clone(), samples: data.compute.len() };
    let mut files: Vec<(String, Vec<u8>)> = vec![
        ("compute_encoder.onnx".into(), export::mlp_graph("encoder", "features", "embedding", &enc, &doc)),
        ("compute_head.onnx".into(), export::mlp_graph("head", "set_sum", "cost_ms", &head, &doc)),
        ("compute_end_to_end.onnx".into(), export::compute_end_to_end(&enc, &head, &doc)),
    ];
    let mut comm_cards = Vec::new();
    for (&d, samples) in &data.comm {
        if samples.len() < 10 {
            bail!("{} comm samples for D={d}: at least 10 are needed", samples.len());
        }
        let (tr, va, te) = split_80_10_10(samples.len(), opts.train.seed.wrapping_add(d as u64));
        let mut metrics_d = BTreeMap::new();
        let mut graphs = Vec::new();
        for (dir, tag) in [(Direction::Backward, "bw"), (Direction::Forward, "fw")] {
            let m = CommModel::new(samples, dir, &tr, opts.train.seed.wrapping_add(d as u64))?;
            train(&m, &format!("comm_d{d}_{tag}"), &tr, &va, &opts.train, Some(&ckpt), opts.resume)?;
            for (split, idx) in [("train", &tr), ("val", &va), ("test", &te)] {
                let (p, t) = m.predict(idx)?;
                metrics_d.insert(format!("{tag}/{split}"), metrics(&p, &t));
            }
            let file = format!("comm_d{d}_{tag}.onnx");
            files.push((
                file.clone(),
                export::mlp_graph(&format!("comm_{tag}"), "x", "comm_ms", &m.net.export()?, &doc),
            ));
            graphs.push((file, m.norm.clone()));
        }
        let [(bw_file, bw_norm), (fw_file, fw_norm)]: [(String, _); 2] =
            graphs.try_into().map_err(|_| anyhow::anyhow!("expected two comm graphs"))?;
        comm_cards.push(CommCard {
            devices: d,
            bw_normalisation: bw_norm,
            fw_normalisation: fw_norm,
            bw_file,
            fw_file,
            metrics: metrics_d,
            dataset: DatasetInfo { files: data.files.clone(), sha256: data.sha256.clone(), samples: samples.len() },
        });
    }
    let card = ModelCard {
        schema: CARD_SCHEMA.into(),
        name: opts.name.clone(),
        hardware: data.hardware.clone(),
        units: "ms".into(),
        trainer_version: env!("CARGO_PKG_VERSION").into(),
        seed: opts.train.seed,
        command: opts.command.clone(),
        compute: ComputeCard {
            feature_schema: FeatureSchema::NeuroShard20,
            feature_names: FeatureSchema::NeuroShard20.names(),
            normalisation: neuroshard_pool_normalisation()?.clone(),
            encoder_file: "compute_encoder.onnx".into(),
            head_file: "compute_head.onnx".into(),
            end_to_end_file: "compute_end_to_end.onnx".into(),
            batch_size: data.batch_size,
            metrics: compute_metrics,
            dataset,
        },
        comm: comm_cards,
    };
    let card_json = serde_json::to_string_pretty(&card)?;
    files.push(("card.json".into(), card_json.clone().into_bytes()));
    for (name, bytes) in &files {
        write_atomic(&opts.out.join(name), bytes)?;
    }
    // Reload through planner-core (tract) and compare with the trainer's own predictions.
    let blobs: BTreeMap<String, Vec<u8>> = files.into_iter().collect();
    let loaded = NeuralModel::from_profile(&card_json, |f| blobs.get(f).map(Vec::as_slice))?;
    let mut max_diff = 0.0f64;
    for &i in all.iter().take(256) {
        let s = &data.compute[i];
        let set: Vec<PieceRef<'_>> = s.tables.iter().map(|t| PieceRef::whole(t, t.dim)).collect();
        let tract_ms = loaded.compute_ms(&set)?;
        // The planner clamps negative predictions at 0; compare like with like.
        max_diff = max_diff.max((tract_ms - pred[i].max(0.0)).abs());
    }
    if max_diff > 1e-3 {
        bail!("the exported profile disagrees with the trainer by {max_diff} ms (tolerance 1e-3)");
    }
    Ok(ProfileOutcome { card, reload_max_abs_diff_ms: max_diff })
}

/// Writes through a temporary file and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))
}
