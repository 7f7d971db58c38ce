//! The NeuroShard protocol's grid (SPEC section 3): one cell per device count and max dim, every
//! planner judged by the cost model's prediction, with the task's lower bound and, where asked, the
//! measured judge.

use std::path::Path;

use anyhow::{Context, Result};
use planner_core::bound::lower_bound;
use planner_core::task::SuiteSpec;

use super::measure::Collector;
use super::report::{Cell, PlannerCell};
use super::{Bench, judge, mean};
use crate::tasks_cmd::with_rule;

/// What becomes of a cell's judged tasks' plans (`judge::write_cell_plans`).
#[derive(Clone, Copy)]
pub enum CellJudge<'a> {
    /// Written into the directory and measured with the collector: the measured judge.
    Measure(&'a Collector<'a>, &'a Path),
    /// Written into the directory, nothing measured (`--plans-only`).
    PlansOnly(&'a Path),
}

/// The cell of `devices` devices and tables up to `max_dim`, `tasks` tasks; `judge`: what becomes of the
/// judged tasks' plans, when this cell is judged.
pub fn cell(b: &Bench, devices: usize, max_dim: u32, tasks: usize, judge: Option<CellJudge<'_>>) -> Result<Cell> {
    let spec = SuiteSpec::neuroshard(
        devices,
        max_dim,
        tasks,
        b.args.seed ^ ((devices as u64) << 16) ^ (u64::from(max_dim) << 24),
    );
    let suite = with_rule(
        spec.tasks().with_context(|| format!("drawing the {devices}-device, max-dim {max_dim} suite"))?,
        b.rule,
    );
    let mut bounds = Vec::with_capacity(suite.len());
    let mut proven = true;
    for st in &suite {
        let bound = lower_bound(&st.task, b.model.as_ref())?;
        proven &= bound.proven;
        bounds.push(bound.cost_ms);
    }
    let (runs, summary) = b.run_suite(&suite, b.args.cost.definition)?;
    let mut rows: Vec<PlannerCell> = summary
        .into_iter()
        .zip(&runs)
        .map(|(summary, r)| {
            let (hits, misses) = r
                .iter()
                .filter_map(|x| x.stats)
                .fold((0, 0), |(h, m), s| (h + s.set_cache_hits, m + s.set_cache_misses));
            let gaps: Vec<f64> = r
                .iter()
                .zip(&bounds)
                // Row-wise plans are outside the space the bound covers (`planner_core::bound`).
                .filter(|(x, _)| x.solved.as_ref().is_some_and(|(p, _)| p.row_split_tables() == 0))
                .filter_map(|(x, b)| x.outcome.cost_ms.map(|c| (c - b) / b * 100.0))
                .collect();
            PlannerCell {
                summary,
                cache_hit_rate: (hits + misses > 0).then(|| hits as f64 / (hits + misses) as f64),
                gap_to_bound_pct: mean(&gaps),
                measured_mean_ms: None,
                predicted_mean_ms: None,
            }
        })
        .collect();
    let measured = match judge {
        Some(CellJudge::PlansOnly(dir)) => {
            let plans = judge::write_cell_plans(b, dir, &suite, &runs)?;
            eprintln!(
                "wrote the plans of {} tasks ({}) to {}; nothing measured",
                plans.tasks.len(),
                plans.names.join(", "),
                dir.display()
            );
            None
        }
        Some(CellJudge::Measure(collector, dir)) => {
            eprintln!("measuring {devices} devices, max dim {max_dim} in {}", dir.display());
            let m = judge::measure_cell(b, collector, dir, &suite, &runs)?;
            for row in &m.summary.planners {
                if let Some(r) = rows.iter_mut().find(|r| r.summary.planner == row.planner) {
                    r.measured_mean_ms = row.measured_mean_ms;
                    r.predicted_mean_ms = row.predicted_mean_ms;
                }
            }
            Some(m)
        }
        None => None,
    };
    eprintln!("cell {devices} devices, max dim {max_dim}: done");
    Ok(Cell {
        devices,
        max_dim,
        tasks: suite.len(),
        lower_bound_mean_ms: mean(&bounds).unwrap_or(0.0),
        lower_bound_proven: proven,
        planners: rows,
        measured,
    })
}
