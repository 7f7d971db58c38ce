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
/// planner whose median passed `--scale-cutoff-ms` at one point is skipped at the later points with at
/// least as many tables and devices.
pub fn scale(b: &Bench, count: usize) -> Result<Vec<ScaleRow>> {
    let args = b.args;
    let mut points = checked_points(args)?;
    if args.quick {
        points.truncate(1);
    }
    // (planner, tables, devices) where a planner's median passed the cutoff.
    let mut too_slow: Vec<(&str, usize, usize)> = Vec::new();
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
                skipped: too_slow.iter().any(|&(n, t, d)| n == entry.name && t <= tables && d <= devices),
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
                    too_slow.push((entry.name, tables, devices));
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

/// Least-squares exponents of `ys` on two regressors at once (`log v = a + b₁·x₁ + b₂·x₂`), each `None`
/// where the points cannot separate it: a regressor that does not vary has no exponent (the other is then
/// the one-regressor slope), and two that vary together (every point on one line, like the default
/// points) separate neither; two regressors need at least 4 points.
fn slopes2(x1: &[f64], x2: &[f64], ys: &[f64]) -> (Option<f64>, Option<f64>) {
    let n = ys.len();
    if n < 3 || x1.len() != n || x2.len() != n {
        return (None, None);
    }
    let m = |v: &[f64]| v.iter().sum::<f64>() / n as f64;
    let (m1, m2, my) = (m(x1), m(x2), m(ys));
    let s = |a: &[f64], ma: f64, b: &[f64], mb: f64| a.iter().zip(b).map(|(x, y)| (x - ma) * (y - mb)).sum::<f64>();
    let (s11, s22, s12) = (s(x1, m1, x1, m1), s(x2, m2, x2, m2), s(x1, m1, x2, m2));
    let (s1y, s2y) = (s(x1, m1, ys, my), s(x2, m2, ys, my));
    // "Does not vary": no spread beyond rounding of the logs of equal counts.
    let flat = |sxx: f64| sxx <= 1e-12;
    match (flat(s11), flat(s22)) {
        (true, true) => (None, None),
        (false, true) => (Some(s1y / s11), None),
        (true, false) => (None, Some(s2y / s22)),
        (false, false) => {
            let det = s11 * s22 - s12 * s12;
            if n < 4 || det <= 1e-9 * s11 * s22 {
                return (None, None);
            }
            (Some((s22 * s1y - s12 * s2y) / det), Some((s11 * s2y - s12 * s1y) / det))
        }
    }
}

/// Each planner's growth exponents over the points it ran at (time and heap above zero): along the
/// points (on log tables, whatever the devices do), and with tables and devices separated where the
/// points vary them apart.
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
            // (log tables, log devices, log value) of the points where the value is above zero.
            let logs = |value: &dyn Fn(&ScaleRow) -> f64| -> (Vec<f64>, Vec<f64>, Vec<f64>) {
                let mut out = (Vec::new(), Vec::new(), Vec::new());
                for r in &ran {
                    let v = value(r);
                    if v > 0.0 {
                        out.0.push((r.tables as f64).ln());
                        out.1.push((r.devices as f64).ln());
                        out.2.push(v.ln());
                    }
                }
                out
            };
            let (tt, td, ty) = logs(&|r| r.plan_time_p50_ms);
            let (ht, hd, hy) = logs(&|r| r.peak_heap_max_bytes as f64);
            let (time_tables, time_devices) = slopes2(&tt, &td, &ty);
            let (heap_tables, heap_devices) = slopes2(&ht, &hd, &hy);
            ScaleFit {
                planner: name.to_string(),
                points: ran.len(),
                time_exponent: slope(&tt, &ty),
                heap_exponent: slope(&ht, &hy),
                time_exponent_tables: time_tables,
                time_exponent_devices: time_devices,
                heap_exponent_tables: heap_tables,
                heap_exponent_devices: heap_devices,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{slope, slopes2};

    fn ln(v: &[f64]) -> Vec<f64> {
        v.iter().map(|x| x.ln()).collect()
    }

    #[test]
    fn two_exponents_are_separated_where_the_points_vary_tables_and_devices_apart() {
        // v = 3 · t^1.2 · d^0.5 on a diagonal, a row at fixed tables and a column at fixed devices.
        let pts = [(100.0, 8.0), (200.0, 16.0), (500.0, 64.0), (500.0, 8.0), (500.0, 256.0), (2000.0, 64.0)];
        let (t, d): (Vec<f64>, Vec<f64>) = pts.iter().copied().unzip();
        let v: Vec<f64> = pts.iter().map(|(t, d)| 3.0 * t.powf(1.2) * d.powf(0.5)).collect();
        let (bt, bd) = slopes2(&ln(&t), &ln(&d), &ln(&v));
        assert!((bt.unwrap() - 1.2).abs() < 1e-9 && (bd.unwrap() - 0.5).abs() < 1e-9, "{bt:?} {bd:?}");
    }

    #[test]
    fn an_axis_that_does_not_vary_or_varies_with_the_other_has_no_exponent_of_its_own() {
        let v = |t: &[f64], d: &[f64]| -> Vec<f64> { t.iter().zip(d).map(|(t, d)| t.powf(1.5) * d).collect() };
        // Devices fixed: the tables exponent alone.
        let (t, d) = (vec![100.0, 200.0, 400.0], vec![64.0; 3]);
        assert_eq!(slopes2(&ln(&t), &ln(&d), &ln(&v(&t, &d))).1, None);
        assert!((slopes2(&ln(&t), &ln(&d), &ln(&v(&t, &d))).0.unwrap() - 1.5).abs() < 1e-9);
        // Tables fixed: the devices exponent alone.
        let (t, d) = (vec![500.0; 3], vec![8.0, 64.0, 256.0]);
        let (bt, bd) = slopes2(&ln(&t), &ln(&d), &ln(&v(&t, &d)));
        assert!(bt.is_none() && (bd.unwrap() - 1.0).abs() < 1e-9);
        // Devices proportional to tables (the default points' shape): neither separates, the joint slope
        // is their sum.
        let (t, d) = (vec![100.0, 200.0, 400.0, 800.0], vec![8.0, 16.0, 32.0, 64.0]);
        assert_eq!(slopes2(&ln(&t), &ln(&d), &ln(&v(&t, &d))), (None, None));
        assert!((slope(&ln(&t), &ln(&v(&t, &d))).unwrap() - 2.5).abs() < 1e-9);
        // Too few points.
        assert_eq!(slopes2(&ln(&[1.0, 2.0]), &ln(&[1.0, 3.0]), &[0.0, 1.0]), (None, None));
    }
}
