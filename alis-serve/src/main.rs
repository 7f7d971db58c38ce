//! `shardplan-serve`: the loopback serving benchmark of the ALIS row-sharding strategies.
//!
//! `shardplan-serve bench` starts S shard servers (this binary again, as `shardplan-serve server`) on
//! 127.0.0.1, loads every row of the stream, replays the stream window by window with real RPCs while the
//! chosen strategies re-place rows live, and reports latency percentiles, throughput, fanout, migration
//! and the correctness counts (misses, wrong values, lost rows). The stream flags and the strategy flags
//! are `shardplan dynamic`'s, with the same defaults. Errors print their whole chain and exit with
//! status 1 (usage errors: 2, from clap).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use alis::{STRATEGY_NAMES, StrategyConfig, Stream, SyntheticParams};
use alis_serve::bench::{self, BenchConfig, CellReport, ControllerPriority, Load};
use alis_serve::server::{self, ServerConfig};
use alis_serve::wire::MAX_DIM;
use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use serde::Serialize;

/// Serve embedding rows from shard processes on loopback and measure the ALIS strategies with real RPCs.
#[derive(Parser)]
#[command(name = "shardplan-serve", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the serving benchmark: every strategy × shard count × seed × repeat on fresh servers.
    Bench(Box<BenchArgs>),
    /// Print the table of one or more JSON reports written by `bench --out` (runs made separately, e.g.
    /// one strategy at a time, in one table).
    Report(ReportArgs),
    /// Run one shard server (started by `bench`; announces `ready ADDR rows=N torn_bytes=B` on stdout and
    /// exits when its standard input closes).
    #[command(hide = true)]
    Server(ServerArgs),
}

#[derive(Debug, clap::Args)]
struct ReportArgs {
    /// JSON reports of `shardplan-serve bench --out`.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct ServerArgs {
    /// Shard index.
    #[arg(long)]
    shard: u32,
    /// Directory of the server's log.
    #[arg(long)]
    dir: PathBuf,
    /// Values per row.
    #[arg(long)]
    dim: usize,
}

/// Arguments of `shardplan-serve bench`.
#[allow(clippy::struct_excessive_bools, reason = "independent command-line switches, one field each")]
#[derive(Debug, Clone, clap::Args)]
struct BenchArgs {
    /// Request stream file: JSON Lines (`.jsonl`/`.json`/`.ndjson`) or CSV (`.csv`), as `shardplan dynamic`.
    #[arg(long, conflicts_with = "synthetic")]
    input: Option<PathBuf>,
    /// Use the seeded synthetic generator instead of a file (generator seed = run seed).
    #[arg(long)]
    synthetic: bool,
    /// Shard counts (server processes), comma separated.
    #[arg(long, value_delimiter = ',', default_values_t = vec![4usize, 8])]
    shards: Vec<usize>,
    /// Strategies to run, comma separated (default: all).
    #[arg(long, value_delimiter = ',')]
    strategies: Vec<String>,
    /// Number of seeds.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    seed_base: u64,
    /// Runs of every strategy per shard count and seed, interleaved: repeat r runs the strategies in their
    /// order rotated by r, so that no strategy always runs first or after the same one. With two or more,
    /// the report adds a table of medians and ranges over the runs and paired comparisons with the first
    /// strategy.
    #[arg(long, default_value_t = 1)]
    repeats: usize,
    /// Requests per window (one update per window); default: the generator's requests per window, or 1000.
    #[arg(long)]
    window_requests: Option<usize>,
    /// Values (f32) per embedding row.
    #[arg(long, default_value_t = 64)]
    dim: usize,
    /// Closed loop: requests in flight (each client sends its next request when the last is answered).
    #[arg(long, default_value_t = 16, conflicts_with = "rate")]
    concurrency: usize,
    /// Open loop instead: requests per second, sent on schedule whatever the answers.
    #[arg(long)]
    rate: Option<f64>,
    /// Data connections from the router to each server.
    #[arg(long, default_value_t = 2)]
    lanes: usize,
    /// Longest time requests are sent for, per run, seconds (the stream's end stops a run earlier).
    #[arg(long, default_value_t = 60.0)]
    duration_s: f64,
    /// Probability that a migration gets a server killed (SIGKILL) at a random step, then restarted.
    #[arg(long, default_value_t = 0.0)]
    kill_prob: f64,
    /// Scheduling priority of the controller thread, which runs every update and migration on the cores
    /// the router and the servers use: `normal` (the process's) or `low` (the lowest of its policy, nice 19
    /// on Linux).
    #[arg(long, value_enum, default_value_t = ControllerPriority::Normal)]
    controller_priority: ControllerPriority,
    /// A request not fully answered within this time (retries included) counts as failed, seconds.
    #[arg(long, default_value_t = 30.0)]
    request_limit_s: f64,
    /// Directory for the servers' logs (one subdirectory per run); default: a new one in the system's
    /// temporary directory, removed at the end unless --keep-data.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Keep the servers' logs after the runs.
    #[arg(long)]
    keep_data: bool,
    /// Write every run's report as JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Balance slack ε of the per-shard row cap ⌈(1+ε)·rows/S⌉.
    #[arg(long, default_value_t = StrategyConfig::default().epsilon)]
    epsilon: f64,
    /// Refinement sweeps of the iterative partitioner.
    #[arg(long, default_value_t = StrategyConfig::default().max_iters)]
    max_iters: usize,
    /// p of the probabilistic-fanout objective, in (0, 1].
    #[arg(long, default_value_t = StrategyConfig::default().p_fanout)]
    p_fanout: f64,
    /// Full re-partition period in windows.
    #[arg(long, default_value_t = StrategyConfig::default().full_every)]
    full_every: usize,
    /// Per-window age decay of `full`'s history, in (0, 1] (1: undecayed).
    #[arg(long, default_value_t = StrategyConfig::default().full_decay)]
    full_decay: f64,
    /// ALIS incremental data ratio, in (0, 1].
    #[arg(long, default_value_t = StrategyConfig::default().incr_ratio)]
    incr_ratio: f64,
    /// Per-window age decay of accumulated weights and votes, in (0, 1].
    #[arg(long, default_value_t = StrategyConfig::default().decay)]
    decay: f64,
    /// ALIS aggregate history weight β, in [0, 1].
    #[arg(long, default_value_t = StrategyConfig::default().beta)]
    beta: f64,
    /// Previous shard sets that vote in the aggregate step.
    #[arg(long, default_value_t = StrategyConfig::default().history_sets)]
    history_sets: usize,
    /// Previous windows whose requests ALIS's light incremental step partitions with the newest part of the
    /// window (0: the newest part alone, as the paper).
    #[arg(long, default_value_t = StrategyConfig::default().history_windows)]
    history_windows: usize,
    /// ALIS's global step: every this many updates (0: never), a V-cycle across shards of the deployed
    /// placement on the last --global-windows windows (docs/ALIS.md, "The global step").
    #[arg(long, default_value_t = StrategyConfig::default().global_every)]
    global_every: usize,
    /// Windows ALIS's global step reads, the latest included (0: all requests so far).
    #[arg(long, default_value_t = StrategyConfig::default().global_windows)]
    global_windows: usize,
    /// Slots per row of the sparse weight matrix.
    #[arg(long, default_value_t = StrategyConfig::default().top_k)]
    top_k: usize,
    /// ALIS: keep rows the window does not touch where they are.
    #[arg(long)]
    keep_cold: bool,
    /// ALIS: end the aggregate step with label propagation from the voted placement.
    #[arg(long)]
    polish: bool,
    /// The partitioner of `static`, `direct`, `full` and ALIS's light incremental step: `multilevel` or `flat`.
    #[arg(long, default_value = "multilevel")]
    partitioner: String,
    /// Generator: communities.
    #[arg(long, default_value_t = 64)]
    communities: usize,
    /// Generator: items per community at the start.
    #[arg(long, default_value_t = 400)]
    items_per_community: usize,
    /// Generator: windows.
    #[arg(long, default_value_t = 24)]
    windows: usize,
    /// Generator: requests per window.
    #[arg(long, default_value_t = 2000)]
    requests_per_window: usize,
    /// Generator: fewest rows per request.
    #[arg(long, default_value_t = 4)]
    min_rows: usize,
    /// Generator: most rows per request.
    #[arg(long, default_value_t = 16)]
    max_rows: usize,
    /// Generator: Zipf exponent inside a community.
    #[arg(long, default_value_t = 0.8)]
    zipf: f64,
    /// Generator: probability a row comes from another community.
    #[arg(long, default_value_t = 0.05)]
    noise: f64,
    /// Generator: fraction of items changing community per window.
    #[arg(long, default_value_t = 0.02)]
    drift: f64,
    /// Generator: fraction of items retired per window.
    #[arg(long, default_value_t = 0.01)]
    churn: f64,
    /// Generator: new items per window as a fraction of live items.
    #[arg(long, default_value_t = 0.02)]
    new_items: f64,
    /// Generator: std-dev of the per-window log-popularity walk of a community.
    #[arg(long, default_value_t = 0.1)]
    popularity_drift: f64,
    /// Generator: window of the abrupt shift.
    #[arg(long, default_value_t = 12)]
    shift_window: usize,
    /// Generator: fraction of items reassigned at the shift.
    #[arg(long, default_value_t = 0.5)]
    shift_fraction: f64,
}

/// Most server processes one run starts.
const MAX_SERVERS: usize = 64;

#[derive(Serialize)]
struct Report<'a> {
    source: String,
    requests: usize,
    rows: usize,
    window_requests: usize,
    dim: usize,
    lanes: usize,
    duration_s: f64,
    kill_prob: f64,
    controller_priority: ControllerPriority,
    config: StrategyConfig,
    machine: Machine,
    cells: &'a [CellReport],
}

#[derive(Serialize)]
struct Machine {
    cpu: String,
    cores: usize,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Bench(a) => run_bench(a),
        Command::Server(a) => run_server(a),
        Command::Report(a) => run_report(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_server(a: &ServerArgs) -> anyhow::Result<()> {
    if !(1..=MAX_DIM).contains(&a.dim) {
        bail!("invalid --dim = {} (allowed: 1..={MAX_DIM})", a.dim);
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the runtime")?;
    rt.block_on(async {
        let cfg = ServerConfig { shard: a.shard, dir: a.dir.clone(), dim: a.dim };
        let started = server::start(&cfg).await.with_context(|| format!("starting server {}", a.shard))?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "ready {} rows={} torn_bytes={}", started.addr, started.rows, started.torn_bytes)
            .and_then(|()| out.flush())
            .context("announcing the address")?;
        drop(out);
        // The parent holds this process's standard input: when it closes (the parent stopped us, or died),
        // the server ends. Everything it acknowledged is already synced.
        std::thread::Builder::new()
            .name("stdin-watch".into())
            .spawn(|| {
                let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
                std::process::exit(0);
            })
            .context("starting the standard-input watcher")?;
        started.serve().await.with_context(|| format!("server {}", a.shard))
    })
}

/// The part of a report file that `report` reads.
#[derive(serde::Deserialize)]
struct ReportFile {
    cells: Vec<CellReport>,
}

fn run_report(a: &ReportArgs) -> anyhow::Result<()> {
    let mut cells = Vec::new();
    for f in &a.files {
        let text = shardplan_files::read_text_capped(f, 1 << 30)?;
        let r: ReportFile = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a `shardplan-serve bench` report", f.display()))?;
        cells.extend(r.cells);
    }
    println!("{}", alis_serve::report::markdown(&cells));
    Ok(())
}

fn read_stream(path: &Path) -> anyhow::Result<Stream> {
    let text = shardplan_files::read_text_capped(path, alis::MAX_STREAM_FILE_BYTES)?;
    alis::parse_named(&path.to_string_lossy(), &text).with_context(|| format!("parsing {}", path.display()))
}

fn run_bench(a: &BenchArgs) -> anyhow::Result<()> {
    let strategies: Vec<String> = if a.strategies.is_empty() {
        STRATEGY_NAMES.iter().map(|s| (*s).to_string()).collect()
    } else {
        a.strategies.clone()
    };
    if a.seeds == 0 {
        bail!("invalid --seeds = 0 (allowed: >= 1)");
    }
    if !(1..=100).contains(&a.repeats) {
        bail!("invalid --repeats = {} (allowed: 1..=100)", a.repeats);
    }
    if a.shards.is_empty() {
        bail!("invalid --shards: empty list (allowed: 1..={MAX_SERVERS})");
    }
    if let Some(&s) = a.shards.iter().find(|&&s| !(1..=MAX_SERVERS).contains(&s)) {
        bail!("invalid --shards entry {s} (allowed: 1..={MAX_SERVERS} server processes)");
    }
    if !(1..=MAX_DIM).contains(&a.dim) {
        bail!("invalid --dim = {} (allowed: 1..={MAX_DIM})", a.dim);
    }
    if !(1..=4096).contains(&a.concurrency) {
        bail!("invalid --concurrency = {} (allowed: 1..=4096)", a.concurrency);
    }
    if let Some(r) = a.rate
        && !(r.is_finite() && r > 0.0 && r <= 1e6)
    {
        bail!("invalid --rate = {r} (allowed: (0, 1000000] requests per second)");
    }
    if !(1..=64).contains(&a.lanes) {
        bail!("invalid --lanes = {} (allowed: 1..=64)", a.lanes);
    }
    if !(a.duration_s.is_finite() && a.duration_s > 0.0 && a.duration_s <= 86_400.0) {
        bail!("invalid --duration-s = {} (allowed: (0, 86400])", a.duration_s);
    }
    if !(0.0..=1.0).contains(&a.kill_prob) {
        bail!("invalid --kill-prob = {} (allowed: [0, 1])", a.kill_prob);
    }
    if !(a.request_limit_s.is_finite() && a.request_limit_s > 0.0 && a.request_limit_s <= 3600.0) {
        bail!("invalid --request-limit-s = {} (allowed: (0, 3600])", a.request_limit_s);
    }
    let base = StrategyConfig {
        shards: a.shards[0],
        epsilon: a.epsilon,
        max_iters: a.max_iters,
        p_fanout: a.p_fanout,
        full_every: a.full_every,
        full_decay: a.full_decay,
        incr_ratio: a.incr_ratio,
        decay: a.decay,
        beta: a.beta,
        history_sets: a.history_sets,
        history_windows: a.history_windows,
        global_every: a.global_every,
        global_windows: a.global_windows,
        top_k: a.top_k,
        evict_cold: !a.keep_cold,
        polish: a.polish,
        partitioner: a.partitioner.parse().context("checking --partitioner")?,
        seed: a.seed_base,
    };
    for &s in &a.shards {
        StrategyConfig { shards: s, ..base }.validate().context("checking --shards and strategy flags")?;
    }
    for p in &strategies {
        alis::make_strategy(p, &base).with_context(|| format!("checking --strategies entry {p:?}"))?;
    }
    let gen_params = |seed: u64| SyntheticParams {
        seed,
        communities: a.communities,
        items_per_community: a.items_per_community,
        windows: a.windows,
        requests_per_window: a.requests_per_window,
        min_rows: a.min_rows,
        max_rows: a.max_rows,
        zipf: a.zipf,
        noise: a.noise,
        drift: a.drift,
        churn: a.churn,
        new_items: a.new_items,
        popularity_drift: a.popularity_drift,
        shift_window: a.shift_window,
        shift_fraction: a.shift_fraction,
    };
    let file_stream = match (&a.input, a.synthetic) {
        (Some(path), false) => Some(Arc::new(read_stream(path)?)),
        (None, true) => {
            gen_params(a.seed_base).validate().context("checking the generator flags")?;
            None
        }
        _ => bail!("give exactly one of --input FILE or --synthetic"),
    };
    let window_requests = a.window_requests.unwrap_or(if a.synthetic { a.requests_per_window } else { 1000 });
    if window_requests == 0 {
        bail!("invalid --window-requests = 0 (allowed: >= 1)");
    }
    let exe = std::env::current_exe().context("finding this binary to start the servers")?;
    let (root, remove_root) = match &a.data_dir {
        Some(d) => (d.clone(), false),
        None => (std::env::temp_dir().join(format!("shardplan-serve-{}", std::process::id())), !a.keep_data),
    };
    let load = match a.rate {
        Some(rate_per_s) => Load::Open { rate_per_s },
        None => Load::Closed { concurrency: a.concurrency },
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the runtime")?;
    let mut cells: Vec<CellReport> = Vec::new();
    let (mut n_req, mut n_rows) = (0, 0);
    let source = match &a.input {
        Some(p) => p.display().to_string(),
        None => format!("synthetic {:?}", gen_params(a.seed_base)),
    };
    let outcome = (|| -> anyhow::Result<()> {
        for seed in a.seed_base..a.seed_base + a.seeds {
            let stream = match &file_stream {
                Some(s) => s.clone(),
                None => {
                    Arc::new(alis::synthetic::generate(&gen_params(seed)).context("generating the synthetic stream")?)
                }
            };
            n_req = stream.n_requests();
            n_rows = stream.n_rows();
            for (&shards, repeat) in a.shards.iter().flat_map(|s| (0..a.repeats).map(move |r| (s, r))) {
                let rotated = strategies.iter().cycle().skip(repeat % strategies.len()).take(strategies.len());
                for p in rotated {
                    let cfg = StrategyConfig { shards, seed, ..base };
                    let data_dir = root.join(format!("S{shards}-{p}-seed{seed}-run{repeat}"));
                    let bc = BenchConfig {
                        exe: exe.clone(),
                        data_dir: data_dir.clone(),
                        dim: a.dim,
                        window_requests,
                        load,
                        lanes: a.lanes,
                        duration: Duration::from_secs_f64(a.duration_s),
                        kill_prob: a.kill_prob,
                        request_limit: Duration::from_secs_f64(a.request_limit_s),
                        fault: None,
                        migration_call_rows: alis_serve::wire::MIGRATION_CALL_ROWS,
                        controller_priority: a.controller_priority,
                    };
                    let mut r = rt
                        .block_on(bench::run(stream.clone(), p, cfg, &bc))
                        .with_context(|| format!("serving strategy {p} with S={shards}, seed {seed}, run {repeat}"))?;
                    r.repeat = repeat;
                    eprintln!(
                        "seed {seed} run {repeat} S={shards} {p:<9} p50 {:.0} µs p99 {:.0} µs {:.0} req/s fanout {:.3} migrated {} \
                         misses {} wrong {} kills {} lost {}",
                        r.p50_us,
                        r.p99_us,
                        r.throughput_rps,
                        r.mean_fanout,
                        r.migrated_total,
                        r.misses,
                        r.wrong_values,
                        r.kills,
                        r.lost_rows
                    );
                    cells.push(r);
                    if !a.keep_data {
                        std::fs::remove_dir_all(&data_dir)
                            .with_context(|| format!("removing {}", data_dir.display()))?;
                    }
                }
            }
        }
        Ok(())
    })();
    if remove_root {
        let _ = std::fs::remove_dir_all(&root);
    }
    outcome?;
    println!(
        "Stream: {source}\n{n_req} requests, {n_rows} rows, windows of {window_requests} requests, dim {}, {} load, \
         {} lanes, kill probability {} per migration, controller priority {}; loopback on this machine ({} \
         cores).\n",
        a.dim,
        match load {
            Load::Closed { concurrency } => format!("closed-loop {concurrency}-client"),
            Load::Open { rate_per_s } => format!("open-loop {rate_per_s} req/s"),
        },
        a.lanes,
        a.kill_prob,
        a.controller_priority.name(),
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get)
    );
    println!("{}", alis_serve::report::markdown(&cells));
    if let Some(out) = &a.out {
        let report = Report {
            source,
            requests: n_req,
            rows: n_rows,
            window_requests,
            dim: a.dim,
            lanes: a.lanes,
            duration_s: a.duration_s,
            kill_prob: a.kill_prob,
            controller_priority: a.controller_priority,
            config: base,
            machine: Machine {
                cpu: shardplan_files::cpu_model(),
                cores: std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
            },
            cells: &cells,
        };
        let json = serde_json::to_string_pretty(&report).context("serialising the report")?;
        shardplan_files::write_atomic(out, json.as_bytes())?;
    }
    Ok(())
}
