//! The measured judge of one cell: a task's plans written as plan documents, measured together by
//! `shardplan-collect`, and the predictions judged by the times (`planner_core::eval::judge_summary`):
//! Kendall's tau per task, MAPE and bias, interval coverage, the judge's noise, per-planner means,
//! and the best of ours against every other planner, task by task.

use std::path::Path;

use anyhow::{Context, Result, bail};
use planner_core::PlanDocument;
use planner_core::cost::card;
use planner_core::eval::{JudgedTask, judge_summary, paired};
use planner_core::task::SuiteTask;

use super::Bench;
use super::measure::Collector;
use super::report::MeasuredCell;
use crate::run_one::Run;
use shardplan_files::write_atomic;

/// The planners whose best measured plan is ours.
const OURS: [&str; 2] = ["neuroshard", "neuroshard+refine"];

/// The plan documents of one cell's judged tasks: for each of the first `--measure-tasks` tasks of
/// `suite` that every planner of `--measure-planners` solved, its plans written into `dir`
/// (`task{N}_{planner}.plan.json`). The one selection the measured judge measures and `--plans-only`
/// writes.
pub struct CellPlans {
    /// The planners' names, in the order of every task's documents.
    pub names: Vec<String>,
    /// Per task: its index in `suite` and its plan documents.
    pub tasks: Vec<(usize, Vec<std::path::PathBuf>)>,
    /// Tasks left out, with the planners that did not solve them.
    pub skipped: Vec<(usize, Vec<String>)>,
}

/// Writes the plan documents of `suite`'s judged tasks into `dir` ([`CellPlans`]).
pub fn write_cell_plans(b: &Bench, dir: &Path, suite: &[SuiteTask], runs: &[Vec<Run>]) -> Result<CellPlans> {
    let (args, entries) = (b.args, &b.entries);
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let wanted: Vec<String> = args.measure_planners.split(',').map(|s| s.trim().to_string()).collect();
    let measured: Vec<usize> = (0..entries.len()).filter(|&p| wanted.iter().any(|w| w == entries[p].name)).collect();
    if measured.is_empty() {
        bail!("--measure-planners {:?} names none of the planners run (--algos)", args.measure_planners);
    }
    let names: Vec<String> = measured.iter().map(|&p| entries[p].name.to_string()).collect();
    let mut tasks = Vec::new();
    let mut skipped = Vec::new();
    for (k, st) in suite.iter().enumerate() {
        if tasks.len() >= args.measure_tasks {
            break;
        }
        let failed: Vec<String> =
            measured.iter().filter(|&&p| runs[p][k].solved.is_none()).map(|&p| entries[p].name.to_string()).collect();
        if !failed.is_empty() {
            skipped.push((st.index, failed));
            continue;
        }
        let mut docs = Vec::new();
        for &p in &measured {
            let Some((plan, report)) = runs[p][k].solved.as_ref() else { continue };
            let path = dir.join(format!("task{}_{}.plan.json", st.index, entries[p].name.replace('+', "-")));
            let doc = PlanDocument::new(entries[p].name, st.seed, st.task.clone(), plan, report.clone());
            write_atomic(&path, serde_json::to_string_pretty(&doc)?.as_bytes())?;
            docs.push(path);
        }
        tasks.push((k, docs));
    }
    Ok(CellPlans { names, tasks, skipped })
}

/// Measures the plans of the first `--measure-tasks` tasks of `suite` that every planner of
/// `--measure-planners` solved (`runs`: every planner's runs on `suite`), keeping the plan documents
/// and measurements in `dir`, and judges the predictions by them.
pub fn measure_cell(
    b: &Bench,
    collector: &Collector,
    dir: &Path,
    suite: &[SuiteTask],
    runs: &[Vec<Run>],
) -> Result<MeasuredCell> {
    let (args, model) = (b.args, b.model.as_ref());
    if let Some(q) = args.measure_quiet_reference_ms
        && !(q.is_finite() && q > 0.0)
    {
        bail!("--measure-quiet-reference-ms = {q} is invalid: a positive time in ms");
    }
    let CellPlans { names, tasks: docs, skipped } = write_cell_plans(b, dir, suite, runs)?;
    let mut tasks = Vec::new();
    let model_hardware = model.reference_speed().map(|(fingerprint, _)| fingerprint);
    let mut hardware: Option<String> = None;
    let mut other_machine: Option<String> = None;
    let mut comm: Option<String> = None;
    // Comm's share of every measured plan's cost (at its bottleneck device).
    let mut comm_shares = Vec::new();
    for (k, docs) in &docs {
        let st = &suite[*k];
        let out = dir.join(format!("task{}.measured.json", st.index));
        eprintln!("  measuring task {} ({} plans)", st.index, docs.len());
        let m = collector.measure(docs, &out, st.seed)?;
        if hardware.is_none() {
            other_machine = model.measured_on().and_then(|recorded| card::other_machine(recorded, &m.hardware));
            if let Some(why) = &other_machine {
                eprintln!("  note: the cost model was {why}: its accuracy here is across machines");
            }
            hardware = Some(m.hardware.fingerprint.clone());
            comm = Some(m.comm.clone());
        }
        for p in &m.plans {
            if let Some(d) = p.measured.devices.get(p.measured.bottleneck_device).filter(|_| p.measured.cost_ms > 0.0) {
                comm_shares.push((d.fw_comm_ms + d.bw_comm_ms) / p.measured.cost_ms);
            }
        }
        tasks.push(JudgedTask::from_measured(format!("task {}", st.index), m, model));
    }
    let summary = judge_summary(&tasks, &names);
    let ours: Vec<String> = OURS.iter().filter(|o| names.iter().any(|n| n == *o)).map(|o| (*o).to_string()).collect();
    let paired = if ours.is_empty() {
        Vec::new()
    } else {
        names.iter().filter(|n| !ours.contains(n)).filter_map(|n| paired(&tasks, &ours, n)).collect()
    };
    Ok(MeasuredCell {
        tasks: tasks.len(),
        skipped,
        summary,
        paired,
        dir: dir.display().to_string(),
        hardware,
        model_hardware,
        other_machine,
        comm,
        comm_share: (!comm_shares.is_empty()).then(|| comm_shares.iter().sum::<f64>() / comm_shares.len() as f64),
    })
}
