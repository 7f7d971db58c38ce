//! Aggregating planner runs over a task suite: mean cost, valid plans, improvement over the best
//! seed baseline, planning-time percentiles. Pure arithmetic; callers measure the times.

use serde::{Deserialize, Serialize};

/// What one planner did on one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskOutcome {
    /// Plan cost if the planner returned a plan that fits memory; `None` if it failed or overfilled a device.
    pub cost_ms: Option<f64>,
    /// Wall time the planner took, ms (measured by the caller).
    pub plan_time_ms: f64,
}

/// One planner's row in an evaluation table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannerSummary {
    /// Planner name.
    pub planner: String,
    /// Tasks run.
    pub tasks: usize,
    /// Tasks with a valid (in-memory) plan.
    pub valid: usize,
    /// Mean cost over all tasks; `None` ("-" in the seeds' tables) if any task had no valid plan.
    pub mean_cost_ms: Option<f64>,
    /// Mean cost over the tasks it solved.
    pub mean_cost_valid_ms: Option<f64>,
    /// `(best − this) / best · 100` against the best seed baseline's `mean_cost_ms`; positive is better.
    pub improvement_pct: Option<f64>,
    /// Median planning time.
    pub plan_time_p50_ms: f64,
    /// 95th-percentile planning time.
    pub plan_time_p95_ms: f64,
}

/// Nearest-rank percentile (`q` in 0..=100) of `values`; 0 for an empty slice.
#[must_use]
pub fn percentile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((q / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}

/// Summarises each planner's outcomes; `is_baseline(name)` tells which rows are seed baselines.
#[must_use]
pub fn summarize(runs: &[(String, Vec<TaskOutcome>)], is_baseline: impl Fn(&str) -> bool) -> Vec<PlannerSummary> {
    let mut rows: Vec<PlannerSummary> = runs
        .iter()
        .map(|(name, outcomes)| {
            let costs: Vec<f64> = outcomes.iter().filter_map(|o| o.cost_ms).collect();
            let times: Vec<f64> = outcomes.iter().map(|o| o.plan_time_ms).collect();
            let mean = (!costs.is_empty()).then(|| costs.iter().sum::<f64>() / costs.len() as f64);
            PlannerSummary {
                planner: name.clone(),
                tasks: outcomes.len(),
                valid: costs.len(),
                mean_cost_ms: if costs.len() == outcomes.len() { mean } else { None },
                mean_cost_valid_ms: mean,
                improvement_pct: None,
                plan_time_p50_ms: percentile(&times, 50.0),
                plan_time_p95_ms: percentile(&times, 95.0),
            }
        })
        .collect();
    let best = rows
        .iter()
        .filter(|r| is_baseline(&r.planner))
        .filter_map(|r| r.mean_cost_ms)
        .fold(None, |b: Option<f64>, c| Some(b.map_or(c, |b| b.min(c))));
    if let Some(best) = best {
        for r in &mut rows {
            r.improvement_pct = r.mean_cost_ms.map(|c| (best - c) / best * 100.0);
        }
    }
    rows
}

/// Kendall's tau-b between two rankings of the same items (ties in either count against neither
/// side); `None` for fewer than two items or when either side is all ties. Used to ask whether a cost
/// model orders plans the way measurements do.
#[must_use]
pub fn kendall_tau(a: &[f64], b: &[f64]) -> Option<f64> {
    let n = a.len().min(b.len());
    let (mut concordant, mut discordant, mut ties_a, mut ties_b) = (0i64, 0i64, 0i64, 0i64);
    for i in 0..n {
        for j in i + 1..n {
            let da = a[i].total_cmp(&a[j]) as i64;
            let db = b[i].total_cmp(&b[j]) as i64;
            match (da, db) {
                (0, 0) => {}
                (0, _) => ties_a += 1,
                (_, 0) => ties_b += 1,
                _ if da == db => concordant += 1,
                _ => discordant += 1,
            }
        }
    }
    let pairs_a = (concordant + discordant + ties_b) as f64;
    let pairs_b = (concordant + discordant + ties_a) as f64;
    (pairs_a > 0.0 && pairs_b > 0.0).then(|| (concordant - discordant) as f64 / (pairs_a * pairs_b).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(cost: Option<f64>, t: f64) -> TaskOutcome {
        TaskOutcome { cost_ms: cost, plan_time_ms: t }
    }

    #[test]
    fn kendall_tau_b() {
        assert_eq!(kendall_tau(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]), Some(1.0));
        assert_eq!(kendall_tau(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), Some(-1.0));
        // One swapped pair of three: (2 - 1) / 3.
        assert!((kendall_tau(&[1.0, 2.0, 3.0], &[1.0, 3.0, 2.0]).unwrap() - 1.0 / 3.0).abs() < 1e-12);
        // A tie in `a` (items 0 and 1): C = 2, D = 0, pairs_a = 2, pairs_b = 3: 2 / sqrt(6).
        assert!((kendall_tau(&[1.0, 1.0, 2.0], &[1.0, 2.0, 3.0]).unwrap() - 2.0 / 6f64.sqrt()).abs() < 1e-12);
        assert_eq!(kendall_tau(&[1.0], &[1.0]), None);
        assert_eq!(kendall_tau(&[1.0, 1.0], &[1.0, 2.0]), None);
    }

    #[test]
    fn percentiles_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 95.0), 95.0);
        assert_eq!(percentile(&[3.0], 95.0), 3.0);
    }

    #[test]
    fn failed_tasks_blank_the_mean_and_improvement_uses_best_baseline() {
        let runs = vec![
            ("a".to_string(), vec![o(Some(10.0), 1.0), o(Some(20.0), 2.0)]),
            ("b".to_string(), vec![o(Some(12.0), 1.0), o(None, 2.0)]),
            ("new".to_string(), vec![o(Some(9.0), 5.0), o(Some(18.0), 5.0)]),
        ];
        let rows = summarize(&runs, |n| n != "new");
        assert_eq!(rows[0].mean_cost_ms, Some(15.0));
        assert_eq!(rows[1].mean_cost_ms, None);
        assert_eq!(rows[1].mean_cost_valid_ms, Some(12.0));
        assert_eq!(rows[1].valid, 1);
        assert!((rows[2].improvement_pct.unwrap() - 10.0).abs() < 1e-12);
        assert_eq!(rows[0].improvement_pct, Some(0.0));
    }
}
