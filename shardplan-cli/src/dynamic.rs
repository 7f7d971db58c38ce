//! `shardplan dynamic`: prequential replay of a request stream (a file or the synthetic generator) through
//! every dynamic row-sharding strategy, over several shard counts and seeds.

use std::path::PathBuf;
use std::time::Instant;

use alis::{
    self, LatencyModel, ReplayConfig, RunSummary, STRATEGY_NAMES, StrategyConfig, Stream, SyntheticParams,
    WindowMetrics,
};
use anyhow::{Context, bail};
use serde::Serialize;

/// Arguments of `shardplan dynamic`.
#[allow(clippy::struct_excessive_bools, reason = "independent command-line switches, one field each")]
#[derive(Debug, Clone, clap::Args)]
pub struct DynamicArgs {
    /// Request stream file: JSON Lines (`.jsonl`/`.json`) or CSV (`.csv`); see docs/ALIS.md.
    #[arg(long, conflicts_with = "synthetic")]
    pub input: Option<PathBuf>,
    /// Use the seeded synthetic generator instead of a file (generator seed = run seed).
    #[arg(long)]
    pub synthetic: bool,
    /// Shard counts to evaluate, comma separated.
    #[arg(long, value_delimiter = ',', default_values_t = vec![4usize, 8, 16])]
    pub shards: Vec<usize>,
    /// Strategies to run, comma separated (default: all). `--policies` is the same flag (its earlier name).
    #[arg(long, alias = "policies", value_delimiter = ',')]
    pub strategies: Vec<String>,
    /// Number of seeds (runs per strategy and shard count).
    #[arg(long, default_value_t = 5)]
    pub seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    pub seed_base: u64,
    /// Requests per window (one update per window); default: the generator's requests per window, or 1000.
    #[arg(long)]
    pub window_requests: Option<usize>,
    /// Balance slack ε of the per-shard row cap ⌈(1+ε)·rows/S⌉.
    #[arg(long, default_value_t = StrategyConfig::default().epsilon)]
    pub epsilon: f64,
    /// Refinement sweeps of the iterative partitioner.
    #[arg(long, default_value_t = StrategyConfig::default().max_iters)]
    pub max_iters: usize,
    /// p of the probabilistic-fanout objective, in (0, 1].
    #[arg(long, default_value_t = StrategyConfig::default().p_fanout)]
    pub p_fanout: f64,
    /// Full re-partition period in windows.
    #[arg(long, default_value_t = StrategyConfig::default().full_every)]
    pub full_every: usize,
    /// Per-window age decay of `full`'s history, in (0, 1]: a request a windows older than the latest weighs
    /// `full_decay^a` in its partition (1: all history undecayed; docs/ALIS.md, "A decayed `full`").
    #[arg(long, default_value_t = StrategyConfig::default().full_decay)]
    pub full_decay: f64,
    /// ALIS incremental data ratio (the paper's α of light incremental sharding), in (0, 1].
    #[arg(long, default_value_t = StrategyConfig::default().incr_ratio)]
    pub incr_ratio: f64,
    /// Per-window age decay of accumulated weights and votes (the paper's α(I)), in (0, 1].
    #[arg(long, default_value_t = StrategyConfig::default().decay)]
    pub decay: f64,
    /// ALIS aggregate history weight β, in [0, 1].
    #[arg(long, default_value_t = StrategyConfig::default().beta)]
    pub beta: f64,
    /// Previous shard sets that vote in the aggregate step.
    #[arg(long, default_value_t = StrategyConfig::default().history_sets)]
    pub history_sets: usize,
    /// Previous windows whose requests ALIS's light incremental step partitions with the newest part of the
    /// window (0: the newest part alone, as the paper).
    #[arg(long, default_value_t = StrategyConfig::default().history_windows)]
    pub history_windows: usize,
    /// ALIS's global step: every this many updates (0: never), in place of the light step, a V-cycle across
    /// shards of the deployed placement on the last --global-windows windows (docs/ALIS.md, "The global step").
    #[arg(long, default_value_t = StrategyConfig::default().global_every)]
    pub global_every: usize,
    /// Windows ALIS's global step reads, the latest included (0: all requests so far).
    #[arg(long, default_value_t = StrategyConfig::default().global_windows)]
    pub global_windows: usize,
    /// Slots per row of the sparse weight matrix.
    #[arg(long, default_value_t = StrategyConfig::default().top_k)]
    pub top_k: usize,
    /// The partitioner of `static`, `direct`, `full` and ALIS's light incremental step: `multilevel`, `deep`
    /// (multilevel with deep initial partitioning, docs/ALIS.md) or `flat` (the earlier one-level local search).
    #[arg(long, default_value = "multilevel")]
    pub partitioner: String,
    /// Instead of replaying: write the hypergraphs that `direct` and `full` (as chosen by --strategies)
    /// partition at every scored update, each window's requests, the rows' hash keys, and this partitioner's
    /// result and time for every shard count, to this folder (read by `tools/alis_kahypar.py`).
    #[arg(long)]
    pub dump_dir: Option<PathBuf>,
    /// With --dump-dir: timed runs of the partitioner per hypergraph and shard count (the median is kept).
    #[arg(long, default_value_t = 3)]
    pub dump_reps: usize,
    /// ALIS: keep rows the window does not touch where they are (by default they give their room to the
    /// window's rows and move off overflowing shards, least recently touched first).
    #[arg(long)]
    pub keep_cold: bool,
    /// ALIS: end the aggregate step with label propagation from the voted placement over the whole window
    /// and the windows the light step reads (docs/ALIS.md, "Polishing the vote"); no effect on `alis-base`.
    #[arg(long)]
    pub polish: bool,
    /// Bytes per embedding row (dimension · 4).
    #[arg(long, default_value_t = 64.0)]
    pub row_bytes: f64,
    /// Latency model: fixed cost of one RPC, microseconds.
    #[arg(long, default_value_t = 20.0)]
    pub rpc_base_us: f64,
    /// Latency model: caller cost of issuing one RPC, microseconds.
    #[arg(long, default_value_t = 2.0)]
    pub issue_us: f64,
    /// Latency model: link bandwidth, Gbit/s.
    #[arg(long, default_value_t = 100.0)]
    pub bw_gbit: f64,
    /// Write the full results (summaries, and per-window metrics with --per-window) as JSON here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Include per-window metrics in the JSON (needs --out).
    #[arg(long, requires = "out")]
    pub per_window: bool,
    /// Generator: communities.
    #[arg(long, default_value_t = 64)]
    pub communities: usize,
    /// Generator: items per community at the start.
    #[arg(long, default_value_t = 400)]
    pub items_per_community: usize,
    /// Generator: windows.
    #[arg(long, default_value_t = 24)]
    pub windows: usize,
    /// Generator: requests per window.
    #[arg(long, default_value_t = 2000)]
    pub requests_per_window: usize,
    /// Generator: fewest rows per request.
    #[arg(long, default_value_t = 4)]
    pub min_rows: usize,
    /// Generator: most rows per request.
    #[arg(long, default_value_t = 16)]
    pub max_rows: usize,
    /// Generator: Zipf exponent inside a community.
    #[arg(long, default_value_t = 0.8)]
    pub zipf: f64,
    /// Generator: probability a row comes from another community.
    #[arg(long, default_value_t = 0.05)]
    pub noise: f64,
    /// Generator: fraction of items changing community per window.
    #[arg(long, default_value_t = 0.02)]
    pub drift: f64,
    /// Generator: fraction of items retired per window.
    #[arg(long, default_value_t = 0.01)]
    pub churn: f64,
    /// Generator: new items per window as a fraction of live items.
    #[arg(long, default_value_t = 0.02)]
    pub new_items: f64,
    /// Generator: std-dev of the per-window log-popularity walk of a community.
    #[arg(long, default_value_t = 0.1)]
    pub popularity_drift: f64,
    /// Generator: window of the abrupt shift.
    #[arg(long, default_value_t = 12)]
    pub shift_window: usize,
    /// Generator: fraction of items reassigned at the shift.
    #[arg(long, default_value_t = 0.5)]
    pub shift_fraction: f64,
}

/// One (strategy, shard count) cell: per-seed summaries and their mean ± sd.
#[derive(Debug, Serialize)]
struct Cell {
    strategy: String,
    shards: usize,
    runs: Vec<RunSummary>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    windows: Vec<Vec<WindowMetrics>>,
}

#[derive(Debug, Serialize)]
struct Report {
    source: String,
    requests: usize,
    rows: usize,
    window_requests: usize,
    config: StrategyConfig,
    latency: LatencyModel,
    cells: Vec<Cell>,
    peak_rss_bytes: Option<u64>,
}

/// Runs `shardplan dynamic`.
pub fn run(args: &DynamicArgs) -> anyhow::Result<()> {
    let strategies: Vec<String> = if args.strategies.is_empty() {
        STRATEGY_NAMES.iter().map(|s| (*s).to_string()).collect()
    } else {
        args.strategies.clone()
    };
    if args.seeds == 0 {
        bail!("invalid --seeds = 0 (allowed: >= 1)");
    }
    if args.shards.is_empty() {
        bail!("invalid --shards: empty list (allowed: shard counts 1..=4096)");
    }
    let base = StrategyConfig {
        shards: args.shards[0],
        epsilon: args.epsilon,
        max_iters: args.max_iters,
        p_fanout: args.p_fanout,
        full_every: args.full_every,
        full_decay: args.full_decay,
        incr_ratio: args.incr_ratio,
        decay: args.decay,
        beta: args.beta,
        history_sets: args.history_sets,
        history_windows: args.history_windows,
        global_every: args.global_every,
        global_windows: args.global_windows,
        top_k: args.top_k,
        evict_cold: !args.keep_cold,
        polish: args.polish,
        partitioner: args.partitioner.parse().context("checking --partitioner")?,
        seed: args.seed_base,
    };
    // Validate everything before the first (possibly long) run.
    for &s in &args.shards {
        StrategyConfig { shards: s, ..base }.validate().context("checking --shards and strategy flags")?;
    }
    for p in &strategies {
        alis::make_strategy(p, &base).with_context(|| format!("checking --strategies entry {p:?}"))?;
    }
    if !(args.bw_gbit > 0.0 && args.row_bytes > 0.0 && args.rpc_base_us >= 0.0 && args.issue_us >= 0.0) {
        bail!(
            "invalid latency model: --bw-gbit {} and --row-bytes {} must be > 0, --rpc-base-us {} and --issue-us {} >= 0",
            args.bw_gbit,
            args.row_bytes,
            args.rpc_base_us,
            args.issue_us
        );
    }
    let latency = LatencyModel {
        rpc_base_us: args.rpc_base_us,
        issue_us: args.issue_us,
        bw_bytes_per_us: args.bw_gbit * 1e9 / 8.0 / 1e6,
        row_bytes: args.row_bytes,
    };
    let gen_params = |seed: u64| SyntheticParams {
        seed,
        communities: args.communities,
        items_per_community: args.items_per_community,
        windows: args.windows,
        requests_per_window: args.requests_per_window,
        min_rows: args.min_rows,
        max_rows: args.max_rows,
        zipf: args.zipf,
        noise: args.noise,
        drift: args.drift,
        churn: args.churn,
        new_items: args.new_items,
        popularity_drift: args.popularity_drift,
        shift_window: args.shift_window,
        shift_fraction: args.shift_fraction,
    };
    let file_stream = match (&args.input, args.synthetic) {
        (Some(path), false) => Some(read_stream(path)?),
        (None, true) => None,
        _ => bail!("give exactly one of --input FILE or --synthetic"),
    };
    let window_requests = args.window_requests.unwrap_or(if args.synthetic { args.requests_per_window } else { 1000 });
    let replay_cfg = ReplayConfig { window_requests, latency };
    let source = match &args.input {
        Some(p) => p.display().to_string(),
        None => format!("synthetic {:?}", gen_params(args.seed_base)),
    };
    if let Some(dir) = &args.dump_dir {
        return dump(dir, args, &strategies, &base, file_stream.as_ref(), &gen_params, window_requests);
    }
    let mut cells: Vec<Cell> = Vec::new();
    let (mut n_req, mut n_rows) = (0, 0);
    for seed in args.seed_base..args.seed_base + args.seeds {
        let generated;
        let stream: &Stream = if let Some(s) = &file_stream {
            s
        } else {
            generated = alis::synthetic::generate(&gen_params(seed)).context("generating the synthetic stream")?;
            &generated
        };
        n_req = stream.n_requests();
        n_rows = stream.n_rows();
        for &shards in &args.shards {
            for p in &strategies {
                let cfg = StrategyConfig { shards, seed, ..base };
                let start = Instant::now();
                let mut clock = || start.elapsed().as_secs_f64() * 1e3;
                let r = alis::replay(stream, p, &cfg, &replay_cfg, &mut clock)
                    .with_context(|| format!("replaying strategy {p} with S={shards}, seed {seed}"))?;
                eprintln!(
                    "seed {seed} S={shards} {p:<9} fanout {:.3} update {:.2} ms",
                    r.summary.mean_fanout, r.summary.update_ms
                );
                let idx = if let Some(i) = cells.iter().position(|c| c.strategy == *p && c.shards == shards) {
                    i
                } else {
                    cells.push(Cell { strategy: p.clone(), shards, runs: Vec::new(), windows: Vec::new() });
                    cells.len() - 1
                };
                let cell = &mut cells[idx];
                cell.runs.push(r.summary);
                if args.per_window {
                    cell.windows.push(r.windows);
                }
            }
        }
    }
    if let Some(n) = cells.iter().flat_map(|c| &c.runs).map(|r| r.scored_windows).min().filter(|&n| n < 2) {
        eprintln!(
            "warning: windows of {window_requests} requests leave {n} scored window{} in this stream of {n_req} \
             requests: window-to-window variability is undefined and the goals are not judged (give a smaller \
             --window-requests)",
            if n == 1 { "" } else { "s" }
        );
    }
    println!("{}", markdown(&source, n_req, n_rows, window_requests, &args.shards, &cells));
    let peak = peak_rss_bytes();
    if let Some(b) = peak {
        println!("peak resident memory: {:.1} MiB", b as f64 / (1024.0 * 1024.0));
    }
    if let Some(out) = &args.out {
        let report = Report {
            source,
            requests: n_req,
            rows: n_rows,
            window_requests,
            config: base,
            latency,
            cells,
            peak_rss_bytes: peak,
        };
        let json = serde_json::to_string_pretty(&report).context("serialising the report")?;
        shardplan_files::write_atomic(out, json.as_bytes())?;
    }
    Ok(())
}

/// One partitioned hypergraph of the dump and, per shard count, this partitioner's result.
#[derive(Debug, Serialize)]
struct DumpInstance {
    scope: &'static str,
    seed: u64,
    /// The update (index of the window it ends with); the partition is scored on window `update + 1`.
    update: usize,
    file: String,
    n_vertices: usize,
    n_nets: usize,
    n_pins: usize,
    ours: Vec<DumpResult>,
}

#[derive(Debug, Serialize)]
struct DumpResult {
    shards: usize,
    cap: usize,
    km1: u64,
    max_load: usize,
    /// Median wall-clock time of the partition call.
    time_ms: f64,
    /// Median CPU time of the partition call (this thread's), where the system reports it.
    cpu_ms: Option<f64>,
    part: String,
}

#[derive(Debug, Serialize)]
struct DumpWindow {
    index: usize,
    file: String,
    rows_known: usize,
}

#[derive(Debug, Serialize)]
struct DumpStream {
    seed: u64,
    rows_file: String,
    windows: Vec<DumpWindow>,
}

#[derive(Debug, Serialize)]
struct DumpManifest {
    source: String,
    window_requests: usize,
    epsilon: f64,
    shards: Vec<usize>,
    partitioner: String,
    config: StrategyConfig,
    streams: Vec<DumpStream>,
    instances: Vec<DumpInstance>,
}

/// The nets as an hMETIS file (1-based pins; with `weights`, each line starts with the net's weight).
fn hmetis(n_vertices: usize, nets: &[(&[u32], u32)], weights: bool) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "{} {}{}", nets.len(), n_vertices, if weights { " 1" } else { "" });
    for (pins, w) in nets {
        if weights {
            let _ = write!(s, "{w} ");
        }
        for (i, p) in pins.iter().enumerate() {
            let _ = write!(s, "{}{}", if i == 0 { "" } else { " " }, p + 1);
        }
        s.push('\n');
    }
    s
}

/// `--dump-dir`: the hypergraphs `direct` and `full` partition at every scored update, each window's
/// requests and the rows' hash keys (for scoring a partition on the next window as the replay does), and
/// this partitioner's partition, objective and median time per shard count. Every instance's partitioner
/// runs from a generator seeded with the run seed.
fn dump(
    dir: &std::path::Path,
    args: &DynamicArgs,
    strategies: &[String],
    base: &StrategyConfig,
    file_stream: Option<&Stream>,
    gen_params: &dyn Fn(u64) -> SyntheticParams,
    window_requests: usize,
) -> anyhow::Result<()> {
    let mut scopes: Vec<(&'static str, alis::Scope)> = Vec::new();
    for name in strategies {
        match name.as_str() {
            "direct" => scopes.push(("direct", alis::Scope::Latest)),
            "full" => scopes.push(("full", alis::Scope::All)),
            other => bail!("invalid --strategies entry {other:?} with --dump-dir (allowed: direct, full)"),
        }
    }
    if args.dump_reps == 0 {
        bail!("invalid --dump-reps = 0 (allowed: >= 1)");
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let write = |name: &str, text: &str| shardplan_files::write_atomic(&dir.join(name), text.as_bytes());
    let mut streams = Vec::new();
    let mut instances = Vec::new();
    for seed in args.seed_base..args.seed_base + args.seeds {
        let generated;
        let stream: &Stream = if let Some(s) = file_stream {
            s
        } else {
            generated = alis::synthetic::generate(&gen_params(seed)).context("generating the synthetic stream")?;
            &generated
        };
        let windows = stream.windows(window_requests)?;
        let rows_file = format!("rows-{seed}.txt");
        let mut keys = String::new();
        for r in 0..stream.n_rows() as u32 {
            keys.push_str(&stream.row_key(r).wrapping_add(u64::from(stream.row_table(r))).to_string());
            keys.push('\n');
        }
        write(&rows_file, &keys)?;
        let mut dumped_windows = Vec::new();
        for (w, range) in windows.iter().enumerate() {
            let file = format!("window-{seed}-{w:03}.hgr");
            let rows_known = stream.rows_known_after(range.end);
            let nets: Vec<(&[u32], u32)> = range.clone().map(|i| (stream.request(i), 1)).collect();
            write(&file, &hmetis(rows_known, &nets, false))?;
            dumped_windows.push(DumpWindow { index: w, file, rows_known });
        }
        streams.push(DumpStream { seed, rows_file, windows: dumped_windows });
        // The last update is never scored (no window follows it).
        for (u, range) in windows.iter().enumerate().take(windows.len().saturating_sub(1)) {
            // `full` with a decayed history weighs every window by its age (`alis::decayed_partition_input`).
            let starts: Vec<usize> =
                if base.full_decay < 1.0 { windows[..=u].iter().map(|w| w.start).collect() } else { Vec::new() };
            for &(name, scope) in &scopes {
                let cfg0 = StrategyConfig { seed, ..*base };
                let input = |cfg: &StrategyConfig| {
                    if scope == alis::Scope::All && cfg.full_decay < 1.0 {
                        alis::decayed_partition_input(stream, &starts, range.end, cfg)
                    } else {
                        alis::scope_partition_input(stream, scope, range.clone(), cfg)
                    }
                };
                let (hg, _) = input(&cfg0)?;
                let file = if scope == alis::Scope::Latest {
                    format!("window-{seed}-{u:03}.hgr")
                } else {
                    let file = format!("{name}-{seed}-{u:03}.hgr");
                    let nets: Vec<(&[u32], u32)> = (0..hg.n_nets()).map(|e| (hg.net(e), hg.net_weight(e))).collect();
                    write(&file, &hmetis(hg.n_vertices(), &nets, nets.iter().any(|n| n.1 != 1)))?;
                    file
                };
                let mut ours = Vec::new();
                for &shards in &args.shards {
                    let cfg = StrategyConfig { shards, ..cfg0 };
                    let (hg, params) = input(&cfg)?;
                    let init = vec![alis::partition::UNASSIGNED; hg.n_vertices()];
                    let mut times = Vec::with_capacity(args.dump_reps);
                    let mut cpu_times = Vec::with_capacity(args.dump_reps);
                    let mut part = Vec::new();
                    for _ in 0..args.dump_reps {
                        let cpu0 = thread_cpu_ns();
                        let start = Instant::now();
                        part = alis::partition::partition_seeded(&hg, &init, &params, seed)?.0;
                        times.push(start.elapsed().as_secs_f64() * 1e3);
                        if let (Some(a), Some(b)) = (cpu0, thread_cpu_ns()) {
                            cpu_times.push(b.saturating_sub(a) as f64 / 1e6);
                        }
                    }
                    times.sort_by(f64::total_cmp);
                    cpu_times.sort_by(f64::total_cmp);
                    let mut load = vec![0usize; shards];
                    for &s in &part {
                        load[s as usize] += 1;
                    }
                    let part_file = format!("ours-{name}-{seed}-{u:03}-S{shards}.part");
                    let text = part.iter().fold(String::new(), |mut t, s| {
                        use std::fmt::Write;
                        let _ = writeln!(t, "{s}");
                        t
                    });
                    write(&part_file, &text)?;
                    ours.push(DumpResult {
                        shards,
                        cap: params.caps[0],
                        km1: alis::partition::km1(&hg, &part),
                        max_load: load.iter().copied().max().unwrap_or(0),
                        time_ms: times[times.len() / 2],
                        cpu_ms: cpu_times.get(cpu_times.len() / 2).copied(),
                        part: part_file,
                    });
                }
                eprintln!("seed {seed} update {u} {name}: {} nets, {} rows", hg.n_nets(), hg.n_vertices());
                instances.push(DumpInstance {
                    scope: name,
                    seed,
                    update: u,
                    file,
                    n_vertices: hg.n_vertices(),
                    n_nets: hg.n_nets(),
                    n_pins: hg.n_pins(),
                    ours,
                });
            }
        }
    }
    let source = match &args.input {
        Some(p) => p.display().to_string(),
        None => format!("synthetic {:?}", gen_params(args.seed_base)),
    };
    let manifest = DumpManifest {
        source,
        window_requests,
        epsilon: base.epsilon,
        shards: args.shards.clone(),
        partitioner: base.partitioner.to_string(),
        config: *base,
        streams,
        instances,
    };
    let json = serde_json::to_string_pretty(&manifest).context("serialising the dump manifest")?;
    write("manifest.json", &json)?;
    eprintln!("wrote {} instances to {}", manifest.instances.len(), dir.display());
    Ok(())
}

fn read_stream(path: &std::path::Path) -> anyhow::Result<Stream> {
    let text = shardplan_files::read_text_capped(path, alis::MAX_STREAM_FILE_BYTES)?;
    alis::parse_named(&path.to_string_lossy(), &text).with_context(|| format!("parsing {}", path.display()))
}

fn mean_sd(xs: impl Iterator<Item = f64>) -> (f64, f64) {
    let v: Vec<f64> = xs.collect();
    alis::metrics::mean_sd(&v)
}

fn markdown(source: &str, n_req: usize, n_rows: usize, win: usize, shards: &[usize], cells: &[Cell]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let seeds = cells.first().map_or(0, |c| c.runs.len());
    let _ = writeln!(
        s,
        "Stream: {source}\n{n_req} requests, {n_rows} rows, windows of {win} requests, {seeds} seeds (mean ± sd over seeds).\n"
    );
    for &sh in shards {
        let _ = writeln!(s, "### S = {sh}\n");
        // Window-to-window figures need two scored windows (window 0 is served before any update and not
        // scored); with fewer they are undefined, not a perfectly stable 0.
        let scored = cells.iter().filter(|c| c.shards == sh).flat_map(|c| &c.runs).map(|r| r.scored_windows).min();
        let judged = scored.is_some_and(|n| n >= 2);
        if !judged {
            let n = scored.unwrap_or(0);
            let _ = writeln!(
                s,
                "**Only {n} scored window{}**: the window-to-window figures are undefined (shown as –) and the goals \
                 are not judged. Give a smaller `--window-requests` for at least 3 windows.\n",
                if n == 1 { "" } else { "s" }
            );
        }
        let _ = writeln!(
            s,
            "| strategy | mean fanout | P99 fanout | window sd | step sd | remote rows/req | max row imb | traffic imb | migrated rows/update | update ms | latency µs | P99 latency µs | state MiB |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for c in cells.iter().filter(|c| c.shards == sh) {
            let f = |g: &dyn Fn(&RunSummary) -> f64, prec: usize| {
                let (m, d) = mean_sd(c.runs.iter().map(g));
                format!("{m:.prec$} ± {d:.prec$}")
            };
            let variability =
                |g: &dyn Fn(&RunSummary) -> f64, prec: usize| if judged { f(g, prec) } else { "–".into() };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                c.strategy,
                f(&|r| r.mean_fanout, 3),
                f(&|r| r.p99_fanout, 2),
                variability(&|r| r.window_fanout_sd, 3),
                variability(&|r| r.window_fanout_step_sd, 3),
                f(&|r| r.remote_rows_per_request, 2),
                f(&|r| r.max_row_imbalance, 3),
                f(&|r| r.mean_traffic_imbalance, 2),
                f(&|r| r.migrated_rows_per_update, 1),
                f(&|r| r.update_ms, 2),
                f(&|r| r.mean_latency_us, 1),
                f(&|r| r.p99_latency_us, 1),
                f(&|r| r.state_bytes as f64 / (1024.0 * 1024.0), 2),
            );
        }
        let get = |p: &str| cells.iter().find(|c| c.shards == sh && c.strategy == p);
        if !judged {
            s.push('\n');
            continue;
        }
        if let (Some(a), Some(full)) = (get("alis"), get("full")) {
            let (au, _) = mean_sd(a.runs.iter().map(|r| r.update_ms));
            let (fu, _) = mean_sd(full.runs.iter().map(|r| r.update_ms));
            let (af, _) = mean_sd(a.runs.iter().map(|r| r.mean_fanout));
            let (ff, _) = mean_sd(full.runs.iter().map(|r| r.mean_fanout));
            let _ = writeln!(
                s,
                "\nALIS vs full: update {:.1}× cheaper (goal ≥ 8×: {}); fanout {:+.1}% (goal within 5%: {})",
                fu / au.max(1e-9),
                if fu >= 8.0 * au { "met" } else { "NOT met" },
                100.0 * (af - ff) / ff,
                if af <= 1.05 * ff { "met" } else { "NOT met" },
            );
        }
        for other in ["greedy", "alis-base"] {
            if let (Some(a), Some(g)) = (get("alis"), get(other)) {
                let (asd, _) = mean_sd(a.runs.iter().map(|r| r.window_fanout_sd));
                let (gsd, _) = mean_sd(g.runs.iter().map(|r| r.window_fanout_sd));
                let (amad, _) = mean_sd(a.runs.iter().map(|r| r.window_fanout_mad));
                let (gmad, _) = mean_sd(g.runs.iter().map(|r| r.window_fanout_mad));
                let (astep, _) = mean_sd(a.runs.iter().map(|r| r.window_fanout_step_sd));
                let (gstep, _) = mean_sd(g.runs.iter().map(|r| r.window_fanout_step_sd));
                // Runs of both cells are in seed order, so the difference can be paired per seed.
                let diffs: Vec<f64> = a
                    .runs
                    .iter()
                    .zip(&g.runs)
                    .map(|(x, y)| x.window_fanout_step_sd - y.window_fanout_step_sd)
                    .collect();
                let (dm, dsd) = alis::metrics::mean_sd(&diffs);
                let lower = diffs.iter().filter(|&&d| d < 0.0).count();
                let _ = writeln!(
                    s,
                    "ALIS vs {other}: window-to-window step sd {astep:.3} vs {gstep:.3} (goal lower: {}; paired per seed {dm:+.4} ± {:.4} s.e., lower in {lower}/{} seeds); sd of window means {asd:.3} vs {gsd:.3}, mean |Δ| {amad:.3} vs {gmad:.3}",
                    if astep < gstep { "met" } else { "NOT met" },
                    dsd / (diffs.len().max(1) as f64).sqrt(),
                    diffs.len(),
                );
            }
        }
        s.push('\n');
    }
    s
}

/// CPU time this thread has run, in nanoseconds (Linux `/proc/thread-self/schedstat`), if available: the
/// partitioner's own time, which other processes on the machine do not inflate as they do wall-clock time.
fn thread_cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

/// Peak resident set size of this process (Linux `VmHWM`), if available.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
