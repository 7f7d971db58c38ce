//! The AutoShard planner with its embedded policy: legality under tight memory, `NoFit`, determinism,
//! and the native LSTM cell against tract running the exported graph.

use planner_core::cost::{AnalyticalModel, CostDefinition, evaluate};
use planner_core::planners::autoshard::{AutoShard, HIDDEN, LstmCell, STEP_INPUT_LEN, lstm_role};
use planner_core::planners::{PlanContext, Planner};
use planner_core::policy::{PolicyAlgorithm, embedded};
use planner_core::task::{Devices, PoolHalf, Protocol, SuiteSpec, Task};
use planner_core::{Error, Plan};
use tract_onnx::prelude::{Framework, InferenceModelExt, IntoRunnable, Tensor, tvec};

fn autoshard_task(tables: usize, seed: u64) -> Task {
    let suite = SuiteSpec {
        protocol: Protocol::AutoShard,
        devices: 0,
        max_dim: 32,
        tables: Some((tables, tables + 1)),
        pool_half: Some(PoolHalf::Test),
        count: 1,
        seed,
    };
    suite.task(0).unwrap().task
}

fn plan(task: &Task) -> Result<Plan, Error> {
    AutoShard::default().plan(task, &PlanContext::new(&AnalyticalModel::default(), 0))
}

#[test]
fn autoshard_is_registered_and_plans_a_protocol_task_within_memory() {
    let entry = planner_core::planners::planner("autoshard").unwrap();
    assert!(!entry.is_seed_baseline);
    let task = autoshard_task(80, 1);
    let p = entry.build().plan(&task, &PlanContext::new(&AnalyticalModel::default(), 0)).unwrap();
    assert_eq!(p.split_tables(), 0);
    let report = evaluate(&task, &p, &AnalyticalModel::default(), CostDefinition::NeuroShard).unwrap();
    assert!(report.feasible, "{:?}", report.violations);
}

#[test]
fn autoshard_never_chooses_a_device_the_table_does_not_fit_on() {
    // Caps where only a few devices can hold anything: the policy's preferred device is often illegal,
    // so the mask (not the policy) must keep every table on a device with room.
    for seed in 0..4u64 {
        let mut task = autoshard_task(40, seed);
        let d = task.devices.count();
        let total = task.total_bytes();
        let largest = task.tables.iter().map(planner_core::TableSpec::size_bytes).max().unwrap();
        // Two devices share the tables with 10% slack; the others cannot hold the smallest table.
        let smallest = task.tables.iter().map(planner_core::TableSpec::size_bytes).min().unwrap();
        let roomy = (total / 2 + total / 10).max(largest);
        let caps: Vec<u64> =
            (0..d).map(|i| if i % 2 == 1 && i < 4 { roomy } else { smallest.saturating_sub(1).max(1) }).collect();
        task.devices = Devices::new(caps.clone()).unwrap();
        match plan(&task) {
            Ok(p) => {
                let mut used = vec![0u64; d];
                for piece in p.pieces() {
                    used[piece.device] += task.tables[piece.table_id].size_bytes();
                }
                for (dev, (u, c)) in used.iter().zip(&caps).enumerate() {
                    assert!(u <= c, "seed {seed}: device {dev} holds {u} bytes, cap {c}");
                }
                assert!(p.pieces().iter().all(|x| x.device == 1 || x.device == 3), "seed {seed}");
            }
            // A greedy order may still strand a table when two devices are this full; it must say so.
            Err(Error::NoFit { need_bytes, best_free_bytes, .. }) => assert!(need_bytes > best_free_bytes),
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
}

#[test]
fn autoshard_reports_nofit_when_a_table_fits_nowhere() {
    let mut task = autoshard_task(20, 2);
    let smallest = task.tables.iter().map(planner_core::TableSpec::size_bytes).min().unwrap();
    task.devices = Devices::uniform(task.devices.count(), smallest - 1).unwrap();
    match plan(&task) {
        Err(Error::NoFit { table, need_bytes, best_free_bytes }) => {
            assert!(task.tables.iter().any(|t| t.name == table));
            assert!(need_bytes > best_free_bytes);
            assert_eq!(best_free_bytes, smallest - 1, "nothing was placed yet");
        }
        other => panic!("expected NoFit, got {other:?}"),
    }
}

#[test]
fn autoshard_inference_is_deterministic() {
    let task = autoshard_task(60, 5);
    let a = plan(&task).unwrap();
    let b = plan(&task).unwrap();
    let planner = AutoShard::default();
    let analytical = AnalyticalModel::default();
    let ctx = PlanContext::new(&analytical, 9);
    let c = planner.plan(&task, &ctx).unwrap();
    let d = planner.plan(&task, &ctx).unwrap();
    assert_eq!(a, b);
    assert_eq!(a, c, "the seed and the caller's cost model do not change a greedy plan");
    assert_eq!(c, d);
}

#[test]
fn native_lstm_cell_matches_tract_on_the_embedded_graphs() {
    let policy = embedded(PolicyAlgorithm::AutoShard).unwrap().load().unwrap();
    for layer in 0..2 {
        let bytes = policy.graph(&lstm_role(layer)).unwrap();
        let cell = LstmCell::from_onnx(bytes).unwrap();
        let width = if layer == 0 { STEP_INPUT_LEN } else { HIDDEN };
        assert_eq!(cell.inputs, width);
        let wave = |n: usize, k: f32| -> Vec<f32> { (0..n).map(|i| (i as f32 * k).sin() * 1.5).collect() };
        let (x, h, c) = (wave(width, 0.7), wave(HIDDEN, 1.3), wave(HIDDEN, 0.31));
        let runnable = tract_onnx::onnx()
            .model_for_read(&mut &bytes[..])
            .and_then(InferenceModelExt::into_optimized)
            .and_then(IntoRunnable::into_runnable)
            .unwrap();
        let t = |v: &[f32], w: usize| Tensor::from_shape(&[1, w], v).unwrap().into();
        let out = runnable.run(tvec!(t(&x, width), t(&h, HIDDEN), t(&c, HIDDEN))).unwrap();
        let f64s = |v: &[f32]| v.iter().map(|&a| f64::from(a)).collect::<Vec<_>>();
        let (h2, c2) = cell.step(&f64s(&x), &f64s(&h), &f64s(&c));
        for (got, tract) in [(h2, &out[0]), (c2, &out[1])] {
            let tract: Vec<f32> = tract.to_plain_array_view::<f32>().unwrap().iter().copied().collect();
            assert_eq!(tract.len(), HIDDEN);
            for (a, b) in got.iter().zip(&tract) {
                assert!((a - f64::from(*b)).abs() < 1e-5, "layer {layer}: native {a} vs tract {b}");
            }
        }
    }
}
