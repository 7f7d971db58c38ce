//! `shardplan export-torchrec`: write a plan document as a TorchRec sharding plan.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use planner_core::memory::plan_violations;
use planner_core::torchrec_plan::to_torchrec_plan;
use planner_core::{Plan, PlanDocument, Task};

use crate::common::MemoryArgs;
use shardplan_files::write_atomic;

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
    /// The plan is checked against this rule before it is written (TorchRec applies its own: a plan that
    /// only fits the seed papers' `weights` rule would run out of memory there).
    #[command(flatten)]
    pub memory: MemoryArgs,
}

/// Runs `shardplan export-torchrec`.
pub fn run(args: &ExportArgs) -> Result<()> {
    let text = std::fs::read_to_string(&args.plan).with_context(|| format!("reading {}", args.plan.display()))?;
    let (doc, plan) = PlanDocument::from_json(&text).with_context(|| format!("in {}", args.plan.display()))?;
    let task = doc.task.with_memory(args.memory.rule()?);
    write_torchrec(&task, &plan, args.local_world_size, &args.out)
}

/// Writes `plan` of `task` as a TorchRec sharding plan to `out`, after checking that TorchRec can build
/// it and that it fits every device under the task's memory rule.
pub fn write_torchrec(task: &Task, plan: &Plan, local_world_size: Option<usize>, out: &Path) -> Result<()> {
    plan.check_torchrec_buildable(task).context(
        "not writing a TorchRec plan TorchRec cannot build (replan with --splits torchrec, the default of `plan --torchrec-out`)",
    )?;
    let over = plan_violations(task, plan)?;
    if !over.is_empty() {
        bail!(
            "the plan does not fit under the {} memory rule ({}); not writing a TorchRec plan that would run out of memory \
             (replan under this rule, or pass --memory-rule weights to export it anyway)",
            task.memory.name(),
            over.join("; ")
        );
    }
    let doc = to_torchrec_plan(task, plan, local_world_size).context("writing the plan as a TorchRec plan")?;
    write_atomic(out, serde_json::to_string_pretty(&doc)?.as_bytes())?;
    println!("TorchRec sharding plan written to {}", out.display());
    Ok(())
}
