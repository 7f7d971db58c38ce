//! `shardplan-collect comm`: forward/backward all-to-all of random per-device dims with start delays,
//! appended to a comm dataset.

use anyhow::{Result, bail};
use clap::Args;
use planner_core::dataset::{Measurement, Timings};
use planner_core::task::task_seed;

use crate::Cli;
use crate::backend::Timing;
use crate::collect::{self, RunPlan};
use crate::common::{
    CollectArgs, install_stop_handler, make_backend, report, start_guard, template, validate_common, validate_devices,
};
use crate::workload;

#[derive(Args, Debug)]
/// Arguments of `shardplan-collect comm`.
pub struct CommArgs {
    #[command(flatten)]
    pub common: CollectArgs,
    /// Devices taking part in the all-to-all (threads on the CPU backend, GPUs on CUDA).
    #[arg(long, default_value_t = 4)]
    pub devices: usize,
    /// Start delays are drawn in [0, diff) with diff uniform in [1, this) ms (SPEC section 4: 20; raise it
    /// where plans' devices finish their compute further apart).
    #[arg(long, default_value_t = 20.0)]
    pub max_delay_ms: f64,
    /// Each sample makes each dim, with probability q uniform in [0, this), a row-wise table: a piece on
    /// every device, as TorchRec's plans place them (their devices' dim sums reach several times the
    /// SPEC's). 0 (the default): the SPEC's samples.
    #[arg(long, default_value_t = 0.0)]
    pub row_wise_max: f64,
    /// Draw the spread of the start delays log-uniform from 0.05 ms up to `--max-delay-ms` instead of
    /// uniform from 1 ms (SPEC): levelled plans start their exchanges within a millisecond or two.
    #[arg(long)]
    pub log_delays: bool,
}

/// `shardplan-collect comm`.
pub fn run(cli: &Cli, args: &CommArgs) -> Result<i32> {
    let c = &args.common;
    validate_common(c)?;
    if c.run.rounds != 1 {
        bail!("--rounds = {} is invalid for comm samples: rounds apply to compute and `sets` runs", c.run.rounds);
    }
    validate_devices(args.devices, c.run.batch_size)?;
    if !(args.max_delay_ms.is_finite() && args.max_delay_ms > 1.0 && args.max_delay_ms <= 10_000.0) {
        bail!("--max-delay-ms = {} is invalid: use a number in (1, 10000]", args.max_delay_ms);
    }
    if !(args.row_wise_max.is_finite() && (0.0..=1.0).contains(&args.row_wise_max)) {
        bail!("--row-wise-max = {} is invalid: use a probability in [0, 1]", args.row_wise_max);
    }
    // Locked first: a second run on this --out fails here, before a backend or guard is set up.
    let output = collect::lock_output(&c.run.out)?;
    let mut backend = make_backend(cli, !c.run.no_flush)?;
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
    let mut sampler: Vec<String> = Vec::new();
    if args.log_delays {
        sampler.push(format!("log-delays<{}ms", args.max_delay_ms));
    } else if args.max_delay_ms != 20.0 {
        sampler.push(format!("delays<{}ms", args.max_delay_ms));
    }
    if args.row_wise_max > 0.0 {
        sampler.push(format!("row-wise<{}", args.row_wise_max));
    }
    let sampler = (!sampler.is_empty()).then(|| sampler.join(","));
    let tpl = template(backend.as_ref(), c, format!("comm:d{}", args.devices), sampler, empty);
    let plan =
        RunPlan { out: c.run.out.clone(), samples: c.samples, shard: c.shard, resume: c.run.resume, quiet: cli.quiet };
    let stop = install_stop_handler()?;
    let timing = Timing { warmup: c.run.warmup, reps: c.run.reps };
    let mut guard = start_guard(cli, backend.as_mut(), c.run.batch_size)?;
    let prepare = |g: u64| {
        Ok(workload::sample_comm(
            args.devices,
            task_seed(c.seed, g as usize),
            args.max_delay_ms,
            args.row_wise_max,
            args.log_delays,
        ))
    };
    let summary = collect::run(&plan, output, &tpl, &stop, prepare, |g, sample| {
        let (times, conditions) = guard.measure(backend.as_mut(), &format!("sample {g}"), false, |b| {
            b.comm(&sample, c.run.batch_size as usize, timing)
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
    Ok(report(&summary, &c.run.out))
}
