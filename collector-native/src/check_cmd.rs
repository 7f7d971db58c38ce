//! `shardplan-collect check`: validates datasets (schema, hardware, duplicates) and prints a summary.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use planner_core::dataset::{DatasetReader, HardwarePolicy};

#[derive(Args, Debug)]
/// Arguments of `shardplan-collect check`.
pub struct CheckArgs {
    /// Dataset files.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Accept records measured on different hardware.
    #[arg(long)]
    pub mix_hardware: bool,
}

/// `shardplan-collect check`: the files through planner-core's `DatasetReader` (the checks the trainer
/// makes too), then a summary.
pub fn run(args: &CheckArgs) -> Result<i32> {
    let policy = if args.mix_hardware { HardwarePolicy::Mix } else { HardwarePolicy::Single };
    let mut reader = DatasetReader::new(policy);
    for f in &args.files {
        let text = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        reader.add(&f.display().to_string(), &text)?;
    }
    let all = reader.records();
    let compute = all.iter().filter(|r| r.kind() == "compute").count();
    println!("{} records: {compute} compute, {} comm; no duplicates", all.len(), all.len() - compute);
    Ok(0)
}
