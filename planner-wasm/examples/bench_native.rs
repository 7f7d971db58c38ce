//! Native side of the browser-vs-native planning benchmark (`web-demo/tests/bench.mjs` runs it and the
//! same measurement in Chromium). It calls the binding's own [`planner_wasm::api::plan`], the code the
//! browser runs, compiled natively, with the same method: for each of the NeuroShard-protocol tasks
//! (4 devices, max dim 128, seed 0: the tasks of `shardplan eval --devices 4 --max-dim 128 --seed 0`),
//! one warm-up run, then the mean of enough repeated runs to last 20 ms. Prints JSON:
//! `{planner: [ms per task, ...]}`.
//!
//! Usage: `cargo run --profile wasm-release -p planner-wasm --example bench_native -- [count]` (default 100
//! tasks; the bundle's optimisation settings, compiled for the host).

use std::collections::BTreeMap;
use std::time::Instant;

use planner_wasm::api::{ModelOptions, PlanRequest, SampleRequest, plan, planners, sample_task};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let count: usize = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(100);
    let epoch = Instant::now();
    let now_ms = || epoch.elapsed().as_secs_f64() * 1e3;
    let mut out: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for index in 0..count {
        let task = sample_task(&SampleRequest {
            devices: 4,
            mem_cap_bytes: None,
            max_dim: Some(128),
            tables: None,
            seed: 0,
            index,
        })?;
        for p in planners() {
            let mut req = PlanRequest {
                task: task.clone(),
                planner: p.name.into(),
                seed: 0,
                model: ModelOptions::default(),
                repeat: 1,
                // The browser's default, as the worker sends no rule.
                memory: planner_core::MemoryRule::torchrec(),
                budget_ms: None,
                topology: None,
                tiers: "auto".into(),
            };
            let times = out.entry(p.name).or_default();
            let once = match plan(&req, now_ms) {
                Ok(o) => o.planning_ms,
                Err(_) => continue, // no valid plan on this task: no time recorded (the browser side skips it too)
            };
            if once >= 50.0 {
                times.push(once);
                continue;
            }
            req.repeat = 10;
            loop {
                let ms = plan(&req, now_ms)?.planning_ms;
                if ms * f64::from(req.repeat) >= 20.0 || req.repeat >= 10_000 {
                    times.push(ms);
                    break;
                }
                req.repeat = (req.repeat * 10).min(10_000);
            }
        }
    }
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}
