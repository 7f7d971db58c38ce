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
pub mod calibrate;
pub mod data;
pub mod dreamshard;
pub mod export;
pub mod models;
pub mod net;
pub mod rl;
pub mod terms;
pub mod train;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use planner_core::cost::card::{
    CARD_SCHEMA, CommCard, ComputeCard, DatasetInfo, IntervalCard, MemberFiles, ModelCard, SplitMetrics,
};
use planner_core::cost::{AnalyticalModel, CostModel, NeuralModel};
use planner_core::features::FeatureSchema;
use rand::{RngExt, SeedableRng, rngs::ChaCha8Rng};

use crate::data::{ComputeSample, Loaded, table_identity};
use crate::models::{CommModel, ComputeModel, ComputeTarget, Direction, Loss, metrics};
use crate::train::{Checkpoints, TrainConfig, train};
use shardplan_files::write_atomic;

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
    /// Compute networks in the ensemble (1: a single model, no prediction interval).
    pub members: usize,
    /// Loss of the compute model.
    pub loss: Loss,
    /// Share of held-out samples the prediction interval is calibrated to cover.
    pub coverage: f64,
    /// Take pooling factor and rows as `ln(1 + x)` before the z-score (`false`: NeuroShard's scheme).
    pub log_features: bool,
    /// Express every sample's time at one machine speed (the median reference-kernel reading of the data),
    /// when every sample has a reading (`docs/COST_MODELS.md`, "Speed").
    pub speed_normalise: bool,
    /// Resume from checkpoints in `out/checkpoints`.
    pub resume: bool,
    /// What the compute networks learn: the time, or the time over the memory-terms model.
    pub target: ComputeTarget,
    /// The command line, recorded in the card.
    pub command: String,
}

impl ProfileOptions {
    /// What this run's checkpoints record and a resume must match ([`Checkpoints::run`]): the dataset
    /// hash and every option that shapes the trained weights. Not the epoch count: a resumed run may
    /// train for longer, with the same shuffles as an uninterrupted one.
    fn checkpoint_run(&self, dataset_sha256: &str) -> BTreeMap<String, String> {
        [
            ("dataset_sha256", dataset_sha256.to_string()),
            ("batch", self.train.batch.to_string()),
            ("lr", self.train.lr.to_string()),
            ("loss", format!("{:?}", self.loss)),
            ("log_features", self.log_features.to_string()),
            ("speed_normalise", self.speed_normalise.to_string()),
            ("target", format!("{:?}", self.target)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

/// Refuses to write into `out` when it holds another profile: a `card.json` that is not a profile card,
/// or one trained on a dataset other than `dataset_sha256`. Retraining on the same data may replace it.
fn refuse_other_profile(out: &Path, dataset_sha256: &str) -> Result<()> {
    let path = out.join("card.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let card = ModelCard::from_json(&text).with_context(|| {
        format!("{} holds a card.json that is not a profile's; choose another --out", out.display())
    })?;
    if card.compute.dataset.sha256 != dataset_sha256 {
        bail!(
            "{} holds profile `{}`, trained on the dataset with sha256 {}; this run's dataset has sha256 {}. \
             Choose another --out, or remove that profile first",
            out.display(),
            card.name,
            card.compute.dataset.sha256,
            dataset_sha256
        );
    }
    Ok(())
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
    samples.iter().map(|s| Ok(model.compute_ms(&s.piece_refs())?)).collect()
}

fn pick(v: &[f64], idx: &[usize]) -> Vec<f64> {
    idx.iter().map(|&i| v[i]).collect()
}

/// Most ensemble members a profile may have.
pub const MAX_MEMBERS: usize = 16;

/// The members' predictions of every sample of `data`: `[member][sample]`.
fn member_predictions(
    nets: &[net::ComputeNet],
    data: &[ComputeSample],
    loss: Loss,
    base: Option<&[f64]>,
) -> Result<Vec<Vec<f64>>> {
    let all: Vec<usize> = (0..data.len()).collect();
    nets.iter().map(|net| ComputeModel { net, data, loss, base }.predict(&all)).collect()
}

/// Per sample, the memory-terms model's time of its set, ms.
fn terms_base(card: &planner_core::cost::terms::TermsCard, samples: &[ComputeSample], batch: u32) -> Result<Vec<f64>> {
    let t = planner_core::cost::terms::Terms::new(card, batch, "the profile being trained")?;
    Ok(samples.iter().map(|s| t.set_ms(&s.piece_refs())).collect())
}

/// Mean over members per sample, each member clamped at 0 as the planner does.
fn ensemble_mean(preds: &[Vec<f64>]) -> Vec<f64> {
    let k = preds.len() as f64;
    (0..preds.first().map_or(0, Vec::len)).map(|i| preds.iter().map(|p| p[i].max(0.0)).sum::<f64>() / k).collect()
}

/// Per sample: (mean, sd) over members (clamped at 0).
fn mean_sd(preds: &[Vec<f64>], i: usize) -> (f64, f64) {
    let k = preds.len() as f64;
    let mean = preds.iter().map(|p| p[i].max(0.0)).sum::<f64>() / k;
    let var = preds.iter().map(|p| (p[i].max(0.0) - mean).powi(2)).sum::<f64>() / (k - 1.0).max(1.0);
    (mean, var.sqrt())
}

/// The smallest `z` with `|target − mean| ≤ z · sd` for a `coverage` share of `idx` (samples whose
/// members all agree exactly need `z` = ∞ unless they are exact; they count as covered only then).
fn calibrate_z(preds: &[Vec<f64>], targets: &[f64], idx: &[usize], coverage: f64) -> Option<f64> {
    let mut ratios: Vec<f64> = idx
        .iter()
        .map(|&i| {
            let (mean, sd) = mean_sd(preds, i);
            let err = (targets[i] - mean).abs();
            if sd > 0.0 {
                err / sd
            } else if err == 0.0 {
                0.0
            } else {
                f64::INFINITY
            }
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    let k = ((coverage * ratios.len() as f64).ceil() as usize).clamp(1, ratios.len().max(1));
    ratios.get(k - 1).copied().filter(|z| z.is_finite() && *z > 0.0)
}

/// Share of `idx` whose target lies within `mean ± z · sd`.
fn coverage_of(preds: &[Vec<f64>], targets: &[f64], idx: &[usize], z: f64) -> f64 {
    let inside = idx
        .iter()
        .filter(|&&i| {
            let (mean, sd) = mean_sd(preds, i);
            (targets[i] - mean).abs() <= z * sd
        })
        .count();
    inside as f64 / idx.len().max(1) as f64
}

/// Trains a whole profile, writes it to `opts.out`, reloads it through planner-core and checks it.
pub fn train_profile(opts: &ProfileOptions) -> Result<ProfileOutcome> {
    if opts.members == 0 || opts.members > MAX_MEMBERS {
        bail!("`--members` = {} is invalid: use 1..={MAX_MEMBERS}", opts.members);
    }
    if !(opts.coverage > 0.0 && opts.coverage < 1.0) {
        bail!("`--coverage` = {} is invalid: a share in (0, 1)", opts.coverage);
    }
    let norm = data::normalisation(opts.log_features)?;
    let mut data: Loaded = data::load(&opts.datasets, norm)?;
    let reference_ms = if opts.speed_normalise { data.reference_ms() } else { None };
    let with_reading = data.samples_with_reading();
    if opts.speed_normalise && reference_ms.is_none() && with_reading > 0 {
        eprintln!(
            "note: {} of {} compute samples have no reference-kernel reading: the profile is trained on the \
             times as measured (as with `--speed measured`); leave out the data without readings to train at \
             one reference speed",
            data.compute.len() - with_reading,
            data.compute.len()
        );
    }
    if let Some(r) = reference_ms {
        data.normalise_speed(r)?;
    }
    if data.compute.len() < 10 {
        bail!(
            "{} compute samples in {:?}: at least 10 are needed for an 80/10/10 split",
            data.compute.len(),
            opts.datasets
        );
    }
    refuse_other_profile(&opts.out, &data.sha256)?;
    // The memory-terms model, where the collector recorded the machine's last-level cache (the CPU
    // backend does; a GPU profile gets one from `shardplan-train fit-terms --llc-mib`), fitted on the
    // networks' own training split; on it (`ComputeTarget::OverTerms`) the networks learn what it misses.
    let llc = terms::llc_from_hardware(&data.hardware);
    let terms_card = llc.map(|llc| terms::fit_terms(&data, opts.train.seed, llc)).transpose()?;
    let on_terms = opts.target == ComputeTarget::OverTerms;
    let base = match (&terms_card, on_terms) {
        (Some(t), true) => Some(terms_base(t, &data.compute, data.batch_size)?),
        (None, true) => bail!(
            "`--target over-terms` needs the memory-terms model, and the data's hardware note records no last-level cache size \
             (the CPU collector records it; a GPU profile has no terms model to learn on)"
        ),
        (_, false) => None,
    };
    let ckpt = opts.out.join("checkpoints");
    let run = opts.checkpoint_run(&data.sha256);
    let checkpoints = Checkpoints { dir: &ckpt, resume: opts.resume, run: &run };
    std::fs::create_dir_all(&opts.out).with_context(|| format!("creating {}", opts.out.display()))?;
    let mut compute_metrics = BTreeMap::new();

    // Compute model, random split. Member 0 trains on the training split itself; every further member
    // on a bootstrap resample of it, from its own seed.
    let (tr, va, te) = split_80_10_10(data.compute.len(), opts.train.seed);
    let mut nets = Vec::with_capacity(opts.members);
    let mut best_epochs = Vec::with_capacity(opts.members);
    for m in 0..opts.members {
        let seed = opts.train.seed.wrapping_add(m as u64);
        let train_idx: Vec<usize> = if m == 0 {
            tr.clone()
        } else {
            let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xB007_5742);
            (0..tr.len()).map(|_| tr[rng.random_range(0..tr.len())]).collect()
        };
        let net = net::ComputeNet::new(seed)?;
        let model = ComputeModel { net: &net, data: &data.compute, loss: opts.loss, base: base.as_deref() };
        let label = if m == 0 { "compute".to_string() } else { format!("compute_m{m}") };
        let cfg = TrainConfig { seed, ..opts.train.clone() };
        let outcome = train(&model, &label, &train_idx, &va, &cfg, Some(checkpoints))?;
        best_epochs.push(outcome.best_epoch);
        nets.push(net);
    }
    let targets: Vec<f64> = data.compute.iter().map(|s| s.target_ms).collect();
    let all: Vec<usize> = (0..data.compute.len()).collect();
    let preds = member_predictions(&nets, &data.compute, opts.loss, base.as_deref())?;
    let pred = ensemble_mean(&preds);
    // Every sample's target, prediction and split, for looking at where the model errs.
    let split_of = |i: usize| {
        if te.contains(&i) {
            "test"
        } else if va.contains(&i) {
            "val"
        } else {
            "train"
        }
    };
    let mut rows = String::new();
    for (i, s) in data.compute.iter().enumerate() {
        let rows_split = s.pieces.iter().filter(|(t, r)| *r < t.rows).count();
        let bytes = s.pieces.iter().map(|(t, r)| t.block_bytes(*r, t.dim)).sum::<u64>();
        let _ = writeln!(
            rows,
            "{i},{},{:.6},{:.6},{},{rows_split},{bytes}",
            split_of(i),
            s.target_ms,
            pred[i],
            s.pieces.len()
        );
    }
    std::fs::create_dir_all(&opts.out).with_context(|| format!("creating {}", opts.out.display()))?;
    write_atomic(
        &opts.out.join("predictions.csv"),
        format!("sample,split,target_ms,predicted_ms,pieces,row_pieces,bytes\n{rows}").as_bytes(),
    )?;
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
        SplitMetrics { samples: best_epochs[0], mse: 0.0, mae: 0.0, mape_pct: 0.0 },
    );
    let interval = if opts.members > 1 {
        let z = calibrate_z(&preds, &targets, &va, opts.coverage).ok_or_else(|| {
            anyhow::anyhow!("cannot calibrate a prediction interval: the members agree exactly on the validation split")
        })?;
        Some(IntervalCard {
            z,
            coverage: opts.coverage,
            calibrated_on: format!("validation split, {} samples", va.len()),
            test_coverage: Some(coverage_of(&preds, &targets, &te, z)),
        })
    } else {
        None
    };

    // Unseen tables: a dataset measured on tables the training data never contains.
    if !opts.unseen.is_empty() {
        let mut unseen = data::load(&opts.unseen, norm)?;
        if let Some(r) = reference_ms {
            unseen.normalise_speed(r)?;
        }
        if unseen.hardware.get("fingerprint") != data.hardware.get("fingerprint") {
            bail!("the unseen-table dataset was measured on other hardware than the training data");
        }
        let seen: std::collections::HashSet<Vec<u64>> =
            tr.iter().flat_map(|&i| data.compute[i].pieces.iter().map(|(t, _)| table_identity(t))).collect();
        // A pool can hold statistically identical tables (e.g. many 100-row tables with one lookup per
        // bag) in both halves; a sample with such a table is not about unseen tables, so it is left out.
        let total_unseen = unseen.compute.len();
        let (unseen_samples, shared): (Vec<_>, Vec<_>) =
            unseen.compute.into_iter().partition(|s| s.pieces.iter().all(|(t, _)| !seen.contains(&table_identity(t))));
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
        let t: Vec<f64> = unseen_samples.iter().map(|s| s.target_ms).collect();
        let unseen_base = match &terms_card {
            Some(t) if on_terms => Some(terms_base(t, &unseen_samples, unseen.batch_size)?),
            _ => None,
        };
        let p = ensemble_mean(&member_predictions(&nets, &unseen_samples, opts.loss, unseen_base.as_deref())?);
        compute_metrics.insert("neural/unseen/test".into(), metrics(&p, &t));
        let a: Vec<f64> =
            analytical_predictions(&unseen_samples, unseen.batch_size)?.iter().map(|x| x * scale).collect();
        compute_metrics.insert("analytical-calibrated/unseen/test".into(), metrics(&a, &t));
    }
    finish_profile(opts, &nets, &data, norm, reference_ms, compute_metrics, interval, terms_card, &pred, &all)
}

/// Files of a profile to write: (name, bytes).
type ProfileFiles = Vec<(String, Vec<u8>)>;

/// Trains the comm models of every device count in `data` (backward and forward, each `in → 128 → 64 → 32
/// → 16 → D` on an 80/10/10 split seeded by the device count; the forward one learns the exchange beyond
/// each device's wait, [`CommCard::fw_after_wait`]). Returns the ONNX files and the cards.
fn train_comm(
    data: &Loaded,
    train_cfg: &TrainConfig,
    checkpoints: Option<Checkpoints<'_>>,
    doc: &str,
) -> Result<(ProfileFiles, Vec<CommCard>)> {
    let mut files: ProfileFiles = Vec::new();
    let mut comm_cards = Vec::new();
    for (&d, samples) in &data.comm {
        if samples.len() < 10 {
            bail!("{} comm samples for D={d}: at least 10 are needed", samples.len());
        }
        let (tr, va, te) = split_80_10_10(samples.len(), train_cfg.seed.wrapping_add(d as u64));
        let mut metrics_d = BTreeMap::new();
        let mut graphs = Vec::new();
        for (dir, tag) in [(Direction::Backward, "bw"), (Direction::Forward, "fw")] {
            let m = CommModel::new(samples, dir, &tr, train_cfg.seed.wrapping_add(d as u64))?;
            train(&m, &format!("comm_d{d}_{tag}"), &tr, &va, train_cfg, checkpoints)?;
            for (split, idx) in [("train", &tr), ("val", &va), ("test", &te)] {
                let (p, t) = m.predict(idx)?;
                metrics_d.insert(format!("{tag}/{split}"), metrics(&p, &t));
            }
            let file = format!("comm_d{d}_{tag}.onnx");
            files
                .push((file.clone(), export::mlp_graph(&format!("comm_{tag}"), "x", "comm_ms", &m.net.export()?, doc)));
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
            fw_after_wait: true,
            metrics: metrics_d,
            dataset: DatasetInfo { files: data.files.clone(), sha256: data.sha256.clone(), samples: samples.len() },
        });
    }
    Ok((files, comm_cards))
}

/// Retrains the comm models of the profile in `profile` on `datasets` (their comm records; compute
/// records are read and checked, not trained on) and writes them into it: the ONNX files and the card's
/// entries of the device counts the data holds; the compute networks, the other device counts and
/// everything else stay as they are. The profile is then loaded back through planner-core. Returns the
/// new comm cards.
///
/// # Errors
/// An unreadable card or dataset, data measured on other hardware, no comm records, or fewer than 10
/// for a device count.
pub fn fit_comm_into_profile(profile: &Path, datasets: &[PathBuf], train_cfg: &TrainConfig) -> Result<Vec<CommCard>> {
    let card_path = profile.join("card.json");
    let text = std::fs::read_to_string(&card_path)
        .with_context(|| format!("reading the profile's card {}", card_path.display()))?;
    let mut card = ModelCard::from_json(&text).with_context(|| format!("reading {}", card_path.display()))?;
    let data = data::load(datasets, &card.compute.normalisation)?;
    if data.hardware.get("fingerprint") != card.hardware.get("fingerprint") {
        bail!(
            "the datasets were measured on {} but the profile on {}: fit a profile on its own hardware's data",
            data.hardware.get("fingerprint").unwrap_or(&serde_json::Value::Null),
            card.hardware.get("fingerprint").unwrap_or(&serde_json::Value::Null)
        );
    }
    if data.comm.is_empty() {
        bail!(
            "no comm records in {} dataset file(s): give the comm datasets (`shardplan-collect comm`)",
            datasets.len()
        );
    }
    let doc = format!("shardplan profile {}; see card.json", card.name);
    let (files, comm_cards) = train_comm(&data, train_cfg, None, &doc)?;
    card.comm.retain(|c| !comm_cards.iter().any(|n| n.devices == c.devices));
    card.comm.extend(comm_cards.iter().cloned());
    card.comm.sort_by_key(|c| c.devices);
    let _ = write!(card.command, "; comm models: shardplan-train fit-comm on {}", data.files.join(", "));
    card.check()?;
    let card_json = serde_json::to_string_pretty(&card)? + "\n";
    // Checked before anything is written: the card with the new graphs loads through planner-core.
    let mut blobs = onnx_files(profile)?;
    blobs.extend(files.iter().cloned());
    NeuralModel::from_profile(&card_json, |f| blobs.get(f).map(Vec::as_slice))?;
    for (name, bytes) in &files {
        write_atomic(&profile.join(name), bytes)?;
    }
    write_atomic(&card_path, card_json.as_bytes())?;
    Ok(comm_cards)
}

/// Trains comm models, writes every graph and the card, then reloads and checks the profile.
#[allow(clippy::too_many_arguments)]
fn finish_profile(
    opts: &ProfileOptions,
    nets: &[net::ComputeNet],
    data: &Loaded,
    norm: &planner_core::features::Normalisation,
    reference_ms: Option<f64>,
    compute_metrics: BTreeMap<String, SplitMetrics>,
    interval: Option<IntervalCard>,
    compute_terms: Option<planner_core::cost::terms::TermsCard>,
    pred: &[f64],
    all: &[usize],
) -> Result<ProfileOutcome> {
    let ckpt = opts.out.join("checkpoints");
    let run = opts.checkpoint_run(&data.sha256);
    let checkpoints = Checkpoints { dir: &ckpt, resume: opts.resume, run: &run };
    let on_terms = opts.target == ComputeTarget::OverTerms;
    let doc = if on_terms {
        format!(
            "shardplan profile {}; see card.json. The compute graphs output the factor over the card's memory-terms time \
             (compute.on_terms), not milliseconds",
            opts.name
        )
    } else {
        format!("shardplan profile {}; see card.json", opts.name)
    };
    let head_output = if on_terms { "over_terms" } else { "cost_ms" };
    let dataset = DatasetInfo { files: data.files.clone(), sha256: data.sha256.clone(), samples: data.compute.len() };
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    let mut ensemble = Vec::new();
    for (m, net) in nets.iter().enumerate() {
        let enc = net.encoder.export()?;
        let head = net.head.export()?;
        let suffix = if m == 0 { String::new() } else { format!("_m{m}") };
        let (enc_file, head_file) = (format!("compute_encoder{suffix}.onnx"), format!("compute_head{suffix}.onnx"));
        files.push((enc_file.clone(), export::mlp_graph("encoder", "features", "embedding", &enc, &doc)));
        files.push((head_file.clone(), export::mlp_graph("head", "set_sum", head_output, &head, &doc)));
        if m == 0 {
            files.push(("compute_end_to_end.onnx".into(), export::compute_end_to_end(&enc, &head, &doc)));
        } else {
            ensemble.push(MemberFiles { encoder_file: enc_file, head_file });
        }
    }
    let (comm_files, comm_cards) = train_comm(data, &opts.train, Some(checkpoints), &doc)?;
    files.extend(comm_files);
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
            normalisation: norm.clone(),
            encoder_file: "compute_encoder.onnx".into(),
            head_file: "compute_head.onnx".into(),
            end_to_end_file: "compute_end_to_end.onnx".into(),
            ensemble,
            interval,
            batch_size: data.batch_size,
            reference_ms,
            metrics: compute_metrics,
            dataset,
            on_terms,
        },
        comm: comm_cards,
        compute_terms,
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
        let tract_ms = loaded.compute_ms(&data.compute[i].piece_refs())?;
        // `pred` is the members' mean, each clamped at 0 as the planner does.
        max_diff = max_diff.max((tract_ms - pred[i]).abs());
    }
    if max_diff > 1e-3 {
        bail!("the exported profile disagrees with the trainer by {max_diff} ms (tolerance 1e-3)");
    }
    Ok(ProfileOutcome { card, reload_max_abs_diff_ms: max_diff })
}
