//! `shardplan-train fit-terms`: a profile's memory-terms compute model (`trainer::terms`).

use std::path::PathBuf;

use anyhow::Result;

/// Arguments of `shardplan-train fit-terms`.
#[derive(clap::Args)]
pub struct FitTermsArgs {
    /// Profile directory (its `card.json` is rewritten with the fitted model; nothing else changes).
    #[arg(long)]
    pub profile: PathBuf,
    /// The profile's compute datasets (`.jsonl` or `.jsonl.gz`; comm records are skipped).
    #[arg(long = "data", required = true, num_args = 1..)]
    pub datasets: Vec<PathBuf>,
    /// The measured machine's last-level cache, MiB (default: what the collector recorded in the
    /// profile's hardware note; a GPU profile records none: an H100's L2 is 50 MiB).
    #[arg(long)]
    pub llc_mib: Option<f64>,
}

/// `shardplan-train fit-terms`: fits, writes, and prints the coefficients and the splits' accuracy.
pub fn run(a: &FitTermsArgs) -> Result<()> {
    let t = trainer::terms::fit_into_profile(&a.profile, &a.datasets, a.llc_mib)?;
    println!("memory-terms model of {} (last-level cache {} MiB):", a.profile.display(), t.llc_bytes >> 20);
    for (name, c) in &t.coefficients {
        println!("  {name:<22} {c:.6} ms per unit");
    }
    for (split, m) in &t.metrics {
        println!("  {split:<22} MAPE {:.1}% over {} sets", m.mape_pct, m.samples);
    }
    Ok(())
}
