//! `shardplan-train fit-comm`: retrains a profile's comm models on comm datasets, keeping its compute
//! networks (`trainer::fit_comm_into_profile`).

use std::path::PathBuf;

use anyhow::{Result, bail};

/// Arguments of `shardplan-train fit-comm`.
#[derive(clap::Args)]
pub struct FitCommArgs {
    /// Profile directory (its comm graphs and the card's comm entries of the device counts in the data are
    /// replaced; nothing else changes).
    #[arg(long)]
    pub profile: PathBuf,
    /// Comm datasets (`shardplan-collect comm`; `.jsonl` or `.jsonl.gz`), measured on the profile's hardware.
    #[arg(long = "data", required = true, num_args = 1..)]
    pub datasets: Vec<PathBuf>,
    /// Epochs per model.
    #[arg(long, default_value_t = 400)]
    pub epochs: usize,
    /// Mini-batch size (the calibration loop's default).
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    /// Seed of initialisation, splits and shuffles (each device count D trains from seed + D).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// `shardplan-train fit-comm`: trains, writes, and prints each model's test accuracy.
pub fn run(a: &FitCommArgs) -> Result<()> {
    if a.epochs == 0 || a.batch == 0 {
        bail!("`--epochs` = {} and `--batch` = {} must be at least 1", a.epochs, a.batch);
    }
    let cfg = trainer::train::TrainConfig { epochs: a.epochs, batch: a.batch, lr: 1e-3, seed: a.seed, progress: false };
    let cards = trainer::fit_comm_into_profile(&a.profile, &a.datasets, &cfg)?;
    println!("comm models of {}:", a.profile.display());
    for c in &cards {
        for (split, m) in &c.metrics {
            println!(
                "  D = {:<3} {split:<9} MAPE {:5.1}%  MAE {:.3} ms over {} values",
                c.devices, m.mape_pct, m.mae, m.samples
            );
        }
    }
    Ok(())
}
