//! `shardplan-collect bench`: the backend's compute and comm samples/s and its kernels' effective
//! bandwidth (no dataset written); `--dump` writes the workloads for other implementations to time.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use planner_core::table::TableSpec;
use planner_core::task::task_seed;

use crate::Cli;
use crate::backend::{Timing, check_fits};
use crate::common::{load_base_tables, make_backend, validate_devices, validate_max_tables, validate_timing};
use crate::cpu;
use crate::workload::{self, Sampler, WorkPiece};

#[derive(Args, Debug)]
/// Arguments of `shardplan-collect bench`.
pub struct BenchArgs {
    /// Compute samples to run.
    #[arg(long, default_value_t = 5)]
    pub compute_samples: u64,
    /// Comm samples to run.
    #[arg(long, default_value_t = 5)]
    pub comm_samples: u64,
    /// Bags per table.
    #[arg(long, default_value_t = 65_536)]
    pub batch_size: u32,
    /// Devices of the comm samples.
    #[arg(long, default_value_t = 4)]
    pub devices: usize,
    /// Memory cap of a compute set.
    #[arg(long, default_value = "4GiB")]
    pub mem_cap: String,
    /// Most tables in a compute set.
    #[arg(long, default_value_t = 15)]
    pub max_tables: usize,
    /// Base seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Untimed runs per sample.
    #[arg(long, default_value_t = 5)]
    pub warmup: u32,
    /// Timed runs per sample.
    #[arg(long, default_value_t = 10)]
    pub reps: u32,
    /// Also write every compute sample's workload to this directory (`sample_<g>.json` with the
    /// tables, `sample_<g>_t<k>.indices` / `.offsets` as little-endian u32), so that another
    /// implementation (`tools/torch_embedding_bag_bench.py`) can time exactly the same lookups.
    #[arg(long)]
    pub dump: Option<PathBuf>,
}

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

/// Runs compute and comm samples exactly as a collection does (same generator, same protocol) without
/// writing them, and reports throughput and the kernels' effective bandwidth (bytes touched / median time,
/// see `cpu::bytes_touched`).
pub fn run(cli: &Cli, args: &BenchArgs) -> Result<i32> {
    // The limits of `compute` and `comm`: a sample allocates its lookups by the batch and the devices.
    validate_timing(args.batch_size, args.reps, args.warmup)?;
    validate_devices(args.devices, args.batch_size)?;
    validate_max_tables(args.max_tables)?;
    let mem_cap = planner_core::units::parse_bytes("--mem-cap", &args.mem_cap)?;
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
        let sample = workload::sample_comm(args.devices, task_seed(args.seed, g as usize), 20.0, 0.0, false);
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
