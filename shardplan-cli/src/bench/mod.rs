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
//!
//! One file per experiment: [`grid`] (the cells), [`judge`] (the measured judge of a cell, through
//! the [`measure`] client of `shardplan-collect`), [`optimality`], [`scale`] and [`protocols`]; the
//! result types and the Markdown report are in [`report`]. A planner runs on a task as in `eval`
//! ([`crate::run_one`]), a fresh instance per task.

mod grid;
mod judge;
mod measure;
mod optimality;
mod protocols;
mod report;
mod scale;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use planner_core::SplitRule;
use planner_core::cost::{CostDefinition, CostModel};
use planner_core::eval::{PlannerSummary, TaskOutcome};
use planner_core::planners::{PlannerEntry, planners};
use planner_core::task::SuiteTask;

use crate::common::{CostArgs, MemoryArgs};
use crate::run_one::{Run, run_one, summarize};
use crate::tasks_cmd::Rules;
use measure::Collector;
use report::{BENCH_SCHEMA, BenchResult, markdown};
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
    /// Tasks per scale point (see --scale-points); 0 skips the scale section.
    #[arg(long, default_value_t = 3)]
    pub scale_tasks: usize,
    /// Scale points as `TABLES/DEVICES`, comma-separated, run in this order (`--quick`: the first). Points
    /// that vary tables and devices apart also give each one's growth exponent.
    #[arg(long, default_value = "100/8,200/16,500/64,1000/128,2000/256")]
    pub scale_points: String,
    /// A planner whose median planning time at a scale point passed this many milliseconds is not run
    /// at the later points with at least as many tables and devices (its rows say so).
    #[arg(long, default_value_t = 10_000.0)]
    pub scale_cutoff_ms: f64,
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
    /// A plan's cost is a median over rounds, so its noise falls with their number; an even count splits
    /// into two equal halves for the judge's agreement with itself (docs/BENCHMARKS.md, "Measured again:
    /// the same plans in 4 rounds").
    #[arg(long, default_value_t = 4)]
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
    /// Turn the collector's contention guard off (a dedicated machine where nothing else runs; the
    /// judge's own noise is still reported).
    #[arg(long)]
    pub measure_no_guard: bool,
    /// The reference kernel's time on the measuring machine when quiet, ms (its profile card's
    /// `compute.reference_ms`): passed to the collector's guard, which then takes a sample again when the
    /// machine reads more than 1.15× slower, and waits for it before a task starts.
    #[arg(long)]
    pub measure_quiet_reference_ms: Option<f64>,
    #[command(flatten)]
    pub plans: PlansArgs,
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

/// Where the measured judge's plan documents go, and whether they are measured.
#[derive(Args, Debug, Clone)]
pub struct PlansArgs {
    /// Where plan documents and measurements are kept (default: `bench-plans` next to `--out`, or in
    /// the current directory).
    #[arg(long)]
    pub plans_dir: Option<PathBuf>,
    /// Write the plans the measured judge would measure (the first `--measure-tasks` tasks of each
    /// `--measure-cells` cell that every `--measure-planners` planner solved) into `--plans-dir`, and
    /// measure nothing: to measure them later or on another machine (`shardplan-collect measure-plan`,
    /// `tools/judge_variants.sh`).
    #[arg(long, conflicts_with = "measure_with")]
    pub plans_only: bool,
}

/// What every experiment reads: the flags, the planners run, the cost model (the prediction judge) and
/// the rules every task is planned under.
struct Bench<'a> {
    args: &'a BenchArgs,
    entries: Vec<&'static PlannerEntry>,
    model: Box<dyn CostModel>,
    rule: Rules,
}

impl Bench<'_> {
    /// A fresh `entry` on `st`, its plan priced under `definition`.
    fn run(&self, entry: &PlannerEntry, st: &SuiteTask, definition: CostDefinition) -> Result<Run> {
        run_one(entry.build().as_ref(), entry.name, st, self.model.as_ref(), definition)
    }

    /// Every planner on every task of `suite` (runs per planner, in suite order) and each planner's
    /// summary.
    fn run_suite(
        &self,
        suite: &[SuiteTask],
        definition: CostDefinition,
    ) -> Result<(Vec<Vec<Run>>, Vec<PlannerSummary>)> {
        let runs: Vec<Vec<Run>> = self
            .entries
            .iter()
            .map(|e| suite.iter().map(|st| self.run(e, st, definition)).collect())
            .collect::<Result<_>>()?;
        let pairs: Vec<(String, Vec<TaskOutcome>)> = self
            .entries
            .iter()
            .zip(&runs)
            .map(|(e, r)| (e.name.to_string(), r.iter().map(|x| x.outcome.clone()).collect()))
            .collect();
        let summary = summarize(&pairs);
        Ok((runs, summary))
    }
}

fn parse_list<T: std::str::FromStr>(flag: &str, s: &str) -> Result<Vec<T>> {
    s.split(',').map(|x| x.trim().parse::<T>().map_err(|_| anyhow::anyhow!("{flag}: {x:?} is not a number"))).collect()
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
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
    if scale_tasks > 0 {
        scale::checked_points(args)?;
    }
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
    let plans_dir =
        args.plans.plans_dir.clone().unwrap_or_else(|| {
            args.out.as_ref().and_then(|o| o.parent()).unwrap_or(Path::new(".")).join("bench-plans")
        });
    let collector = args.measure_with.as_deref().map(|bin| Collector::new(bin, args));
    let b = Bench {
        args,
        entries: planners(&args.algos)?,
        model: args.cost.build()?,
        rule: Rules { memory: args.memory.rule()?, splits: args.memory.splits(SplitRule::Any)? },
    };
    eprintln!("memory rule: {}; splits: {}", b.rule.memory.describe(), b.rule.splits.name());
    let mut cells = Vec::new();
    for &devices in &device_counts {
        for &max_dim in &max_dims {
            let wanted = measure_cells.as_ref().is_none_or(|c| c.contains(&(devices, max_dim)));
            let dir = plans_dir.join(format!("d{devices}_dim{max_dim}"));
            let judge = match &collector {
                _ if !wanted || args.measure_tasks == 0 => None,
                Some(c) => Some(grid::CellJudge::Measure(c, dir.as_path())),
                None if args.plans.plans_only => Some(grid::CellJudge::PlansOnly(dir.as_path())),
                None => None,
            };
            cells.push(grid::cell(&b, devices, max_dim, tasks, judge)?);
        }
    }
    // Each finished section is saved at once, so a later failure loses nothing already computed.
    let mut result = BenchResult {
        schema: BENCH_SCHEMA,
        cost_model: b.model.name(),
        memory_rule: b.rule.memory,
        splits: b.rule.splits,
        seed: args.seed,
        cells,
        optimality: None,
        scale: Vec::new(),
        scale_fits: Vec::new(),
        seed_protocols: Vec::new(),
    };
    save(args, &result)?;
    if exact_tasks > 0 {
        result.optimality = Some(optimality::optimality(&b, exact_tasks)?);
        save(args, &result)?;
    }
    if scale_tasks > 0 {
        result.scale = scale::scale(&b, scale_tasks)?;
        result.scale_fits = scale::fits(&result.scale);
        save(args, &result)?;
    }
    let protocol_tasks = if args.quick { args.protocol_tasks.min(2) } else { args.protocol_tasks };
    if protocol_tasks > 0 {
        result.seed_protocols = protocols::seed_protocols(&b, protocol_tasks)?;
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
