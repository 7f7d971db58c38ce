//! `shardplan evaluate`: price existing plans — ours (`shardplan.plan/v1`) or TorchRec plans
//! (`shardplan.torchrec-plan/v1`) — under any cost model, definition and memory rule, with TorchRec's
//! own estimate beside ours, each labelled with its batch.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use planner_core::planners::torchrec::{TorchRecConfig, TorchRecPricing, price_plan};
use planner_core::torchrec_plan::{TORCHREC_PLAN_SCHEMA, TorchRecPlanDocument};
use planner_core::{PLAN_SCHEMA, Plan, PlanDocument, PlanReport, Task, evaluate};
use serde::Serialize;

use crate::common::{CostArgs, DEFAULT_MEM, MemoryArgs, TopologyArgs, devices, load_tables, render_table};
use crate::plan_cmd::{batch_label, device_table, link_line, torchrec_line};
use shardplan_files::write_atomic;

/// Arguments of `shardplan evaluate`.
#[derive(Args, Debug)]
pub struct EvaluateArgs {
    /// Plan files: plan documents written by `shardplan plan` (they carry their task), or TorchRec plans
    /// (`shardplan.torchrec-plan/v1`, with --tables for the tables' statistics).
    #[arg(required = true)]
    pub plans: Vec<PathBuf>,
    /// Tables file for TorchRec plans (matched by name; formats in docs/FORMATS.md).
    #[arg(long)]
    pub tables: Option<PathBuf>,
    /// Dimension for a tables CSV without a `dim` column.
    #[arg(long)]
    pub dim: Option<u32>,
    /// Memory cap per device for TorchRec plans (`4GiB`, or one per device separated by commas).
    #[arg(long, default_value = DEFAULT_MEM)]
    pub mem: String,
    /// Keep each plan document's own memory rule instead of the --memory-rule flags.
    #[arg(long)]
    pub own_rule: bool,
    #[command(flatten)]
    pub memory: MemoryArgs,
    /// Price every plan on this topology (replacing a plan document's own; without these flags each
    /// plan keeps its document's topology, and a TorchRec plan is one host).
    #[command(flatten)]
    pub topology: TopologyArgs,
    #[command(flatten)]
    pub cost: CostArgs,
    /// Also write every plan's report and TorchRec's estimate as JSON here.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// One priced plan.
#[derive(Serialize)]
struct Priced {
    plan: String,
    planner: String,
    report: PlanReport,
    torchrec: TorchRecPricing,
    torchrec_buildable: Option<String>,
}

/// Reads one plan file of either schema into its task and plan.
fn read(path: &PathBuf, args: &EvaluateArgs) -> Result<(String, Task, Plan)> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let schema: Option<String> = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("schema").and_then(|s| s.as_str()).map(str::to_string));
    if schema.as_deref() == Some(TORCHREC_PLAN_SCHEMA) {
        let doc = TorchRecPlanDocument::from_json(&text).with_context(|| format!("in {}", path.display()))?;
        let Some(tables) = &args.tables else {
            bail!("{} is a TorchRec plan: give --tables with its tables' statistics", path.display());
        };
        let task = Task::new(load_tables(tables, args.dim)?, devices(doc.world_size, &args.mem)?)?;
        let task = doc.tiered_task(&task).with_context(|| format!("in {}", path.display()))?;
        let plan = doc.to_plan(&task).with_context(|| format!("in {}", path.display()))?;
        return Ok(("torchrec-plan".into(), task, plan));
    }
    let (doc, plan) = PlanDocument::from_json(&text).with_context(|| {
        format!("in {} (expected schema {PLAN_SCHEMA:?} or {TORCHREC_PLAN_SCHEMA:?})", path.display())
    })?;
    Ok((doc.planner, doc.task, plan))
}

/// Runs `shardplan evaluate`.
pub fn run(args: &EvaluateArgs) -> Result<()> {
    let model = args.cost.build()?;
    let rule = args.memory.rule()?;
    let mut priced = Vec::with_capacity(args.plans.len());
    for path in &args.plans {
        let (planner, task, plan) = read(path, args)?;
        let task = if args.own_rule { task } else { task.with_memory(rule) };
        let task = match args.topology.topology(task.devices.count())? {
            Some(t) => task.with_topology(Some(t))?,
            None => task,
        };
        let report = evaluate(&task, &plan, model.as_ref(), args.cost.definition)
            .with_context(|| format!("pricing {}", path.display()))?;
        let torchrec = price_plan(&task, &plan, &TorchRecConfig::default())?;
        let torchrec_buildable = plan.check_torchrec_buildable(&task).err().map(|e| e.to_string());
        if args.plans.len() == 1 {
            println!(
                "{}: plan by `{planner}`, {} tables on {} devices; cost model {}, definition {}",
                path.display(),
                task.tables.len(),
                task.devices.count(),
                report.cost_model,
                report.definition
            );
            println!("Memory rule: {}", report.memory_rule.describe());
            if let Some(t) = &task.topology {
                println!("Topology: {}", t.describe());
            }
            println!("{}", device_table(&report));
            if let Some(line) = crate::plan_cmd::host_dram_line(&task, &report) {
                println!("{line}");
            }
            println!(
                "cost {:.3} ms per iteration{} (bottleneck: device {}); fits memory (usable bytes): {}",
                report.cost_ms,
                batch_label(report.global_batch),
                report.bottleneck_device,
                if report.feasible { "yes".to_string() } else { format!("NO ({})", report.violations.join("; ")) },
            );
            if task.is_multi_host() {
                println!("{}", link_line(&report));
            }
            println!("{}", torchrec_line(&torchrec));
            println!(
                "TorchRec can build it: {}",
                torchrec_buildable.as_deref().map_or("yes".into(), |e| format!("no ({e})"))
            );
        }
        priced.push(Priced { plan: path.display().to_string(), planner, report, torchrec, torchrec_buildable });
    }
    if priced.len() > 1 {
        let first = &priced[0];
        println!(
            "cost model {} (global batch {}), definition {}; TorchRec's estimate at {} samples per rank",
            first.report.cost_model,
            first.report.global_batch.map_or("unknown".into(), |b| b.to_string()),
            first.report.definition,
            first.torchrec.batch_per_rank
        );
        let rows: Vec<Vec<String>> = priced
            .iter()
            .map(|p| {
                vec![
                    p.plan.clone(),
                    p.planner.clone(),
                    format!("{:.3}", p.report.cost_ms),
                    p.report.bottleneck_device.to_string(),
                    if p.report.feasible { "yes".into() } else { "NO".into() },
                    format!("{:.3}", p.torchrec.objective_ms),
                    if p.torchrec_buildable.is_none() { "yes".into() } else { "no".into() },
                ]
            })
            .collect();
        println!(
            "{}",
            render_table(
                &["plan", "planner", "cost ms", "bottleneck", "fits", "TorchRec estimate ms", "TorchRec can build"],
                &rows,
                false
            )
        );
    }
    if let Some(out) = &args.out {
        write_atomic(out, serde_json::to_string_pretty(&priced)?.as_bytes())?;
    }
    Ok(())
}
