//! `shardplan-collect`: measures what embedding-table sharding really costs on a machine, and writes
//! cost datasets that the trainer turns into cost models.
//!
//! Subcommands: `probe` (devices and the copy bandwidth every kernel is judged against), `compute`
//! (random table sets from an augmented pool, one fused forward + backward with SGD update each),
//! `comm` (forward/backward all-to-all with random per-device dims and start delays), `measure-plan`
//! (the real per-device cost of a plan written by `shardplan plan`, in the planner's breakdown) and
//! `check` (validate datasets).
//!
//! Key types: [`backend::Backend`] with [`backend::CpuBackend`] and [`cuda::CudaBackend`];
//! [`workload::generate_bags`] (synthetic lookups that reproduce a table's statistics);
//! [`collect::run`] (shards, resume, progress, Ctrl-C); the record format is planner-core's
//! `dataset::CostRecord`, so the trainer reads exactly what is written here.
//!
//! Why it is built this way:
//! * **Two backends, one protocol.** The CPU backend runs real kernels (multi-threaded fused
//!   embedding bags, a real thread all-to-all) so the whole collect → train → plan pipeline runs and is
//!   tested anywhere; its datasets say `backend: cpu` and are never mixed with GPU data by readers.
//! * **Builds without CUDA.** cudarc loads the driver, NVRTC and NCCL at run time; the CUDA path checks
//!   each library is present before touching it and turns absence into an error, not a panic.
//!   Kernels are plain CUDA C in `kernels/`, compiled by NVRTC for the device found and cached.
//! * **Deterministic samples.** Sample `g` is drawn from `task_seed(seed, g)`, so `--shard i/n` splits a
//!   run across machines with no coordination and `--resume` knows exactly what is missing: no
//!   duplicate, nothing lost.
//! * **Crash-safe output.** One JSON line per sample, written in one call and flushed; a line cut by a
//!   kill is detected (no final newline) and cut on resume.

mod backend;
mod collect;
mod cpu;
mod cuda;
mod guard;
mod measure;
mod workload;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use planner_core::dataset::{
    CostRecord, DATASET_SCHEMA, HardwarePolicy, Measurement, Protocol, RunInfo, SetRequest, TableRecord, Timings,
    fnv1a64, parse_dataset,
};
use planner_core::features::FeatureSchema;
use planner_core::pool::dlrm_pool;
use planner_core::table::{ElementType, TableSpec};
use planner_core::task::task_seed;

use crate::backend::{Backend, CpuBackend, Timing, check_fits, check_fp32};
use crate::collect::{RunPlan, Shard};
use crate::guard::{Guard, GuardLimits};
use crate::workload::{Sampler, WorkPiece};

/// Command line of `shardplan-collect`.
#[derive(Parser, Debug)]
#[command(
    name = "shardplan-collect",
    version,
    about = "Measure embedding-bag compute and all-to-all costs into cost datasets"
)]
pub struct Cli {
    /// Where to measure.
    #[arg(long, value_enum, default_value_t = BackendArg::Cpu, global = true)]
    backend: BackendArg,
    /// CPU threads (CPU backend; default: all).
    #[arg(long, global = true)]
    threads: Option<usize>,
    /// No progress bar.
    #[arg(long, global = true)]
    quiet: bool,
    /// Record measurements even while other processes run (turns the contention guard off).
    #[arg(long, global = true)]
    no_guard: bool,
    /// Measurements of one sample the contention guard may throw away (pausing 1, 2, 4, … 30 s between
    /// tries) before the run stops.
    #[arg(long, global = true, default_value_t = 12)]
    guard_retries: u32,
    /// Largest share of the machine's CPU time other processes may use while a sample is timed, percent.
    #[arg(long, global = true, default_value_t = 10.0)]
    guard_max_busy_pct: f64,
    /// Largest reference-kernel time after a sample over its baseline (taken when the run starts).
    #[arg(long, global = true, default_value_t = 1.35)]
    guard_max_reference_ratio: f64,
    #[command(subcommand)]
    command: Command,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum BackendArg {
    Cpu,
    Cuda,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Describe the devices and measure their copy bandwidth.
    Probe,
    /// Time fused forward + backward (SGD) of random table sets.
    Compute(ComputeArgs),
    /// Time forward/backward all-to-all of random per-device dims with start delays.
    Comm(CommArgs),
    /// Time the sets a file asks for (`shardplan.set-request/v1` lines) into a compute dataset.
    Sets(SetsArgs),
    /// Measure the real per-device cost of plan files written by `shardplan plan`, in interleaved rounds.
    MeasurePlan(measure::MeasurePlanArgs),
    /// Validate datasets (schema, hardware, duplicates) and print a summary.
    Check(CheckArgs),
    /// Benchmark the backend: compute and comm samples/s, kernels' effective bandwidth (no dataset).
    Bench(BenchArgs),
}

/// Options shared by `compute` and `comm`.
#[derive(Args, Debug, Clone)]
struct CollectArgs {
    /// Samples of the whole run (all shards together).
    #[arg(long)]
    samples: u64,
    /// Base seed; sample g uses `task_seed(seed, g)`.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Measure only samples g with g % n == i.
    #[arg(long, default_value = "0/1")]
    shard: Shard,
    /// Continue an existing --out file (repairs a truncated last line).
    #[arg(long)]
    resume: bool,
    /// Bags per table (samples in the batch).
    #[arg(long, default_value_t = 65_536)]
    batch_size: u32,
    /// Output JSON Lines file.
    #[arg(long)]
    out: PathBuf,
    /// Untimed runs before the timed ones.
    #[arg(long, default_value_t = 5)]
    warmup: u32,
    /// Timed runs (the median is recorded with every run).
    #[arg(long, default_value_t = 10)]
    reps: u32,
    /// Do not flush caches before timed runs.
    #[arg(long)]
    no_flush: bool,
}

#[derive(Args, Debug)]
struct ComputeArgs {
    #[command(flatten)]
    common: CollectArgs,
    /// Table file (CSV or JSON) to sample from instead of the built-in DLRM pool; every table is
    /// augmented to dims {4, 8, 16, 32, 64, 128}.
    #[arg(long)]
    tables: Option<PathBuf>,
    /// Most tables in a SPEC set (SPEC sets have 1..=max tables; plan-like sets up to 30 pieces).
    #[arg(long, default_value_t = 15)]
    max_tables: usize,
    /// Memory cap of a set (e.g. 4GiB); tables larger than it are never drawn.
    #[arg(long, default_value = "4GiB")]
    mem_cap: String,
    /// How sets are drawn: `spec` (SPEC section 4) or `mixed` (also row-wise pieces, up to 30 pieces,
    /// large tables alone and sets near the cap).
    #[arg(long, value_enum, default_value_t = Sampler::Mixed)]
    sampler: Sampler,
}

#[derive(Args, Debug)]
struct SetsArgs {
    #[command(flatten)]
    common: SetsCommon,
    /// Set requests, one `shardplan.set-request/v1` JSON object per line; line `i` becomes sample `i`.
    #[arg(long)]
    requests: PathBuf,
}

#[derive(Args, Debug, Clone)]
struct SetsCommon {
    /// Continue an existing --out file (repairs a truncated last line).
    #[arg(long)]
    resume: bool,
    /// Bags per table (samples in the batch).
    #[arg(long, default_value_t = 65_536)]
    batch_size: u32,
    /// Output JSON Lines file.
    #[arg(long)]
    out: PathBuf,
    /// Untimed runs before the timed ones.
    #[arg(long, default_value_t = 5)]
    warmup: u32,
    /// Timed runs (the median is recorded with every run).
    #[arg(long, default_value_t = 10)]
    reps: u32,
    /// Do not flush caches before timed runs.
    #[arg(long)]
    no_flush: bool,
}

#[derive(Args, Debug)]
struct CommArgs {
    #[command(flatten)]
    common: CollectArgs,
    /// Devices taking part in the all-to-all (threads on the CPU backend, GPUs on CUDA).
    #[arg(long, default_value_t = 4)]
    devices: usize,
    /// Start delays are drawn in [0, diff) with diff uniform in [1, this) ms (SPEC section 4: 20; raise it
    /// where plans' devices finish their compute further apart).
    #[arg(long, default_value_t = 20.0)]
    max_delay_ms: f64,
}

#[derive(Args, Debug)]
struct BenchArgs {
    /// Compute samples to run.
    #[arg(long, default_value_t = 5)]
    compute_samples: u64,
    /// Comm samples to run.
    #[arg(long, default_value_t = 5)]
    comm_samples: u64,
    /// Bags per table.
    #[arg(long, default_value_t = 65_536)]
    batch_size: u32,
    /// Devices of the comm samples.
    #[arg(long, default_value_t = 4)]
    devices: usize,
    /// Memory cap of a compute set.
    #[arg(long, default_value = "4GiB")]
    mem_cap: String,
    /// Most tables in a compute set.
    #[arg(long, default_value_t = 15)]
    max_tables: usize,
    /// Base seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Untimed runs per sample.
    #[arg(long, default_value_t = 5)]
    warmup: u32,
    /// Timed runs per sample.
    #[arg(long, default_value_t = 10)]
    reps: u32,
    /// Also write every compute sample's workload to this directory (`sample_<g>.json` with the
    /// tables, `sample_<g>_t<k>.indices` / `.offsets` as little-endian u32), so that another
    /// implementation (`tools/torch_embedding_bag_bench.py`) can time exactly the same lookups.
    #[arg(long)]
    dump: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct CheckArgs {
    /// Dataset files.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Accept records measured on different hardware.
    #[arg(long)]
    mix_hardware: bool,
}

fn main() {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(1);
        }
    }
}

/// Exit code of a run stopped by Ctrl-C (128 + SIGINT, as shells report it).
const EXIT_INTERRUPTED: i32 = 130;

fn make_backend(cli: &Cli, flush: bool) -> Result<Box<dyn Backend>> {
    Ok(match cli.backend {
        BackendArg::Cpu => Box::new(CpuBackend::new(cli.threads, flush)?),
        BackendArg::Cuda => Box::new(cuda::CudaBackend::new(flush).context("starting the cuda backend")?),
    })
}

/// Ctrl-C sets `stop`; the loop finishes the sample in flight and returns. A second Ctrl-C exits now.
fn install_stop_handler() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    ctrlc::set_handler(move || {
        if flag.swap(true, Ordering::SeqCst) {
            std::process::exit(EXIT_INTERRUPTED);
        }
        eprintln!("\nstopping after the sample in flight (Ctrl-C again to abort now)");
    })
    .context("installing the Ctrl-C handler")?;
    Ok(stop)
}

fn run(cli: &Cli) -> Result<i32> {
    match &cli.command {
        Command::Probe => {
            let mut backend = make_backend(cli, true)?;
            println!("{}", serde_json::to_string_pretty(&backend.probe()?)?);
            Ok(0)
        }
        Command::Compute(args) => compute(cli, args),
        Command::Comm(args) => comm(cli, args),
        Command::Sets(args) => sets(cli, args),
        Command::MeasurePlan(args) => {
            let mut backend = make_backend(cli, !args.no_flush)?;
            let mut guard = start_guard(cli, backend.as_mut(), args.batch_size)?;
            measure::measure_plan(backend.as_mut(), &mut guard, args, cli.quiet)?;
            Ok(0)
        }
        Command::Check(args) => check(args),
        Command::Bench(args) => bench(cli, args),
    }
}

fn validate_common(c: &CollectArgs) -> Result<()> {
    if c.samples == 0 {
        bail!("--samples = 0 is invalid: measure at least 1 sample");
    }
    if c.batch_size == 0 || c.batch_size > 1 << 22 {
        bail!("--batch-size = {} is invalid: use 1..=4194304", c.batch_size);
    }
    if c.reps == 0 || c.reps > 1000 || c.warmup > 1000 {
        bail!("--reps = {} / --warmup = {} are invalid: reps in 1..=1000, warmup in 0..=1000", c.reps, c.warmup);
    }
    Ok(())
}

fn template(
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
        batch_size: c.batch_size,
        dtype: ElementType::Fp32,
        feature_schema: FeatureSchema::NeuroShard20,
        protocol: Protocol { warmup: c.warmup, reps: c.reps, cache_flush: backend.cache_flush() },
        measurement,
        conditions: None,
    }
}

/// The contention guard's limits from the command line.
fn guard_limits(cli: &Cli) -> Result<GuardLimits> {
    if !(cli.guard_max_busy_pct.is_finite() && (0.0..=100.0).contains(&cli.guard_max_busy_pct)) {
        bail!("--guard-max-busy-pct = {} is invalid: a percentage in 0..=100", cli.guard_max_busy_pct);
    }
    if !(cli.guard_max_reference_ratio.is_finite() && cli.guard_max_reference_ratio >= 1.0) {
        bail!("--guard-max-reference-ratio = {} is invalid: at least 1", cli.guard_max_reference_ratio);
    }
    if cli.guard_retries > 100 {
        bail!("--guard-retries = {} is invalid: at most 100", cli.guard_retries);
    }
    Ok(GuardLimits {
        other_busy_pct: cli.guard_max_busy_pct,
        steal_pct: GuardLimits::default().steal_pct,
        reference_ratio: cli.guard_max_reference_ratio,
        retries: cli.guard_retries,
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
fn compute_record(
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

/// Samples measured on one weight memory before it is renewed (`Backend::renew_memory`), so that a
/// dataset averages over memory layouts instead of carrying one layout's luck in every sample.
const SAMPLES_PER_MEMORY: u64 = 16;

/// Times one prepared set on device 0 under the guard.
fn time_pieces(
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

fn report(summary: &collect::Summary, out: &Path) -> i32 {
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

fn compute(cli: &Cli, args: &ComputeArgs) -> Result<i32> {
    let c = &args.common;
    validate_common(c)?;
    if args.max_tables == 0 || args.max_tables > 1024 {
        bail!("--max-tables = {} is invalid: use 1..=1024", args.max_tables);
    }
    let mem_cap = planner_core::units::parse_bytes("--mem-cap", &args.mem_cap)?;
    let (base, pool_label) = load_base_tables(args.tables.as_deref())?;
    let candidates = workload::augmented_candidates(&base, mem_cap)?;
    let mut backend = make_backend(cli, !c.no_flush)?;
    let have = backend.memory_bytes(0)?;
    if mem_cap > have {
        bail!(
            "--mem-cap = {mem_cap} bytes cannot fit: the {} backend has {have} bytes available; lower --mem-cap",
            backend.hardware().backend.name()
        );
    }
    let empty = Measurement::Compute {
        tables: Vec::new(),
        fwd: Timings::from_reps(vec![]),
        bwd: Timings::from_reps(vec![]),
        total: Timings::from_reps(vec![]),
    };
    // Records of the SPEC sampler carry no sampler name, as before samplers were named.
    let sampler = (args.sampler != Sampler::Spec).then(|| args.sampler.name().to_string());
    let tpl = template(backend.as_ref(), c, pool_label, sampler, empty);
    let plan = RunPlan { out: c.out.clone(), samples: c.samples, shard: c.shard, resume: c.resume, quiet: cli.quiet };
    let stop = install_stop_handler()?;
    let timing = Timing { warmup: c.warmup, reps: c.reps };
    let mut guard = start_guard(cli, backend.as_mut(), c.batch_size)?;
    let prepare = |g: u64| {
        let seed = task_seed(c.seed, g as usize);
        let set = workload::sample_set(&candidates, args.sampler, args.max_tables, mem_cap, seed)?;
        let bags = set.iter().map(|p| p.bags(c.batch_size)).collect::<Result<Vec<_>>>()?;
        Ok((set, bags))
    };
    let summary = collect::run(&plan, &tpl, &stop, prepare, |g, (set, bags)| {
        let lookups: Vec<u64> = bags.iter().map(|b| b.indices.len() as u64).collect();
        let (times, conditions) = time_pieces(backend.as_mut(), &mut guard, g, &set, &bags, timing)?;
        Ok(compute_record(&tpl, g, &set, &lookups, times, conditions))
    })?;
    Ok(report(&summary, &c.out))
}

fn sets(cli: &Cli, args: &SetsArgs) -> Result<i32> {
    let c = &args.common;
    if c.batch_size == 0 || c.batch_size > 1 << 22 {
        bail!("--batch-size = {} is invalid: use 1..=4194304", c.batch_size);
    }
    if c.reps == 0 || c.reps > 1000 || c.warmup > 1000 {
        bail!("--reps = {} / --warmup = {} are invalid: reps in 1..=1000, warmup in 0..=1000", c.reps, c.warmup);
    }
    let text = std::fs::read_to_string(&args.requests)
        .with_context(|| format!("reading --requests {}", args.requests.display()))?;
    let mut requests: Vec<Vec<WorkPiece>> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let context = format!("{} line {}", args.requests.display(), i + 1);
        let req: SetRequest = serde_json::from_str(line).with_context(|| context.clone())?;
        let pieces = req.validate(&context)?;
        let pieces: Vec<WorkPiece> =
            pieces.into_iter().map(|(table, rows, lookup_seed)| WorkPiece { table, rows, lookup_seed }).collect();
        check_fp32(&pieces.iter().map(|p| p.table.clone()).collect::<Vec<_>>()).with_context(|| context.clone())?;
        requests.push(pieces);
    }
    if requests.is_empty() {
        bail!("--requests {} holds no set", args.requests.display());
    }
    let mut backend = make_backend(cli, !c.no_flush)?;
    let name = args.requests.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let common = CollectArgs {
        samples: requests.len() as u64,
        seed: 0,
        shard: Shard { index: 0, count: 1 },
        resume: c.resume,
        batch_size: c.batch_size,
        out: c.out.clone(),
        warmup: c.warmup,
        reps: c.reps,
        no_flush: c.no_flush,
    };
    let empty = Measurement::Compute {
        tables: Vec::new(),
        fwd: Timings::from_reps(vec![]),
        bwd: Timings::from_reps(vec![]),
        total: Timings::from_reps(vec![]),
    };
    let sampler = format!("requests:{name}#{:016x}", fnv1a64(text.as_bytes()));
    let tpl = template(backend.as_ref(), &common, "requests".into(), Some(sampler), empty);
    let plan = RunPlan {
        out: c.out.clone(),
        samples: common.samples,
        shard: common.shard,
        resume: c.resume,
        quiet: cli.quiet,
    };
    let stop = install_stop_handler()?;
    let timing = Timing { warmup: c.warmup, reps: c.reps };
    let mut guard = start_guard(cli, backend.as_mut(), c.batch_size)?;
    let prepare = |g: u64| {
        let set = requests[g as usize].clone();
        let bags = set.iter().map(|p| p.bags(c.batch_size)).collect::<Result<Vec<_>>>()?;
        Ok((set, bags))
    };
    let summary = collect::run(&plan, &tpl, &stop, prepare, |g, (set, bags)| {
        let lookups: Vec<u64> = bags.iter().map(|b| b.indices.len() as u64).collect();
        let (times, conditions) = time_pieces(backend.as_mut(), &mut guard, g, &set, &bags, timing)?;
        Ok(compute_record(&tpl, g, &set, &lookups, times, conditions))
    })?;
    Ok(report(&summary, &c.out))
}

fn comm(cli: &Cli, args: &CommArgs) -> Result<i32> {
    let c = &args.common;
    validate_common(c)?;
    if args.devices == 0 || args.devices > 1024 {
        bail!("--devices = {} is invalid: use 1..=1024", args.devices);
    }
    if (c.batch_size as usize) < args.devices {
        bail!(
            "--batch-size = {} is smaller than --devices = {}: every device needs at least one row",
            c.batch_size,
            args.devices
        );
    }
    let mut backend = make_backend(cli, !c.no_flush)?;
    if let Some(max) = backend.max_comm_devices()
        && args.devices > max
    {
        bail!(
            "--devices = {} but the {} backend sees {max} device(s)",
            args.devices,
            backend.hardware().backend.name()
        );
    }
    let empty = Measurement::Comm {
        device_dims: Vec::new(),
        dim_sums: Vec::new(),
        delays_ms: Vec::new(),
        fw: Vec::new(),
        bw: Vec::new(),
    };
    // The SPEC's delays carry no sampler name; wider ones say so, so a resumed file cannot mix them.
    let sampler = (args.max_delay_ms != 20.0).then(|| format!("delays<{}ms", args.max_delay_ms));
    let tpl = template(backend.as_ref(), c, format!("comm:d{}", args.devices), sampler, empty);
    let plan = RunPlan { out: c.out.clone(), samples: c.samples, shard: c.shard, resume: c.resume, quiet: cli.quiet };
    let stop = install_stop_handler()?;
    let timing = Timing { warmup: c.warmup, reps: c.reps };
    let mut guard = start_guard(cli, backend.as_mut(), c.batch_size)?;
    if !(args.max_delay_ms.is_finite() && args.max_delay_ms > 1.0 && args.max_delay_ms <= 10_000.0) {
        bail!("--max-delay-ms = {} is invalid: use a number in (1, 10000]", args.max_delay_ms);
    }
    let prepare = |g: u64| Ok(workload::sample_comm(args.devices, task_seed(c.seed, g as usize), args.max_delay_ms));
    let summary = collect::run(&plan, &tpl, &stop, prepare, |g, sample| {
        let (times, conditions) = guard.measure(backend.as_mut(), &format!("sample {g}"), false, |b| {
            b.comm(&sample, c.batch_size as usize, timing)
        })?;
        let mut r = tpl.clone();
        r.conditions = Some(conditions);
        r.sample_index = g;
        r.measurement = Measurement::Comm {
            dim_sums: sample.dim_sums(),
            device_dims: sample.device_dims,
            delays_ms: sample.delays_ms,
            fw: times.fw_ms.into_iter().map(Timings::from_reps).collect(),
            bw: times.bw_ms.into_iter().map(Timings::from_reps).collect(),
        };
        Ok(r)
    })?;
    Ok(report(&summary, &c.out))
}

fn check(args: &CheckArgs) -> Result<i32> {
    let policy = if args.mix_hardware { HardwarePolicy::Mix } else { HardwarePolicy::Single };
    let mut all: Vec<CostRecord> = Vec::new();
    for f in &args.files {
        let text = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        all.extend(parse_dataset(&f.display().to_string(), &text, policy)?);
    }
    if policy == HardwarePolicy::Single
        && let Some(first) = all.first()
        && let Some(other) = all.iter().find(|r| r.hardware.fingerprint != first.hardware.fingerprint)
    {
        bail!(
            "the files mix hardware {:?} and {:?}; pass --mix-hardware to accept that",
            first.hardware.fingerprint,
            other.hardware.fingerprint
        );
    }
    let mut seen = std::collections::BTreeSet::new();
    for r in &all {
        let key =
            (r.kind(), serde_json::to_string(&(&r.run.seed, &r.run.pool, &r.hardware.fingerprint))?, r.sample_index);
        if !seen.insert(key) {
            bail!("sample {} ({}, seed {}) appears more than once", r.sample_index, r.kind(), r.run.seed);
        }
    }
    let compute = all.iter().filter(|r| r.kind() == "compute").count();
    println!("{} records: {compute} compute, {} comm; no duplicates", all.len(), all.len() - compute);
    Ok(0)
}

/// Runs compute and comm samples exactly as a collection does (same generator, same protocol) without
/// writing them, and reports throughput and the kernels' effective bandwidth (bytes touched / median time,
/// see `cpu::bytes_touched`).
/// Writes one compute sample's tables and lookups for `bench --dump` (format in `BenchArgs::dump`).
fn dump_workload(dir: &Path, g: u64, batch: u32, set: &[TableSpec], bags: &[workload::Bags]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("--dump {}: creating it", dir.display()))?;
    let le = |v: &[u32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    for (k, b) in bags.iter().enumerate() {
        for (ext, data) in [("indices", &b.indices), ("offsets", &b.offsets)] {
            let path = dir.join(format!("sample_{g}_t{k}.{ext}"));
            shardplan_files::write_atomic(&path, &le(data)).context("--dump")?;
        }
    }
    let meta = serde_json::json!({
        "sample": g,
        "batch_size": batch,
        "tables": set.iter().map(|t| serde_json::json!({"name": t.name, "rows": t.rows, "dim": t.dim})).collect::<Vec<_>>(),
    });
    let path = dir.join(format!("sample_{g}.json"));
    shardplan_files::write_atomic(&path, &serde_json::to_vec_pretty(&meta)?).context("--dump")
}

fn bench(cli: &Cli, args: &BenchArgs) -> Result<i32> {
    let mem_cap = planner_core::units::parse_bytes("--mem-cap", &args.mem_cap)?;
    if args.batch_size == 0 || (args.batch_size as usize) < args.devices || args.devices == 0 || args.reps == 0 {
        bail!(
            "--batch-size = {}, --devices = {}, --reps = {}: need batch >= devices >= 1 and reps >= 1",
            args.batch_size,
            args.devices,
            args.reps
        );
    }
    let (base, _) = load_base_tables(None)?;
    let candidates = workload::augmented_candidates(&base, mem_cap)?;
    let mut backend = make_backend(cli, true)?;
    let timing = Timing { warmup: args.warmup, reps: args.reps };
    let (mut fwd_bytes, mut bwd_bytes, mut fwd_ms, mut bwd_ms) = (0u64, 0u64, 0.0f64, 0.0f64);
    let mut per_sample = Vec::new();
    let t0 = std::time::Instant::now();
    for g in 0..args.compute_samples {
        let seed = task_seed(args.seed, g as usize);
        let pieces = workload::sample_set(&candidates, Sampler::Spec, args.max_tables, mem_cap, seed)?;
        let set: Vec<TableSpec> = pieces.iter().map(WorkPiece::kernel_table).collect();
        check_fits(backend.as_ref(), 0, &set)?;
        let bags = pieces.iter().map(|p| p.bags(args.batch_size)).collect::<Result<Vec<_>>>()?;
        if let Some(dir) = &args.dump {
            dump_workload(dir, g, args.batch_size, &set, &bags)?;
        }
        let (fb, bb) = cpu::bytes_touched(&set, &bags);
        let times = backend.compute(0, &set, bags, seed, timing)?;
        let (f, b) = (planner_core::dataset::median(&times.fwd_ms), planner_core::dataset::median(&times.bwd_ms));
        per_sample.push(serde_json::json!({
            "tables": set.len(),
            "fwd_ms": f,
            "bwd_ms": b,
            "fwd_gb_per_s": fb as f64 / (f / 1e3) / 1e9,
            "bwd_gb_per_s": bb as f64 / (b / 1e3) / 1e9,
        }));
        (fwd_bytes, bwd_bytes, fwd_ms, bwd_ms) = (fwd_bytes + fb, bwd_bytes + bb, fwd_ms + f, bwd_ms + b);
    }
    let compute_s = t0.elapsed().as_secs_f64();
    let t1 = std::time::Instant::now();
    for g in 0..args.comm_samples {
        let sample = workload::sample_comm(args.devices, task_seed(args.seed, g as usize), 20.0);
        backend.comm(&sample, args.batch_size as usize, timing)?;
    }
    let comm_s = t1.elapsed().as_secs_f64();
    let out = serde_json::json!({
        "hardware": backend.hardware(),
        "batch_size": args.batch_size,
        "protocol": { "warmup": args.warmup, "reps": args.reps, "cache_flush": backend.cache_flush() },
        "compute": {
            "samples": args.compute_samples,
            "seconds": compute_s,
            "samples_per_s": args.compute_samples as f64 / compute_s,
            "fwd_effective_gb_per_s": fwd_bytes as f64 / (fwd_ms / 1e3) / 1e9,
            "bwd_effective_gb_per_s": bwd_bytes as f64 / (bwd_ms / 1e3) / 1e9,
            "bandwidth_formula": "sum of bytes touched over samples / sum of median kernel times (cpu::bytes_touched)",
            "per_sample": per_sample,
        },
        "comm": {
            "devices": args.devices,
            "samples": args.comm_samples,
            "seconds": comm_s,
            "samples_per_s": args.comm_samples as f64 / comm_s,
        },
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(0)
}
