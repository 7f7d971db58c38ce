//! The training loop shared by every model: seeded shuffles, mini-batches, Adam, best-validation
//! weights, a checkpoint after every epoch (weights, best weights, optimizer state, epoch), and a
//! progress bar with loss and ETA. A resumed run continues from the checkpoint's epoch with the same
//! shuffles, so it ends with the same weights as an uninterrupted run.

use std::collections::HashMap;
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

/// Trains `model` on `train` indices, keeping the weights with the lowest MSE on `val`.
/// With `checkpoint_dir`, state is saved after every epoch; with `resume`, a matching checkpoint is loaded first.
pub fn train(
    model: &dyn Trainable,
    label: &str,
    train: &[usize],
    val: &[usize],
    cfg: &TrainConfig,
    checkpoint_dir: Option<&Path>,
    resume: bool,
) -> Result<TrainOutcome> {
    if train.is_empty() || val.is_empty() {
        bail!("{label}: need training and validation samples, got {} and {}", train.len(), val.len());
    }
    let vars = model.vars();
    let mut adam = Adam::new(&vars, cfg.lr)?;
    let mut start_epoch = 0usize;
    let mut best = (f64::INFINITY, 0usize, snapshot(&vars)?);
    if let (Some(dir), true) = (checkpoint_dir, resume) {
        let path = checkpoint_path(dir, label);
        if path.exists() {
            let t = candle_core::safetensors::load(&path, &Device::Cpu)
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
        if let Some(dir) = checkpoint_dir {
            save_checkpoint(dir, label, &vars, &best.2, &adam, epoch + 1, best.0, cfg.seed)?;
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
    dir: &Path,
    label: &str,
    vars: &[&Var],
    best: &[Tensor],
    adam: &Adam,
    epoch: usize,
    best_val: f64,
    seed: u64,
) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
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
    let path = checkpoint_path(dir, label);
    let tmp = path.with_extension("safetensors.tmp");
    candle_core::safetensors::save(&t, &tmp).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}
