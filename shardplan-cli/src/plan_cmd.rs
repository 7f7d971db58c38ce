//! `shardplan plan`: plan one task and explain its cost.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use planner_core::planners::torchrec::{TorchRecConfig, TorchRecPricing, price_plan};
use planner_core::planners::{PlanContext, planner};
use planner_core::units::{format_bytes, group_digits};
use planner_core::{PlanDocument, PlanReport, SplitRule, Task, evaluate};

use crate::common::{CostArgs, DEFAULT_MEM, MemoryArgs, TopologyArgs, devices, load_tables, render_table};
use shardplan_files::write_atomic;

/// Arguments of `shardplan plan`.
#[derive(Args, Debug)]
pub struct PlanArgs {
    /// Tables file (.json or .csv; formats in docs/FORMATS.md; TorchRec-style JSON definitions are
    /// recognised by their `num_embeddings` field). Without it, a task is sampled from the
    /// built-in 856-table DLRM pool.
    #[arg(long)]
    pub tables: Option<PathBuf>,
    /// Dimension for a CSV without a `dim` column (such as the shared pool statistics file).
    #[arg(long)]
    pub dim: Option<u32>,
    /// Sample this many tables from the built-in pool (dims from {4..max-dim}); without it (and without
    /// --tables), a NeuroShard-protocol task for --devices and --max-dim is drawn.
    #[arg(long)]
    pub sample: Option<usize>,
    /// Largest dimension when sampling from the pool (a power of two in 4..=128).
    #[arg(long, default_value_t = 128)]
    pub max_dim: u32,
    /// Number of devices.
    #[arg(long, default_value_t = 4)]
    pub devices: usize,
    /// Memory cap per device (`4GiB`, `512MiB`, bytes), or one per device separated by commas.
    #[arg(long, default_value = DEFAULT_MEM)]
    pub mem: String,
    /// Planner (see `shardplan list`).
    #[arg(long, default_value = planner_core::planners::DEFAULT_PLANNER)]
    pub algo: String,
    /// Seed for sampling and for randomised planners.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Where to write the plan JSON (schema shardplan.plan/v1).
    #[arg(long, default_value = "plan.json")]
    pub out: PathBuf,
    /// Also write the plan as a TorchRec sharding plan (schema shardplan.torchrec-plan/v1).
    #[arg(long)]
    pub torchrec_out: Option<PathBuf>,
    /// Ranks per host for --torchrec-out placements (default: the topology's devices per host, or all
    /// devices on one host).
    #[arg(long)]
    pub local_world_size: Option<usize>,
    #[command(flatten)]
    pub topology: TopologyArgs,
    /// Memory tiers. `auto`: when the tables need more HBM than the devices have, the coldest (by
    /// misses per byte freed) move to host DRAM behind an HBM cache of a chosen share of their rows
    /// (TorchRec's `fused_uvm_caching`; `docs/COST_MODELS.md`, "Memory tiers"). `hbm`: HBM only. A
    /// `cache_load_factor` in the tables file is kept either way.
    #[arg(long, default_value = "auto", value_parser = ["auto", "hbm"])]
    pub tiers: String,
    /// List the pieces on every device.
    #[arg(long)]
    pub verbose: bool,
    #[command(flatten)]
    pub memory: MemoryArgs,
    /// Return within about this many milliseconds with the best plan found so far. NeuroShard finishes
    /// a first placement in a hurry when it runs out; dreamshard/autoshard place the tables left by
    /// load; refinement stops; torchrec stops proposing once a proposal fits. The overshoot is the
    /// up-front pricing of every piece and a final report (docs/NEUROSHARD.md, "Budget and progress").
    #[arg(long)]
    pub budget_ms: Option<f64>,
    #[command(flatten)]
    pub cost: CostArgs,
}

/// Runs `shardplan plan`.
pub fn run(args: &PlanArgs) -> Result<()> {
    let entry = planner(&args.algo)?;
    let model = args.cost.build()?;
    let devs = devices(args.devices, &args.mem)?;
    let rule = args.memory.rule()?;
    let topology = args.topology.topology(devs.count())?;
    let task = match (&args.tables, args.sample) {
        (Some(path), None) => Task::new(load_tables(path, args.dim)?, devs)?,
        (Some(_), Some(_)) => bail!("--tables and --sample are exclusive: plan a file, or sample from the pool"),
        (None, sample) => planner_core::task::sample_task(devs, args.max_dim, sample, args.seed, 0)
            .context("sampling a task from the pool")?,
    }
    .with_memory(rule)
    .with_splits(args.memory.splits(if args.torchrec_out.is_some() { SplitRule::TorchRec } else { SplitRule::Any })?)
    .with_topology(topology)?;
    let tiers = planner_core::tier::TierMode::parse(&args.tiers)?;
    let epoch = Instant::now();
    let clock = || epoch.elapsed().as_secs_f64() * 1e3;
    let mut ctx = PlanContext::new(model.as_ref(), args.seed);
    if let Some(ms) = args.budget_ms {
        if !ms.is_finite() || ms <= 0.0 {
            bail!("--budget-ms = {ms}: give a positive number of milliseconds");
        }
        ctx = ctx.with_budget(&clock, ms);
    }
    let planner = entry.build();
    let heap_before = crate::heap::reset_peak();
    let (task, plan) = planner_core::planners::plan_tiered(planner.as_ref(), &task, &ctx, tiers)
        .with_context(|| format!("planner `{}`", entry.name))?;
    let plan_time_ms = clock();
    let heap = format_bytes(crate::heap::peak().saturating_sub(heap_before) as u64);
    match planner.last_stats() {
        None => println!("Search: {plan_time_ms:.1} ms, peak heap {heap}"),
        Some(stats) if stats.proposals > 0 => {
            println!(
                "Search: {plan_time_ms:.1} ms, peak heap {heap}; TorchRec's planner partitioned {} proposals, {} fit",
                stats.proposals, stats.proposals_fit
            );
            if stats.stopped_early {
                println!("stopped early by --budget-ms: the best proposal so far");
            }
        }
        Some(stats) => {
            let cache = if stats.set_cache_hits + stats.set_cache_misses > 0 {
                format!(", set-cache hit rate {:.1}%", 100.0 * stats.hit_rate())
            } else {
                String::new()
            };
            println!(
                "Search: {:.1} ms, peak heap {heap}, {} grid searches, {} beam rounds{cache}{}",
                plan_time_ms,
                stats.grid_searches,
                stats.rounds,
                if stats.stopped_early { "; stopped early by --budget-ms, best plan so far" } else { "" }
            );
            if let Some(d) = stats.declined_gain {
                println!(
                    "Refinement's plan was predicted {:.1}% cheaper, under the {:.1}% this cost model gets a device's time wrong by (its measured error): the search's plan is kept",
                    100.0 * d.gain,
                    100.0 * d.floor
                );
            }
        }
    }
    let report = evaluate(&task, &plan, model.as_ref(), args.cost.definition)?;
    println!(
        "Plan by `{}` for {} tables ({}) on {} devices; cost model {}, definition {}",
        entry.name,
        task.tables.len(),
        format_bytes(task.total_bytes()),
        task.devices.count(),
        report.cost_model,
        report.definition
    );
    println!("Memory rule: {}; splits: {}", report.memory_rule.describe(), task.splits.name());
    if let Some(t) = &task.topology {
        println!("Topology: {}", t.describe());
    }
    if let Some(line) = tiers_line(&task) {
        println!("{line}");
    }
    println!("{}", device_table(&report));
    if let Some(line) = host_dram_line(&task, &report) {
        println!("{line}");
    }
    if args.verbose {
        for d in &report.devices {
            println!("device {}: {}", d.device, d.pieces.join(", "));
        }
    }
    if let Some([lo, hi]) = report.cost_interval_ms {
        println!("predicted cost interval {lo:.3}–{hi:.3} ms (the ensemble's calibrated interval)");
    }
    if let Some(e) = report.expected_cost_ms.filter(|&e| e != report.cost_ms) {
        println!(
            "expected as measured: {e:.3} ms (the slowest device's expected time, each device off by the profile's measured error)"
        );
    }
    println!(
        "cost {:.3} ms per iteration{} (bottleneck: device {}); fits memory (usable bytes): {}; split tables: {} ({} row-wise)",
        report.cost_ms,
        batch_label(report.global_batch),
        report.bottleneck_device,
        if report.feasible { "yes".to_string() } else { format!("NO ({})", report.violations.join("; ")) },
        plan.split_tables(),
        plan.row_split_tables()
    );
    if task.is_multi_host() {
        println!("{}", link_line(&report));
    }
    println!("{}", torchrec_line(&price_plan(&task, &plan, &TorchRecConfig::default())?));
    if let Some(path) = &args.torchrec_out {
        crate::export_cmd::write_torchrec(&task, &plan, args.local_world_size, path)?;
    }
    let doc = PlanDocument::new(entry.name, args.seed, task, &plan, report);
    let json = serde_json::to_string_pretty(&doc)?;
    write_atomic(&args.out, json.as_bytes())?;
    println!("plan written to {}", args.out.display());
    Ok(())
}

/// Host DRAM taken on every host by the tables in host memory, against what the host has; nothing when no
/// table lives there.
pub fn host_dram_line(task: &Task, report: &PlanReport) -> Option<String> {
    if report.devices.iter().all(|d| d.memory.host_bytes == 0) {
        return None;
    }
    let (dram, per_host) = planner_core::memory::host_dram(task);
    let hosts: Vec<String> = report
        .devices
        .chunks(per_host.max(1))
        .zip(&dram)
        .enumerate()
        .map(|(h, (devices, &cap))| {
            let used = devices.iter().fold(0u64, |a, d| a.saturating_add(d.memory.host_bytes));
            format!("host {h} {} of {}", format_bytes(used), format_bytes(cap))
        })
        .collect();
    let shown = hosts.len().min(8);
    let more = if hosts.len() > shown { format!(", … {} more", hosts.len() - shown) } else { String::new() };
    Some(format!("Host DRAM per host: {}{more}", hosts[..shown].join(", ")))
}

/// Which tables live in host memory (behind an HBM cache or not), or nothing when all are in HBM.
pub fn tiers_line(task: &Task) -> Option<String> {
    let cached: Vec<&planner_core::TableSpec> = task.tables.iter().filter(|t| t.in_host_memory()).collect();
    if cached.is_empty() {
        return None;
    }
    let host: u64 = cached.iter().fold(0u64, |a, t| a.saturating_add(t.size_bytes()));
    let mut shares: Vec<String> = cached
        .iter()
        .take(8)
        .map(|t| match t.cache_load_factor() {
            Some(c) => format!("{} {:.0}%", t.name, 100.0 * c),
            None => format!("{} no cache", t.name),
        })
        .collect();
    if cached.len() > 8 {
        shares.push(format!("… {} more", cached.len() - 8));
    }
    Some(format!(
        "Tiers: {} of {} tables ({}) in host memory (HBM cache share of rows: {}); the rest in HBM",
        cached.len(),
        task.tables.len(),
        format_bytes(host),
        shares.join(", ")
    ))
}

/// What holds up the bottleneck device: compute, its in-host exchange or the network.
pub fn link_line(report: &PlanReport) -> String {
    report.bottleneck_link().map_or_else(String::new, |b| {
        format!(
            "bottleneck link: {} (device {}: compute {:.3} ms, in-host exchange {:.3} ms, network {:.3} ms)",
            b.part, report.bottleneck_device, b.compute_ms, b.in_host_ms, b.network_ms
        )
    })
}

/// `" at a global batch of N"`, or nothing when the model does not say.
pub fn batch_label(global_batch: Option<u64>) -> String {
    global_batch.map_or_else(String::new, |b| format!(" at a global batch of {}", group_digits(b)))
}

/// TorchRec's own estimate of a plan, in its units and at its batch.
pub fn torchrec_line(t: &TorchRecPricing) -> String {
    let ranks = t.rank_ms.len() as u64;
    format!(
        "TorchRec's estimate of this plan: {:.3} ms (its objective: the largest per-rank sum of shard perf; {} samples per rank, global batch {})",
        t.objective_ms,
        group_digits(t.batch_per_rank),
        group_digits(t.batch_per_rank.saturating_mul(ranks))
    )
}

/// The per-device table of a report: memory terms (weights, optimizer state, buffers), their sum
/// against the usable bytes (the cap less the rule's reservation), then the costs.
pub fn device_table(report: &PlanReport) -> String {
    // An ensemble's prediction interval of each device's compute, when the model has one.
    let intervals = report.devices.iter().any(|d| d.compute_interval_ms.is_some());
    // The network part of the exchanges, on several hosts.
    let network = report.devices.iter().any(|d| d.network_ms > 0.0);
    // Host memory of cached tables.
    let host = report.devices.iter().any(|d| d.memory.host_bytes > 0);
    let rows: Vec<Vec<String>> = report
        .devices
        .iter()
        .map(|d| {
            let m = &d.memory;
            let share = if m.usable_bytes == 0 {
                "-".to_string()
            } else {
                format!("{:.1}%", 100.0 * d.bytes as f64 / m.usable_bytes as f64)
            };
            let mut row = vec![
                d.device.to_string(),
                d.pieces.len().to_string(),
                format_bytes(m.weights_bytes),
                format_bytes(m.optimizer_bytes),
                format_bytes(m.buffer_bytes),
                format_bytes(d.bytes),
                format_bytes(m.usable_bytes),
                share,
                d.dim_sum.to_string(),
                format!("{:.3}", d.compute_ms),
                format!("{:.3}", d.fw_comm_ms),
                format!("{:.3}", d.bw_comm_ms),
                format!("{:.3}", d.total_ms),
                if d.device == report.bottleneck_device { "<- bottleneck".into() } else { String::new() },
            ];
            if network {
                row.insert(12, format!("{:.3}", d.network_ms));
            }
            if host {
                row.insert(8, format_bytes(m.host_bytes));
                row.insert(5, format_bytes(m.cache_state_bytes));
            }
            if intervals {
                let interval = d.compute_interval_ms.map_or("-".into(), |[lo, hi]| format!("{lo:.3}–{hi:.3}"));
                row.insert(10, interval);
            }
            row
        })
        .collect();
    let mut headers = vec![
        "device",
        "pieces",
        "weights",
        "optimizer",
        "buffers",
        "bytes",
        "usable",
        "% of usable",
        "dim sum",
        "compute ms",
        "fw comm ms",
        "bw comm ms",
        "total ms",
        "",
    ];
    if network {
        headers.insert(12, "of which network ms");
    }
    if host {
        headers.insert(8, "host DRAM");
        headers.insert(5, "cache state");
    }
    if intervals {
        headers.insert(10, "compute interval ms");
    }
    render_table(&headers, &rows, false)
}
