//! `shardplan-train dreamshard`: trains a DreamShard policy (`trainer::dreamshard`).

use std::path::PathBuf;

use anyhow::Result;

/// Arguments of `shardplan-train dreamshard` (defaults: the paper's loop on the DreamShard protocol).
#[derive(clap::Args)]
pub struct DreamShardArgs {
    /// Output directory.
    #[arg(long)]
    pub out: PathBuf,
    /// Seed of initialisation, task draws and sampling.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Outer iterations (each: real evaluations, cost-network steps, policy updates).
    #[arg(long, default_value_t = 30)]
    pub iterations: usize,
    /// Real evaluations per iteration.
    #[arg(long, default_value_t = 10)]
    pub evals: usize,
    /// Cost-network steps per iteration (the paper: 300).
    #[arg(long, default_value_t = 100)]
    pub cost_steps: usize,
    /// Cost-network batch (the paper: 64).
    #[arg(long, default_value_t = 32)]
    pub cost_batch: usize,
    /// Policy updates per iteration (the paper: 10).
    #[arg(long, default_value_t = 50)]
    pub rl_updates: usize,
    /// Episodes per policy update.
    #[arg(long, default_value_t = 10)]
    pub episodes: usize,
    /// Adam learning rate, decayed linearly (the paper: 5e-4).
    #[arg(long, default_value_t = 2e-3)]
    pub lr: f64,
    /// Entropy bonus.
    #[arg(long, default_value_t = 1e-3)]
    pub entropy: f64,
    /// Devices of the training tasks.
    #[arg(long, default_value_t = 4)]
    pub devices: usize,
    /// Table-count range of the training tasks, `MIN..MAX` (MAX exclusive).
    #[arg(long, default_value = "10..101")]
    pub tables: String,
    /// Validation tasks (train half of the pool, other seeds), judged every iteration.
    #[arg(long, default_value_t = 20)]
    pub validation_tasks: usize,
    /// Test tasks (the other half of the pool; the same for every seed), judged at the end.
    #[arg(long, default_value_t = 50)]
    pub test_tasks: usize,
    /// What evaluates plans for real: `model:<cost model>` (an embedded profile or `analytical`) or
    /// `collector:<path to shardplan-collect>`.
    #[arg(long, default_value = "model:h100")]
    pub judge: String,
    /// Backend of a collector judge (`cpu` or `cuda`).
    #[arg(long, default_value = "cpu")]
    pub judge_backend: String,
    /// Bags per table of a collector judge.
    #[arg(long, default_value_t = 4096)]
    pub judge_batch: u32,
    /// No per-iteration lines.
    #[arg(long)]
    pub quiet: bool,
}

/// `shardplan-train dreamshard`.
pub fn run(a: &DreamShardArgs) -> Result<()> {
    use planner_core::task::{PoolHalf, Protocol, SuiteSpec};
    use trainer::dreamshard::{CollectorJudge, DreamShardConfig, Judge, ModelJudge, train_dreamshard, write};
    let tables = crate::common::parse_tables(&a.tables).map_err(anyhow::Error::msg)?;
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
                Box::new(planner_core::AnalyticalModel::new(planner_core::HardwareProfile::torchrec_default(), 65_536)?)
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
        command: crate::common::command_line(),
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
}
