//! One planner on one task, as `eval` and `bench` run it: planned with the task's seed, timed on the
//! wall clock, its plan priced by the cost model. A planner's refusal to plan within memory is an
//! outcome (as in the seed papers' tables), not an error.

use std::time::Instant;

use anyhow::Result;
use planner_core::cost::{CostDefinition, CostModel};
use planner_core::eval::{PlannerSummary, TaskOutcome};
use planner_core::planners::{self, PlanContext, Planner, SearchStats};
use planner_core::task::SuiteTask;
use planner_core::{Error, Plan, PlanReport, evaluate};

/// What one planner did on one task.
pub struct Run {
    /// The plan and its report, when the plan fits memory.
    pub solved: Option<(Plan, PlanReport)>,
    /// Cost (`None`: no plan within memory) and planning time.
    pub outcome: TaskOutcome,
    /// Why there is no plan within memory: the planner's refusal or the plan's violations.
    pub failure: Option<String>,
    /// The planner's counters of this run, for planners that keep them.
    pub stats: Option<SearchStats>,
    /// Most heap bytes the process held while planning, above what it held before.
    pub peak_heap_bytes: u64,
}

/// Runs `planner` (registered as `name`) on `st` and prices its plan with `model` under `definition`.
/// Only the `plan` call is timed.
pub fn run_one(
    planner: &dyn Planner,
    name: &str,
    st: &SuiteTask,
    model: &dyn CostModel,
    definition: CostDefinition,
) -> Result<Run> {
    let ctx = PlanContext::new(model, st.seed);
    // Every planner is timed as a fresh process would run it, not on the model's memo of the planner
    // before it on the same task.
    model.forget_memo();
    let before = crate::heap::reset_peak();
    let start = Instant::now();
    let result = planner.plan(&st.task, &ctx);
    let plan_time_ms = start.elapsed().as_secs_f64() * 1e3;
    let peak_heap_bytes = crate::heap::peak().saturating_sub(before) as u64;
    let stats = planner.last_stats();
    let (solved, failure) = match result {
        Ok(plan) => {
            let report = evaluate(&st.task, &plan, model, definition)?;
            if report.feasible { (Some((plan, report)), None) } else { (None, Some(report.violations.join("; "))) }
        }
        Err(e @ (Error::NoFit { .. } | Error::NoPlan { .. } | Error::ReservationExceedsCap { .. })) => {
            (None, Some(e.to_string()))
        }
        Err(e) => return Err(anyhow::Error::new(e).context(format!("planner `{name}` on task {}", st.index))),
    };
    let cost_ms = solved.as_ref().map(|(_, report)| report.cost_ms);
    Ok(Run { solved, outcome: TaskOutcome { cost_ms, plan_time_ms }, failure, stats, peak_heap_bytes })
}

/// Each planner's summary over its outcomes, with the improvement over the best of the registry's
/// seed baselines among them.
pub fn summarize(runs: &[(String, Vec<TaskOutcome>)]) -> Vec<PlannerSummary> {
    planner_core::eval::summarize(runs, is_seed_baseline)
}

/// Whether `name` is one of the registry's seed baselines.
fn is_seed_baseline(name: &str) -> bool {
    planners::planner(name).is_ok_and(|e| e.is_seed_baseline)
}

/// Why rows of [`summarize`] show "-" under "vs best baseline", as lines to print below the table.
pub fn missing_improvement_notes(rows: &[PlannerSummary]) -> String {
    let reasons = planner_core::eval::missing_improvement_reasons(rows, is_seed_baseline);
    reasons.iter().fold(String::new(), |mut out, w| {
        out.push_str("\n- ");
        out.push_str(w);
        out
    })
}
