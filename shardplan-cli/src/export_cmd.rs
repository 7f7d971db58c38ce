//! `shardplan export-torchrec`: write a plan document as a TorchRec sharding plan.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use planner_core::torchrec_plan::to_torchrec_plan;
use planner_core::{Plan, PlanDocument, Task};

use crate::common::write_atomic;

/// Arguments of `shardplan export-torchrec`.
#[derive(Args, Debug)]
pub struct ExportArgs {
    /// A plan document written by `shardplan plan` (schema shardplan.plan/v1).
    pub plan: PathBuf,
    /// Where to write the TorchRec plan (schema shardplan.torchrec-plan/v1); apply it with the
    /// Python helper in tools/ (docs/TORCHREC.md).
    #[arg(long, default_value = "plan.torchrec.json")]
    pub out: PathBuf,
    /// Ranks per host, for the `cuda:L` of placements (default: all devices on one host).
    #[arg(long)]
    pub local_world_size: Option<usize>,
}

/// Runs `shardplan export-torchrec`.
pub fn run(args: &ExportArgs) -> Result<()> {
    let text = std::fs::read_to_string(&args.plan).with_context(|| format!("reading {}", args.plan.display()))?;
    let (doc, plan) = PlanDocument::from_json(&text).with_context(|| format!("in {}", args.plan.display()))?;
    write_torchrec(&doc.task, &plan, args.local_world_size, &args.out)
}

/// Writes `plan` of `task` as a TorchRec sharding plan to `out`.
pub fn write_torchrec(task: &Task, plan: &Plan, local_world_size: Option<usize>, out: &Path) -> Result<()> {
    let doc = to_torchrec_plan(task, plan, local_world_size).context("writing the plan as a TorchRec plan")?;
    write_atomic(out, serde_json::to_string_pretty(&doc)?.as_bytes())?;
    println!("TorchRec sharding plan written to {}", out.display());
    Ok(())
}
