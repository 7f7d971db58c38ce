//! What the subcommands share: the backend and the contention guard the global options choose, the
//! options of a collection run, the record template, timing a set of pieces, the base tables and the
//! report of a run.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, bail};
use clap::Args;
use planner_core::dataset::{
    CostRecord, DATASET_SCHEMA, MAX_RUN_SAMPLES, Measurement, Protocol, RunInfo, TableRecord, Timings, fnv1a64,
};
use planner_core::features::FeatureSchema;
use planner_core::pool::dlrm_pool;
use planner_core::table::{ElementType, TableSpec};

use crate::backend::{Backend, CpuBackend, Timing, check_fits, check_fp32};
use crate::collect::{self, Shard};
use crate::guard::{Guard, GuardLimits};
use crate::workload::{self, WorkPiece};
use crate::{BackendArg, Cli, cpu, cuda};

/// Exit code of a run stopped by Ctrl-C (128 + SIGINT, as shells report it).
pub const EXIT_INTERRUPTED: i32 = 130;

/// The backend `--backend` names, flushing caches before timed runs when `flush`.
pub fn make_backend(cli: &Cli, flush: bool) -> Result<Box<dyn Backend>> {
    Ok(match cli.backend {
        BackendArg::Cpu => Box::new(CpuBackend::new(cli.threads, flush)?),
        BackendArg::Cuda => Box::new(cuda::CudaBackend::new(flush).context("starting the cuda backend")?),
    })
}

/// Ctrl-C sets `stop`; the loop finishes the sample in flight and returns. A second Ctrl-C exits now.
pub fn install_stop_handler() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    ctrlc::set_handler(move || {
        if flag.swap(true, Ordering::SeqCst) {
            std::process::exit(EXIT_INTERRUPTED);
        }
        eprintln!("\nstopping after the sample in flight; with --rounds, its group is measured again on --resume (Ctrl-C again to abort now)");
    })
    .context("installing the Ctrl-C handler")?;
    Ok(stop)
}

/// Options of every measuring run: where it writes, whether it resumes, the batch and the repetitions.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Continue an existing --out file (repairs a truncated last line).
    #[arg(long)]
    pub resume: bool,
    /// Bags per table (samples in the batch).
    #[arg(long, default_value_t = 65_536)]
    pub batch_size: u32,
    /// Output JSON Lines file.
    #[arg(long)]
    pub out: PathBuf,
    /// Untimed runs before the timed ones.
    #[arg(long, default_value_t = 5)]
    pub warmup: u32,
    /// Timed runs (the median is recorded with every run); per round with `--rounds`.
    #[arg(long, default_value_t = 10)]
    pub reps: u32,
    /// Do not flush caches before timed runs.
    #[arg(long)]
    pub no_flush: bool,
    /// Time every compute sample in this many rounds, seconds apart: samples are taken in groups of
    /// [`ROUND_GROUP`], each group timed once per round in a new seeded order, and a record keeps every
    /// round's runs (`protocol.rounds`). On a host whose speed wanders, one moment's timing of a set is
    /// off by about 10%; rounds average over moments. Compute and `sets` runs only.
    #[arg(long, default_value_t = 1)]
    pub rounds: u32,
}

/// Samples timed together in rounds (`--rounds`): a round of a group takes long enough (10–20 s on the
/// CPU backend at batch 4,096) that a sample's rounds fall at different moments of the host, and a killed
/// run loses at most one group.
pub const ROUND_GROUP: usize = 24;

/// Refuses batch sizes and repetitions out of range.
pub fn validate_run(c: &RunArgs) -> Result<()> {
    validate_timing(c.batch_size, c.reps, c.warmup)?;
    if c.rounds == 0 || c.rounds > 100 {
        bail!("--rounds = {} is invalid: use 1..=100", c.rounds);
    }
    Ok(())
}

/// Refuses a batch (bags per table) outside 1..=4,194,304 and timed / untimed runs outside 1..=1000 /
/// 0..=1000: every sample allocates its lookups by the batch, and runs repeat it.
pub fn validate_timing(batch: u32, reps: u32, warmup: u32) -> Result<()> {
    if batch == 0 || batch > 1 << 22 {
        bail!("--batch-size = {batch} is invalid: use 1..=4194304");
    }
    if reps == 0 || reps > 1000 || warmup > 1000 {
        bail!("--reps = {reps} / --warmup = {warmup} are invalid: reps in 1..=1000, warmup in 0..=1000");
    }
    Ok(())
}

/// Refuses comm samples over `devices` outside 1..=1024, or more devices than rows in the batch.
pub fn validate_devices(devices: usize, batch: u32) -> Result<()> {
    if devices == 0 || devices > 1024 {
        bail!("--devices = {devices} is invalid: use 1..=1024");
    }
    if (batch as usize) < devices {
        bail!("--batch-size = {batch} is smaller than --devices = {devices}: every device needs at least one row");
    }
    Ok(())
}

/// Refuses a compute set of more than 1,024 tables (or none).
pub fn validate_max_tables(max_tables: usize) -> Result<()> {
    if max_tables == 0 || max_tables > 1024 {
        bail!("--max-tables = {max_tables} is invalid: use 1..=1024");
    }
    Ok(())
}

/// Options shared by `compute` and `comm`: the samples to draw, and the run's options.
#[derive(Args, Debug, Clone)]
pub struct CollectArgs {
    /// Samples of the whole run (all shards together).
    #[arg(long)]
    pub samples: u64,
    /// Base seed; sample g uses `task_seed(seed, g)`.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Measure only samples g with g % n == i.
    #[arg(long, default_value = "0/1")]
    pub shard: Shard,
    #[command(flatten)]
    pub run: RunArgs,
}

/// Refuses sample counts, batch sizes and repetitions out of range.
pub fn validate_common(c: &CollectArgs) -> Result<()> {
    if c.samples == 0 || c.samples > MAX_RUN_SAMPLES {
        bail!("--samples = {} is invalid: use 1..={MAX_RUN_SAMPLES}", c.samples);
    }
    validate_run(&c.run)
}

/// The record every sample of a run starts from (its identity, checked on resume).
pub fn template(
    backend: &dyn Backend,
    c: &CollectArgs,
    pool: String,
    sampler: Option<String>,
    measurement: Measurement,
) -> CostRecord {
    CostRecord {
        schema: DATASET_SCHEMA.into(),
        sample_index: 0,
        run: RunInfo { seed: c.seed, pool, shard_index: c.shard.index, shard_count: c.shard.count, sampler },
        hardware: backend.hardware().clone(),
        batch_size: c.run.batch_size,
        dtype: ElementType::Fp32,
        feature_schema: FeatureSchema::NeuroShard20,
        protocol: Protocol {
            warmup: c.run.warmup,
            reps: c.run.reps,
            cache_flush: backend.cache_flush(),
            rounds: c.run.rounds,
        },
        measurement,
        conditions: None,
    }
}

/// The contention guard's limits from the command line.
pub fn guard_limits(cli: &Cli) -> Result<GuardLimits> {
    if !(cli.guard_max_busy_pct.is_finite() && (0.0..=100.0).contains(&cli.guard_max_busy_pct)) {
        bail!("--guard-max-busy-pct = {} is invalid: a percentage in 0..=100", cli.guard_max_busy_pct);
    }
    if !(cli.guard_max_reference_ratio.is_finite() && cli.guard_max_reference_ratio >= 1.0) {
        bail!("--guard-max-reference-ratio = {} is invalid: at least 1", cli.guard_max_reference_ratio);
    }
    if let Some(q) = cli.guard_quiet_reference_ms
        && !(q.is_finite() && q > 0.0)
    {
        bail!("--guard-quiet-reference-ms = {q} is invalid: a positive time in ms");
    }
    if !(cli.guard_max_slowdown.is_finite() && cli.guard_max_slowdown >= 1.0) {
        bail!("--guard-max-slowdown = {} is invalid: at least 1", cli.guard_max_slowdown);
    }
    if !(cli.guard_max_drift.is_finite() && cli.guard_max_drift >= 1.0) {
        bail!("--guard-max-drift = {} is invalid: at least 1", cli.guard_max_drift);
    }
    if cli.guard_retries > 100 {
        bail!("--guard-retries = {} is invalid: at most 100", cli.guard_retries);
    }
    Ok(GuardLimits {
        other_busy_pct: cli.guard_max_busy_pct,
        steal_pct: GuardLimits::default().steal_pct,
        reference_ratio: cli.guard_max_reference_ratio,
        quiet_reference_ms: cli.guard_quiet_reference_ms,
        max_slowdown: cli.guard_max_slowdown,
        retries: cli.guard_retries,
        max_drift: cli.guard_max_drift,
    })
}

/// Starts the contention guard for a run (or none with `--no-guard`).
pub fn start_guard(cli: &Cli, backend: &mut dyn Backend, batch: u32) -> Result<Guard> {
    let limits = guard_limits(cli)?;
    if cli.no_guard {
        return Ok(Guard::off());
    }
    let g = Guard::start(backend, batch, limits)?;
    if let Some(b) = g.baseline_ms() {
        eprintln!("contention guard: reference kernel baseline {b:.3} ms");
    }
    Ok(g)
}

/// The compute record of a measured set of pieces.
pub fn compute_record(
    tpl: &CostRecord,
    g: u64,
    pieces: &[WorkPiece],
    lookups: &[u64],
    times: cpu::ComputeTimes,
    conditions: planner_core::dataset::Conditions,
) -> CostRecord {
    let total: Vec<f64> = times.fwd_ms.iter().zip(&times.bwd_ms).map(|(f, b)| f + b).collect();
    let mut r = tpl.clone();
    r.sample_index = g;
    r.measurement = Measurement::Compute {
        tables: pieces
            .iter()
            .zip(lookups)
            .map(|(p, &l)| TableRecord::piece(&p.table, p.rows, p.rows.map(|_| l)))
            .collect(),
        fwd: Timings::from_reps(times.fwd_ms),
        bwd: Timings::from_reps(times.bwd_ms),
        total: Timings::from_reps(total),
    };
    r.conditions = Some(conditions);
    r
}

/// Times the compute samples of a `compute` or `sets` run into `output`: each once with `--reps` runs, or
/// with `--rounds` in rounds ([`collect::run_rounds`]), its record then holding every round's runs and
/// what the guard saw over all of them ([`merge_conditions`]).
#[allow(clippy::too_many_arguments)] // the run's parts, each owned by its command
pub fn measure_compute_samples(
    c: &RunArgs,
    plan: &collect::RunPlan,
    output: std::fs::File,
    tpl: &CostRecord,
    stop: &AtomicBool,
    backend: &mut dyn Backend,
    guard: &mut Guard,
    prepare: impl Fn(u64) -> Result<(Vec<WorkPiece>, Vec<workload::Bags>)> + Sync,
) -> Result<collect::Summary> {
    let timing = Timing { warmup: c.warmup, reps: c.reps };
    let lookups = |bags: &[workload::Bags]| -> Vec<u64> { bags.iter().map(|b| b.indices.len() as u64).collect() };
    if c.rounds == 1 {
        return collect::run(plan, output, tpl, stop, prepare, |g, (set, bags)| {
            let (times, conditions) = time_pieces(backend, guard, g, &set, &bags, timing)?;
            Ok(compute_record(tpl, g, &set, &lookups(&bags), times, conditions))
        });
    }
    let rounds = collect::Rounds { count: c.rounds, group: ROUND_GROUP, seed: tpl.run.seed };
    collect::run_rounds(
        plan,
        output,
        tpl,
        stop,
        rounds,
        prepare,
        |g, (set, bags)| time_pieces(backend, guard, g, set, bags, timing),
        |g, (set, bags), rounds| {
            let mut times = cpu::ComputeTimes { fwd_ms: Vec::new(), bwd_ms: Vec::new() };
            let mut seen = Vec::with_capacity(rounds.len());
            for (t, cond) in rounds {
                times.fwd_ms.extend(t.fwd_ms);
                times.bwd_ms.extend(t.bwd_ms);
                seen.push(cond);
            }
            Ok(compute_record(tpl, g, &set, &lookups(&bags), times, merge_conditions(&seen)))
        },
    )
}

/// What the guard saw over a sample's rounds: the most other processes and steal of any round, the
/// median reference reading and ratio (the reading a trainer scales the sample's median by), and every
/// round's retries.
fn merge_conditions(rounds: &[planner_core::dataset::Conditions]) -> planner_core::dataset::Conditions {
    use planner_core::dataset::median;
    let readings: Vec<f64> = rounds.iter().filter_map(|c| c.reference_ms).collect();
    planner_core::dataset::Conditions {
        other_busy_pct: rounds.iter().map(|c| c.other_busy_pct).fold(0.0, f64::max),
        steal_pct: rounds.iter().map(|c| c.steal_pct).fold(0.0, f64::max),
        reference_ratio: median(&rounds.iter().map(|c| c.reference_ratio).collect::<Vec<_>>()),
        reference_ms: (!readings.is_empty()).then(|| median(&readings)),
        retries: rounds.iter().map(|c| c.retries).sum(),
    }
}

/// Samples measured on one weight memory before it is renewed (`Backend::renew_memory`), so that a
/// dataset averages over memory layouts instead of carrying one layout's luck in every sample.
const SAMPLES_PER_MEMORY: u64 = 16;

/// Times one prepared set on device 0 under the guard.
pub fn time_pieces(
    backend: &mut dyn Backend,
    guard: &mut Guard,
    g: u64,
    pieces: &[WorkPiece],
    bags: &[workload::Bags],
    timing: Timing,
) -> Result<(cpu::ComputeTimes, planner_core::dataset::Conditions)> {
    if g > 0 && g.is_multiple_of(SAMPLES_PER_MEMORY) {
        backend.renew_memory();
    }
    let tables: Vec<TableSpec> = pieces.iter().map(WorkPiece::kernel_table).collect();
    check_fits(backend, 0, &tables)?;
    guard.measure(backend, &format!("sample {g}"), true, |b| b.compute(0, &tables, bags.to_vec(), 0, timing))
}

/// The base tables to augment: the built-in pool or a user's file, and the pool's provenance label.
pub fn load_base_tables(path: Option<&Path>) -> Result<(Vec<TableSpec>, String)> {
    match path {
        None => {
            let pool = dlrm_pool()?;
            let tables = pool
                .iter()
                .map(|p| p.at_dim(format!("t{}", p.table_id), 4, ElementType::Fp32))
                .collect::<planner_core::Result<Vec<_>>>()?;
            Ok((tables, "dlrm_t856".into()))
        }
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading --tables {}", p.display()))?;
            let is_json = p.extension().is_some_and(|e| e.eq_ignore_ascii_case("json"));
            let tables = if is_json {
                planner_core::input::parse_tables_json(&text)
            } else {
                // The pool's statistics file has no `dim` column: its tables are measured at dim 4.
                let has_dim = text.lines().next().is_some_and(|h| h.split(',').any(|c| c.trim() == "dim"));
                planner_core::input::parse_tables_csv(&text, (!has_dim).then_some(4))
            }
            .with_context(|| format!("parsing --tables {}", p.display()))?;
            check_fp32(&tables)?;
            let name = p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned());
            Ok((tables, format!("file:{name}#{:016x}", fnv1a64(text.as_bytes()))))
        }
    }
}

/// Prints what a collection run did and returns its exit code ([`EXIT_INTERRUPTED`] when samples remain).
pub fn report(summary: &collect::Summary, out: &Path) -> i32 {
    if summary.repaired_bytes > 0 {
        eprintln!("repaired {}: cut a truncated last line of {} bytes", out.display(), summary.repaired_bytes);
    }
    eprintln!(
        "{}: {} records were already there, {} written now, {} of this shard remaining",
        out.display(),
        summary.existing,
        summary.written,
        summary.remaining
    );
    if summary.remaining > 0 {
        eprintln!("interrupted: run the same command with --resume to finish");
        return EXIT_INTERRUPTED;
    }
    0
}
