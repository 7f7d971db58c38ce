//! `measure-plan`: the real cost of a plan, in the same breakdown the planner predicts
//! (per device compute, forward comm, backward comm, total; bottleneck; cost). This is the ground
//! truth benchmarks judge planners by.
//!
//! Procedure (NeuroShard definition, SPEC section 1): measure every device's fused set; measure the
//! backward all-to-all of the per-device dims (no delays); derive each device's start delay from
//! measured compute + backward comm; measure the forward all-to-all with those delays. With
//! `--definition four-phase` the forward all-to-all runs without delays. Pieces of a split table
//! share the table's lookups (same seed), as the columns of one table do in training.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use planner_core::cost::{ComputeSplit, CostDefinition, DeviceReport, PlanReport};
use planner_core::dataset::{Protocol, median};
use planner_core::document::PlanDocument;
use planner_core::memory::{DeviceMemoryReport, MemoryRule};
use planner_core::table::TableSpec;
use planner_core::task::task_seed;
use serde_json::json;

use crate::backend::{Backend, Timing, check_fits, check_fp32};
use crate::workload::{CommSample, generate_bags};

/// Options of `measure-plan`.
#[derive(Args, Debug)]
pub struct MeasurePlanArgs {
    /// Plan file (`shardplan.plan/v1`).
    pub plan: PathBuf,
    /// Bags per table.
    #[arg(long, default_value_t = 65_536)]
    pub batch_size: u32,
    /// Seed of the synthetic lookups.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Untimed runs.
    #[arg(long, default_value_t = 5)]
    pub warmup: u32,
    /// Timed runs.
    #[arg(long, default_value_t = 10)]
    pub reps: u32,
    /// Cost definition.
    #[arg(long, value_enum, default_value_t = DefinitionArg::NeuroShard)]
    pub definition: DefinitionArg,
    /// Do not flush caches before timed runs.
    #[arg(long)]
    pub no_flush: bool,
    /// Write the JSON report here (default: stdout).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Measure compute only and take every device's comm times (and start delays) from the plan's
    /// predicted report: for a machine with fewer devices than the plan (one GPU timing each device's
    /// tables in turn). The report's `comm` field says so.
    #[arg(long)]
    pub comm_from_plan: bool,
}

/// `--definition`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefinitionArg {
    /// Forward comm sees the start delays compute + backward comm create.
    NeuroShard,
    /// Max over devices of the four phases, no delays.
    FourPhase,
}

/// Schema tag of measure-plan reports.
pub const MEASURED_PLAN_SCHEMA: &str = "shardplan.measured-plan/v1";

/// Runs `measure-plan`.
pub fn measure_plan(backend: &mut dyn Backend, args: &MeasurePlanArgs) -> Result<()> {
    if args.batch_size == 0 || args.reps == 0 {
        anyhow::bail!("--batch-size = {} and --reps = {} must both be at least 1", args.batch_size, args.reps);
    }
    let text = std::fs::read_to_string(&args.plan).with_context(|| format!("reading plan {}", args.plan.display()))?;
    let (doc, plan) =
        PlanDocument::from_json(&text).with_context(|| format!("parsing plan {}", args.plan.display()))?;
    let task = &doc.task;
    check_fp32(&task.tables)?;
    let n = task.devices.count();
    if let Some(max) = backend.max_comm_devices()
        && n > max
        && !args.comm_from_plan
    {
        anyhow::bail!(
            "the plan has {n} devices but the {} backend sees {max}; pass --comm-from-plan to measure compute only",
            backend.hardware().backend.name()
        );
    }
    if args.comm_from_plan && doc.report.devices.len() != n {
        anyhow::bail!("--comm-from-plan: the plan's report has {} devices, its task {n}", doc.report.devices.len());
    }
    if (args.batch_size as usize) < n {
        anyhow::bail!("--batch-size = {} is smaller than the plan's {n} devices", args.batch_size);
    }
    let timing = Timing { warmup: args.warmup, reps: args.reps };
    let by_device = plan.pieces_by_device(n);
    let pieces = plan.pieces();
    let mut devices = Vec::with_capacity(n);
    let mut device_dims = Vec::with_capacity(n);
    for (device, idx) in by_device.iter().enumerate() {
        let set: Vec<TableSpec> = idx
            .iter()
            .map(|&i| {
                let p = pieces[i];
                let mut t = task.tables[p.table_id].clone();
                t.name = format!("{}[{}..{}]", t.name, p.col_offset, p.col_offset + p.dim);
                t.dim = p.dim;
                // A row-wise piece is measured as the cost models price it: a table of its own rows
                // serving its share of the lookups, with the table's access distribution.
                if let Some(r) = p.rows
                    && r.count < t.rows
                {
                    t.pooling_factor *= r.count as f64 / t.rows as f64;
                    t.name = format!("{}[rows {}..{}]", t.name, r.offset, r.offset + r.count);
                    t.rows = r.count;
                }
                t
            })
            .collect();
        let (compute_ms, split) = if set.is_empty() {
            (0.0, ComputeSplit { fwd_ms: 0.0, bwd_ms: 0.0 })
        } else {
            let on = device % backend.compute_devices();
            check_fits(backend, on, &set).with_context(|| format!("device {device} of the plan"))?;
            let bags = idx
                .iter()
                .zip(&set)
                .map(|(&i, t)| generate_bags(t, args.batch_size, task_seed(args.seed, pieces[i].table_id)))
                .collect::<Result<Vec<_>>>()?;
            let times = backend.compute(on, &set, bags, task_seed(args.seed, 1 << 20 | device), timing)?;
            let total: Vec<f64> = times.fwd_ms.iter().zip(&times.bwd_ms).map(|(f, b)| f + b).collect();
            (median(&total), ComputeSplit { fwd_ms: median(&times.fwd_ms), bwd_ms: median(&times.bwd_ms) })
        };
        device_dims.push(set.iter().map(|t| t.dim).collect::<Vec<u32>>());
        devices.push(DeviceReport {
            device,
            pieces: set.iter().map(|t| t.name.clone()).collect(),
            bytes: set.iter().map(TableSpec::size_bytes).sum(),
            mem_cap_bytes: task.devices.mem_cap_bytes()[device],
            memory: DeviceMemoryReport::weights_rule(&set, task.devices.mem_cap_bytes()[device]),
            dim_sum: set.iter().map(|t| u64::from(t.dim)).sum(),
            compute_ms,
            compute_split: Some(split),
            fw_comm_ms: 0.0,
            bw_comm_ms: 0.0,
            delay_ms: 0.0,
            total_ms: 0.0,
        });
    }
    let batch = args.batch_size as usize;
    let (definition, delays, fw, bw) = if args.comm_from_plan {
        let p = &doc.report.devices;
        let definition = match args.definition {
            DefinitionArg::FourPhase => CostDefinition::FourPhase,
            DefinitionArg::NeuroShard => CostDefinition::NeuroShard,
        };
        (
            definition,
            p.iter().map(|d| d.delay_ms).collect(),
            p.iter().map(|d| d.fw_comm_ms).collect(),
            p.iter().map(|d| d.bw_comm_ms).collect(),
        )
    } else {
        measure_comm(backend, args, device_dims, &devices, batch, timing)?
    };
    let comm_source = if args.comm_from_plan {
        format!("modelled: taken from the plan's report ({})", doc.report.cost_model)
    } else {
        "measured".to_string()
    };

    let mut violations = Vec::new();
    for (i, d) in devices.iter_mut().enumerate() {
        d.bw_comm_ms = bw[i];
        d.fw_comm_ms = fw[i];
        d.delay_ms = delays[i];
        d.total_ms = d.compute_ms + d.bw_comm_ms + d.fw_comm_ms;
        if d.bytes > d.mem_cap_bytes {
            violations.push(format!("device {i}: {} bytes placed, cap {}", d.bytes, d.mem_cap_bytes));
        }
    }
    let (bottleneck_device, cost_ms) = devices
        .iter()
        .map(|d| d.total_ms)
        .enumerate()
        .fold((0, f64::NEG_INFINITY), |b, (i, c)| if c > b.1 { (i, c) } else { b });
    let measured = PlanReport {
        cost_model: format!("measured:{}", backend.hardware().fingerprint),
        definition,
        cost_ms,
        bottleneck_device,
        // Bytes above are the tables' sizes against whole caps: the weights rule.
        memory_rule: MemoryRule::Weights,
        feasible: violations.is_empty(),
        violations,
        devices,
    };
    print_comparison(&doc.report, &measured);
    let out = json!({
        "schema": MEASURED_PLAN_SCHEMA,
        "plan": args.plan.display().to_string(),
        "planner": doc.planner,
        "hardware": backend.hardware(),
        "batch_size": args.batch_size,
        "seed": args.seed,
        "protocol": Protocol { warmup: args.warmup, reps: args.reps, cache_flush: backend.cache_flush() },
        "comm": comm_source,
        "predicted": doc.report,
        "measured": measured,
    });
    let text = serde_json::to_string_pretty(&out)? + "\n";
    match &args.out {
        Some(p) => std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))?,
        None => print!("{text}"),
    }
    Ok(())
}

/// (definition, start delays, forward comm, backward comm), per device, in ms.
type CommTimesPerDevice = (CostDefinition, Vec<f64>, Vec<f64>, Vec<f64>);

/// Measures the all-to-all of a plan: backward without delays, then (NeuroShard) forward with the start
/// delays that measured compute + backward comm create. Returns (definition, delays, fw, bw) per device.
fn measure_comm(
    backend: &mut dyn Backend,
    args: &MeasurePlanArgs,
    device_dims: Vec<Vec<u32>>,
    devices: &[DeviceReport],
    batch: usize,
    timing: Timing,
) -> Result<CommTimesPerDevice> {
    let n = devices.len();
    let no_delay = CommSample { device_dims: device_dims.clone(), delays_ms: vec![0.0; n] };
    let first = backend.comm(&no_delay, batch, timing)?;
    let bw: Vec<f64> = first.bw_ms.iter().map(|v| median(v)).collect();
    let (definition, delays, fw) = match args.definition {
        DefinitionArg::FourPhase => {
            (CostDefinition::FourPhase, vec![0.0; n], first.fw_ms.iter().map(|v| median(v)).collect::<Vec<_>>())
        }
        DefinitionArg::NeuroShard => {
            let start: Vec<f64> = devices.iter().zip(&bw).map(|(d, b)| d.compute_ms + b).collect();
            let min = start.iter().copied().fold(f64::INFINITY, f64::min);
            let delays: Vec<f64> = start.iter().map(|s| s - min).collect();
            let second = backend.comm(&CommSample { device_dims, delays_ms: delays.clone() }, batch, timing)?;
            (CostDefinition::NeuroShard, delays, second.fw_ms.iter().map(|v| median(v)).collect())
        }
    };
    Ok((definition, delays, fw, bw))
}

/// Predicted vs measured per device, on stderr.
fn print_comparison(predicted: &PlanReport, measured: &PlanReport) {
    eprintln!("device  predicted compute/fw/bw/total ms   measured compute/fw/bw/total ms");
    for m in &measured.devices {
        let p = predicted.devices.iter().find(|p| p.device == m.device);
        let pred = p.map_or_else(
            || "-".to_string(),
            |p| format!("{:8.3} {:7.3} {:7.3} {:8.3}", p.compute_ms, p.fw_comm_ms, p.bw_comm_ms, p.total_ms),
        );
        eprintln!(
            "{:>6}  {pred:<36} {:8.3} {:7.3} {:7.3} {:8.3}",
            m.device, m.compute_ms, m.fw_comm_ms, m.bw_comm_ms, m.total_ms
        );
    }
    eprintln!(
        "cost: predicted {:.3} ms (device {}, {}), measured {:.3} ms (device {})",
        predicted.cost_ms,
        predicted.bottleneck_device,
        predicted.cost_model,
        measured.cost_ms,
        measured.bottleneck_device
    );
}
