//! Planning time and peak heap at scale: by default 100 tables on 8 devices, 200 on 16, 500 on 64,
//! 1,000 on 128 and 2,000 on 256 (`--scale-points`; `--quick`: the first), on caps that hold the
//! tables, and how each planner's time and heap grow over the points.

use anyhow::{Result, bail};
use planner_core::eval::percentile;
use planner_core::task::{Protocol, SuiteTask};
use planner_core::{Devices, Task};

use super::report::{ScaleFit, ScaleRow};
use super::{Bench, mean};
use crate::run_one::Run;
use crate::tasks_cmd::Rules;

/// A scale task: `tables` pool tables at dims up to 128 on `devices` devices whose equal caps are the
/// smallest multiple of 4 GiB whose usable bytes (under the bench's memory rule) hold 1.3× an even
/// share of the tables' bytes and 1.1× the largest table (the NeuroShard protocol's 4 GiB caps cannot
/// hold 100 such tables on 8 devices).
fn scale_task(tables: usize, devices: usize, index: usize, seed: u64, rule: Rules) -> Result<SuiteTask> {
    const GIB4: u64 = 4 << 30;
    let specs = planner_core::task::sample_pool_tables(tables, 128, seed)?;
    let mut cap = GIB4;
    let task = loop {
        let task = rule.apply(Task::new(specs.clone(), Devices::uniform(devices, cap)?)?);
        let bytes: Vec<u64> =
            task.tables.iter().map(|t| task.block_bytes(t, t.rows, t.dim)).collect::<Result<_, _>>()?;
        let total: u64 = bytes.iter().sum();
        let largest = bytes.iter().copied().max().unwrap_or(0);
        let need = ((total as f64 * 1.3 / devices as f64) as u64).max((largest as f64 * 1.1) as u64);
        let usable = task.usable_bytes().ok().and_then(|u| u.first().copied()).unwrap_or(0);
        if usable >= need {
            break task;
        }
        cap = cap
            .checked_add(GIB4)
            .filter(|&c| c <= 1 << 50)
            .ok_or_else(|| anyhow::anyhow!("scale point {tables}/{devices}: no cap up to 1 PiB holds the tables"))?;
    };
    Ok(SuiteTask {
        schema: planner_core::task::TASK_SCHEMA.into(),
        index,
        seed,
        protocol: Protocol::NeuroShard,
        pool_ids: Vec::new(),
        task,
    })
}

/// The scale points of `args`, after checking the scale flags (the bench calls this before any work,
/// so a bad flag is refused at once rather than after the earlier sections).
pub fn checked_points(args: &super::BenchArgs) -> Result<Vec<(usize, usize)>> {
    if !args.scale_cutoff_ms.is_finite() || args.scale_cutoff_ms <= 0.0 {
        bail!("--scale-cutoff-ms = {}: give a positive number of milliseconds", args.scale_cutoff_ms);
    }
    points(&args.scale_points)
}

/// The points of `--scale-points`: `TABLES/DEVICES` pairs, comma-separated.
fn points(list: &str) -> Result<Vec<(usize, usize)>> {
    list.split(',')
        .map(|p| {
            let p = p.trim();
            let parsed = p.split_once('/').and_then(|(t, d)| Some((t.trim().parse().ok()?, d.trim().parse().ok()?)));
            match parsed {
                Some((t, d)) if t > 0 && d > 0 => Ok((t, d)),
                _ => bail!("--scale-points: `{p}` is not TABLES/DEVICES with both at least 1 (e.g. 500/64)"),
            }
        })
        .collect()
}

/// Planning time and peak heap of every planner but `random` on `count` tasks per scale point; a
/// planner whose median passed `--scale-cutoff-ms` at one point is skipped at the later ones.
pub fn scale(b: &Bench, count: usize) -> Result<Vec<ScaleRow>> {
    let args = b.args;
    let mut points = checked_points(args)?;
    if args.quick {
        points.truncate(1);
    }
    let mut too_slow: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for (tables, devices) in points {
        let suite: Vec<SuiteTask> = (0..count)
            .map(|k| {
                let seed = planner_core::task::task_seed(args.seed ^ ((tables as u64) << 8), k);
                scale_task(tables, devices, k, seed, b.rule)
            })
            .collect::<Result<_>>()?;
        let cap = suite.first().map_or(0, |st| st.task.devices.mem_cap_bytes()[0]);
        for entry in b.entries.iter().filter(|e| e.name != "random") {
            let mut row = ScaleRow {
                tables,
                devices,
                mem_cap_bytes: cap,
                planner: entry.name.to_string(),
                plan_time_p50_ms: 0.0,
                plan_time_max_ms: 0.0,
                valid: 0,
                tasks: 0,
                mean_cost_valid_ms: None,
                peak_heap_max_bytes: 0,
                skipped: too_slow.contains(&entry.name),
                costs_ms: Vec::new(),
                first_vs_this: None,
            };
            if !row.skipped {
                let runs: Vec<Run> =
                    suite.iter().map(|st| b.run(entry, st, args.cost.definition)).collect::<Result<_>>()?;
                let times: Vec<f64> = runs.iter().map(|r| r.outcome.plan_time_ms).collect();
                let costs: Vec<f64> = runs.iter().filter_map(|r| r.outcome.cost_ms).collect();
                row.plan_time_p50_ms = percentile(&times, 50.0);
                row.plan_time_max_ms = times.iter().copied().fold(0.0, f64::max);
                row.valid = costs.len();
                row.tasks = runs.len();
                row.mean_cost_valid_ms = mean(&costs);
                row.peak_heap_max_bytes = runs.iter().map(|r| r.peak_heap_bytes).max().unwrap_or(0);
                row.costs_ms = runs.iter().map(|r| r.outcome.cost_ms).collect();
                // The point's first planner against this one, on the tasks both solved.
                let first = out.iter().find(|r: &&ScaleRow| r.tables == tables && r.devices == devices).unwrap_or(&row);
                let pairs: Vec<(f64, f64)> =
                    first.costs_ms.iter().zip(&row.costs_ms).filter_map(|(a, b)| Some(((*a)?, (*b)?))).collect();
                row.first_vs_this = planner_core::eval::paired_costs(&first.planner, &row.planner, &pairs);
                eprintln!(
                    "scale {tables}/{devices} {}: p50 {:.1} ms, peak heap {:.1} MiB",
                    entry.name,
                    row.plan_time_p50_ms,
                    row.peak_heap_max_bytes as f64 / f64::from(1u32 << 20)
                );
                if row.plan_time_p50_ms > args.scale_cutoff_ms {
                    too_slow.push(entry.name);
                }
            }
            out.push(row);
        }
    }
    Ok(out)
}

/// Least-squares slope of `ys` on `xs` (`None` with fewer than 3 points or no spread in `xs`).
fn slope(xs: &[f64], ys: &[f64]) -> Option<f64> {
    let n = xs.len();
    if n < 3 {
        return None;
    }
    let (mx, my) = (xs.iter().sum::<f64>() / n as f64, ys.iter().sum::<f64>() / n as f64);
    let sxx: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    let sxy: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// Each planner's growth exponents over the points it ran at (time and heap above zero).
pub fn fits(rows: &[ScaleRow]) -> Vec<ScaleFit> {
    let mut names: Vec<&str> = Vec::new();
    for r in rows {
        if !names.contains(&r.planner.as_str()) {
            names.push(&r.planner);
        }
    }
    names
        .into_iter()
        .map(|name| {
            let ran: Vec<&ScaleRow> = rows.iter().filter(|r| r.planner == name && !r.skipped && r.tasks > 0).collect();
            let fit = |value: &dyn Fn(&ScaleRow) -> f64| {
                let pts: Vec<(f64, f64)> = ran
                    .iter()
                    .map(|r| (r.tables as f64, value(r)))
                    .filter(|&(_, v)| v > 0.0)
                    .map(|(t, v)| (t.ln(), v.ln()))
                    .collect();
                let (xs, ys): (Vec<f64>, Vec<f64>) = pts.into_iter().unzip();
                slope(&xs, &ys)
            };
            ScaleFit {
                planner: name.to_string(),
                points: ran.len(),
                time_exponent: fit(&|r| r.plan_time_p50_ms),
                heap_exponent: fit(&|r| r.peak_heap_max_bytes as f64),
            }
        })
        .collect()
}
