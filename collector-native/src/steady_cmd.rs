//! `shardplan-collect steady`: the contention guard's reference kernel timed several times in a row,
//! and whether the machine is steady enough to start a long measurement on (`guard::steadiness`).

use anyhow::{Result, bail};
use clap::Args;

use crate::{Cli, common, guard};

/// Arguments of `shardplan-collect steady`.
#[derive(Args, Debug)]
pub struct SteadyArgs {
    /// Readings of the reference kernel, one after another (about a second each on a CPU).
    #[arg(long, default_value_t = 15)]
    pub readings: usize,
    /// Bags per table of the reference kernel: the batch of the measurement to come.
    #[arg(long, default_value_t = 4096)]
    pub batch_size: u32,
}

/// `shardplan-collect steady`: the readings and the verdict on stdout; exit code 3 when unsteady.
pub fn run(cli: &Cli, args: &SteadyArgs) -> Result<i32> {
    if !(2..=1000).contains(&args.readings) {
        bail!("--readings = {} is invalid: use 2..=1000", args.readings);
    }
    common::validate_timing(args.batch_size, 1, 0)?;
    let limits = common::guard_limits(cli)?;
    let mut backend = common::make_backend(cli, true)?;
    let before = guard::cpu_ticks();
    let readings = guard::reference_readings(backend.as_mut(), args.batch_size, args.readings)?;
    let usage = guard::usage_since(before);
    let (lines, steady) = guard::steadiness(&readings, &limits, usage);
    for l in lines {
        println!("{l}");
    }
    Ok(if steady { 0 } else { 3 })
}
