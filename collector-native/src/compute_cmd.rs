//! `shardplan-collect compute`: random table sets from an augmented pool (or a tables file), one fused
//! forward + backward with SGD update each, appended to a compute dataset.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;
use planner_core::dataset::{Measurement, Timings};
use planner_core::task::task_seed;

use crate::Cli;
use crate::collect::{self, RunPlan};
use crate::common::{
    CollectArgs, install_stop_handler, load_base_tables, make_backend, measure_compute_samples, report, start_guard,
    template, validate_common, validate_max_tables,
};
use crate::workload::{self, Sampler};

#[derive(Args, Debug)]
/// Arguments of `shardplan-collect compute`.
pub struct ComputeArgs {
    #[command(flatten)]
    pub common: CollectArgs,
    /// Table file (CSV or JSON) to sample from instead of the built-in DLRM pool; every table is
    /// augmented to dims {4, 8, 16, 32, 64, 128}.
    #[arg(long)]
    pub tables: Option<PathBuf>,
    /// Most tables in a SPEC set (SPEC sets have 1..=max tables; plan-like sets up to 30 pieces).
    #[arg(long, default_value_t = 15)]
    pub max_tables: usize,
    /// Memory cap of a set (e.g. 4GiB); tables larger than it are never drawn.
    #[arg(long, default_value = "4GiB")]
    pub mem_cap: String,
    /// How sets are drawn: `spec` (SPEC section 4) or `mixed` (also row-wise pieces, up to 30 pieces,
    /// large tables alone and sets near the cap).
    #[arg(long, value_enum, default_value_t = Sampler::Mixed)]
    pub sampler: Sampler,
}

/// `shardplan-collect compute`.
pub fn run(cli: &Cli, args: &ComputeArgs) -> Result<i32> {
    let c = &args.common;
    validate_common(c)?;
    validate_max_tables(args.max_tables)?;
    let mem_cap = planner_core::units::parse_bytes("--mem-cap", &args.mem_cap)?;
    let (base, pool_label) = load_base_tables(args.tables.as_deref())?;
    let candidates = workload::augmented_candidates(&base, mem_cap)?;
    // Locked first: a second run on this --out fails here, before a backend or guard is set up.
    let output = collect::lock_output(&c.run.out)?;
    let mut backend = make_backend(cli, !c.run.no_flush)?;
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
    let plan =
        RunPlan { out: c.run.out.clone(), samples: c.samples, shard: c.shard, resume: c.run.resume, quiet: cli.quiet };
    let stop = install_stop_handler()?;
    let mut guard = start_guard(cli, backend.as_mut(), c.run.batch_size)?;
    let prepare = |g: u64| {
        let seed = task_seed(c.seed, g as usize);
        let set = workload::sample_set(&candidates, args.sampler, args.max_tables, mem_cap, seed)?;
        let bags = set.iter().map(|p| p.bags(c.run.batch_size)).collect::<Result<Vec<_>>>()?;
        Ok((set, bags))
    };
    let summary = measure_compute_samples(&c.run, &plan, output, &tpl, &stop, backend.as_mut(), &mut guard, prepare)?;
    Ok(report(&summary, &c.run.out))
}
