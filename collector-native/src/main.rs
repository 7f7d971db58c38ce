//! `shardplan-collect`: measures what embedding-table sharding really costs on a machine, and writes
//! cost datasets that the trainer turns into cost models.
//!
//! Subcommands: `probe` (devices and the copy bandwidth every kernel is judged against), `compute`
//! (random table sets from an augmented pool, one fused forward + backward with SGD update each),
//! `comm` (forward/backward all-to-all with random per-device dims and start delays), `measure-plan`
//! (the real per-device cost of a plan written by `shardplan plan`, in the planner's breakdown) and
//! `check` (validate datasets).
//!
//! `main.rs` holds the command line and the dispatch; each subcommand's body is its own file
//! (`compute_cmd.rs`, `comm_cmd.rs`, `sets_cmd.rs`, `measure.rs`, `check_cmd.rs`, `bench_cmd.rs`), and
//! what they share (backend, contention guard, record template, run report) is in `common.rs`.
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
mod bench_cmd;
mod check_cmd;
mod collect;
mod comm_cmd;
mod common;
mod compute_cmd;
mod cpu;
mod cuda;
mod guard;
mod measure;
mod sets_cmd;
mod steady_cmd;
mod workload;

use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};

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
    pub backend: BackendArg,
    /// CPU threads (CPU backend; default: all).
    #[arg(long, global = true)]
    pub threads: Option<usize>,
    /// No progress bar.
    #[arg(long, global = true)]
    pub quiet: bool,
    /// Record measurements even while other processes run (turns the contention guard off).
    #[arg(long, global = true)]
    pub no_guard: bool,
    /// Measurements of one sample the contention guard may throw away (pausing 1, 2, 4, … 30 s between
    /// tries) before the run stops.
    #[arg(long, global = true, default_value_t = 12)]
    pub guard_retries: u32,
    /// Largest share of the machine's CPU time other processes may use while a sample is timed, percent.
    #[arg(long, global = true, default_value_t = 10.0)]
    pub guard_max_busy_pct: f64,
    /// Largest reference-kernel time after a sample over its baseline (taken when the run starts).
    #[arg(long, global = true, default_value_t = 1.35)]
    pub guard_max_reference_ratio: f64,
    /// The reference kernel's time on this machine when it is quiet, ms (a profile card's
    /// `compute.reference_ms`). With it, a sample after which the kernel reads more than
    /// `--guard-max-slowdown` times this is taken again, and a run does not start on a machine that
    /// slow: a contended host changes plans' relative costs, not only their scale.
    #[arg(long, global = true)]
    pub guard_quiet_reference_ms: Option<f64>,
    /// Largest reference-kernel time over `--guard-quiet-reference-ms`.
    #[arg(long, global = true, default_value_t = 1.15)]
    pub guard_max_slowdown: f64,
    /// `measure-plan`: largest ratio of the reference kernel's median reading in the slowest round over
    /// the fastest round's; a measurement whose rounds drifted more is refused, nothing recorded.
    #[arg(long, global = true, default_value_t = 1.2)]
    pub guard_max_drift: f64,
    #[command(subcommand)]
    command: Command,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
/// `--backend`.
pub enum BackendArg {
    /// The CPU backend (threads as devices).
    Cpu,
    /// CUDA GPUs with NCCL.
    Cuda,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Describe the devices and measure their copy bandwidth.
    Probe,
    /// Time fused forward + backward (SGD) of random table sets.
    Compute(compute_cmd::ComputeArgs),
    /// Time forward/backward all-to-all of random per-device dims with start delays.
    Comm(comm_cmd::CommArgs),
    /// Time the sets a file asks for (`shardplan.set-request/v1` lines) into a compute dataset.
    Sets(sets_cmd::SetsArgs),
    /// Measure the real per-device cost of plan files written by `shardplan plan`, in interleaved rounds.
    MeasurePlan(measure::MeasurePlanArgs),
    /// Validate datasets (schema, hardware, duplicates) and print a summary.
    Check(check_cmd::CheckArgs),
    /// Benchmark the backend: compute and comm samples/s, kernels' effective bandwidth (no dataset).
    Bench(bench_cmd::BenchArgs),
    /// Time the contention guard's reference kernel several times in a row and say whether the machine
    /// is steady enough to start a long measurement on (exit code 3 when it is not).
    Steady(steady_cmd::SteadyArgs),
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

fn run(cli: &Cli) -> Result<i32> {
    match &cli.command {
        Command::Probe => {
            let mut backend = common::make_backend(cli, true)?;
            println!("{}", serde_json::to_string_pretty(&backend.probe()?)?);
            Ok(0)
        }
        Command::Compute(args) => compute_cmd::run(cli, args),
        Command::Comm(args) => comm_cmd::run(cli, args),
        Command::Sets(args) => sets_cmd::run(cli, args),
        Command::MeasurePlan(args) => measure::run(cli, args),
        Command::Check(args) => check_cmd::run(args),
        Command::Bench(args) => bench_cmd::run(cli, args),
        Command::Steady(args) => steady_cmd::run(cli, args),
    }
}
