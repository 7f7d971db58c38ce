//! The `dreamshard` planner: the embedded policy loads, never chooses a device a table does not fit
//! on, is deterministic, and plans table and device counts it was not trained on.

use planner_core::cost::{CostDefinition, evaluate, profiles};
use planner_core::planners::dreamshard::{DreamShard, DreamShardNets};
use planner_core::planners::{PlanContext, Planner};
use planner_core::policy::{PolicyAlgorithm, embedded};
use planner_core::task::{Devices, PoolHalf, Protocol, SuiteSpec, Task};
use planner_core::{Error, Plan};

fn suite(devices: usize, tables: (usize, usize), count: usize, seed: u64) -> Vec<Task> {
    let spec = SuiteSpec {
        protocol: Protocol::DreamShard,
        devices,
        max_dim: 16,
        tables: Some(tables),
        pool_half: Some(PoolHalf::Test),
        count,
        seed,
    };
    spec.tasks().unwrap().into_iter().map(|s| s.task).collect()
}

fn plan(task: &Task) -> Result<Plan, Error> {
    let model = profiles::load_with_comm_fallback("h100").unwrap();
    DreamShard::default().plan(task, &PlanContext::new(&model, 0))
}

#[test]
fn the_embedded_policy_is_a_dreamshard_policy_with_provenance() {
    let p = embedded(PolicyAlgorithm::DreamShard).expect("a DreamShard policy is embedded").load().unwrap();
    assert!(p.card.training.real_evaluations > 0);
    assert!(p.card.training.wall_s > 0.0);
    assert!(DreamShardNets::from_policy(&p).is_ok());
}

#[test]
fn plans_unseen_tables_and_other_table_and_device_counts_within_memory() {
    let model = profiles::load_with_comm_fallback("h100").unwrap();
    for (devices, tables) in [(4, (10, 101)), (8, (100, 201)), (2, (5, 20))] {
        for task in suite(devices, tables, 4, 7) {
            let p = plan(&task).unwrap();
            let r = evaluate(&task, &p, &model, CostDefinition::FourPhase).unwrap();
            assert!(r.feasible, "{devices} devices: {:?}", r.violations);
            assert_eq!(r.devices.len(), devices);
        }
    }
}

#[test]
fn never_chooses_a_device_the_table_does_not_fit_on() {
    // Shrink the caps until memory binds: only a plan that respects every cap may come back.
    let model = profiles::load_with_comm_fallback("h100").unwrap();
    let mut bound = 0;
    for mut task in suite(4, (20, 60), 6, 11) {
        let total = task.total_bytes();
        let largest = task.tables.iter().map(planner_core::TableSpec::size_bytes).max().unwrap();
        let cap = (total / 4 + total / 40).max(largest);
        task.devices = Devices::new(vec![cap, cap, cap / 2 + largest, cap]).unwrap();
        match plan(&task) {
            Ok(p) => {
                let r = evaluate(&task, &p, &model, CostDefinition::FourPhase).unwrap();
                assert!(r.feasible, "{:?}", r.violations);
                bound += usize::from(r.devices.iter().any(|d| d.bytes * 10 > d.mem_cap_bytes * 9));
            }
            Err(Error::NoFit { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert!(bound > 0, "no task had a device near its cap: the test did not test memory");
}

#[test]
fn a_table_that_fits_nowhere_is_refused_by_name() {
    let mut task = suite(4, (10, 20), 1, 3).remove(0);
    let largest = task.tables.iter().map(planner_core::TableSpec::size_bytes).max().unwrap();
    task.devices = Devices::uniform(4, largest - 1).unwrap();
    match plan(&task) {
        Err(Error::NoFit { table, need_bytes, .. }) => {
            assert_eq!(need_bytes, largest);
            assert!(task.tables.iter().any(|t| t.name == table));
        }
        other => panic!("expected NoFit, got {other:?}"),
    }
}

#[test]
fn inference_is_deterministic() {
    for task in suite(4, (10, 101), 5, 5) {
        let a = plan(&task).unwrap();
        let b = plan(&task).unwrap();
        assert_eq!(a, b);
    }
}

#[test]
fn a_chooser_that_breaks_memory_is_an_error_not_a_plan() {
    let nets = DreamShardNets::embedded().unwrap();
    let mut task = suite(4, (30, 40), 1, 9).remove(0);
    let largest = task.tables.iter().map(planner_core::TableSpec::size_bytes).max().unwrap();
    task.devices = Devices::new(vec![largest, u64::MAX / 8, u64::MAX / 8, u64::MAX / 8]).unwrap();
    // Always device 0: the second table placed there cannot fit.
    let r = nets.rollout(&task, |_, _| 0);
    assert!(matches!(r, Err(Error::InvalidPlan(_))), "{r:?}");
}
