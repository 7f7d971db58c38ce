//! `shardplan-train calibrate`: the plan → measure → learn loop (`trainer::calibrate`).

use std::path::PathBuf;

use anyhow::Result;
use trainer::models::ComputeTarget;
use trainer::train::TrainConfig;

/// Arguments of `shardplan-train calibrate`.
#[derive(clap::Args)]
pub struct CalibrateArgs {
    /// The `shardplan-collect` binary that measures.
    #[arg(long)]
    pub collector: PathBuf,
    /// Its backend (`cpu` or `cuda`).
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    /// Loop directory (datasets, profiles, reports, state).
    #[arg(long)]
    pub out: PathBuf,
    /// Name of the profiles written.
    #[arg(long)]
    pub name: String,
    /// Rounds of plan → measure → retrain after the start.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Bags per table of every measurement.
    #[arg(long, default_value_t = 4096)]
    pub batch: u32,
    /// Cells of the NeuroShard protocol, `DEVICESxMAXDIM` comma-separated.
    #[arg(long, default_value = "4x32,4x128,8x32,8x128")]
    pub cells: String,
    /// Training tasks per cell and round.
    #[arg(long, default_value_t = 4)]
    pub train_tasks: usize,
    /// Held-out tasks per cell (measured every round).
    #[arg(long, default_value_t = 2)]
    pub holdout_tasks: usize,
    /// Planners whose plans are measured, comma-separated.
    #[arg(
        long,
        default_value = "size,dim,lookup,size-lookup,torchrec,neuroshard,neuroshard+refine,size-lookup+refine"
    )]
    pub planners: String,
    /// Device sets measured per round.
    #[arg(long, default_value_t = 300)]
    pub sets_per_round: usize,
    /// Random sets (mixed sampler) measured at the start.
    #[arg(long, default_value_t = 400)]
    pub initial_samples: u64,
    /// Comm samples per device count.
    #[arg(long, default_value_t = 300)]
    pub comm_samples: u64,
    /// Largest start delay of the comm samples, ms.
    #[arg(long, default_value_t = 60.0)]
    pub comm_max_delay_ms: f64,
    /// Each comm sample makes each dim, with probability up to this, a row-wise table on every device
    /// (`shardplan-collect comm --row-wise-max`), so that the comm models see the dim sums of TorchRec's
    /// row-wise plans.
    #[arg(long, default_value_t = 0.8)]
    pub comm_row_wise_max: f64,
    /// Measure no comm (a machine with one GPU): price comm with this analytical preset (`h100`,
    /// `h100-ib`, `a100`, `torchrec`, …) and time held-out plans' compute only (`measure-plan
    /// --comm-from-plan`); the profiles then have no comm model.
    #[arg(long)]
    pub comm_from_preset: Option<String>,
    /// Round 0's profile: a profile directory (e.g. `planner-core/profiles/h100`) judged and planned with
    /// as it is, instead of one trained on the initial sets.
    #[arg(long)]
    pub start_profile: Option<PathBuf>,
    /// Datasets every round's profile is also trained on (earlier collections of the same machine).
    #[arg(long, num_args = 1..)]
    pub extra_data: Vec<PathBuf>,
    /// Run only stages that measure (`measure`) or only stages that train (`train`), stopping before the
    /// first stage of the other kind still to do: measure on the GPU machine, train on another, resume on
    /// the first (the same options otherwise; `--collector` may differ).
    #[arg(long, value_enum)]
    pub only: Option<trainer::calibrate::Only>,
    /// Memory cap of a device.
    #[arg(long, default_value = "4GiB")]
    pub mem_cap: String,
    /// How device memory is counted for every planner: `torchrec` (TorchRec 1.9.2's reservation and
    /// buffers, defaults) or `weights` (the seed papers' rule).
    #[arg(long, default_value = "torchrec")]
    pub memory_rule: String,
    /// Seed of suites, sampler and training (the bench's default suite seed 0 is kept for judging).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Epochs per profile.
    #[arg(long, default_value_t = 300)]
    pub epochs: usize,
    /// Mini-batch size.
    #[arg(long, default_value_t = 64)]
    pub batch_size: usize,
    /// Ensemble members.
    #[arg(long, default_value_t = 5)]
    pub members: usize,
    /// Loss of the compute model.
    #[arg(long, value_enum, default_value_t = trainer::models::Loss::Relative)]
    pub loss: trainer::models::Loss,
    /// What every round's compute networks learn: `time` or `over-terms` (`shardplan-train profile --target`).
    #[arg(long, value_enum, default_value_t = ComputeTarget::Time)]
    pub target: ComputeTarget,
    /// Measuring rounds of every held-out task's plans.
    #[arg(long, default_value_t = 2)]
    pub measure_rounds: u32,
    /// Neighbour plans around each training task's best plan.
    #[arg(long, default_value_t = 8)]
    pub neighbours: usize,
    /// Untimed runs before the timed ones, every set.
    #[arg(long, default_value_t = 2)]
    pub warmup: u32,
    /// Timed runs per set (the sample is their median); per round with `--set-rounds`.
    #[arg(long, default_value_t = 10)]
    pub reps: u32,
    /// Rounds every compute set is timed in, seconds apart (`shardplan-collect --rounds`); the held-out
    /// plans' rounds are `--measure-rounds`.
    #[arg(long, default_value_t = 1)]
    pub set_rounds: u32,
    /// Do not flush the last-level cache before every run (the records say so).
    #[arg(long)]
    pub no_flush: bool,
    /// Turn the contention guard off (only where measurements run beside each other, as in tests).
    #[arg(long)]
    pub no_guard: bool,
    /// The machine's reference-kernel time when quiet, ms (the start profile's card
    /// `compute.reference_ms`): the collector's guard then refuses samples taken more than 1.15× slower,
    /// where a contended host would change the sets' relative costs.
    #[arg(long)]
    pub quiet_reference_ms: Option<f64>,
}

/// `shardplan-train calibrate`: the loop, then every round's held-out report as a Markdown table.
pub fn run(a: &CalibrateArgs) -> Result<()> {
    use trainer::calibrate::{CalibrateOptions, calibrate};
    let cells = a
        .cells
        .split(',')
        .map(|c| {
            let (d, m) =
                c.trim().split_once('x').ok_or_else(|| anyhow::anyhow!("`--cells`: {c:?} is not DEVICESxMAXDIM"))?;
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
        comm_row_wise_max: a.comm_row_wise_max,
        comm_preset: a.comm_from_preset.clone(),
        start_profile: a.start_profile.clone(),
        extra_data: a.extra_data.clone(),
        only: a.only,
        mem_cap: a.mem_cap.clone(),
        memory: planner_core::MemoryRule::from_parts(&a.memory_rule, None, None, None, None)?,
        seed: a.seed,
        train: TrainConfig { epochs: a.epochs, batch: a.batch_size, lr: 1e-3, seed: a.seed, progress: false },
        members: a.members,
        loss: a.loss,
        target: a.target,
        measure_rounds: a.measure_rounds,
        neighbours: a.neighbours,
        timing: trainer::calibrate::CollectorTiming {
            warmup: a.warmup,
            reps: a.reps,
            set_rounds: a.set_rounds,
            flush: !a.no_flush,
            guard: !a.no_guard,
            quiet_reference_ms: a.quiet_reference_ms,
        },
        command: crate::common::command_line(),
    };
    let reports = calibrate(&opts)?;
    println!(
        "| round | samples | cell | plan MAPE % as measured | at reference speed | bias % | device MAPE % | tau | the judge's own tau | interval coverage | judge cv % |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let pct = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |x| format!("{x:.1}"));
    for r in &reports {
        for (cell, s) in &r.cells {
            let a = s.accuracy_at_reference_speed.as_ref().unwrap_or(&s.accuracy);
            println!(
                "| {} | {} | {cell} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.round,
                r.samples,
                pct(s.accuracy.plan_mape_pct),
                pct(s.accuracy_at_reference_speed.as_ref().and_then(|x| x.plan_mape_pct)),
                a.plan_bias_pct.map_or_else(|| "-".to_string(), |x| format!("{x:+.1}")),
                pct(a.device_mape_pct),
                s.kendall_tau_mean.map_or_else(|| "-".to_string(), |x| format!("{x:.2}")),
                s.self_tau_mean.map_or_else(|| "-".to_string(), |x| format!("{x:.2}")),
                a.interval_coverage.map_or_else(|| "-".into(), |c| format!("{:.0}%", 100.0 * c)),
                pct(s.measurement_cv_pct),
            );
        }
    }
    let last = opts.out.join("profiles").join(format!("round-{}", opts.rounds));
    if reports.last().is_some_and(|r| r.round == opts.rounds) {
        println!("calibrated profile: {}", last.display());
    } else {
        println!("not finished: rerun the same command (without `--only` where the next stage can run) to go on");
    }
    Ok(())
}
