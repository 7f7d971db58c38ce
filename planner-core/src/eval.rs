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

/// Why rows of [`summarize`] have no `improvement_pct`, one line each, for printing under the table:
/// either no baseline found a valid plan for every task (there is nothing to compare against), or the
/// planner itself did not (its mean over all tasks is undefined). Empty when every row has a figure.
#[must_use]
pub fn missing_improvement_reasons(rows: &[PlannerSummary], is_baseline: impl Fn(&str) -> bool) -> Vec<String> {
    let baselines: Vec<&PlannerSummary> = rows.iter().filter(|r| is_baseline(&r.planner)).collect();
    if baselines.is_empty() || rows.iter().all(|r| r.improvement_pct.is_some()) {
        return Vec::new();
    }
    if baselines.iter().all(|r| r.mean_cost_ms.is_none()) {
        let counts: Vec<String> = baselines.iter().map(|r| format!("{} {}/{}", r.planner, r.valid, r.tasks)).collect();
        return vec![format!(
            "\"vs best baseline\" is \"-\" for every planner: no seed baseline found a plan within memory for every task (valid: {}), so there is no baseline mean to compare with",
            counts.join(", ")
        )];
    }
    rows.iter()
        .filter(|r| r.improvement_pct.is_none())
        .map(|r| {
            format!(
                "{}: \"vs best baseline\" is \"-\" because it found no plan within memory for {} of the {} tasks (its mean over all tasks is undefined)",
                r.planner,
                r.tasks - r.valid,
                r.tasks
            )
        })
        .collect()
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

/// One plan priced by a cost model and measured by the collector.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgedPlan {
    /// Planner that made it.
    pub planner: String,
    /// Its predicted report.
    pub predicted: crate::cost::PlanReport,
    /// Its measured report (`shardplan-collect measure-plan`).
    pub measured: crate::cost::PlanReport,
    /// Its measured cost in every round of the measurement, ms.
    pub round_costs_ms: Vec<f64>,
}

/// The plans of the planners that solved one task, measured together.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct JudgedTask {
    /// Task label (cell and index).
    pub task: String,
    /// One plan per planner that returned a plan fitting memory.
    pub plans: Vec<JudgedPlan>,
    /// Multiplier that expresses this task's measured times at the cost model's reference speed: the
    /// model's reference-kernel time over the reading during the measurement (`None`: not known).
    #[serde(default)]
    pub speed_factor: Option<f64>,
}

impl JudgedTask {
    /// A measured-plans document as a judged task labelled `task`, its speed factor for `model`.
    #[must_use]
    pub fn from_measured(
        task: String,
        measured: crate::document::MeasuredPlans,
        model: &dyn crate::cost::CostModel,
    ) -> Self {
        let speed_factor = measured.speed_factor(model);
        let plans = measured
            .plans
            .into_iter()
            .map(|p| JudgedPlan {
                planner: p.planner,
                predicted: p.predicted,
                measured: p.measured,
                round_costs_ms: p.round_costs_ms,
            })
            .collect();
        Self { task, plans, speed_factor }
    }
}

/// How close predictions are to measurements over a set of plans.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Accuracy {
    /// Mean |predicted − measured| / measured over all plans, %.
    pub plan_mape_pct: Option<f64>,
    /// Mean (predicted − measured) / measured over all plans, % (negative: the model is optimistic).
    pub plan_bias_pct: Option<f64>,
    /// Mean |predicted − measured| / measured of every non-empty device's total over all plans, %.
    pub device_mape_pct: Option<f64>,
    /// Share of plans whose measured cost lies inside the predicted interval (when the model gives one).
    pub interval_coverage: Option<f64>,
    /// As `plan_mape_pct`, for the expected measured cost ([`crate::cost::PlanReport::expected_cost_ms`])
    /// in place of the plan's cost; `None` unless every plan's prediction has one.
    #[serde(default)]
    pub expected_plan_mape_pct: Option<f64>,
    /// As `plan_bias_pct`, for the expected measured cost.
    #[serde(default)]
    pub expected_plan_bias_pct: Option<f64>,
}

/// One planner over the measured tasks of a cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgedPlanner {
    /// Planner name.
    pub planner: String,
    /// Measured tasks it solved.
    pub solved: usize,
    /// Mean predicted cost over the tasks every planner solved, ms.
    pub predicted_mean_ms: Option<f64>,
    /// Mean measured cost over the tasks every planner solved, ms.
    pub measured_mean_ms: Option<f64>,
    /// Mean |predicted − measured| / measured of its plans, %.
    pub mape_pct: Option<f64>,
}

/// What the measured judge says about a set of tasks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeSummary {
    /// Tasks measured.
    pub tasks: usize,
    /// Tasks every planner solved (the means are over these).
    pub common_tasks: usize,
    /// Plans measured.
    pub plans: usize,
    /// Kendall's tau-b between predicted and measured costs of the planners' plans, per task.
    pub kendall_tau: Vec<Option<f64>>,
    /// Mean of the defined taus.
    pub kendall_tau_mean: Option<f64>,
    /// Mean Kendall's tau-b per task with the planners' plans ranked by their expected measured cost
    /// ([`crate::cost::PlanReport::expected_cost_ms`]), over the tasks where every plan has one.
    #[serde(default)]
    pub expected_kendall_tau_mean: Option<f64>,
    /// Predictions against the measured times as measured.
    pub accuracy: Accuracy,
    /// Predictions against the measured times expressed at the cost model's reference speed (every task
    /// with a speed factor; `None` otherwise).
    pub accuracy_at_reference_speed: Option<Accuracy>,
    /// Mean coefficient of variation of a plan's cost across measuring rounds, %: the judge's own noise.
    pub measurement_cv_pct: Option<f64>,
    /// The judge against itself: Kendall's tau-b between each task's plans ranked by their mean cost
    /// over the even-numbered measuring rounds and over the odd-numbered ones, mean over the tasks whose
    /// plans all have two rounds or more. A model cannot be shown to rank plans better than the judge
    /// ranks them against itself; each half has half the rounds, so this is a lower bound on the whole
    /// run's agreement with itself.
    #[serde(default)]
    pub self_tau_mean: Option<f64>,
    /// Tasks where the plan predicted cheapest is also measured cheapest.
    pub same_winner: usize,
    /// Per planner.
    pub planners: Vec<JudgedPlanner>,
}

fn mean_of(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Summarises measured tasks: accuracy of the predictions (MAPE of plan and device costs, bias, interval
/// coverage), whether the model ranks plans as measurement does (Kendall's tau-b per task), the
/// judge's noise, and each planner's measured mean over the tasks every planner in `planners` solved.
#[must_use]
pub fn judge_summary(tasks: &[JudgedTask], planners: &[String]) -> JudgeSummary {
    let all: Vec<&JudgedPlan> = tasks.iter().flat_map(|t| &t.plans).collect();
    let rel = |p: &JudgedPlan| (p.predicted.cost_ms - p.measured.cost_ms) / p.measured.cost_ms;
    let valid: Vec<&JudgedPlan> = all.iter().copied().filter(|p| p.measured.cost_ms > 0.0).collect();
    let cvs: Vec<f64> = valid
        .iter()
        .filter(|p| p.round_costs_ms.len() > 1)
        .map(|p| {
            let v = &p.round_costs_ms;
            let m = v.iter().sum::<f64>() / v.len() as f64;
            let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64;
            if m > 0.0 { 100.0 * var.sqrt() / m } else { 0.0 }
        })
        .collect();
    let mut taus = Vec::with_capacity(tasks.len());
    let mut expected_taus = Vec::new();
    let mut same_winner = 0;
    for t in tasks {
        let expected: Option<Vec<f64>> = t.plans.iter().map(|p| p.predicted.expected_cost_ms).collect();
        if let Some(e) = expected {
            let meas: Vec<f64> = t.plans.iter().map(|p| p.measured.cost_ms).collect();
            expected_taus.extend(kendall_tau(&e, &meas));
        }
        let pred: Vec<f64> = t.plans.iter().map(|p| p.predicted.cost_ms).collect();
        let meas: Vec<f64> = t.plans.iter().map(|p| p.measured.cost_ms).collect();
        taus.push(kendall_tau(&pred, &meas));
        let argmin = |v: &[f64]| v.iter().enumerate().min_by(|a, b| a.1.total_cmp(b.1)).map(|(i, _)| i);
        if !pred.is_empty() && argmin(&pred) == argmin(&meas) {
            same_winner += 1;
        }
    }
    let common: Vec<&JudgedTask> =
        tasks.iter().filter(|t| planners.iter().all(|n| t.plans.iter().any(|p| &p.planner == n))).collect();
    let rows = planners
        .iter()
        .map(|name| {
            let mine: Vec<&JudgedPlan> = all.iter().copied().filter(|p| &p.planner == name).collect();
            let on_common: Vec<&JudgedPlan> =
                common.iter().filter_map(|t| t.plans.iter().find(|p| &p.planner == name)).collect();
            JudgedPlanner {
                planner: name.clone(),
                solved: mine.len(),
                predicted_mean_ms: mean_of(&on_common.iter().map(|p| p.predicted.cost_ms).collect::<Vec<_>>()),
                measured_mean_ms: mean_of(&on_common.iter().map(|p| p.measured.cost_ms).collect::<Vec<_>>()),
                mape_pct: mean_of(
                    &mine.iter().filter(|p| p.measured.cost_ms > 0.0).map(|p| 100.0 * rel(p).abs()).collect::<Vec<_>>(),
                ),
            }
        })
        .collect();
    let defined: Vec<f64> = taus.iter().flatten().copied().collect();
    let self_taus: Vec<f64> = tasks
        .iter()
        .filter(|t| t.plans.len() > 1 && t.plans.iter().all(|p| p.round_costs_ms.len() > 1))
        .filter_map(|t| {
            let half = |h: usize| -> Vec<f64> {
                let mean =
                    |p: &JudgedPlan| mean_of(&p.round_costs_ms.iter().skip(h).step_by(2).copied().collect::<Vec<_>>());
                t.plans.iter().filter_map(mean).collect()
            };
            kendall_tau(&half(0), &half(1))
        })
        .collect();
    let at_reference = tasks
        .iter()
        .all(|t| t.speed_factor.is_some_and(|f| f.is_finite() && f > 0.0))
        .then(|| accuracy(tasks, |t| t.speed_factor.unwrap_or(1.0)))
        .filter(|_| !tasks.is_empty());
    JudgeSummary {
        tasks: tasks.len(),
        common_tasks: common.len(),
        plans: all.len(),
        kendall_tau_mean: mean_of(&defined),
        kendall_tau: taus,
        expected_kendall_tau_mean: mean_of(&expected_taus),
        accuracy: accuracy(tasks, |_| 1.0),
        accuracy_at_reference_speed: at_reference,
        measurement_cv_pct: mean_of(&cvs),
        self_tau_mean: mean_of(&self_taus),
        same_winner,
        planners: rows,
    }
}

/// Accuracy of the plans of `tasks`, every task's measured times multiplied by `scale(task)`.
fn accuracy(tasks: &[JudgedTask], scale: impl Fn(&JudgedTask) -> f64) -> Accuracy {
    let (mut rel, mut dev, mut inside) = (Vec::new(), Vec::new(), Vec::new());
    let mut expected_rel: Option<Vec<f64>> = Some(Vec::new());
    for t in tasks {
        let f = scale(t);
        for p in t.plans.iter().filter(|p| p.measured.cost_ms > 0.0) {
            let m = p.measured.cost_ms * f;
            rel.push((p.predicted.cost_ms - m) / m);
            expected_rel = expected_rel.zip(p.predicted.expected_cost_ms).map(|(mut v, e)| {
                v.push((e - m) / m);
                v
            });
            for (pd, md) in p.predicted.devices.iter().zip(&p.measured.devices) {
                if md.total_ms > 0.0 && !pd.pieces.is_empty() {
                    dev.push(((pd.total_ms - md.total_ms * f) / (md.total_ms * f)).abs());
                }
            }
            if let Some([lo, hi]) = p.predicted.cost_interval_ms {
                inside.push((lo..=hi).contains(&m));
            }
        }
    }
    Accuracy {
        plan_mape_pct: mean_of(&rel.iter().map(|r| 100.0 * r.abs()).collect::<Vec<_>>()),
        plan_bias_pct: mean_of(&rel.iter().map(|r| 100.0 * r).collect::<Vec<_>>()),
        device_mape_pct: mean_of(&dev).map(|x| 100.0 * x),
        interval_coverage: (!inside.is_empty())
            .then(|| inside.iter().filter(|&&b| b).count() as f64 / inside.len() as f64),
        expected_plan_mape_pct: expected_rel
            .as_ref()
            .and_then(|v| mean_of(&v.iter().map(|r| 100.0 * r.abs()).collect::<Vec<_>>())),
        expected_plan_bias_pct: expected_rel.and_then(|v| mean_of(&v.iter().map(|r| 100.0 * r).collect::<Vec<_>>())),
    }
}

/// A paired comparison of two planners' measured costs on the tasks both solved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Paired {
    /// The planner (or group) compared.
    pub ours: String,
    /// The planner it is compared with.
    pub theirs: String,
    /// Tasks both solved.
    pub tasks: usize,
    /// Mean over tasks of (theirs − ours) / theirs, %: positive means ours is faster.
    pub mean_gain_pct: f64,
    /// Standard error of that mean, percentage points.
    pub se_pct: f64,
    /// Tasks where ours measured at most theirs.
    pub ours_not_slower: usize,
}

/// Compares, task by task, the best measured cost among the `ours` planners with planner `theirs`.
#[must_use]
pub fn paired(tasks: &[JudgedTask], ours: &[String], theirs: &str) -> Option<Paired> {
    let pairs: Vec<(f64, f64)> = tasks
        .iter()
        .filter_map(|t| {
            let best_ours = t
                .plans
                .iter()
                .filter(|p| ours.contains(&p.planner))
                .map(|p| p.measured.cost_ms)
                .fold(f64::INFINITY, f64::min);
            let other = t.plans.iter().find(|p| p.planner == theirs)?;
            Some((best_ours, other.measured.cost_ms))
        })
        .collect();
    paired_costs(&ours.join(" / "), theirs, &pairs)
}

/// The paired comparison of per-task costs `(ours, theirs)` (a pair with a non-finite or non-positive
/// cost is left out; `None` when none is left).
#[must_use]
pub fn paired_costs(ours: &str, theirs: &str, pairs: &[(f64, f64)]) -> Option<Paired> {
    let kept: Vec<(f64, f64)> =
        pairs.iter().copied().filter(|&(o, t)| o.is_finite() && t.is_finite() && t > 0.0).collect();
    let gains: Vec<f64> = kept.iter().map(|&(o, t)| 100.0 * (t - o) / t).collect();
    let n = gains.len();
    let mean = mean_of(&gains)?;
    let se = if n > 1 {
        (gains.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / (n - 1) as f64 / n as f64).sqrt()
    } else {
        0.0
    };
    Some(Paired {
        ours: ours.into(),
        theirs: theirs.into(),
        tasks: n,
        mean_gain_pct: mean,
        se_pct: se,
        ours_not_slower: kept.iter().filter(|&&(o, t)| o <= t).count(),
    })
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

    /// A report costing `cost` (with `expected`, when given, as its expected measured cost).
    fn report(cost: f64, expected: Option<f64>) -> crate::cost::PlanReport {
        let mut v = serde_json::json!({
            "cost_model": "m", "definition": "neuroshard", "cost_ms": cost, "bottleneck_device": 0,
            "feasible": true, "violations": [], "devices": []
        });
        if let Some(e) = expected {
            v["expected_cost_ms"] = e.into();
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_expected_measured_cost_is_judged_beside_the_plain_cost() {
        // The plain prediction orders the first two plans against the measurement; the expected one
        // orders all three as measured, 10% high each.
        let plan = |name: &str, cost: f64, expected: Option<f64>, measured: f64| JudgedPlan {
            planner: name.into(),
            predicted: report(cost, expected),
            measured: report(measured, None),
            round_costs_ms: vec![measured],
        };
        let task = |third: Option<f64>| JudgedTask {
            task: "t".into(),
            plans: vec![
                plan("a", 9.0, Some(11.0), 10.0),
                plan("b", 8.0, Some(22.0), 20.0),
                plan("c", 30.0, third, 30.0),
            ],
            speed_factor: None,
        };
        let names: Vec<String> = ["a", "b", "c"].iter().map(|s| (*s).to_string()).collect();
        let s = judge_summary(&[task(Some(33.0)), task(Some(33.0))], &names);
        assert!((s.kendall_tau_mean.unwrap() - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(s.expected_kendall_tau_mean, Some(1.0));
        assert!((s.accuracy.expected_plan_mape_pct.unwrap() - 10.0).abs() < 1e-9);
        assert!((s.accuracy.expected_plan_bias_pct.unwrap() - 10.0).abs() < 1e-9);
        let plain = s.accuracy.plan_mape_pct.unwrap();
        assert!((plain - 100.0 * (0.1 + 0.6 + 0.0) / 3.0).abs() < 1e-9, "{plain}");
        // One plan without an expected cost: no expected figures for its task's tau, none for the MAPE.
        let s = judge_summary(&[task(None), task(Some(33.0))], &names);
        assert_eq!(s.expected_kendall_tau_mean, Some(1.0));
        assert_eq!(s.accuracy.expected_plan_mape_pct, None);
        let s = judge_summary(&[task(None)], &names);
        assert_eq!(s.expected_kendall_tau_mean, None);
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
        let why = missing_improvement_reasons(&rows, |n| n != "new");
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(why[0].starts_with("b: ") && why[0].contains("1 of the 2 tasks"), "{why:?}");
        // Every baseline failed a task: one line saying there is nothing to compare with.
        let rows = summarize(&runs, |n| n == "b");
        let why = missing_improvement_reasons(&rows, |n| n == "b");
        assert!(rows.iter().all(|r| r.improvement_pct.is_none()));
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(why[0].contains("no seed baseline") && why[0].contains("b 1/2"), "{why:?}");
        // Nothing missing: nothing to say.
        let rows = summarize(&runs[..1], |_| true);
        assert!(missing_improvement_reasons(&rows, |_| true).is_empty());
    }
}
