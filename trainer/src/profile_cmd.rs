//! `shardplan-train profile`: trains a cost profile from datasets (`trainer::train_profile`).

use std::path::PathBuf;

use anyhow::{Result, bail};
use trainer::models::ComputeTarget;
use trainer::train::TrainConfig;
use trainer::{ProfileOptions, train_profile};

/// The machine speed the compute targets are taken at.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Speed {
    Reference,
    Measured,
}

/// Arguments of `shardplan-train profile`.
#[derive(clap::Args)]
pub struct ProfileArgs {
    /// Profile name (selects it in the planner).
    #[arg(long)]
    pub name: String,
    /// Dataset files (`.jsonl` or `.jsonl.gz`): compute and comm records; or measured-plans documents
    /// (`shardplan-collect measure-plan --out`, each plan file beside it or where it recorded it), whose
    /// every distinct device set is a compute sample.
    #[arg(long = "data", required = true, num_args = 1..)]
    pub datasets: Vec<PathBuf>,
    /// Datasets measured on tables disjoint from the training tables (unseen-table metrics).
    #[arg(long = "unseen", num_args = 1..)]
    pub unseen: Vec<PathBuf>,
    /// Output directory.
    #[arg(long)]
    pub out: PathBuf,
    /// Epochs per model.
    #[arg(long, default_value_t = 200)]
    pub epochs: usize,
    /// Mini-batch size.
    #[arg(long, default_value_t = 512)]
    pub batch: usize,
    /// Adam learning rate.
    #[arg(long, default_value_t = 1e-3)]
    pub lr: f64,
    /// Seed of initialisation, splits and shuffles.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Compute networks in the ensemble (each further one from the next seed, on a bootstrap
    /// resample); 1 gives a single model with no prediction interval.
    #[arg(long, default_value_t = 5)]
    pub members: usize,
    /// Loss of the compute model: `mse` (ms², SPEC section 5) or `relative`.
    #[arg(long, value_enum, default_value_t = trainer::models::Loss::Mse)]
    pub loss: trainer::models::Loss,
    /// Share of held-out samples the prediction interval is calibrated to cover.
    #[arg(long, default_value_t = 0.9)]
    pub coverage: f64,
    /// NeuroShard's own feature scheme (every feature z-scored raw) instead of pooling factor and
    /// rows taken as ln(1 + x) first.
    #[arg(long)]
    pub plain_features: bool,
    /// `reference`: train on the times at one machine speed (each target scaled by the dataset's
    /// median reference-kernel reading over the sample's own; data where some sample has no reading,
    /// such as a GPU's, is trained as measured, with a note when others have one; a measured plan's set
    /// without its own reading takes its run's); `measured`: on the times as measured (`docs/COST_MODELS.md`,
    /// "Speed").
    #[arg(long, value_enum, default_value_t = Speed::Reference)]
    pub speed: Speed,
    /// What the compute networks learn: `time`, or `over-terms`, the measured time over the memory-terms
    /// model (fitted first, on the same training split), so that a set's compute is the terms' time times
    /// the networks' output. `over-terms` needs the machine's cache size in the data (the CPU collector
    /// records it).
    #[arg(long, value_enum, default_value_t = ComputeTarget::Time)]
    pub target: ComputeTarget,
    /// Continue from the checkpoints in OUT/checkpoints.
    #[arg(long)]
    pub resume: bool,
    /// No progress bars.
    #[arg(long)]
    pub quiet: bool,
}

/// `shardplan-train profile`: trains, writes the profile to `--out` and prints its metrics as a Markdown
/// table.
pub fn run(a: &ProfileArgs) -> Result<()> {
    if a.epochs == 0 {
        bail!("`--epochs` = 0 is invalid: at least 1");
    }
    if a.batch == 0 {
        bail!("`--batch` = 0 is invalid: at least 1");
    }
    if !(a.lr.is_finite() && a.lr > 0.0) {
        bail!("`--lr` = {} is invalid: a positive number", a.lr);
    }
    let opts = ProfileOptions {
        name: a.name.clone(),
        datasets: a.datasets.clone(),
        unseen: a.unseen.clone(),
        out: a.out.clone(),
        train: TrainConfig { epochs: a.epochs, batch: a.batch, lr: a.lr, seed: a.seed, progress: !a.quiet },
        members: a.members,
        loss: a.loss,
        coverage: a.coverage,
        log_features: !a.plain_features,
        speed_normalise: a.speed == Speed::Reference,
        resume: a.resume,
        target: a.target,
        command: crate::common::command_line(),
    };
    let outcome = train_profile(&opts)?;
    println!("profile `{}` written to {}", outcome.card.name, opts.out.display());
    println!("reloaded through planner-core: max |trainer - tract| = {:.2e} ms", outcome.reload_max_abs_diff_ms);
    println!("| model | split | samples | MSE ms^2 | MAE ms | MAPE % |");
    println!("|---|---|---|---|---|---|");
    for (k, m) in &outcome.card.compute.metrics {
        if !k.starts_with("training/") {
            println!("| compute | {k} | {} | {:.4} | {:.4} | {:.2} |", m.samples, m.mse, m.mae, m.mape_pct);
        }
    }
    for c in &outcome.card.comm {
        for (k, m) in &c.metrics {
            println!(
                "| comm D={} | {k} | {} | {:.4} | {:.4} | {:.2} |",
                c.devices, m.samples, m.mse, m.mae, m.mape_pct
            );
        }
    }
    Ok(())
}
