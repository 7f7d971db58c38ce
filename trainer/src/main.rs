//! `shardplan-train`: trains a cost profile (compute model and comm models) from collector datasets,
//! exports ONNX graphs and a model card, and checks the result loads in planner-core; and trains the
//! AutoShard placement policy (`autoshard`), checking the planner reproduces it.
//! See the `trainer` library docs for the design.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use trainer::train::TrainConfig;
use trainer::{ProfileOptions, train_profile};

/// Train shardplan's learned cost models.
#[derive(Parser)]
#[command(name = "shardplan-train", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train a profile from datasets and write it (card.json + ONNX graphs) to --out.
    Profile(ProfileArgs),
    /// Train the AutoShard placement policy (LSTM actor-critic with V-trace targets) on the h100
    /// compute model and write it (policy.json + ONNX graphs + curve.csv) to --out.
    Autoshard {
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// Seed of initialisation, tasks and sampling.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Learner updates.
        #[arg(long, default_value_t = 500)]
        updates: usize,
        /// Episodes rolled out per update.
        #[arg(long, default_value_t = 8)]
        actors: usize,
        /// Tables per training task: a count (`80`) or a range `lo..hi` (hi excluded).
        #[arg(long, default_value = "80")]
        tables: String,
        /// Adam learning rate at the start (annealed linearly to 0 over the updates).
        #[arg(long, default_value_t = 3e-4)]
        lr: f64,
        /// Score the greedy policy on the validation tasks every this many updates.
        #[arg(long, default_value_t = 10)]
        eval_every: usize,
        /// No progress lines.
        #[arg(long)]
        quiet: bool,
    },
    /// Price the sets of a request file (`shardplan.set-request/v1` lines, as `shardplan-collect sets`
    /// reads) with a profile: one CSV line per set with the mean, every member and the interval; with
    /// `--measured`, the dataset `shardplan-collect sets` wrote for the same file is joined by line.
    Predict {
        /// Profile directory.
        #[arg(long)]
        profile: PathBuf,
        /// Set requests.
        #[arg(long)]
        requests: PathBuf,
        /// The measured dataset of the same requests (optional).
        #[arg(long)]
        measured: Option<PathBuf>,
    },
    /// Measure a profile's evaluation speed: incremental shard evaluations per second and the
    /// end-to-end graph's latency.
    Bench {
        /// Profile directory.
        #[arg(long)]
        profile: PathBuf,
        /// Random sets to evaluate.
        #[arg(long, default_value_t = 4096)]
        sets: usize,
    },
    /// The plan → measure → learn loop: measure the device sets planners produce with a
    /// `shardplan-collect` binary, retrain the profile, re-plan; reports each round's measured judge on
    /// held-out tasks. Resumable: rerun the same command.
    Calibrate(CalibrateArgs),
    /// Train a DreamShard policy (cost network + policy network, REINFORCE on the estimated MDP) and
    /// write it (policy.json + ONNX graphs + curve.json) to --out.
    Dreamshard(DreamShardArgs),
}

/// The machine speed the compute targets are taken at.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Speed {
    Reference,
    Measured,
}

/// Arguments of `shardplan-train profile`.
#[derive(clap::Args)]
struct ProfileArgs {
    /// Profile name (selects it in the planner).
    #[arg(long)]
    name: String,
    /// Dataset files (`.jsonl` or `.jsonl.gz`): compute and comm records.
    #[arg(long = "data", required = true, num_args = 1..)]
    datasets: Vec<PathBuf>,
    /// Datasets measured on tables disjoint from the training tables (unseen-table metrics).
    #[arg(long = "unseen", num_args = 1..)]
    unseen: Vec<PathBuf>,
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Epochs per model.
    #[arg(long, default_value_t = 200)]
    epochs: usize,
    /// Mini-batch size.
    #[arg(long, default_value_t = 512)]
    batch: usize,
    /// Adam learning rate.
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// Seed of initialisation, splits and shuffles.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Compute networks in the ensemble (each further one from the next seed, on a bootstrap
    /// resample); 1 gives a single model with no prediction interval.
    #[arg(long, default_value_t = 5)]
    members: usize,
    /// Loss of the compute model: `mse` (ms², SPEC section 5) or `relative`.
    #[arg(long, value_enum, default_value_t = trainer::models::Loss::Mse)]
    loss: trainer::models::Loss,
    /// Share of held-out samples the prediction interval is calibrated to cover.
    #[arg(long, default_value_t = 0.9)]
    coverage: f64,
    /// NeuroShard's own feature scheme (every feature z-scored raw) instead of pooling factor and
    /// rows taken as ln(1 + x) first.
    #[arg(long)]
    plain_features: bool,
    /// `reference`: train on the times at one machine speed (each target scaled by the dataset's
    /// median reference-kernel reading over the sample's own; needs a reading on every sample);
    /// `measured`: on the times as measured (`docs/COST_MODELS.md`, "Speed").
    #[arg(long, value_enum, default_value_t = Speed::Reference)]
    speed: Speed,
    /// Continue from the checkpoints in OUT/checkpoints.
    #[arg(long)]
    resume: bool,
    /// No progress bars.
    #[arg(long)]
    quiet: bool,
}

/// Arguments of `shardplan-train calibrate`.
#[derive(clap::Args)]
struct CalibrateArgs {
    /// The `shardplan-collect` binary that measures.
    #[arg(long)]
    collector: PathBuf,
    /// Its backend (`cpu` or `cuda`).
    #[arg(long, default_value = "cpu")]
    backend: String,
    /// Loop directory (datasets, profiles, reports, state).
    #[arg(long)]
    out: PathBuf,
    /// Name of the profiles written.
    #[arg(long)]
    name: String,
    /// Rounds of plan → measure → retrain after the start.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Bags per table of every measurement.
    #[arg(long, default_value_t = 4096)]
    batch: u32,
    /// Cells of the NeuroShard protocol, `DEVICESxMAXDIM` comma-separated.
    #[arg(long, default_value = "4x32,4x128,8x32,8x128")]
    cells: String,
    /// Training tasks per cell and round.
    #[arg(long, default_value_t = 4)]
    train_tasks: usize,
    /// Held-out tasks per cell (measured every round).
    #[arg(long, default_value_t = 2)]
    holdout_tasks: usize,
    /// Planners whose plans are measured, comma-separated.
    #[arg(
        long,
        default_value = "size,dim,lookup,size-lookup,torchrec,neuroshard,neuroshard+refine,size-lookup+refine"
    )]
    planners: String,
    /// Device sets measured per round.
    #[arg(long, default_value_t = 300)]
    sets_per_round: usize,
    /// Random sets (mixed sampler) measured at the start.
    #[arg(long, default_value_t = 400)]
    initial_samples: u64,
    /// Comm samples per device count.
    #[arg(long, default_value_t = 300)]
    comm_samples: u64,
    /// Largest start delay of the comm samples, ms.
    #[arg(long, default_value_t = 60.0)]
    comm_max_delay_ms: f64,
    /// Memory cap of a device.
    #[arg(long, default_value = "4GiB")]
    mem_cap: String,
    /// How device memory is counted for every planner: `torchrec` (TorchRec 1.9.2's reservation and
    /// buffers, defaults) or `weights` (the seed papers' rule).
    #[arg(long, default_value = "torchrec")]
    memory_rule: String,
    /// Seed of suites, sampler and training (the bench's default suite seed 0 is kept for judging).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Epochs per profile.
    #[arg(long, default_value_t = 300)]
    epochs: usize,
    /// Mini-batch size.
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
    /// Ensemble members.
    #[arg(long, default_value_t = 5)]
    members: usize,
    /// Loss of the compute model.
    #[arg(long, value_enum, default_value_t = trainer::models::Loss::Relative)]
    loss: trainer::models::Loss,
    /// Measuring rounds of every held-out task's plans.
    #[arg(long, default_value_t = 2)]
    measure_rounds: u32,
    /// Neighbour plans around each training task's best plan.
    #[arg(long, default_value_t = 8)]
    neighbours: usize,
    /// Untimed runs before the timed ones, every set.
    #[arg(long, default_value_t = 2)]
    warmup: u32,
    /// Timed runs per set (the sample is their median).
    #[arg(long, default_value_t = 10)]
    reps: u32,
    /// Do not flush the last-level cache before every run (the records say so).
    #[arg(long)]
    no_flush: bool,
    /// Turn the contention guard off (only where measurements run beside each other, as in tests).
    #[arg(long)]
    no_guard: bool,
}

fn calibrate_cmd(a: &CalibrateArgs) -> ExitCode {
    use trainer::calibrate::{CalibrateOptions, calibrate};
    let run = || -> anyhow::Result<()> {
        let cells = a
            .cells
            .split(',')
            .map(|c| {
                let (d, m) = c
                    .trim()
                    .split_once('x')
                    .ok_or_else(|| anyhow::anyhow!("`--cells`: {c:?} is not DEVICESxMAXDIM"))?;
                Ok((d.parse()?, m.parse()?))
            })
            .collect::<anyhow::Result<Vec<(usize, u32)>>>()?;
        if a.epochs == 0 || a.batch_size == 0 {
            anyhow::bail!("`--epochs` = {} and `--batch-size` = {} must be at least 1", a.epochs, a.batch_size);
        }
        let opts = CalibrateOptions {
            collector: a.collector.clone(),
            backend: a.backend.clone(),
            out: a.out.clone(),
            name: a.name.clone(),
            rounds: a.rounds,
            batch: a.batch,
            cells,
            train_tasks: a.train_tasks,
            holdout_tasks: a.holdout_tasks,
            planners: a.planners.split(',').map(|s| s.trim().to_string()).collect(),
            sets_per_round: a.sets_per_round,
            initial_samples: a.initial_samples,
            comm_samples: a.comm_samples,
            comm_max_delay_ms: a.comm_max_delay_ms,
            mem_cap: a.mem_cap.clone(),
            memory: planner_core::MemoryRule::from_parts(&a.memory_rule, None, None, None, None)?,
            seed: a.seed,
            train: TrainConfig { epochs: a.epochs, batch: a.batch_size, lr: 1e-3, seed: a.seed, progress: false },
            members: a.members,
            loss: a.loss,
            measure_rounds: a.measure_rounds,
            neighbours: a.neighbours,
            timing: trainer::calibrate::CollectorTiming {
                warmup: a.warmup,
                reps: a.reps,
                flush: !a.no_flush,
                guard: !a.no_guard,
            },
            command: std::env::args().collect::<Vec<_>>().join(" "),
        };
        let reports = calibrate(&opts)?;
        println!(
            "| round | samples | cell | plan MAPE % as measured | at reference speed | bias % | device MAPE % | tau | interval coverage | judge cv % |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|");
        let pct = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |x| format!("{x:.1}"));
        for r in &reports {
            for (cell, s) in &r.cells {
                let a = s.accuracy_at_reference_speed.as_ref().unwrap_or(&s.accuracy);
                println!(
                    "| {} | {} | {cell} | {} | {} | {} | {} | {} | {} | {} |",
                    r.round,
                    r.samples,
                    pct(s.accuracy.plan_mape_pct),
                    pct(s.accuracy_at_reference_speed.as_ref().and_then(|x| x.plan_mape_pct)),
                    a.plan_bias_pct.map_or_else(|| "-".to_string(), |x| format!("{x:+.1}")),
                    pct(a.device_mape_pct),
                    s.kendall_tau_mean.map_or_else(|| "-".to_string(), |x| format!("{x:.2}")),
                    a.interval_coverage.map_or_else(|| "-".into(), |c| format!("{:.0}%", 100.0 * c)),
                    pct(s.measurement_cv_pct),
                );
            }
        }
        println!("calibrated profile: {}", opts.out.join("profiles").join(format!("round-{}", opts.rounds)).display());
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Arguments of `shardplan-train dreamshard` (defaults: the paper's loop on the DreamShard protocol).
#[derive(clap::Args)]
struct DreamShardArgs {
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Seed of initialisation, task draws and sampling.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Outer iterations (each: real evaluations, cost-network steps, policy updates).
    #[arg(long, default_value_t = 30)]
    iterations: usize,
    /// Real evaluations per iteration.
    #[arg(long, default_value_t = 10)]
    evals: usize,
    /// Cost-network steps per iteration (the paper: 300).
    #[arg(long, default_value_t = 100)]
    cost_steps: usize,
    /// Cost-network batch (the paper: 64).
    #[arg(long, default_value_t = 32)]
    cost_batch: usize,
    /// Policy updates per iteration (the paper: 10).
    #[arg(long, default_value_t = 50)]
    rl_updates: usize,
    /// Episodes per policy update.
    #[arg(long, default_value_t = 10)]
    episodes: usize,
    /// Adam learning rate, decayed linearly (the paper: 5e-4).
    #[arg(long, default_value_t = 2e-3)]
    lr: f64,
    /// Entropy bonus.
    #[arg(long, default_value_t = 1e-3)]
    entropy: f64,
    /// Devices of the training tasks.
    #[arg(long, default_value_t = 4)]
    devices: usize,
    /// Table-count range of the training tasks, `MIN..MAX` (MAX exclusive).
    #[arg(long, default_value = "10..101")]
    tables: String,
    /// Validation tasks (train half of the pool, other seeds), judged every iteration.
    #[arg(long, default_value_t = 20)]
    validation_tasks: usize,
    /// Test tasks (the other half of the pool; the same for every seed), judged at the end.
    #[arg(long, default_value_t = 50)]
    test_tasks: usize,
    /// What evaluates plans for real: `model:<cost model>` (an embedded profile or `analytical`) or
    /// `collector:<path to shardplan-collect>`.
    #[arg(long, default_value = "model:h100")]
    judge: String,
    /// Backend of a collector judge (`cpu` or `cuda`).
    #[arg(long, default_value = "cpu")]
    judge_backend: String,
    /// Bags per table of a collector judge.
    #[arg(long, default_value_t = 4096)]
    judge_batch: u32,
    /// No per-iteration lines.
    #[arg(long)]
    quiet: bool,
}

fn dreamshard_cmd(a: &DreamShardArgs) -> ExitCode {
    use planner_core::task::{PoolHalf, Protocol, SuiteSpec};
    use trainer::dreamshard::{CollectorJudge, DreamShardConfig, Judge, ModelJudge, train_dreamshard, write};
    let run = || -> anyhow::Result<()> {
        let tables = parse_tables(&a.tables).map_err(anyhow::Error::msg)?;
        for (field, v) in [
            ("--iterations", a.iterations),
            ("--evals", a.evals),
            ("--cost-batch", a.cost_batch),
            ("--validation-tasks", a.validation_tasks),
            ("--test-tasks", a.test_tasks),
        ] {
            if v == 0 {
                anyhow::bail!("`{field}` = 0 is invalid: at least 1");
            }
        }
        if a.episodes < 2 {
            anyhow::bail!("`--episodes` = {} is invalid: at least 2 (their mean is the baseline)", a.episodes);
        }
        if !(a.lr.is_finite() && a.lr > 0.0) {
            anyhow::bail!("`--lr` = {} is invalid: a positive number", a.lr);
        }
        if !(a.entropy.is_finite() && a.entropy >= 0.0) {
            anyhow::bail!("`--entropy` = {} is invalid: a number >= 0", a.entropy);
        }
        let suite = |count: usize, seed: u64| SuiteSpec {
            protocol: Protocol::DreamShard,
            devices: a.devices,
            max_dim: 16,
            tables: Some(tables),
            pool_half: Some(PoolHalf::Train),
            count,
            seed,
        };
        let mut judge: Box<dyn Judge> = match a.judge.split_once(':') {
            Some(("model", name)) => {
                let cost: Box<dyn planner_core::CostModel> = if name == "analytical" {
                    Box::new(planner_core::AnalyticalModel::new(
                        planner_core::HardwareProfile::torchrec_default(),
                        65_536,
                    )?)
                } else {
                    Box::new(planner_core::cost::profiles::load_with_comm_fallback(name)?)
                };
                Box::new(ModelJudge { model: cost })
            }
            Some(("collector", bin)) => Box::new(CollectorJudge {
                bin: bin.into(),
                backend: a.judge_backend.clone(),
                batch: a.judge_batch,
                reps: 3,
                dir: a.out.join("evaluations"),
                count: 0,
            }),
            _ => anyhow::bail!("`--judge` = {:?} is invalid: model:<cost model> or collector:<path>", a.judge),
        };
        let cfg = DreamShardConfig {
            seed: a.seed,
            iterations: a.iterations,
            evals_per_iteration: a.evals,
            cost_steps: a.cost_steps,
            cost_batch: a.cost_batch,
            rl_updates: a.rl_updates,
            episodes: a.episodes,
            lr: a.lr,
            entropy: a.entropy,
            suite: suite(usize::MAX, a.seed),
            validation: suite(a.validation_tasks, a.seed ^ 0x0076_a11d),
            test: SuiteSpec { pool_half: Some(PoolHalf::Test), ..suite(a.test_tasks, 0x7e57) },
            command: std::env::args().collect::<Vec<_>>().join(" "),
            verbose: !a.quiet,
        };
        let trained = train_dreamshard(&cfg, judge.as_mut())?;
        write(&a.out, &trained)?;
        println!(
            "policy `{}` written to {}: {} real evaluations, {} episodes, {:.0} s",
            trained.card.name,
            a.out.display(),
            trained.card.training.real_evaluations,
            trained.card.training.episodes,
            trained.card.training.wall_s
        );
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn bench(dir: &std::path::Path, sets: usize) -> ExitCode {
    let load = |cache: bool| -> anyhow::Result<planner_core::cost::NeuralModel> {
        let card = std::fs::read_to_string(dir.join("card.json"))?;
        let files = trainer::onnx_files(dir)?;
        Ok(planner_core::cost::NeuralModel::from_profile(&card, |f| files.get(f).map(Vec::as_slice))?
            .with_set_cache(cache))
    };
    if sets == 0 {
        eprintln!("error: `--sets` = 0 is invalid: at least 1");
        return ExitCode::FAILURE;
    }
    match trainer::bench::run(dir, load, sets) {
        Ok(lines) => {
            println!("| measurement | sets/s | ms per call |");
            println!("|---|---|---|");
            for l in lines {
                println!("| {} | {:.0} | {:.4} |", l.what, l.sets_per_s, l.ms_per_call);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Parses `--tables`: `N` or `lo..hi` (hi excluded), 1 <= lo < hi.
fn parse_tables(text: &str) -> Result<(usize, usize), String> {
    let bad = || format!("`--tables` = {text} is invalid: a count N >= 1 or a range lo..hi with 1 <= lo < hi");
    let range = if let Some((lo, hi)) = text.split_once("..") {
        (lo.trim().parse::<usize>().map_err(|_| bad())?, hi.trim().parse::<usize>().map_err(|_| bad())?)
    } else {
        let n = text.trim().parse::<usize>().map_err(|_| bad())?;
        (n, n.saturating_add(1))
    };
    if range.0 == 0 || range.1 <= range.0 {
        return Err(bad());
    }
    Ok(range)
}

#[allow(clippy::too_many_arguments, clippy::needless_pass_by_value)] // the subcommand's fields, as parsed
fn autoshard(
    out: PathBuf,
    seed: u64,
    updates: usize,
    actors: usize,
    tables: &str,
    lr: f64,
    eval_every: usize,
    quiet: bool,
) -> ExitCode {
    let fail = |msg: String| {
        eprintln!("error: {msg}");
        ExitCode::FAILURE
    };
    for (field, value) in [("--updates", updates), ("--actors", actors), ("--eval-every", eval_every)] {
        if value == 0 {
            return fail(format!("`{field}` = 0 is invalid: at least 1"));
        }
    }
    if !(lr.is_finite() && lr > 0.0) {
        return fail(format!("`--lr` = {lr} is invalid: a positive number"));
    }
    let tables = match parse_tables(tables) {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let opts = trainer::autoshard::AutoShardOptions {
        out,
        seed,
        updates,
        actors,
        tables,
        lr,
        eval_every,
        progress: !quiet,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    match trainer::autoshard::train_autoshard(&opts) {
        Ok(o) => {
            println!("policy `{}` written to {}", o.card.name, opts.out.display());
            println!(
                "updates {}, episodes {}, wall {:.1} s ({:.3} s per update)",
                o.card.training.iterations, o.card.training.episodes, o.card.training.wall_s, o.seconds_per_update
            );
            println!(
                "greedy validation reward (mean min/max compute): last update {:.4}, exported (update {}) {:.4}",
                o.final_validation_reward, o.best_update, o.best_validation_reward
            );
            for (k, v) in &o.card.training.metrics {
                println!("  {k}: {v:.4}");
            }
            println!("planner reload: greedy plan identical, max |candle - exported| logit = {:.2e}", o.max_logit_diff);
            ExitCode::SUCCESS
        }
        Err(e) => fail(format!("{e:#}")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Profile(args) => profile_cmd(args),
        Command::Bench { profile, sets } => bench(&profile, sets),
        Command::Predict { profile, requests, measured } => {
            match trainer::calibrate::predict(&profile, &requests, measured.as_deref()) {
                Ok(text) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Dreamshard(args) => dreamshard_cmd(&args),
        Command::Calibrate(args) => calibrate_cmd(&args),
        Command::Autoshard { out, seed, updates, actors, tables, lr, eval_every, quiet } => {
            autoshard(out, seed, updates, actors, &tables, lr, eval_every, quiet)
        }
    }
}

fn profile_cmd(a: ProfileArgs) -> ExitCode {
    let ProfileArgs {
        name,
        datasets,
        unseen,
        out,
        epochs,
        batch,
        lr,
        seed,
        members,
        loss,
        coverage,
        plain_features,
        speed,
        resume,
        quiet,
    } = a;
    let bad = |field: &str, value: String, allowed: &str| {
        eprintln!("error: `{field}` = {value} is invalid: {allowed}");
        ExitCode::FAILURE
    };
    if epochs == 0 {
        return bad("--epochs", epochs.to_string(), "at least 1");
    }
    if batch == 0 {
        return bad("--batch", batch.to_string(), "at least 1");
    }
    if !(lr.is_finite() && lr > 0.0) {
        return bad("--lr", lr.to_string(), "a positive number");
    }
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let opts = ProfileOptions {
        name,
        datasets,
        unseen,
        out,
        train: TrainConfig { epochs, batch, lr, seed, progress: !quiet },
        members,
        loss,
        coverage,
        log_features: !plain_features,
        speed_normalise: speed == Speed::Reference,
        resume,
        command,
    };
    match train_profile(&opts) {
        Ok(outcome) => {
            println!("profile `{}` written to {}", outcome.card.name, opts.out.display());
            println!(
                "reloaded through planner-core: max |trainer - tract| = {:.2e} ms",
                outcome.reload_max_abs_diff_ms
            );
            println!("| model | split | samples | MSE ms^2 | MAE ms | MAPE % |");
            println!("|---|---|---|---|---|---|");
            for (k, m) in &outcome.card.compute.metrics {
                if !k.starts_with("training/") {
                    println!("| compute | {k} | {} | {:.4} | {:.4} | {:.2} |", m.samples, m.mse, m.mae, m.mape_pct);
                }
            }
            for c in &outcome.card.comm {
                for (k, m) in &c.metrics {
                    println!(
                        "| comm D={} | {k} | {} | {:.4} | {:.4} | {:.2} |",
                        c.devices, m.samples, m.mse, m.mae, m.mape_pct
                    );
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
