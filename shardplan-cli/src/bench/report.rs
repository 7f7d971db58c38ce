//! What `shardplan bench` reports: the JSON result (`shardplan.bench/v1`) and its Markdown rendering.

use planner_core::eval::{JudgeSummary, Paired, PlannerSummary};
use planner_core::task::{Protocol, SuiteSpec};
use planner_core::{MemoryRule, SplitRule};
use serde::Serialize;

use crate::common::render_table;

/// One planner's row in a cell.
#[derive(Serialize)]
pub struct PlannerCell {
    /// Cost, validity, improvement and planning time.
    #[serde(flatten)]
    pub summary: PlannerSummary,
    /// Set-cache hit rate over the cell, for planners that search.
    pub cache_hit_rate: Option<f64>,
    /// Mean over valid plans without row-wise pieces (the plans the bound covers) of
    /// `(cost − bound) / bound`, percent.
    pub gap_to_bound_pct: Option<f64>,
    /// Mean measured cost over the measured tasks every measured planner solved (measured judge only).
    pub measured_mean_ms: Option<f64>,
    /// Mean predicted cost over the same tasks.
    pub predicted_mean_ms: Option<f64>,
}

/// One (devices, max dim) cell.
#[derive(Serialize)]
pub struct Cell {
    /// Devices per task.
    pub devices: usize,
    /// Largest table dim.
    pub max_dim: u32,
    /// Tasks.
    pub tasks: usize,
    /// Mean lower bound over the tasks.
    pub lower_bound_mean_ms: f64,
    /// Whether the bound is proven for this cost model (see `planner_core::bound`).
    pub lower_bound_proven: bool,
    /// One row per planner.
    pub planners: Vec<PlannerCell>,
    /// Measured judge, when run on this cell.
    pub measured: Option<MeasuredCell>,
}

/// The measured judge on one cell.
#[derive(Serialize)]
pub struct MeasuredCell {
    /// Tasks measured.
    pub tasks: usize,
    /// Tasks of the suite passed over because a measured planner had no valid plan for them, with the
    /// planners that failed.
    pub skipped: Vec<(usize, Vec<String>)>,
    /// Accuracy, ranking, noise and per-planner means (`planner_core::eval::judge_summary`).
    pub summary: JudgeSummary,
    /// The best of `neuroshard` / `neuroshard+refine` against every other measured planner.
    pub paired: Vec<Paired>,
    /// Where the plans and measurements are.
    pub dir: String,
    /// The measuring machine's fingerprint (`shardplan-collect`'s hardware record of the first measured
    /// task; `None` when no task was measured).
    pub hardware: Option<String>,
    /// The machine the cost model was measured on, when its card records one; when it differs from
    /// `hardware` the accuracy figures compare predictions for one machine with times on another.
    pub model_hardware: Option<String>,
    /// How the measuring machine differs from the cost model's (`planner_core::cost::card::other_machine`:
    /// another fingerprint, or another last-level cache); `None` when it is the same machine.
    pub other_machine: Option<String>,
    /// Where the comm times came from: `measured`, or (compute timed on fewer devices than the plan) the
    /// collector's note that they were taken from each plan's prediction.
    pub comm: Option<String>,
    /// Comm's mean share of a measured plan's cost (forward + backward all-to-all of its bottleneck
    /// device over the plan's cost).
    pub comm_share: Option<f64>,
}

/// One planner in the optimality section.
#[derive(Serialize)]
pub struct OptimalityRow {
    /// Planner.
    pub planner: String,
    /// Tasks with a valid plan.
    pub valid: usize,
    /// Mean over valid plans of `(cost − optimum) / optimum`, percent (negative: it beat the unsplit
    /// optimum by splitting).
    pub gap_to_exact_pct: Option<f64>,
    /// Tasks where it was within 0.01% of the optimum or better.
    pub optimal: usize,
}

/// The optimality section.
#[derive(Serialize)]
pub struct Optimality {
    /// Tasks.
    pub tasks: usize,
    /// Tasks left out: some table fits no device unsplit.
    pub skipped: usize,
    /// Tasks the exact search completed (proven optimum over unsplit placements).
    pub complete: usize,
    /// Halvings per table the exact search could make.
    pub split_depth: u32,
    /// Mean gap of the lower bound under the optimum, percent.
    pub bound_gap_pct: f64,
    /// Per planner.
    pub planners: Vec<OptimalityRow>,
}

/// One scale point.
#[derive(Serialize)]
pub struct ScaleRow {
    /// Tables per task.
    pub tables: usize,
    /// Devices.
    pub devices: usize,
    /// Per-device cap of the first task (see `scale_task`).
    pub mem_cap_bytes: u64,
    /// Planner.
    pub planner: String,
    /// Median planning time, ms.
    pub plan_time_p50_ms: f64,
    /// Slowest planning time, ms.
    pub plan_time_max_ms: f64,
    /// Valid plans.
    pub valid: usize,
    /// Tasks.
    pub tasks: usize,
    /// Mean cost of the valid plans.
    pub mean_cost_valid_ms: Option<f64>,
    /// Most heap one run held above what the process held before it, bytes.
    pub peak_heap_max_bytes: u64,
    /// Not run: the planner's median time at a smaller point passed `--scale-cutoff-ms`.
    pub skipped: bool,
    /// Cost of every task's plan (`None`: no plan within memory).
    pub costs_ms: Vec<Option<f64>>,
    /// The point's first planner against this one, task by task (ours: the first planner).
    pub first_vs_this: Option<planner_core::eval::Paired>,
}

/// How a planner's planning time and peak heap grow over the scale points: the least-squares slope of
/// log(value) on log(tables) along the points (tables and devices grow together at the default points),
/// and, where the points vary tables and devices apart, the exponent of each with the other held.
#[derive(Serialize)]
pub struct ScaleFit {
    /// Planner.
    pub planner: String,
    /// Points fitted.
    pub points: usize,
    /// Exponent of the median planning time.
    pub time_exponent: Option<f64>,
    /// Exponent of the peak heap.
    pub heap_exponent: Option<f64>,
    /// Exponent of the median planning time in the number of tables, devices held.
    pub time_exponent_tables: Option<f64>,
    /// Exponent of the median planning time in the number of devices, tables held.
    pub time_exponent_devices: Option<f64>,
    /// Exponent of the peak heap in the number of tables, devices held.
    pub heap_exponent_tables: Option<f64>,
    /// Exponent of the peak heap in the number of devices, tables held.
    pub heap_exponent_devices: Option<f64>,
}

/// One planner on a seed-protocol cell.
#[derive(Serialize)]
pub struct ProtocolRow {
    /// Cost (four-phase), validity, improvement over the best seed baseline and planning time.
    #[serde(flatten)]
    pub summary: PlannerSummary,
    /// Mean over valid plans of min / max device compute, percent (AutoShard's degree of balance).
    pub balance_pct: Option<f64>,
}

/// A cell of the seed-protocol section.
#[derive(Serialize)]
pub struct ProtocolCell {
    /// What it is.
    pub name: String,
    /// The suite drawn.
    pub spec: SuiteSpec,
    /// One row per planner.
    pub planners: Vec<ProtocolRow>,
}

/// The JSON result of `shardplan bench`.
#[derive(Serialize)]
pub struct BenchResult {
    /// Schema tag.
    pub schema: &'static str,
    /// Cost model (the prediction judge).
    pub cost_model: String,
    /// Memory rule every task was planned and judged under.
    pub memory_rule: MemoryRule,
    /// Split rule every task was planned under.
    pub splits: SplitRule,
    /// Suite seed.
    pub seed: u64,
    /// The cells.
    pub cells: Vec<Cell>,
    /// Exact-search optimality gaps.
    pub optimality: Option<Optimality>,
    /// Planning time at scale.
    pub scale: Vec<ScaleRow>,
    /// Growth exponents over the scale points.
    pub scale_fits: Vec<ScaleFit>,
    /// The DreamShard and AutoShard protocols (four-phase cost, unseen tables).
    pub seed_protocols: Vec<ProtocolCell>,
}

/// Schema tag of bench results.
pub const BENCH_SCHEMA: &str = "shardplan.bench/v1";

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or("-".to_string(), |x| format!("{x:.prec$}"))
}

/// The measured judge of one cell, in Markdown: the summary line, the per-planner table, the paired
/// comparison.
/// The accuracy of the plans' expected measured cost (`PlanReport::expected_cost_ms`), and the tau of the
/// ranking by it when given; empty when the predictions have none (the analytical model, older plans).
fn expected_line(a: &planner_core::eval::Accuracy, tau: Option<f64>) -> String {
    let Some(mape) = a.expected_plan_mape_pct else { return String::new() };
    let bias = a.expected_plan_bias_pct.map_or("-".into(), |x| format!("{x:+.1}%"));
    let tau = tau.map_or_else(String::new, |t| format!(", Kendall's tau by it {t:.2}"));
    format!("; the expected measured cost (the slowest device's expected time): MAPE {mape:.1}% (bias {bias}){tau}")
}

fn measured_markdown(m: &MeasuredCell) -> String {
    let s = &m.summary;
    let pct = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.1}%"));
    let a = &s.accuracy;
    let at_speed = s.accuracy_at_reference_speed.as_ref().map_or_else(
        || "no reference speed (the cost model was not trained on speed-normalised data of this machine)".to_string(),
        |r| {
            format!(
                "**{}** (bias {}), device cost {}, inside the predicted interval {}{}",
                pct(r.plan_mape_pct),
                r.plan_bias_pct.map_or("-".into(), |x| format!("{x:+.1}%")),
                pct(r.device_mape_pct),
                r.interval_coverage.map_or("-".into(), |c| format!("{:.0}%", 100.0 * c)),
                expected_line(r, None)
            )
        },
    );
    let machines = match (&m.hardware, &m.other_machine) {
        (None, _) => String::new(),
        (Some(here), Some(why)) => format!(
            "Measured on `{here}`; **the cost model was measured on another machine** ({why}), so its accuracy below is across machines. "
        ),
        (Some(here), _) => format!("Measured on `{here}`. "),
    };
    let machines = match m.comm.as_deref() {
        Some(c) if c != "measured" => {
            let share =
                m.comm_share.map_or_else(String::new, |x| format!(", {:.1}% of a plan's cost on average", 100.0 * x));
            format!(
                "{machines}Compute timed; **comm not measured** ({c}): the costs below are measured compute plus predicted comm{share}. "
            )
        }
        _ => machines,
    };
    let mut out = vec![format!(
        "\n{machines}Measured judge: {} plans on {} tasks (the first of the suite every measured planner solved; {} passed over). \
         Kendall's tau (predicted vs measured ranking of the planners' plans) per task: {}; **mean {}**; same winner on {}/{} tasks. \
         MAPE of plan cost as measured {} (bias {}), of device cost {}; inside the predicted interval {}{}. \
         At the cost model's reference speed: MAPE of plan cost {at_speed}. \
         The judge's noise (cv of a plan's cost across rounds): {}; the judge against itself (tau, even rounds vs odd): {}, \
         the most a model's tau can be shown to reach here. Files: `{}`.\n",
        s.plans,
        m.tasks,
        m.skipped.len(),
        s.kendall_tau.iter().map(|t| opt(*t, 2)).collect::<Vec<_>>().join(", "),
        opt(s.kendall_tau_mean, 2),
        s.same_winner,
        s.tasks,
        pct(a.plan_mape_pct),
        a.plan_bias_pct.map_or("-".into(), |x| format!("{x:+.1}%")),
        pct(a.device_mape_pct),
        a.interval_coverage.map_or("-".into(), |c| format!("{:.0}%", 100.0 * c)),
        expected_line(a, s.expected_kendall_tau_mean),
        pct(s.measurement_cv_pct),
        opt(s.self_tau_mean, 2),
        m.dir
    )];
    let rows: Vec<Vec<String>> = s
        .planners
        .iter()
        .map(|p| {
            vec![
                p.planner.clone(),
                p.solved.to_string(),
                opt(p.predicted_mean_ms, 3),
                opt(p.measured_mean_ms, 3),
                pct(p.mape_pct),
            ]
        })
        .collect();
    out.push(render_table(
        &["planner (measured)", "tasks", "predicted mean ms", "measured mean ms", "MAPE"],
        &rows,
        true,
    ));
    if !m.paired.is_empty() {
        let rows: Vec<Vec<String>> = m
            .paired
            .iter()
            .map(|p| {
                vec![
                    p.theirs.clone(),
                    p.tasks.to_string(),
                    format!("{:+.1}% ± {:.1}", p.mean_gain_pct, p.se_pct),
                    format!("{}/{}", p.ours_not_slower, p.tasks),
                ]
            })
            .collect();
        out.push(format!(
            "\nBest of {} against each planner, task by task (measured; gain = (theirs − ours) / theirs, mean ± s.e.):\n",
            m.paired.first().map_or(String::new(), |p| format!("`{}`", p.ours))
        ));
        out.push(render_table(&["against", "tasks", "gain", "ours not slower"], &rows, true));
    }
    out.join("\n")
}

/// The Markdown report.
pub fn markdown(r: &BenchResult) -> String {
    let mut out = vec![format!(
        "# shardplan bench\n\nCost model (prediction judge): `{}`; memory rule: {}; splits: {}; suite seed {}.",
        r.cost_model,
        r.memory_rule.describe(),
        r.splits.name(),
        r.seed
    )];
    for c in &r.cells {
        out.push(format!(
            "\n## {} devices, max dim {} ({} tasks)\n\nLower bound: mean {:.3} ms ({}); the gap column covers plans without row-wise pieces.\n",
            c.devices,
            c.max_dim,
            c.tasks,
            c.lower_bound_mean_ms,
            if c.lower_bound_proven { "proven for this model" } else { "an estimate for a learned model" }
        ));
        let measured = c.measured.is_some();
        let rows: Vec<Vec<String>> = c
            .planners
            .iter()
            .map(|p| {
                let s = &p.summary;
                let mut row = vec![
                    s.planner.clone(),
                    format!("{}/{}", s.valid, s.tasks),
                    opt(s.mean_cost_ms, 3),
                    opt(s.mean_cost_valid_ms, 3),
                    s.improvement_pct.map_or("-".into(), |x| format!("{x:+.2}%")),
                    p.gap_to_bound_pct.map_or("-".into(), |x| format!("{x:.1}%")),
                    format!("{:.3}", s.plan_time_p50_ms),
                    format!("{:.3}", s.plan_time_p95_ms),
                    p.cache_hit_rate.map_or("-".into(), |x| format!("{:.1}%", 100.0 * x)),
                ];
                if measured {
                    row.push(opt(p.predicted_mean_ms, 3));
                    row.push(opt(p.measured_mean_ms, 3));
                }
                row
            })
            .collect();
        let mut header = vec![
            "planner",
            "valid",
            "mean cost ms",
            "mean ms (valid)",
            "vs best baseline",
            "gap to bound",
            "plan p50 ms",
            "plan p95 ms",
            "cache hits",
        ];
        if measured {
            header.push("predicted ms (measured tasks)");
            header.push("measured ms");
        }
        out.push(render_table(&header, &rows, true));
        push_improvement_notes(&mut out, c.planners.iter().map(|p| &p.summary));
        if let Some(m) = &c.measured {
            out.push(measured_markdown(m));
        }
    }
    if let Some(o) = &r.optimality {
        out.push(format!(
            "\n## Optimality: exact search on {} small tasks (8–12 tables, 4 devices, max dim 128; {} more left out: \
             a table fits no device unsplit)\n\n\
             The exact search proves the optimum over placements with tables halved up to {} times on {}/{} tasks; \
             the lower bound is on average {:.1}% under it. Negative gaps: the planner beat that optimum with finer splits.\n",
            o.tasks, o.skipped, o.split_depth, o.complete, o.tasks, o.bound_gap_pct
        ));
        let rows: Vec<Vec<String>> = o
            .planners
            .iter()
            .map(|p| {
                vec![
                    p.planner.clone(),
                    format!("{}/{}", p.valid, o.tasks),
                    p.gap_to_exact_pct.map_or("-".into(), |x| format!("{x:+.2}%")),
                    format!("{}/{}", p.optimal, p.valid),
                ]
            })
            .collect();
        out.push(render_table(&["planner", "valid", "mean gap to optimum", "optimal or better"], &rows, true));
    }
    if !r.scale.is_empty() {
        out.push(
            "\n## Planning time at scale (max dim 128; caps: the smallest multiple of 4 GiB whose usable bytes hold 1.3× an even share \
             and 1.1× the largest table)\n"
                .to_string(),
        );
        let rows: Vec<Vec<String>> = r
            .scale
            .iter()
            .map(|s| {
                let skipped = || "skipped".to_string();
                vec![
                    format!("{}/{}", s.tables, s.devices),
                    planner_core::units::format_bytes(s.mem_cap_bytes),
                    s.planner.clone(),
                    if s.skipped { skipped() } else { format!("{}/{}", s.valid, s.tasks) },
                    if s.skipped { skipped() } else { format!("{:.1}", s.plan_time_p50_ms) },
                    if s.skipped { skipped() } else { format!("{:.1}", s.plan_time_max_ms) },
                    if s.skipped {
                        skipped()
                    } else {
                        format!("{:.1}", s.peak_heap_max_bytes as f64 / f64::from(1u32 << 20))
                    },
                    opt(s.mean_cost_valid_ms, 3),
                    s.first_vs_this.as_ref().filter(|p| p.ours != p.theirs).map_or("-".into(), |p| {
                        format!("{:+.1}% ± {:.1} ({}/{})", p.mean_gain_pct, p.se_pct, p.ours_not_slower, p.tasks)
                    }),
                ]
            })
            .collect();
        let first = r.scale.first().map_or(String::new(), |s| s.planner.clone());
        let versus = format!("`{first}` cheaper by (± s.e.; tasks not dearer)");
        out.push(render_table(
            &[
                "tables/devices",
                "cap",
                "planner",
                "valid",
                "p50 ms",
                "max ms",
                "peak heap MiB",
                "mean cost ms (valid)",
                &versus,
            ],
            &rows,
            true,
        ));
        if !r.scale_fits.is_empty() {
            out.push(
                "\nGrowth over the points (least-squares slope of log value on log tables along the points, \
                 whatever the devices do; then log value fitted on log tables and log devices together, \
                 \"-\" where the points do not vary the two apart):\n"
                    .to_string(),
            );
            let rows: Vec<Vec<String>> = r
                .scale_fits
                .iter()
                .map(|f| {
                    vec![
                        f.planner.clone(),
                        f.points.to_string(),
                        opt(f.time_exponent, 2),
                        opt(f.heap_exponent, 2),
                        opt(f.time_exponent_tables, 2),
                        opt(f.time_exponent_devices, 2),
                        opt(f.heap_exponent_tables, 2),
                        opt(f.heap_exponent_devices, 2),
                    ]
                })
                .collect();
            out.push(render_table(
                &[
                    "planner",
                    "points",
                    "time exponent",
                    "peak heap exponent",
                    "time: tables",
                    "time: devices",
                    "heap: tables",
                    "heap: devices",
                ],
                &rows,
                true,
            ));
        }
    }
    for c in &r.seed_protocols {
        let table = c.spec.tables.map_or(String::new(), |(lo, hi)| format!("{lo}–{} tables", hi - 1));
        out.push(format!(
            "\n## {} ({} tasks, {table}, fp16, dims {}, test half of the pool; four-phase cost)\n",
            c.name,
            c.spec.count,
            if c.spec.protocol == Protocol::AutoShard { "16/32" } else { "16" },
        ));
        let rows: Vec<Vec<String>> = c
            .planners
            .iter()
            .map(|p| {
                let s = &p.summary;
                vec![
                    s.planner.clone(),
                    format!("{}/{}", s.valid, s.tasks),
                    opt(s.mean_cost_ms, 3),
                    s.improvement_pct.map_or("-".into(), |x| format!("{x:+.2}%")),
                    opt(p.balance_pct, 1),
                    format!("{:.3}", s.plan_time_p50_ms),
                ]
            })
            .collect();
        out.push(render_table(
            &["planner", "valid", "mean cost ms", "vs best baseline", "compute balance min/max %", "plan p50 ms"],
            &rows,
            true,
        ));
        push_improvement_notes(&mut out, c.planners.iter().map(|p| &p.summary));
    }
    out.join("\n")
}

/// Appends why rows show "-" under "vs best baseline", when any do.
fn push_improvement_notes<'a>(out: &mut Vec<String>, summaries: impl Iterator<Item = &'a PlannerSummary>) {
    let summaries: Vec<PlannerSummary> = summaries.cloned().collect();
    let notes = crate::run_one::missing_improvement_notes(&summaries);
    if !notes.is_empty() {
        out.push(notes);
    }
}
