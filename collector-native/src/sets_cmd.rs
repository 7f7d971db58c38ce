//! `shardplan-collect sets`: the sets a request file asks for (`shardplan.set-request/v1` lines), line
//! `i` measured as sample `i` of a compute dataset.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use planner_core::dataset::{Measurement, SetRequest, Timings, fnv1a64};

use crate::Cli;
use crate::backend::check_fp32;
use crate::collect::{self, RunPlan, Shard};
use crate::common::{
    CollectArgs, RunArgs, install_stop_handler, make_backend, measure_compute_samples, report, start_guard, template,
    validate_run,
};
use crate::workload::WorkPiece;

#[derive(Args, Debug)]
/// Arguments of `shardplan-collect sets`.
pub struct SetsArgs {
    #[command(flatten)]
    pub common: RunArgs,
    /// Set requests, one `shardplan.set-request/v1` JSON object per line; line `i` becomes sample `i`.
    #[arg(long)]
    pub requests: PathBuf,
}

/// `shardplan-collect sets`.
pub fn run(cli: &Cli, args: &SetsArgs) -> Result<i32> {
    let c = &args.common;
    validate_run(c)?;
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
    // Locked first: a second run on this --out fails here, before a backend or guard is set up.
    let output = collect::lock_output(&c.out)?;
    let mut backend = make_backend(cli, !c.no_flush)?;
    let name = args.requests.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let common =
        CollectArgs { samples: requests.len() as u64, seed: 0, shard: Shard { index: 0, count: 1 }, run: c.clone() };
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
    let mut guard = start_guard(cli, backend.as_mut(), c.batch_size)?;
    let prepare = |g: u64| {
        let set = requests[g as usize].clone();
        let bags = set.iter().map(|p| p.bags(c.batch_size)).collect::<Result<Vec<_>>>()?;
        Ok((set, bags))
    };
    let summary = measure_compute_samples(c, &plan, output, &tpl, &stop, backend.as_mut(), &mut guard, prepare)?;
    Ok(report(&summary, &c.out))
}
