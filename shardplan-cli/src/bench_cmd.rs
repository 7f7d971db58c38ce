//! `shardplan bench`: every registered planner on the NeuroShard protocol (SPEC section 3), judged
//! by the cost model's prediction and, optionally, by measurement.
//!
//! * **Cells.** For each device count and max dim, `--tasks` seeded tasks; per planner the mean cost,
//!   valid plans, improvement over the best seed baseline, planning time p50/p95, the set-cache hit
//!   rate of searching planners, and the mean gap to the task's lower bound
//!   ([`planner_core::bound::lower_bound`]).
//! * **Measured judge.** With `--measure-with PATH` (a `shardplan-collect` binary), `--measure-tasks`
//!   tasks of each measured cell are measured: the first tasks, in suite order, that every planner of
//!   `--measure-planners` solved (the others are counted as skipped, with who failed). A task's plans
//!   are written as plan documents and timed together by one `shardplan-collect measure-plan` call on
//!   `--measure-backend`, in `--measure-rounds` interleaved rounds, under its contention guard. Per cell
//!   the report gives Kendall's tau between predicted and measured costs per task, the MAPE and bias of
//!   plan costs, the MAPE of device costs, the coverage of the predicted intervals, the judge's own
//!   noise (the coefficient of variation of a plan's cost across rounds), every planner's measured mean,
//!   and the best of `neuroshard` / `neuroshard+refine` against every other planner, task by task. Use a
//!   cost model trained on the measuring hardware (`shardplan-train calibrate`).
//! * **Optimality.** On small tasks (≤ 12 tables) the exact search's optimum over unsplit placements,
//!   and every planner's gap to it.
//! * **Scale.** Planning time at 100 tables / 8 devices, 200 / 16 and 500 / 64.
//!
//! Times are wall-clock on this machine, one planner at a time, in this process.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use planner_core::bound::{ExactConfig, exact, lower_bound};
use planner_core::cost::{CostDefinition, CostModel};
use planner_core::document::MeasuredPlans;
use planner_core::eval::{
    JudgeSummary, JudgedPlan, JudgedTask, Paired, PlannerSummary, TaskOutcome, judge_summary, paired, percentile,
    summarize,
};
use planner_core::planners::{PlanContext, PlannerEntry, planners};
use planner_core::task::{PoolHalf, Protocol, SuiteSpec, SuiteTask};
use planner_core::{Devices, MemoryRule, SplitRule, TableSpec, Task};
use planner_core::{Error, Plan, PlanDocument, evaluate};
use serde::Serialize;

use crate::common::{CostArgs, MemoryArgs, render_table};
use crate::tasks_cmd::{Rules, with_rule};
use shardplan_files::write_atomic;

/// Arguments of `shardplan bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Device counts, comma-separated.
    #[arg(long, default_value = "4,8")]
    pub devices: String,
    /// Max dims, comma-separated (each a power of two from 4 to 128).
    #[arg(long, default_value = "4,8,16,32,64,128")]
    pub max_dims: String,
    /// Tasks per cell.
    #[arg(long, default_value_t = 100)]
    pub tasks: usize,
    /// Suite seed (each cell's suite is seeded from it, the device count and the max dim).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The CI size: 4 devices, max dims 16 and 128, 4 tasks, small optimality and scale runs.
    #[arg(long)]
    pub quick: bool,
    /// Comma-separated planners, or `all`.
    #[arg(long, default_value = "all")]
    pub algos: String,
    /// Tasks in the optimality section (exact search on 8 to 12 tables, 4 devices); 0 skips it.
    #[arg(long, default_value_t = 20)]
    pub exact_tasks: usize,
    /// Halvings per table the exact search may make (0: unsplit placements only; each level multiplies
    /// the search by up to 2^tables).
    #[arg(long, default_value_t = 0)]
    pub exact_split_depth: u32,
    /// Tasks per scale point (100/8, 200/16, 500/64); 0 skips the scale section.
    #[arg(long, default_value_t = 3)]
    pub scale_tasks: usize,
    /// Tasks per cell of the seed-protocol section (DreamShard and AutoShard protocols, unseen tables,
    /// four-phase cost); 0 skips it.
    #[arg(long, default_value_t = 20)]
    pub protocol_tasks: usize,
    /// A `shardplan-collect` binary: measure plans with it (the measured judge).
    #[arg(long)]
    pub measure_with: Option<PathBuf>,
    /// Backend of the measurements (`cpu` or `cuda`).
    #[arg(long, default_value = "cpu")]
    pub measure_backend: String,
    /// Tasks measured per cell: the first ones every planner of `--measure-planners` solved.
    #[arg(long, default_value_t = 10)]
    pub measure_tasks: usize,
    /// Planners whose plans are measured, comma-separated (`random` checks no memory and is left out by
    /// default; so are the learned policies, whose plans cost measuring time).
    #[arg(
        long,
        default_value = "size,dim,lookup,size-lookup,torchrec,neuroshard,neuroshard+refine,size-lookup+refine"
    )]
    pub measure_planners: String,
    /// Rounds of every task's measurement (each set and all-to-all timed once per round, interleaved).
    #[arg(long, default_value_t = 3)]
    pub measure_rounds: u32,
    /// Cells measured, as `DEVICESxMAXDIM` comma-separated (e.g. `4x128,8x128`); default: all.
    #[arg(long)]
    pub measure_cells: Option<String>,
    /// Bags per table in the measurements.
    #[arg(long, default_value_t = 4096)]
    pub measure_batch: u32,
    /// Timed runs per set and round.
    #[arg(long, default_value_t = 10)]
    pub measure_reps: u32,
    /// Time compute only and take comm from the plan's prediction (a machine with fewer devices than the plan).
    #[arg(long)]
    pub measure_comm_from_plan: bool,
    /// Where plan documents and measurements are kept (default: `bench-plans` next to `--out`, or in
    /// the current directory).
    #[arg(long)]
    pub plans_dir: Option<PathBuf>,
    /// Write the JSON result here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write the Markdown report here (it is printed either way).
    #[arg(long)]
    pub md: Option<PathBuf>,
    #[command(flatten)]
    pub cost: CostArgs,
    /// Every task of every section is planned and judged under this rule.
    #[command(flatten)]
    pub memory: MemoryArgs,
}

/// One planner's row in a cell.
#[derive(Serialize)]
pub struct PlannerCell {
    /// Cost, validity, improvement and planning time.
    #[serde(flatten)]
    pub summary: PlannerSummary,
    /// Set-cache hit rate over the cell, for planners that search.
    pub cache_hit_rate: Option<f64>,
    /// Mean over valid plans without row-wise pieces (the plans the bound covers) of
    /// `(cost − bound) / bound`, percent.
    pub gap_to_bound_pct: Option<f64>,
    /// Mean measured cost over the measured tasks every measured planner solved (measured judge only).
    pub measured_mean_ms: Option<f64>,
    /// Mean predicted cost over the same tasks.
    pub predicted_mean_ms: Option<f64>,
}

/// One (devices, max dim) cell.
#[derive(Serialize)]
pub struct Cell {
    /// Devices per task.
    pub devices: usize,
    /// Largest table dim.
    pub max_dim: u32,
    /// Tasks.
    pub tasks: usize,
    /// Mean lower bound over the tasks.
    pub lower_bound_mean_ms: f64,
    /// Whether the bound is proven for this cost model (see `planner_core::bound`).
    pub lower_bound_proven: bool,
    /// One row per planner.
    pub planners: Vec<PlannerCell>,
    /// Measured judge, when run on this cell.
    pub measured: Option<MeasuredCell>,
}

/// The measured judge on one cell.
#[derive(Serialize)]
pub struct MeasuredCell {
    /// Tasks measured.
    pub tasks: usize,
    /// Tasks of the suite passed over because a measured planner had no valid plan for them, with the
    /// planners that failed.
    pub skipped: Vec<(usize, Vec<String>)>,
    /// Accuracy, ranking, noise and per-planner means (`planner_core::eval::judge_summary`).
    pub summary: JudgeSummary,
    /// The best of `neuroshard` / `neuroshard+refine` against every other measured planner.
    pub paired: Vec<Paired>,
    /// Where the plans and measurements are.
    pub dir: String,
    /// The measuring machine's fingerprint (`shardplan-collect`'s hardware record of the first measured
    /// task; `None` when no task was measured).
    pub hardware: Option<String>,
    /// The machine the cost model was measured on, when its card records one; when it differs from
    /// `hardware` the accuracy figures compare predictions for one machine with times on another.
    pub model_hardware: Option<String>,
}

#[derive(Serialize)]
pub struct OptimalityRow {
    /// Planner.
    pub planner: String,
    /// Tasks with a valid plan.
    pub valid: usize,
    /// Mean over valid plans of `(cost − optimum) / optimum`, percent (negative: it beat the unsplit
    /// optimum by splitting).
    pub gap_to_exact_pct: Option<f64>,
    /// Tasks where it was within 0.01% of the optimum or better.
    pub optimal: usize,
}

/// The optimality section.
#[derive(Serialize)]
pub struct Optimality {
    /// Tasks.
    pub tasks: usize,
    /// Tasks left out: some table fits no device unsplit.
    pub skipped: usize,
    /// Tasks the exact search completed (proven optimum over unsplit placements).
    pub complete: usize,
    /// Halvings per table the exact search could make.
    pub split_depth: u32,
    /// Mean gap of the lower bound under the optimum, percent.
    pub bound_gap_pct: f64,
    /// Per planner.
    pub planners: Vec<OptimalityRow>,
}

/// One scale point.
#[derive(Serialize)]
pub struct ScaleRow {
    /// Tables per task.
    pub tables: usize,
    /// Devices.
    pub devices: usize,
    /// Per-device cap of the first task (see `scale_task`).
    pub mem_cap_bytes: u64,
    /// Planner.
    pub planner: String,
    /// Median planning time, ms.
    pub plan_time_p50_ms: f64,
    /// Slowest planning time, ms.
    pub plan_time_max_ms: f64,
    /// Valid plans.
    pub valid: usize,
    /// Tasks.
    pub tasks: usize,
    /// Mean cost of the valid plans.
    pub mean_cost_valid_ms: Option<f64>,
}

/// One planner on a seed-protocol cell.
#[derive(Serialize)]
pub struct ProtocolRow {
    /// Cost (four-phase), validity, improvement over the best seed baseline and planning time.
    #[serde(flatten)]
    pub summary: PlannerSummary,
    /// Mean over valid plans of min / max device compute, percent (AutoShard's degree of balance).
    pub balance_pct: Option<f64>,
}

/// A cell of the seed-protocol section.
#[derive(Serialize)]
pub struct ProtocolCell {
    /// What it is.
    pub name: String,
    /// The suite drawn.
    pub spec: SuiteSpec,
    /// One row per planner.
    pub planners: Vec<ProtocolRow>,
}

/// The JSON result of `shardplan bench`.
#[derive(Serialize)]
pub struct BenchResult {
    /// Schema tag.
    pub schema: &'static str,
    /// Cost model (the prediction judge).
    pub cost_model: String,
    /// Memory rule every task was planned and judged under.
    pub memory_rule: MemoryRule,
    /// Split rule every task was planned under.
    pub splits: SplitRule,
    /// Suite seed.
    pub seed: u64,
    /// The cells.
    pub cells: Vec<Cell>,
    /// Exact-search optimality gaps.
    pub optimality: Option<Optimality>,
    /// Planning time at scale.
    pub scale: Vec<ScaleRow>,
    /// The DreamShard and AutoShard protocols (four-phase cost, unseen tables).
    pub seed_protocols: Vec<ProtocolCell>,
}

/// Schema tag of bench results.
pub const BENCH_SCHEMA: &str = "shardplan.bench/v1";

fn parse_list<T: std::str::FromStr>(flag: &str, s: &str) -> Result<Vec<T>> {
    s.split(',').map(|x| x.trim().parse::<T>().map_err(|_| anyhow::anyhow!("{flag}: {x:?} is not a number"))).collect()
}

/// One planner run on one task.
struct Run {
    plan: Option<Plan>,
    outcome: TaskOutcome,
    hits: u64,
    misses: u64,
    /// AutoShard's degree of balance: min / max device compute.
    balance: Option<f64>,
}

/// min / max over devices of the compute time (AutoShard's degree of balance; `None` with no compute).
fn balance(report: &planner_core::PlanReport) -> Option<f64> {
    let c: Vec<f64> = report.devices.iter().map(|d| d.compute_ms).collect();
    let max = c.iter().copied().fold(0.0, f64::max);
    (max > 0.0).then(|| c.iter().copied().fold(f64::INFINITY, f64::min) / max)
}

/// The seed protocols the learned policies were published on (SPEC section 7), every planner judged
/// by the cost model under DreamShard's four-phase definition, on tables of the pool's test half.
fn seed_protocols(
    entries: &[&PlannerEntry],
    model: &dyn CostModel,
    count: usize,
    seed: u64,
    rule: Rules,
) -> Result<Vec<ProtocolCell>> {
    let cells = [
        ("DreamShard protocol, unseen tables", Protocol::DreamShard, 4, (10, 101)),
        ("DreamShard protocol, 8 devices (transfer)", Protocol::DreamShard, 8, (20, 201)),
        ("AutoShard protocol, 80 tables / 8 devices", Protocol::AutoShard, 8, (80, 81)),
    ];
    let mut out = Vec::new();
    for (name, protocol, devices, tables) in cells {
        let spec = SuiteSpec {
            protocol,
            devices,
            max_dim: 16,
            tables: Some(tables),
            pool_half: Some(PoolHalf::Test),
            count,
            seed: seed ^ 0x5eed_9707 ^ devices as u64,
        };
        let suite = with_rule(spec.tasks().with_context(|| format!("drawing the {name} suite"))?, rule);
        let runs: Vec<Vec<Run>> = entries
            .iter()
            .map(|e| suite.iter().map(|st| run_with(e, st, model, CostDefinition::FourPhase)).collect())
            .collect::<Result<_>>()?;
        let pairs: Vec<(String, Vec<TaskOutcome>)> = entries
            .iter()
            .zip(&runs)
            .map(|(e, r)| (e.name.to_string(), r.iter().map(|x| x.outcome.clone()).collect()))
            .collect();
        let summary = summarize(&pairs, |n| planner_core::planners::planner(n).is_ok_and(|e| e.is_seed_baseline));
        let planners = summary
            .into_iter()
            .zip(&runs)
            .map(|(summary, r)| {
                let b: Vec<f64> = r.iter().filter_map(|x| x.balance).collect();
                ProtocolRow { summary, balance_pct: mean(&b).map(|x| 100.0 * x) }
            })
            .collect();
        eprintln!("seed protocol cell `{name}`: done");
        out.push(ProtocolCell { name: name.into(), spec, planners });
    }
    Ok(out)
}

fn run_one(entry: &PlannerEntry, st: &SuiteTask, model: &dyn CostModel, args: &BenchArgs) -> Result<Run> {
    run_with(entry, st, model, args.cost.definition)
}

/// [`run_one`] under `definition`.
fn run_with(entry: &PlannerEntry, st: &SuiteTask, model: &dyn CostModel, definition: CostDefinition) -> Result<Run> {
    let planner = entry.build();
    let ctx = PlanContext::new(model, st.seed);
    let start = Instant::now();
    let result = planner.plan(&st.task, &ctx);
    let plan_time_ms = start.elapsed().as_secs_f64() * 1e3;
    let (hits, misses) = planner.last_stats().map_or((0, 0), |s| (s.set_cache_hits, s.set_cache_misses));
    match result {
        Ok(plan) => {
            let report = evaluate(&st.task, &plan, model, definition)?;
            let cost_ms = report.feasible.then_some(report.cost_ms);
            let balance = report.feasible.then(|| balance(&report));
            Ok(Run {
                plan: report.feasible.then_some(plan),
                outcome: TaskOutcome { cost_ms, plan_time_ms },
                hits,
                misses,
                balance: balance.flatten(),
            })
        }
        Err(Error::NoFit { .. } | Error::NoPlan { .. } | Error::ReservationExceedsCap { .. }) => {
            Ok(Run { plan: None, outcome: TaskOutcome { cost_ms: None, plan_time_ms }, hits, misses, balance: None })
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!("planner `{}` on task {}", entry.name, st.index))),
    }
}

/// Measures the plans `docs` of one task together with the collector (reusing an earlier measurement).
fn measure(args: &BenchArgs, bin: &Path, docs: &[PathBuf], out_path: &Path, seed: u64) -> Result<MeasuredPlans> {
    if !out_path.is_file() {
        let mut cmd = Command::new(bin);
        cmd.args(["--backend", &args.measure_backend, "--quiet", "measure-plan"]).args(docs).args([
            "--batch-size",
            &args.measure_batch.to_string(),
            "--reps",
            &args.measure_reps.to_string(),
            "--rounds",
            &args.measure_rounds.to_string(),
            "--seed",
            &seed.to_string(),
            "--out",
        ]);
        cmd.arg(out_path);
        if args.measure_comm_from_plan {
            cmd.arg("--comm-from-plan");
        }
        let output = cmd.output().with_context(|| format!("running {}", bin.display()))?;
        if !output.status.success() {
            bail!("{} measure-plan failed: {}", bin.display(), String::from_utf8_lossy(&output.stderr).trim());
        }
    }
    let text = std::fs::read_to_string(out_path).with_context(|| format!("reading {}", out_path.display()))?;
    MeasuredPlans::from_json(&text).with_context(|| format!("parsing {}", out_path.display()))
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The planners whose best measured plan is ours.
pub const OURS: [&str; 2] = ["neuroshard", "neuroshard+refine"];

#[allow(clippy::too_many_arguments)]
fn measure_cell(
    args: &BenchArgs,
    bin: &Path,
    dir: &Path,
    entries: &[&PlannerEntry],
    suite: &[SuiteTask],
    runs: &[Vec<Run>],
    model: &dyn CostModel,
    rows: &mut [PlannerCell],
) -> Result<MeasuredCell> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let wanted: Vec<String> = args.measure_planners.split(',').map(|s| s.trim().to_string()).collect();
    let measured: Vec<usize> = (0..entries.len()).filter(|&p| wanted.iter().any(|w| w == entries[p].name)).collect();
    if measured.is_empty() {
        bail!("--measure-planners {:?} names none of the planners run (--algos)", args.measure_planners);
    }
    let names: Vec<String> = measured.iter().map(|&p| entries[p].name.to_string()).collect();
    let mut tasks = Vec::new();
    let mut skipped = Vec::new();
    let model_hardware = model.reference_speed().map(|(fingerprint, _)| fingerprint);
    let mut hardware: Option<String> = None;
    for (k, st) in suite.iter().enumerate() {
        if tasks.len() >= args.measure_tasks {
            break;
        }
        let failed: Vec<String> =
            measured.iter().filter(|&&p| runs[p][k].plan.is_none()).map(|&p| entries[p].name.to_string()).collect();
        if !failed.is_empty() {
            skipped.push((st.index, failed));
            continue;
        }
        let mut docs = Vec::new();
        for &p in &measured {
            let Some(plan) = runs[p][k].plan.as_ref() else { continue };
            let report = evaluate(&st.task, plan, model, args.cost.definition)?;
            let path = dir.join(format!("task{}_{}.plan.json", st.index, entries[p].name.replace('+', "-")));
            let doc = PlanDocument::new(entries[p].name, st.seed, st.task.clone(), plan, report);
            write_atomic(&path, serde_json::to_string_pretty(&doc)?.as_bytes())?;
            docs.push(path);
        }
        let out = dir.join(format!("task{}.measured.json", st.index));
        eprintln!("  measuring task {} ({} plans)", st.index, docs.len());
        let m = measure(args, bin, &docs, &out, st.seed)?;
        if hardware.is_none() {
            let here = &m.hardware.fingerprint;
            if let Some(trained) = model_hardware.as_ref().filter(|t| *t != here) {
                eprintln!(
                    "  note: the cost model was measured on `{trained}`, these plans on `{here}`: its accuracy here is across machines"
                );
            }
            hardware = Some(here.clone());
        }
        tasks.push(JudgedTask {
            task: format!("task {}", st.index),
            speed_factor: m.speed_factor(model),
            plans: m
                .plans
                .into_iter()
                .map(|p| JudgedPlan {
                    planner: p.planner,
                    predicted: p.predicted,
                    measured: p.measured,
                    round_costs_ms: p.round_costs_ms,
                })
                .collect(),
        });
    }
    let summary = judge_summary(&tasks, &names);
    for row in &summary.planners {
        if let Some(r) = rows.iter_mut().find(|r| r.summary.planner == row.planner) {
            r.measured_mean_ms = row.measured_mean_ms;
            r.predicted_mean_ms = row.predicted_mean_ms;
        }
    }
    let ours: Vec<String> = OURS.iter().filter(|o| names.iter().any(|n| n == *o)).map(|o| (*o).to_string()).collect();
    let paired = if ours.is_empty() {
        Vec::new()
    } else {
        names.iter().filter(|n| !ours.contains(n)).filter_map(|n| paired(&tasks, &ours, n)).collect()
    };
    Ok(MeasuredCell {
        tasks: tasks.len(),
        skipped,
        summary,
        paired,
        dir: dir.display().to_string(),
        hardware,
        model_hardware,
    })
}

fn optimality(
    args: &BenchArgs,
    entries: &[&PlannerEntry],
    model: &dyn CostModel,
    count: usize,
    rule: Rules,
) -> Result<Optimality> {
    let spec = SuiteSpec { tables: Some((8, 13)), seed: args.seed ^ 0x0e7a, ..SuiteSpec::neuroshard(4, 128, count, 0) };
    let suite = with_rule(spec.tasks()?, rule);
    let mut gaps: Vec<Vec<f64>> = vec![Vec::new(); entries.len()];
    let mut optimal = vec![0; entries.len()];
    let mut bound_gaps = Vec::new();
    let mut complete = 0;
    let mut skipped = 0;
    for st in &suite {
        let ex = match exact(
            &st.task,
            model,
            &ExactConfig {
                definition: args.cost.definition,
                max_split_depth: args.exact_split_depth,
                ..ExactConfig::default()
            },
        ) {
            Ok(ex) => ex,
            // A table too large for any device unsplit: no unsplit optimum to compare with.
            Err(Error::NoPlan { .. } | Error::NoFit { .. } | Error::ReservationExceedsCap { .. }) => {
                skipped += 1;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        complete += usize::from(ex.complete);
        let bound = lower_bound(&st.task, model)?;
        bound_gaps.push((ex.cost_ms - bound.cost_ms) / ex.cost_ms * 100.0);
        for (p, entry) in entries.iter().enumerate() {
            if let Some(c) = run_one(entry, st, model, args)?.outcome.cost_ms {
                let gap = (c - ex.cost_ms) / ex.cost_ms * 100.0;
                gaps[p].push(gap);
                optimal[p] += usize::from(gap <= 0.01);
            }
        }
    }
    Ok(Optimality {
        tasks: suite.len() - skipped,
        skipped,
        split_depth: args.exact_split_depth,
        complete,
        bound_gap_pct: mean(&bound_gaps).unwrap_or(0.0),
        planners: entries
            .iter()
            .enumerate()
            .map(|(p, e)| OptimalityRow {
                planner: e.name.to_string(),
                valid: gaps[p].len(),
                gap_to_exact_pct: mean(&gaps[p]),
                optimal: optimal[p],
            })
            .collect(),
    })
}

/// A scale task: `tables` pool tables at dims up to 128 on `devices` devices whose equal caps are the
/// smallest multiple of 4 GiB holding 1.3× an even share of the bytes and 1.1× the largest table (the
/// NeuroShard protocol's 4 GiB caps cannot hold 100 such tables on 8 devices).
fn scale_task(tables: usize, devices: usize, index: usize, seed: u64, rule: Rules) -> Result<SuiteTask> {
    const GIB4: u64 = 4 << 30;
    let specs = planner_core::task::sample_pool_tables(tables, 128, seed)?;
    let total: u64 = specs.iter().map(TableSpec::size_bytes).sum();
    let largest = specs.iter().map(TableSpec::size_bytes).max().unwrap_or(0);
    let need = ((total as f64 * 1.3 / devices as f64) as u64).max((largest as f64 * 1.1) as u64);
    let cap = need.div_ceil(GIB4).max(1) * GIB4;
    let task = rule.apply(Task::new(specs, Devices::uniform(devices, cap)?)?);
    Ok(SuiteTask {
        schema: planner_core::task::TASK_SCHEMA.into(),
        index,
        seed,
        protocol: Protocol::NeuroShard,
        pool_ids: Vec::new(),
        task,
    })
}

fn scale(
    args: &BenchArgs,
    entries: &[&PlannerEntry],
    model: &dyn CostModel,
    count: usize,
    rule: Rules,
) -> Result<Vec<ScaleRow>> {
    let points: &[(usize, usize)] = if args.quick { &[(100, 8)] } else { &[(100, 8), (200, 16), (500, 64)] };
    let mut out = Vec::new();
    for &(tables, devices) in points {
        let suite: Vec<SuiteTask> = (0..count)
            .map(|k| {
                let seed = planner_core::task::task_seed(args.seed ^ ((tables as u64) << 8), k);
                scale_task(tables, devices, k, seed, rule)
            })
            .collect::<Result<_>>()?;
        let cap = suite.first().map_or(0, |st| st.task.devices.mem_cap_bytes()[0]);
        for entry in entries.iter().filter(|e| e.name != "random") {
            let runs: Vec<Run> = suite.iter().map(|st| run_one(entry, st, model, args)).collect::<Result<_>>()?;
            let times: Vec<f64> = runs.iter().map(|r| r.outcome.plan_time_ms).collect();
            let costs: Vec<f64> = runs.iter().filter_map(|r| r.outcome.cost_ms).collect();
            eprintln!("scale {tables}/{devices} {}: p50 {:.1} ms", entry.name, percentile(&times, 50.0));
            out.push(ScaleRow {
                tables,
                devices,
                mem_cap_bytes: cap,
                planner: entry.name.to_string(),
                plan_time_p50_ms: percentile(&times, 50.0),
                plan_time_max_ms: times.iter().copied().fold(0.0, f64::max),
                valid: costs.len(),
                tasks: runs.len(),
                mean_cost_valid_ms: mean(&costs),
            });
        }
    }
    Ok(out)
}

/// Runs `shardplan bench`.
pub fn run(args: &BenchArgs) -> Result<()> {
    let (device_counts, max_dims, tasks, exact_tasks, scale_tasks) = if args.quick {
        (vec![4usize], vec![16u32, 128], 4, args.exact_tasks.min(3), args.scale_tasks.min(1))
    } else {
        (
            parse_list("--devices", &args.devices)?,
            parse_list("--max-dims", &args.max_dims)?,
            args.tasks,
            args.exact_tasks,
            args.scale_tasks,
        )
    };
    if tasks == 0 {
        bail!("--tasks = 0: a cell needs at least one task");
    }
    let measure_cells: Option<Vec<(usize, u32)>> = match &args.measure_cells {
        None => None,
        Some(s) => Some(
            s.split(',')
                .map(|c| {
                    let (d, m) = c
                        .trim()
                        .split_once('x')
                        .with_context(|| format!("--measure-cells: {c:?} is not DEVICESxMAXDIM"))?;
                    Ok((
                        d.parse().with_context(|| format!("--measure-cells: {d:?}"))?,
                        m.parse().with_context(|| format!("--measure-cells: {m:?}"))?,
                    ))
                })
                .collect::<Result<_>>()?,
        ),
    };
    if let Some(bin) = &args.measure_with
        && !bin.is_file()
    {
        bail!(
            "--measure-with {}: no such file (build it with `cargo build --release -p collector-native`)",
            bin.display()
        );
    }
    let plans_dir = args
        .plans_dir
        .clone()
        .unwrap_or_else(|| args.out.as_ref().and_then(|o| o.parent()).unwrap_or(Path::new(".")).join("bench-plans"));
    let entries: Vec<&PlannerEntry> = planners(&args.algos)?;
    let model = args.cost.build()?;
    let rule = Rules { memory: args.memory.rule()?, splits: args.memory.splits(SplitRule::Any)? };
    eprintln!("memory rule: {}; splits: {}", rule.memory.describe(), rule.splits.name());
    let mut cells = Vec::new();
    for &devices in &device_counts {
        for &max_dim in &max_dims {
            let spec = SuiteSpec::neuroshard(
                devices,
                max_dim,
                tasks,
                args.seed ^ ((devices as u64) << 16) ^ (u64::from(max_dim) << 24),
            );
            let suite = with_rule(
                spec.tasks().with_context(|| format!("drawing the {devices}-device, max-dim {max_dim} suite"))?,
                rule,
            );
            let mut bounds = Vec::with_capacity(suite.len());
            let mut proven = true;
            for st in &suite {
                let b = lower_bound(&st.task, model.as_ref())?;
                proven &= b.proven;
                bounds.push(b.cost_ms);
            }
            let mut runs: Vec<Vec<Run>> = Vec::with_capacity(entries.len());
            for entry in &entries {
                let r: Vec<Run> =
                    suite.iter().map(|st| run_one(entry, st, model.as_ref(), args)).collect::<Result<_>>()?;
                runs.push(r);
            }
            let pairs: Vec<(String, Vec<TaskOutcome>)> = entries
                .iter()
                .zip(&runs)
                .map(|(e, r)| (e.name.to_string(), r.iter().map(|x| x.outcome.clone()).collect()))
                .collect();
            let summary =
                summarize(&pairs, |name| planner_core::planners::planner(name).is_ok_and(|e| e.is_seed_baseline));
            let mut rows: Vec<PlannerCell> = summary
                .into_iter()
                .zip(&runs)
                .map(|(summary, r)| {
                    let (hits, misses) = r.iter().fold((0, 0), |(h, m), x| (h + x.hits, m + x.misses));
                    let gaps: Vec<f64> = r
                        .iter()
                        .zip(&bounds)
                        // Row-wise plans are outside the space the bound covers (`planner_core::bound`).
                        .filter(|(x, _)| x.plan.as_ref().is_some_and(|p| p.row_split_tables() == 0))
                        .filter_map(|(x, b)| x.outcome.cost_ms.map(|c| (c - b) / b * 100.0))
                        .collect();
                    PlannerCell {
                        summary,
                        cache_hit_rate: (hits + misses > 0).then(|| hits as f64 / (hits + misses) as f64),
                        gap_to_bound_pct: mean(&gaps),
                        measured_mean_ms: None,
                        predicted_mean_ms: None,
                    }
                })
                .collect();
            let wanted = measure_cells.as_ref().is_none_or(|c| c.contains(&(devices, max_dim)));
            let measured = match &args.measure_with {
                Some(bin) if wanted && args.measure_tasks > 0 => {
                    let dir = plans_dir.join(format!("d{devices}_dim{max_dim}"));
                    eprintln!("measuring {devices} devices, max dim {max_dim} in {}", dir.display());
                    Some(measure_cell(args, bin, &dir, &entries, &suite, &runs, model.as_ref(), &mut rows)?)
                }
                _ => None,
            };
            eprintln!("cell {devices} devices, max dim {max_dim}: done");
            cells.push(Cell {
                devices,
                max_dim,
                tasks: suite.len(),
                lower_bound_mean_ms: mean(&bounds).unwrap_or(0.0),
                lower_bound_proven: proven,
                planners: rows,
                measured,
            });
        }
    }
    // Each finished section is saved at once, so a later failure loses nothing already computed.
    let mut result = BenchResult {
        schema: BENCH_SCHEMA,
        cost_model: model.name(),
        memory_rule: rule.memory,
        splits: rule.splits,
        seed: args.seed,
        cells,
        optimality: None,
        scale: Vec::new(),
        seed_protocols: Vec::new(),
    };
    save(args, &result)?;
    if exact_tasks > 0 {
        result.optimality = Some(optimality(args, &entries, model.as_ref(), exact_tasks, rule)?);
        save(args, &result)?;
    }
    if scale_tasks > 0 {
        result.scale = scale(args, &entries, model.as_ref(), scale_tasks, rule)?;
        save(args, &result)?;
    }
    let protocol_tasks = if args.quick { args.protocol_tasks.min(2) } else { args.protocol_tasks };
    if protocol_tasks > 0 {
        result.seed_protocols = seed_protocols(&entries, model.as_ref(), protocol_tasks, args.seed, rule)?;
        save(args, &result)?;
    }
    println!("{}", markdown(&result));
    Ok(())
}

/// Writes the Markdown and JSON results where asked.
fn save(args: &BenchArgs, result: &BenchResult) -> Result<()> {
    for p in [&args.md, &args.out].into_iter().flatten() {
        if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
    }
    if let Some(p) = &args.md {
        write_atomic(p, markdown(result).as_bytes())?;
    }
    if let Some(p) = &args.out {
        write_atomic(p, serde_json::to_string_pretty(result)?.as_bytes())?;
    }
    Ok(())
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or("-".to_string(), |x| format!("{x:.prec$}"))
}

/// The measured judge of one cell, in Markdown: the summary line, the per-planner table, the paired
/// comparison.
fn measured_markdown(m: &MeasuredCell) -> String {
    let s = &m.summary;
    let pct = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.1}%"));
    let a = &s.accuracy;
    let at_speed = s.accuracy_at_reference_speed.as_ref().map_or_else(
        || "no reference speed (the cost model was not trained on speed-normalised data of this machine)".to_string(),
        |r| {
            format!(
                "**{}** (bias {}), device cost {}, inside the predicted interval {}",
                pct(r.plan_mape_pct),
                r.plan_bias_pct.map_or("-".into(), |x| format!("{x:+.1}%")),
                pct(r.device_mape_pct),
                r.interval_coverage.map_or("-".into(), |c| format!("{:.0}%", 100.0 * c))
            )
        },
    );
    let machines = match (&m.hardware, &m.model_hardware) {
        (None, _) => String::new(),
        (Some(here), Some(trained)) if trained != here => format!(
            "Measured on `{here}`; **the cost model was measured on another machine** (`{trained}`), so its accuracy below is across machines. "
        ),
        (Some(here), _) => format!("Measured on `{here}`. "),
    };
    let mut out = vec![format!(
        "\n{machines}Measured judge: {} plans on {} tasks (the first of the suite every measured planner solved; {} passed over). \
         Kendall's tau (predicted vs measured ranking of the planners' plans) per task: {}; **mean {}**; same winner on {}/{} tasks. \
         MAPE of plan cost as measured {} (bias {}), of device cost {}; inside the predicted interval {}. \
         At the cost model's reference speed: MAPE of plan cost {at_speed}. \
         The judge's noise (cv of a plan's cost across rounds): {}. Files: `{}`.\n",
        s.plans,
        m.tasks,
        m.skipped.len(),
        s.kendall_tau.iter().map(|t| opt(*t, 2)).collect::<Vec<_>>().join(", "),
        opt(s.kendall_tau_mean, 2),
        s.same_winner,
        s.tasks,
        pct(a.plan_mape_pct),
        a.plan_bias_pct.map_or("-".into(), |x| format!("{x:+.1}%")),
        pct(a.device_mape_pct),
        a.interval_coverage.map_or("-".into(), |c| format!("{:.0}%", 100.0 * c)),
        pct(s.measurement_cv_pct),
        m.dir
    )];
    let rows: Vec<Vec<String>> = s
        .planners
        .iter()
        .map(|p| {
            vec![
                p.planner.clone(),
                p.solved.to_string(),
                opt(p.predicted_mean_ms, 3),
                opt(p.measured_mean_ms, 3),
                pct(p.mape_pct),
            ]
        })
        .collect();
    out.push(render_table(
        &["planner (measured)", "tasks", "predicted mean ms", "measured mean ms", "MAPE"],
        &rows,
        true,
    ));
    if !m.paired.is_empty() {
        let rows: Vec<Vec<String>> = m
            .paired
            .iter()
            .map(|p| {
                vec![
                    p.theirs.clone(),
                    p.tasks.to_string(),
                    format!("{:+.1}% ± {:.1}", p.mean_gain_pct, p.se_pct),
                    format!("{}/{}", p.ours_not_slower, p.tasks),
                ]
            })
            .collect();
        out.push(format!(
            "\nBest of {} against each planner, task by task (measured; gain = (theirs − ours) / theirs, mean ± s.e.):\n",
            m.paired.first().map_or(String::new(), |p| format!("`{}`", p.ours))
        ));
        out.push(render_table(&["against", "tasks", "gain", "ours not slower"], &rows, true));
    }
    out.join("\n")
}

/// The Markdown report.
fn markdown(r: &BenchResult) -> String {
    let mut out = vec![format!(
        "# shardplan bench\n\nCost model (prediction judge): `{}`; memory rule: {}; splits: {}; suite seed {}.",
        r.cost_model,
        r.memory_rule.describe(),
        r.splits.name(),
        r.seed
    )];
    for c in &r.cells {
        out.push(format!(
            "\n## {} devices, max dim {} ({} tasks)\n\nLower bound: mean {:.3} ms ({}); the gap column covers plans without row-wise pieces.\n",
            c.devices,
            c.max_dim,
            c.tasks,
            c.lower_bound_mean_ms,
            if c.lower_bound_proven { "proven for this model" } else { "an estimate for a learned model" }
        ));
        let measured = c.measured.is_some();
        let rows: Vec<Vec<String>> = c
            .planners
            .iter()
            .map(|p| {
                let s = &p.summary;
                let mut row = vec![
                    s.planner.clone(),
                    format!("{}/{}", s.valid, s.tasks),
                    opt(s.mean_cost_ms, 3),
                    opt(s.mean_cost_valid_ms, 3),
                    s.improvement_pct.map_or("-".into(), |x| format!("{x:+.2}%")),
                    p.gap_to_bound_pct.map_or("-".into(), |x| format!("{x:.1}%")),
                    format!("{:.3}", s.plan_time_p50_ms),
                    format!("{:.3}", s.plan_time_p95_ms),
                    p.cache_hit_rate.map_or("-".into(), |x| format!("{:.1}%", 100.0 * x)),
                ];
                if measured {
                    row.push(opt(p.predicted_mean_ms, 3));
                    row.push(opt(p.measured_mean_ms, 3));
                }
                row
            })
            .collect();
        let mut header = vec![
            "planner",
            "valid",
            "mean cost ms",
            "mean ms (valid)",
            "vs best baseline",
            "gap to bound",
            "plan p50 ms",
            "plan p95 ms",
            "cache hits",
        ];
        if measured {
            header.push("predicted ms (measured tasks)");
            header.push("measured ms");
        }
        out.push(render_table(&header, &rows, true));
        if let Some(m) = &c.measured {
            out.push(measured_markdown(m));
        }
    }
    if let Some(o) = &r.optimality {
        out.push(format!(
            "\n## Optimality: exact search on {} small tasks (8–12 tables, 4 devices, max dim 128; {} more left out: \
             a table fits no device unsplit)\n\n\
             The exact search proves the optimum over placements with tables halved up to {} times on {}/{} tasks; \
             the lower bound is on average {:.1}% under it. Negative gaps: the planner beat that optimum with finer splits.\n",
            o.tasks, o.skipped, o.split_depth, o.complete, o.tasks, o.bound_gap_pct
        ));
        let rows: Vec<Vec<String>> = o
            .planners
            .iter()
            .map(|p| {
                vec![
                    p.planner.clone(),
                    format!("{}/{}", p.valid, o.tasks),
                    p.gap_to_exact_pct.map_or("-".into(), |x| format!("{x:+.2}%")),
                    format!("{}/{}", p.optimal, p.valid),
                ]
            })
            .collect();
        out.push(render_table(&["planner", "valid", "mean gap to optimum", "optimal or better"], &rows, true));
    }
    if !r.scale.is_empty() {
        out.push(
            "\n## Planning time at scale (max dim 128; caps: the smallest multiple of 4 GiB holding 1.3× an even share \
             and 1.1× the largest table)\n"
                .to_string(),
        );
        let rows: Vec<Vec<String>> = r
            .scale
            .iter()
            .map(|s| {
                vec![
                    format!("{}/{}", s.tables, s.devices),
                    planner_core::units::format_bytes(s.mem_cap_bytes),
                    s.planner.clone(),
                    format!("{}/{}", s.valid, s.tasks),
                    format!("{:.1}", s.plan_time_p50_ms),
                    format!("{:.1}", s.plan_time_max_ms),
                    opt(s.mean_cost_valid_ms, 3),
                ]
            })
            .collect();
        out.push(render_table(
            &["tables/devices", "cap", "planner", "valid", "p50 ms", "max ms", "mean cost ms (valid)"],
            &rows,
            true,
        ));
    }
    for c in &r.seed_protocols {
        let table = c.spec.tables.map_or(String::new(), |(lo, hi)| format!("{lo}–{} tables", hi - 1));
        out.push(format!(
            "\n## {} ({} tasks, {table}, fp16, dims {}, test half of the pool; four-phase cost)\n",
            c.name,
            c.spec.count,
            if c.spec.protocol == Protocol::AutoShard { "16/32" } else { "16" },
        ));
        let rows: Vec<Vec<String>> = c
            .planners
            .iter()
            .map(|p| {
                let s = &p.summary;
                vec![
                    s.planner.clone(),
                    format!("{}/{}", s.valid, s.tasks),
                    opt(s.mean_cost_ms, 3),
                    s.improvement_pct.map_or("-".into(), |x| format!("{x:+.2}%")),
                    opt(p.balance_pct, 1),
                    format!("{:.3}", s.plan_time_p50_ms),
                ]
            })
            .collect();
        out.push(render_table(
            &["planner", "valid", "mean cost ms", "vs best baseline", "compute balance min/max %", "plan p50 ms"],
            &rows,
            true,
        ));
    }
    out.join("\n")
}
