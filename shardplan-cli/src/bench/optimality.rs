//! Optimality on small tasks (8 to 12 tables, 4 devices): the exact search's optimum over unsplit
//! placements (or placements with up to `--exact-split-depth` halvings per table), the lower bound's
//! gap under it, and every planner's gap to it.

use anyhow::Result;
use planner_core::Error;
use planner_core::bound::{ExactConfig, exact, lower_bound};
use planner_core::task::SuiteSpec;

use super::report::{Optimality, OptimalityRow};
use super::{Bench, mean};
use crate::tasks_cmd::with_rule;

/// The optimality section on `count` tasks.
pub fn optimality(b: &Bench, count: usize) -> Result<Optimality> {
    let (args, entries, model) = (b.args, &b.entries, b.model.as_ref());
    let spec = SuiteSpec { tables: Some((8, 13)), seed: args.seed ^ 0x0e7a, ..SuiteSpec::neuroshard(4, 128, count, 0) };
    let suite = with_rule(spec.tasks()?, b.rule);
    let mut gaps: Vec<Vec<f64>> = vec![Vec::new(); entries.len()];
    let mut optimal = vec![0; entries.len()];
    let mut bound_gaps = Vec::new();
    let mut complete = 0;
    let mut skipped = 0;
    for st in &suite {
        let ex = match exact(
            &st.task,
            model,
            &ExactConfig {
                definition: args.cost.definition,
                max_split_depth: args.exact_split_depth,
                ..ExactConfig::default()
            },
        ) {
            Ok(ex) => ex,
            // A table too large for any device unsplit: no unsplit optimum to compare with.
            Err(Error::NoPlan { .. } | Error::NoFit { .. } | Error::ReservationExceedsCap { .. }) => {
                skipped += 1;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        complete += usize::from(ex.complete);
        let bound = lower_bound(&st.task, model)?;
        bound_gaps.push((ex.cost_ms - bound.cost_ms) / ex.cost_ms * 100.0);
        for (p, entry) in entries.iter().enumerate() {
            if let Some(c) = b.run(entry, st, args.cost.definition)?.outcome.cost_ms {
                let gap = (c - ex.cost_ms) / ex.cost_ms * 100.0;
                gaps[p].push(gap);
                optimal[p] += usize::from(gap <= 0.01);
            }
        }
    }
    Ok(Optimality {
        tasks: suite.len() - skipped,
        skipped,
        split_depth: args.exact_split_depth,
        complete,
        bound_gap_pct: mean(&bound_gaps).unwrap_or(0.0),
        planners: entries
            .iter()
            .enumerate()
            .map(|(p, e)| OptimalityRow {
                planner: e.name.to_string(),
                valid: gaps[p].len(),
                gap_to_exact_pct: mean(&gaps[p]),
                optimal: optimal[p],
            })
            .collect(),
    })
}
