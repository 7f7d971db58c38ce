//! `shardplan-train bench`: a profile's evaluation speed (`trainer::bench`).

use std::path::PathBuf;

use anyhow::{Result, bail};

/// Arguments of `shardplan-train bench`.
#[derive(clap::Args)]
pub struct BenchArgs {
    /// Profile directory.
    #[arg(long)]
    pub profile: PathBuf,
    /// Random sets to evaluate.
    #[arg(long, default_value_t = 4096)]
    pub sets: usize,
}

/// `shardplan-train bench`: incremental evaluations per second and the end-to-end graph's latency, as a
/// Markdown table.
pub fn run(a: &BenchArgs) -> Result<()> {
    let dir = a.profile.as_path();
    let load = |cache: bool| -> Result<planner_core::cost::NeuralModel> {
        let card = std::fs::read_to_string(dir.join("card.json"))?;
        let files = trainer::onnx_files(dir)?;
        Ok(planner_core::cost::NeuralModel::from_profile(&card, |f| files.get(f).map(Vec::as_slice))?
            .with_set_cache(cache))
    };
    if a.sets == 0 {
        bail!("`--sets` = 0 is invalid: at least 1");
    }
    let lines = trainer::bench::run(dir, load, a.sets)?;
    println!("| measurement | sets/s | ms per call |");
    println!("|---|---|---|");
    for l in lines {
        println!("| {} | {:.0} | {:.4} |", l.what, l.sets_per_s, l.ms_per_call);
    }
    Ok(())
}
