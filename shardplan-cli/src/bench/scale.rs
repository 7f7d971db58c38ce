//! Planning time at scale: 100 tables on 8 devices, 200 on 16 and 500 on 64 (`--quick`: the first),
//! on caps that hold the tables.

use anyhow::Result;
use planner_core::eval::percentile;
use planner_core::task::{Protocol, SuiteTask};
use planner_core::{Devices, TableSpec, Task};

use super::report::ScaleRow;
use super::{Bench, mean};
use crate::run_one::Run;
use crate::tasks_cmd::Rules;

/// A scale task: `tables` pool tables at dims up to 128 on `devices` devices whose equal caps are the
/// smallest multiple of 4 GiB holding 1.3× an even share of the bytes and 1.1× the largest table (the
/// NeuroShard protocol's 4 GiB caps cannot hold 100 such tables on 8 devices).
fn scale_task(tables: usize, devices: usize, index: usize, seed: u64, rule: Rules) -> Result<SuiteTask> {
    const GIB4: u64 = 4 << 30;
    let specs = planner_core::task::sample_pool_tables(tables, 128, seed)?;
    let total: u64 = specs.iter().map(TableSpec::size_bytes).sum();
    let largest = specs.iter().map(TableSpec::size_bytes).max().unwrap_or(0);
    let need = ((total as f64 * 1.3 / devices as f64) as u64).max((largest as f64 * 1.1) as u64);
    let cap = need.div_ceil(GIB4).max(1) * GIB4;
    let task = rule.apply(Task::new(specs, Devices::uniform(devices, cap)?)?);
    Ok(SuiteTask {
        schema: planner_core::task::TASK_SCHEMA.into(),
        index,
        seed,
        protocol: Protocol::NeuroShard,
        pool_ids: Vec::new(),
        task,
    })
}

/// Planning time of every planner but `random` on `count` tasks per scale point.
pub fn scale(b: &Bench, count: usize) -> Result<Vec<ScaleRow>> {
    let args = b.args;
    let points: &[(usize, usize)] = if args.quick { &[(100, 8)] } else { &[(100, 8), (200, 16), (500, 64)] };
    let mut out = Vec::new();
    for &(tables, devices) in points {
        let suite: Vec<SuiteTask> = (0..count)
            .map(|k| {
                let seed = planner_core::task::task_seed(args.seed ^ ((tables as u64) << 8), k);
                scale_task(tables, devices, k, seed, b.rule)
            })
            .collect::<Result<_>>()?;
        let cap = suite.first().map_or(0, |st| st.task.devices.mem_cap_bytes()[0]);
        for entry in b.entries.iter().filter(|e| e.name != "random") {
            let runs: Vec<Run> =
                suite.iter().map(|st| b.run(entry, st, args.cost.definition)).collect::<Result<_>>()?;
            let times: Vec<f64> = runs.iter().map(|r| r.outcome.plan_time_ms).collect();
            let costs: Vec<f64> = runs.iter().filter_map(|r| r.outcome.cost_ms).collect();
            eprintln!("scale {tables}/{devices} {}: p50 {:.1} ms", entry.name, percentile(&times, 50.0));
            out.push(ScaleRow {
                tables,
                devices,
                mem_cap_bytes: cap,
                planner: entry.name.to_string(),
                plan_time_p50_ms: percentile(&times, 50.0),
                plan_time_max_ms: times.iter().copied().fold(0.0, f64::max),
                valid: costs.len(),
                tasks: runs.len(),
                mean_cost_valid_ms: mean(&costs),
            });
        }
    }
    Ok(out)
}
