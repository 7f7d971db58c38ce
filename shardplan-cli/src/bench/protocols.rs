//! The seed protocols (DreamShard's and AutoShard's, on unseen tables): every planner under the
//! four-phase cost, with AutoShard's degree of compute balance.

use anyhow::{Context, Result};
use planner_core::cost::CostDefinition;
use planner_core::task::{PoolHalf, Protocol, SuiteSpec};

use super::report::{ProtocolCell, ProtocolRow};
use super::{Bench, mean};
use crate::tasks_cmd::with_rule;

/// min / max over devices of the compute time (AutoShard's degree of balance; `None` with no compute).
fn balance(report: &planner_core::PlanReport) -> Option<f64> {
    let c: Vec<f64> = report.devices.iter().map(|d| d.compute_ms).collect();
    let max = c.iter().copied().fold(0.0, f64::max);
    (max > 0.0).then(|| c.iter().copied().fold(f64::INFINITY, f64::min) / max)
}

/// The seed protocols the learned policies were published on (SPEC section 7), every planner judged
/// by the cost model under DreamShard's four-phase definition, on tables of the pool's test half.
pub fn seed_protocols(b: &Bench, count: usize) -> Result<Vec<ProtocolCell>> {
    let cells = [
        ("DreamShard protocol, unseen tables", Protocol::DreamShard, 4, (10, 101)),
        ("DreamShard protocol, 8 devices (transfer)", Protocol::DreamShard, 8, (20, 201)),
        ("AutoShard protocol, 80 tables / 8 devices", Protocol::AutoShard, 8, (80, 81)),
    ];
    let mut out = Vec::new();
    for (name, protocol, devices, tables) in cells {
        let spec = SuiteSpec {
            protocol,
            devices,
            max_dim: 16,
            tables: Some(tables),
            pool_half: Some(PoolHalf::Test),
            count,
            seed: b.args.seed ^ 0x5eed_9707 ^ devices as u64,
        };
        let suite = with_rule(spec.tasks().with_context(|| format!("drawing the {name} suite"))?, b.rule);
        let (runs, summary) = b.run_suite(&suite, CostDefinition::FourPhase)?;
        let planners = summary
            .into_iter()
            .zip(&runs)
            .map(|(summary, r)| {
                let balances: Vec<f64> =
                    r.iter().filter_map(|x| x.solved.as_ref().and_then(|(_, report)| balance(report))).collect();
                ProtocolRow { summary, balance_pct: mean(&balances).map(|x| 100.0 * x) }
            })
            .collect();
        eprintln!("seed protocol cell `{name}`: done");
        out.push(ProtocolCell { name: name.into(), spec, planners });
    }
    Ok(out)
}
