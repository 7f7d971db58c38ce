//! The training loop shared by every model: seeded shuffles, mini-batches, Adam, best-validation
//! weights, a checkpoint after every epoch (weights, best weights, optimizer state, epoch), and a
//! progress bar with loss and ETA. A resumed run continues from the checkpoint's epoch with the same
//! shuffles, so it ends with the same weights as an uninterrupted run. Every checkpoint records what it
//! was trained from ([`Checkpoints::run`]: the dataset hash and the options that shape training), and a
//! resume refuses a checkpoint that records anything else.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use candle_core::{Device, Tensor, Var};
use indicatif::{ProgressBar, ProgressStyle};
use rand::{RngExt, SeedableRng, rngs::ChaCha8Rng};

use crate::adam::Adam;

/// Hyper-parameters (SPEC section 5 defaults: Adam lr 1e-3, batch 512).
#[derive(Debug, Clone)]
pub struct TrainConfig {
    /// Passes over the training split.
    pub epochs: usize,
    /// Mini-batch size.
    pub batch: usize,
    /// Learning rate.
    pub lr: f64,
    /// Seed of the shuffles.
    pub seed: u64,
    /// Show a progress bar.
    pub progress: bool,
}

/// A model the loop can train: its parameters, a batch loss and predictions.
pub trait Trainable {
    /// Parameters in a fixed order.
    fn vars(&self) -> Vec<&Var>;
    /// Mean squared error over the samples `idx` (indices into the model's data).
    fn loss(&self, idx: &[usize]) -> Result<Tensor>;
}

/// What a run ended with.
pub struct TrainOutcome {
    /// Validation MSE of the kept (best) weights.
    pub best_val_mse: f64,
    /// Epoch the best weights came from (1-based).
    pub best_epoch: usize,
    /// Epochs run in this process (less than the total after a resume).
    pub epochs_run: usize,
}

fn snapshot(vars: &[&Var]) -> Result<Vec<Tensor>> {
    Ok(vars.iter().map(|v| v.as_tensor().copy()).collect::<candle_core::Result<_>>()?)
}

fn checkpoint_path(dir: &Path, label: &str) -> PathBuf {
    dir.join(format!("{label}.safetensors"))
}

/// Where a run keeps its checkpoints, and what a checkpoint must record to be resumed.
#[derive(Debug, Clone, Copy)]
pub struct Checkpoints<'a> {
    /// Directory of the checkpoints (`<label>.safetensors`).
    pub dir: &'a Path,
    /// Continue from a checkpoint found there.
    pub resume: bool,
    /// What the run trains from (`dataset_sha256` and the options that shape training), stored in every
    /// checkpoint's metadata; a resume refuses a checkpoint whose record differs in any entry.
    pub run: &'a BTreeMap<String, String>,
}

/// Refuses a checkpoint whose recorded run (`recorded`, its metadata) is not `run`.
fn check_recorded_run(
    path: &Path,
    recorded: Option<&HashMap<String, String>>,
    run: &BTreeMap<String, String>,
) -> Result<()> {
    for (key, want) in run {
        let Some(got) = recorded.and_then(|m| m.get(key)) else {
            bail!(
                "checkpoint {} records no `{key}`: it cannot be checked against this run's ({want}); remove it to start over",
                path.display()
            );
        };
        if got != want {
            if key == "dataset_sha256" {
                bail!(
                    "checkpoint {} was trained on the dataset with sha256 {got}, but this run's dataset has sha256 {want}; \
                     resume with the same datasets, or choose another --out",
                    path.display()
                );
            }
            bail!(
                "checkpoint {} was written with {key} = {got}, but this run has {key} = {want}; resume with the same options, \
                 or choose another --out",
                path.display()
            );
        }
    }
    Ok(())
}

/// Trains `model` on `train` indices, keeping the weights with the lowest MSE on `val`.
/// With `checkpoints`, state is saved after every epoch; with `resume`, a checkpoint of the same run is
/// loaded first (one of another run is refused).
pub fn train(
    model: &dyn Trainable,
    label: &str,
    train: &[usize],
    val: &[usize],
    cfg: &TrainConfig,
    checkpoints: Option<Checkpoints<'_>>,
) -> Result<TrainOutcome> {
    if train.is_empty() || val.is_empty() {
        bail!("{label}: need training and validation samples, got {} and {}", train.len(), val.len());
    }
    let vars = model.vars();
    let mut adam = Adam::new(&vars, cfg.lr)?;
    let mut start_epoch = 0usize;
    let mut best = (f64::INFINITY, 0usize, snapshot(&vars)?);
    if let Some(ck) = checkpoints.filter(|c| c.resume) {
        let path = checkpoint_path(ck.dir, label);
        if path.exists() {
            let bytes = std::fs::read(&path).with_context(|| format!("reading checkpoint {}", path.display()))?;
            let (_, header) = safetensors::SafeTensors::read_metadata(&bytes)
                .with_context(|| format!("reading checkpoint {}", path.display()))?;
            check_recorded_run(&path, header.metadata().as_ref(), ck.run)?;
            let t = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu)
                .with_context(|| format!("loading checkpoint {}", path.display()))?;
            restore(&vars, "weights", &t)?;
            let best_w = (0..vars.len())
                .map(|i| t.get(&format!("best.{i}")).cloned().with_context(|| format!("checkpoint lacks best.{i}")))
                .collect::<Result<Vec<_>>>()?;
            adam.load_state("adam", &t)?;
            let meta: Vec<f64> = t.get("meta").context("checkpoint lacks meta")?.to_vec1()?;
            if meta.len() != 4 || ((meta[2] as u64) << 32 | meta[3] as u64) != cfg.seed {
                bail!("checkpoint {} was written with another seed; remove it or use the same --seed", path.display());
            }
            start_epoch = meta[0] as usize;
            best = (meta[1], start_epoch, best_w);
        }
    }
    let bar = if cfg.progress { ProgressBar::new(cfg.epochs as u64) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("{prefix:>12} [{bar:30}] {pos}/{len} epochs {msg} ({per_sec}, eta {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_prefix(label.to_string());
    bar.set_position(start_epoch as u64);
    let mut order = train.to_vec();
    for epoch in start_epoch..cfg.epochs {
        // The shuffle of epoch e depends only on (seed, e): resumed runs see the same batches.
        let mut rng = ChaCha8Rng::seed_from_u64(planner_core::task::task_seed(cfg.seed, epoch));
        order.copy_from_slice(train);
        for i in (1..order.len()).rev() {
            order.swap(i, rng.random_range(0..=i));
        }
        let mut epoch_loss = 0.0;
        for batch in order.chunks(cfg.batch) {
            let loss = model.loss(batch)?;
            epoch_loss += f64::from(loss.to_scalar::<f32>()?) * batch.len() as f64;
            let grads = loss.backward()?;
            adam.step(&vars, &grads)?;
        }
        let val_mse = eval_mse(model, val, cfg.batch)?;
        if val_mse < best.0 {
            best = (val_mse, epoch + 1, snapshot(&vars)?);
        }
        bar.set_message(format!("train mse {:.4} val mse {val_mse:.4}", epoch_loss / train.len() as f64));
        bar.inc(1);
        if let Some(ck) = checkpoints {
            save_checkpoint(ck, label, &vars, &best.2, &adam, epoch + 1, best.0, cfg.seed)?;
        }
    }
    bar.finish();
    for (v, w) in vars.iter().zip(&best.2) {
        v.set(w)?;
    }
    Ok(TrainOutcome { best_val_mse: best.0, best_epoch: best.1, epochs_run: cfg.epochs.saturating_sub(start_epoch) })
}

/// Mean squared error over `idx`, in batches.
pub fn eval_mse(model: &dyn Trainable, idx: &[usize], batch: usize) -> Result<f64> {
    let mut total = 0.0;
    for chunk in idx.chunks(batch.max(1)) {
        total += f64::from(model.loss(chunk)?.to_scalar::<f32>()?) * chunk.len() as f64;
    }
    Ok(total / idx.len().max(1) as f64)
}

fn restore(vars: &[&Var], prefix: &str, t: &HashMap<String, Tensor>) -> Result<()> {
    for (i, v) in vars.iter().enumerate() {
        let w = t.get(&format!("{prefix}.{i}")).with_context(|| format!("checkpoint lacks {prefix}.{i}"))?;
        if w.dims() != v.as_tensor().dims() {
            bail!("checkpoint {prefix}.{i} has shape {:?}, the model {:?}", w.dims(), v.as_tensor().dims());
        }
        v.set(w)?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn save_checkpoint(
    ck: Checkpoints<'_>,
    label: &str,
    vars: &[&Var],
    best: &[Tensor],
    adam: &Adam,
    epoch: usize,
    best_val: f64,
    seed: u64,
) -> Result<()> {
    std::fs::create_dir_all(ck.dir).with_context(|| format!("creating {}", ck.dir.display()))?;
    let mut t = adam.state("adam")?;
    for (i, v) in vars.iter().enumerate() {
        t.insert(format!("weights.{i}"), v.as_tensor().clone());
    }
    for (i, w) in best.iter().enumerate() {
        t.insert(format!("best.{i}"), w.clone());
    }
    // Seeds are split into 32-bit halves: f64 holds them exactly.
    let meta = [epoch as f64, best_val, (seed >> 32) as f64, (seed & 0xffff_ffff) as f64];
    t.insert("meta".into(), Tensor::new(&meta, &Device::Cpu)?);
    let run: HashMap<String, String> = ck.run.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let bytes = safetensors::serialize(&t, Some(run)).context("serialising a checkpoint")?;
    shardplan_files::write_atomic(&checkpoint_path(ck.dir, label), &bytes)?;
    Ok(())
}
