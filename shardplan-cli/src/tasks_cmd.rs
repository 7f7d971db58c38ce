//! `shardplan tasks`: write a seeded task suite as JSON Lines.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use planner_core::task::{PoolHalf, Protocol, SuiteSpec, SuiteTask};
use planner_core::{MemoryRule, SplitRule, Task};

use crate::common::MemoryArgs;
use shardplan_files::write_atomic;

/// Protocols on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ProtocolArg {
    /// NeuroShard Table 1/5 (fp32, 4 GiB caps).
    Neuroshard,
    /// DreamShard (fp16, 5 GiB caps, dim 16).
    Dreamshard,
    /// AutoShard (fp16, 7 GiB caps, devices = tables / 10).
    Autoshard,
}

/// Pool halves on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum HalfArg {
    /// The training half.
    Train,
    /// The unseen half.
    Test,
}

/// Suite parameters shared by `tasks` and `eval`.
#[derive(Args, Debug, Clone)]
pub struct SuiteArgs {
    /// Task protocol.
    #[arg(long, value_enum, default_value = "neuroshard")]
    pub protocol: ProtocolArg,
    /// Devices per task.
    #[arg(long, default_value_t = 4)]
    pub devices: usize,
    /// Largest table dim (NeuroShard protocol).
    #[arg(long, default_value_t = 128)]
    pub max_dim: u32,
    /// Table-count range `MIN..MAX` (MAX exclusive); default: the protocol's.
    #[arg(long)]
    pub table_range: Option<String>,
    /// Draw tables from one half of the pool only (unseen-table protocol).
    #[arg(long, value_enum)]
    pub pool_half: Option<HalfArg>,
    /// Number of tasks.
    #[arg(long, default_value_t = 100)]
    pub count: usize,
    /// Suite seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

impl SuiteArgs {
    /// The suite these arguments describe.
    pub fn spec(&self) -> Result<SuiteSpec> {
        let most = planner_core::task::MAX_SUITE_TASKS;
        if self.count == 0 || self.count > most {
            bail!("--count = {}: a suite has 1..={most} tasks", self.count);
        }
        let tables = match &self.table_range {
            None => None,
            Some(r) => {
                let parsed =
                    r.split_once("..").and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)));
                match parsed {
                    Some(range) => Some(range),
                    None => bail!("--table-range {r:?} is not of the form MIN..MAX (e.g. 10..60)"),
                }
            }
        };
        Ok(SuiteSpec {
            protocol: match self.protocol {
                ProtocolArg::Neuroshard => Protocol::NeuroShard,
                ProtocolArg::Dreamshard => Protocol::DreamShard,
                ProtocolArg::Autoshard => Protocol::AutoShard,
            },
            devices: self.devices,
            max_dim: self.max_dim,
            tables,
            pool_half: self.pool_half.map(|h| match h {
                HalfArg::Train => PoolHalf::Train,
                HalfArg::Test => PoolHalf::Test,
            }),
            count: self.count,
            seed: self.seed,
        })
    }
}

/// Arguments of `shardplan tasks`.
#[derive(Args, Debug)]
pub struct TasksArgs {
    #[command(flatten)]
    pub suite: SuiteArgs,
    /// Output file (JSON Lines, one `shardplan.task/v1` record per line).
    #[arg(long, default_value = "tasks.jsonl")]
    pub out: PathBuf,
    /// The rule every task is written with (its `memory` field).
    #[command(flatten)]
    pub memory: MemoryArgs,
}

/// Runs `shardplan tasks`.
pub fn run(args: &TasksArgs) -> Result<()> {
    let rule = args.memory.rule()?;
    let tasks =
        with_rule(args.suite.spec()?.tasks()?, Rules { memory: rule, splits: args.memory.splits(SplitRule::Any)? });
    let mut text = String::new();
    for t in &tasks {
        writeln!(text, "{}", serde_json::to_string(t)?)?;
    }
    write_atomic(&args.out, text.as_bytes())?;
    let tables: usize = tasks.iter().map(|t| t.task.tables.len()).sum();
    println!(
        "{} tasks ({tables} tables in all, memory rule {}) written to {}",
        tasks.len(),
        rule.name(),
        args.out.display()
    );
    Ok(())
}

/// The suite's tasks under `rule`.
pub fn with_rule(suite: Vec<SuiteTask>, rules: Rules) -> Vec<SuiteTask> {
    suite.into_iter().map(|st| SuiteTask { task: rules.apply(st.task), ..st }).collect()
}

/// Reads a task suite written by `shardplan tasks`.
pub fn read_suite(path: &Path) -> Result<Vec<SuiteTask>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading task suite {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let t: SuiteTask =
            serde_json::from_str(line).with_context(|| format!("task suite {} line {}", path.display(), i + 1))?;
        if t.schema != planner_core::task::TASK_SCHEMA {
            bail!(
                "task suite {} line {}: schema {:?} is not {:?}",
                path.display(),
                i + 1,
                t.schema,
                planner_core::task::TASK_SCHEMA
            );
        }
        out.push(t);
    }
    if out.is_empty() {
        bail!("task suite {} holds no tasks", path.display());
    }
    Ok(out)
}

/// The rules a command plans and judges every task under: how memory is counted and which splits plans
/// may use.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// The memory rule.
    pub memory: MemoryRule,
    /// The split rule.
    pub splits: SplitRule,
}

impl Rules {
    /// `task` under these rules (replacing its own).
    #[must_use]
    pub fn apply(self, task: Task) -> Task {
        task.with_memory(self.memory).with_splits(self.splits)
    }
}
