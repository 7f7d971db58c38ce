//! Several planners on the same task, the cheapest plan within memory kept: the default planner
//! (`auto`) runs `size-lookup`, which is fast at every size, then `neuroshard-fast`, which splits tables
//! and wins on most small and mid-size tasks (docs/NEUROSHARD.md, "Planning time at scale"), then, up to
//! [`super::AUTO_TORCHREC_LIMIT`] tables × devices, `torchrec+refine`, which reaches TorchRec's row-wise
//! layouts (docs/BENCHMARKS.md, "Refining TorchRec's plan"). The searched members are not refined: the
//! local search from their plans measured slower than the plans themselves (docs/BENCHMARKS.md, "The
//! default without refining its own search"), while from TorchRec's plan it measured faster. A member may
//! be limited to tasks up to a size ([`Portfolio::member_up_to`]); past it, it is skipped, and its refusal
//! is reported only when no other member refused. Each planner gets what the ones before it left of the
//! budget; plans are compared by the cost model under NeuroShard's cost definition, the one all plan with;
//! on equal cost the earlier planner's plan is kept.

use super::{Budget, PlanContext, Planner, SearchStats, StatsCell};
use crate::cost::{CostDefinition, evaluate};
use crate::error::{Error, Result};
use crate::plan::Plan;
use crate::task::Task;

/// Planners run in turn; the cheapest plan within memory wins.
pub struct Portfolio {
    name: &'static str,
    /// Each member with the largest `tables × devices` it runs on (`None`: every size).
    members: Vec<(Box<dyn Planner>, Option<usize>)>,
    stats: StatsCell,
}

impl Portfolio {
    /// `members`, run in order, registered as `name`.
    #[must_use]
    pub fn new(name: &'static str, members: Vec<Box<dyn Planner>>) -> Self {
        Self { name, members: members.into_iter().map(|m| (m, None)).collect(), stats: StatsCell::default() }
    }

    /// Adds `member` last, run only on tasks of at most `limit` tables × devices (a planner whose search
    /// grows too fast to run at every size).
    #[must_use]
    pub fn member_up_to(mut self, member: Box<dyn Planner>, limit: usize) -> Self {
        self.members.push((member, Some(limit)));
        self
    }
}

impl Planner for Portfolio {
    fn name(&self) -> &'static str {
        self.name
    }

    fn plan(&self, task: &Task, ctx: &PlanContext<'_>) -> Result<Plan> {
        let start_ms = ctx.budget.map(|b| (b.clock_ms)());
        let mut best: Option<(f64, Plan, Option<SearchStats>)> = None;
        let mut refusal: Option<Error> = None;
        let mut refusal_stopped = false;
        let size = task.tables.len().saturating_mul(task.devices.count());
        for (member, limit) in &self.members {
            if limit.is_some_and(|l| size > l) {
                continue;
            }
            let budget = ctx.budget.zip(start_ms).map(|(b, start)| Budget {
                clock_ms: b.clock_ms,
                limit_ms: (b.limit_ms - ((b.clock_ms)() - start)).max(0.0),
            });
            if best.is_some() && budget.is_some_and(|b| b.limit_ms <= 0.0) {
                break;
            }
            let rest = PlanContext { cost_model: ctx.cost_model, seed: ctx.seed, budget, progress: ctx.progress };
            match member.plan(task, &rest) {
                Ok(plan) => {
                    let report = evaluate(task, &plan, ctx.cost_model, CostDefinition::NeuroShard)?;
                    if report.feasible && best.as_ref().is_none_or(|(c, _, _)| report.cost_ms < *c) {
                        best = Some((report.cost_ms, plan, member.last_stats()));
                    }
                }
                // The last refusal is kept: the later planners search further (a split can make a table
                // fit), so theirs says more (for instance, that the budget stopped it). A refusal from a
                // planner the budget stopped is kept over a later one that ran to its end: more time is
                // what would help, and the later planner may only have kept more memory back (TorchRec's).
                Err(e @ (Error::NoFit { .. } | Error::NoPlan { .. })) => {
                    let stopped = member.last_stats().is_some_and(|s| s.stopped_early);
                    // A size-limited member is an extra: its refusal stands only when no other gave one.
                    let extra = limit.is_some() && refusal.is_some();
                    if !extra && (stopped || !refusal_stopped) {
                        refusal = Some(e);
                        refusal_stopped = stopped;
                    }
                }
                Err(e) => return Err(e),
            }
        }
        match best {
            Some((_, plan, stats)) => {
                self.stats.set(stats.unwrap_or_default());
                Ok(plan)
            }
            None => Err(refusal.unwrap_or_else(|| Error::NoPlan {
                planner: self.name.into(),
                reason: "no member planner returned a plan within memory".into(),
            })),
        }
    }

    fn last_stats(&self) -> Option<SearchStats> {
        self.stats.get()
    }
}
