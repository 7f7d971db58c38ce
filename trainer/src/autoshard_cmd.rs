//! `shardplan-train autoshard`: trains the AutoShard placement policy (`trainer::autoshard`).

use std::path::PathBuf;

use anyhow::{Result, bail};

/// Arguments of `shardplan-train autoshard`.
#[derive(clap::Args)]
pub struct AutoshardArgs {
    /// Output directory.
    #[arg(long)]
    pub out: PathBuf,
    /// Seed of initialisation, tasks and sampling.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Learner updates.
    #[arg(long, default_value_t = 500)]
    pub updates: usize,
    /// Episodes rolled out per update.
    #[arg(long, default_value_t = 8)]
    pub actors: usize,
    /// Tables per training task: a count (`80`) or a range `lo..hi` (hi excluded).
    #[arg(long, default_value = "80")]
    pub tables: String,
    /// Adam learning rate at the start (annealed linearly to 0 over the updates).
    #[arg(long, default_value_t = 3e-4)]
    pub lr: f64,
    /// Score the greedy policy on the validation tasks every this many updates.
    #[arg(long, default_value_t = 10)]
    pub eval_every: usize,
    /// No progress lines.
    #[arg(long)]
    pub quiet: bool,
}

/// `shardplan-train autoshard`: trains, writes the policy to `--out` and prints its summary.
pub fn run(a: &AutoshardArgs) -> Result<()> {
    for (field, value) in [("--updates", a.updates), ("--actors", a.actors), ("--eval-every", a.eval_every)] {
        if value == 0 {
            bail!("`{field}` = 0 is invalid: at least 1");
        }
    }
    if !(a.lr.is_finite() && a.lr > 0.0) {
        bail!("`--lr` = {} is invalid: a positive number", a.lr);
    }
    let tables = crate::common::parse_tables(&a.tables).map_err(anyhow::Error::msg)?;
    let opts = trainer::autoshard::AutoShardOptions {
        out: a.out.clone(),
        seed: a.seed,
        updates: a.updates,
        actors: a.actors,
        tables,
        lr: a.lr,
        eval_every: a.eval_every,
        progress: !a.quiet,
        command: crate::common::command_line(),
    };
    let o = trainer::autoshard::train_autoshard(&opts)?;
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
    Ok(())
}
