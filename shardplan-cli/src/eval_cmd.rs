//! `shardplan eval`: run planners over a task suite and summarise cost, validity and planning time.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, ValueEnum};
use planner_core::eval::{PlannerSummary, TaskOutcome};
use planner_core::planners::planners;
use planner_core::{MemoryRule, SplitRule};
use serde::Serialize;

use crate::common::{CostArgs, MemoryArgs, render_table};
use crate::run_one::{run_one, summarize};
use crate::tasks_cmd::{Rules, SuiteArgs, read_suite, with_rule};
use shardplan_files::write_atomic;

/// Output formats.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    /// A Markdown table.
    Md,
    /// The full JSON result.
    Json,
}

/// Arguments of `shardplan eval`.
#[derive(Args, Debug)]
pub struct EvalArgs {
    /// Task suite written by `shardplan tasks`; without it, the suite described by the suite flags is drawn.
    #[arg(long)]
    pub tasks: Option<PathBuf>,
    #[command(flatten)]
    pub suite: SuiteArgs,
    /// Comma-separated planners, or `all`.
    #[arg(long, default_value = "all")]
    pub algos: String,
    /// Format printed on standard output.
    #[arg(long, value_enum, default_value = "md")]
    pub format: Format,
    /// Also write the full JSON result here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub cost: CostArgs,
    #[command(flatten)]
    pub memory: MemoryArgs,
}

/// The JSON result of an evaluation.
#[derive(Serialize)]
pub struct EvalResult {
    /// Cost model used.
    pub cost_model: String,
    /// Memory rule every task was planned and judged under.
    pub memory_rule: MemoryRule,
    /// Split rule every task was planned under.
    pub splits: SplitRule,
    /// Number of tasks.
    pub tasks: usize,
    /// One row per planner.
    pub summary: Vec<PlannerSummary>,
    /// Per planner, per task: cost (null = no valid plan), planning time and the failure, if any.
    pub per_task: Vec<PlannerRuns>,
}

/// One planner's per-task results.
#[derive(Serialize)]
pub struct PlannerRuns {
    /// Planner name.
    pub planner: String,
    /// Outcomes in suite order.
    pub outcomes: Vec<TaskOutcome>,
    /// Why a task had no valid plan, in suite order (`None` where it had one).
    pub failures: Vec<Option<String>>,
}

/// Runs `shardplan eval`.
pub fn run(args: &EvalArgs) -> Result<()> {
    let rule = args.memory.rule()?;
    let splits = args.memory.splits(SplitRule::Any)?;
    let suite = with_rule(
        match &args.tasks {
            Some(p) => read_suite(p)?,
            None => args.suite.spec()?.tasks()?,
        },
        Rules { memory: rule, splits },
    );
    let entries = planners(&args.algos)?;
    let model = args.cost.build()?;
    let mut runs = Vec::new();
    for entry in &entries {
        let planner = entry.build();
        let mut outcomes = Vec::with_capacity(suite.len());
        let mut failures = Vec::with_capacity(suite.len());
        for st in &suite {
            let run = run_one(planner.as_ref(), entry.name, st, model.as_ref(), args.cost.definition)?;
            outcomes.push(run.outcome);
            failures.push(run.failure);
        }
        runs.push(PlannerRuns { planner: entry.name.to_string(), outcomes, failures });
    }
    let pairs: Vec<(String, Vec<TaskOutcome>)> = runs.iter().map(|r| (r.planner.clone(), r.outcomes.clone())).collect();
    let summary = summarize(&pairs);
    let result =
        EvalResult { cost_model: model.name(), memory_rule: rule, splits, tasks: suite.len(), summary, per_task: runs };
    let json = serde_json::to_string_pretty(&result)?;
    match args.format {
        Format::Md => println!("{}", markdown(&result)),
        Format::Json => println!("{json}"),
    }
    if let Some(out) = &args.out {
        write_atomic(out, json.as_bytes())?;
    }
    Ok(())
}

/// The Markdown summary table.
fn markdown(r: &EvalResult) -> String {
    let opt = |v: Option<f64>, prec: usize| v.map_or("-".to_string(), |x| format!("{x:.prec$}"));
    let rows: Vec<Vec<String>> = r
        .summary
        .iter()
        .map(|s| {
            vec![
                s.planner.clone(),
                format!("{}/{}", s.valid, s.tasks),
                opt(s.mean_cost_ms, 3),
                opt(s.mean_cost_valid_ms, 3),
                s.improvement_pct.map_or("-".into(), |x| format!("{x:+.2}%")),
                format!("{:.3}", s.plan_time_p50_ms),
                format!("{:.3}", s.plan_time_p95_ms),
            ]
        })
        .collect();
    format!(
        "{} tasks, cost model {}, memory rule {}, splits {}\n\n{}{}",
        r.tasks,
        r.cost_model,
        r.memory_rule.describe(),
        r.splits.name(),
        render_table(
            &[
                "planner",
                "valid",
                "mean cost ms",
                "mean cost ms (valid only)",
                "vs best baseline",
                "plan p50 ms",
                "plan p95 ms"
            ],
            &rows,
            true
        ),
        crate::run_one::missing_improvement_notes(&r.summary)
    )
}
