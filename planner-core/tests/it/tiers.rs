//! Memory tiers: tables in host DRAM behind an HBM cache, what they take and cost, and the choice of
//! tiers when the tables do not fit in HBM.

use planner_core::cost::{AnalyticalModel, CostDefinition, CostModel, HardwareProfile, PieceRef, evaluate};
use planner_core::memory::{MemoryRule, check_capacity};
use planner_core::planners::torchrec::{TorchRecConfig, price_plan};
use planner_core::planners::{PlanContext, REGISTRY, plan_tiered, planner};
use planner_core::task::{Devices, Task, sample_pool_tables};
use planner_core::tier::{TierMode, assign, hit_rate, miss_ms};
use planner_core::topology::Topology;
use planner_core::{Error, Piece, Plan};

use super::table;

const GIB: u64 = 1 << 30;

/// 48 pool tables (dims up to 128) on 4 devices of 2 GiB: about 2.3× the HBM.
fn too_big() -> Task {
    let tables = sample_pool_tables(48, 128, 11).unwrap();
    Task::new(tables, Devices::uniform(4, 2 * GIB).unwrap()).unwrap().with_memory(MemoryRule::torchrec())
}

#[test]
fn every_planner_plans_a_task_too_big_for_hbm_and_the_plan_fits_both_memories() {
    let task = too_big();
    let hbm: u64 = task.tables.iter().map(planner_core::TableSpec::size_bytes).sum();
    assert!(hbm > 2 * 4 * 2 * GIB, "the task is {hbm} bytes");
    assert!(matches!(check_capacity(&task), Err(Error::TaskTooLarge { .. })));
    let model = AnalyticalModel::new(HardwareProfile::builtin("h100").unwrap(), 65_536).unwrap();
    let ctx = PlanContext::new(&model, 0);
    // `random` places at random and may overfill a device (it is the floor, not a planner to use).
    for entry in REGISTRY.iter().filter(|e| e.name != "random") {
        let p = entry.build();
        let (tiered, plan) =
            plan_tiered(p.as_ref(), &task, &ctx, TierMode::Auto).unwrap_or_else(|e| panic!("{}: {e}", entry.name));
        let report = evaluate(&tiered, &plan, &model, CostDefinition::NeuroShard).unwrap();
        assert!(report.feasible, "{}: {:?}", entry.name, report.violations);
        assert!(tiered.tables.iter().any(planner_core::TableSpec::in_host_memory), "{}", entry.name);
        assert!(report.devices.iter().any(|d| d.memory.host_bytes > 0));
        // Only the tiers changed.
        for (a, b) in tiered.tables.iter().zip(&task.tables) {
            assert_eq!((&a.name, a.rows, a.dim), (&b.name, b.rows, b.dim));
        }
    }
    // HBM only: refused, with the capacity message.
    let p = planner("size-lookup").unwrap().build();
    assert!(matches!(plan_tiered(p.as_ref(), &task, &ctx, TierMode::Hbm), Err(Error::TaskTooLarge { .. })));
}

#[test]
fn a_task_too_big_for_hbm_and_host_memory_gets_one_refusal_from_every_planner() {
    // 8 tables of 512 GB on 2 devices: more than the HBM and the host's DRAM together.
    let tables = (0..8).map(|i| table(&format!("g{i}"), 1_000_000_000, 128, 1.0)).collect();
    let task = Task::new(tables, Devices::uniform(2, 80 * GIB).unwrap()).unwrap().with_memory(MemoryRule::torchrec());
    let model = AnalyticalModel::new(HardwareProfile::builtin("h100").unwrap(), 65_536).unwrap();
    let ctx = PlanContext::new(&model, 0);
    for mode in [TierMode::Auto, TierMode::Hbm] {
        let refusals: std::collections::BTreeSet<String> = REGISTRY
            .iter()
            .map(|entry| match plan_tiered(entry.build().as_ref(), &task, &ctx, mode) {
                Err(e @ Error::TaskTooLarge { tables: 8, devices: 2, .. }) => e.to_string(),
                other => panic!("{} ({mode:?}): {other:?}", entry.name),
            })
            .collect();
        assert_eq!(refusals.len(), 1, "{mode:?}: {refusals:?}");
    }
}

#[test]
fn the_choice_frees_hbm_at_the_least_added_misses_and_keeps_what_the_user_set() {
    let task = too_big();
    let tiered = assign(&task, TierMode::Auto, 0.9, 65_536).unwrap();
    let usable: u64 = tiered.usable_bytes().unwrap().iter().sum();
    let need: u64 = tiered.tables.iter().map(|t| tiered.block_bytes(t, t.rows, t.dim).unwrap()).sum();
    assert!(need as f64 <= 0.9 * usable as f64, "{need} of {usable}");
    // A table that fits as it is is left alone; a table the user cached keeps its share.
    let small = Task::new(vec![table("a", 1000, 16, 1.0)], Devices::uniform(2, GIB).unwrap()).unwrap();
    assert_eq!(assign(&small, TierMode::Auto, 0.9, 65_536).unwrap(), small);
    let mut mine = task.clone();
    mine.tables[0] = mine.tables[0].clone().with_cache_load_factor(Some(0.75)).unwrap();
    let kept = assign(&mine, TierMode::Auto, 0.9, 65_536).unwrap();
    assert_eq!(kept.tables[0].cache_load_factor(), Some(0.75));
    // Hotter tables stay in HBM longer: among the cached, the mean hit rate at their share is high
    // where the bins are skewed; a cold table at 1% misses far more than a hot one.
    let flat = table("flat", 1_000_000, 64, 4.0).with_cache_load_factor(Some(0.01)).unwrap();
    assert!((hit_rate(&flat, 0.01) - 0.01).abs() < 1e-12);
}

#[test]
fn a_cached_piece_takes_a_share_of_hbm_and_its_table_in_host_memory() {
    let t = table("t", 1_000_000, 64, 2.0).with_cache_load_factor(Some(0.2)).unwrap();
    let whole = 1_000_000u64 * 64 * 4;
    // The seeds' rule: HBM holds the cached share; host memory the table.
    let w = MemoryRule::Weights.piece(&t, 1_000_000, 64, 4).unwrap();
    assert_eq!((w.weights_bytes, w.host_bytes), ((whole as f64 * 0.2).ceil() as u64, whole));
    // TorchRec's: round(table · clf) shared by the shard's share, the cache state rows · (4 + 16 · clf),
    // the buffers as in HBM.
    let r = MemoryRule::torchrec().piece(&t, 250_000, 64, 4).unwrap();
    assert_eq!(r.weights_bytes, ((whole as f64 * 0.2).round() / 4.0).ceil() as u64);
    assert_eq!(r.cache_state_bytes, (250_000.0f64 * (4.0 + 0.2 * 16.0)).ceil() as u64);
    assert_eq!(r.host_bytes, whole / 4);
    let hbm = MemoryRule::torchrec().piece(&table("t", 1_000_000, 64, 2.0), 250_000, 64, 4).unwrap();
    assert_eq!((r.input_bytes, r.output_bytes), (hbm.input_bytes, hbm.output_bytes));
}

#[test]
fn a_cached_piece_costs_its_hbm_cost_plus_its_misses_and_torchrec_prices_it_slower() {
    let hbm = table("t", 1_000_000, 64, 8.0);
    let cached = hbm.clone().with_cache_load_factor(Some(0.1)).unwrap();
    let model = AnalyticalModel::new(HardwareProfile::builtin("h100").unwrap(), 65_536).unwrap();
    let task = |t| Task::new(vec![t], Devices::uniform(2, 4 * GIB).unwrap()).unwrap();
    let plan = |task: &Task| Plan::new(task, vec![Piece::cols(0, 0, 64, 0)]).unwrap();
    let (a, b) = (task(hbm.clone()), task(cached.clone()));
    let ra = evaluate(&a, &plan(&a), &model, CostDefinition::NeuroShard).unwrap();
    let rb = evaluate(&b, &plan(&b), &model, CostDefinition::NeuroShard).unwrap();
    let miss = miss_ms(&PieceRef::whole(&cached, 64), 65_536, planner_core::tier::DEFAULT_HOST_LINK_BW);
    assert!(miss > 0.0);
    assert!((rb.devices[0].compute_ms - (ra.devices[0].compute_ms + miss)).abs() < 1e-9);
    let split = rb.devices[0].compute_split.unwrap();
    assert!((split.fwd_ms + split.bwd_ms - rb.devices[0].compute_ms).abs() < 1e-9);
    // A faster host link (the topology's) makes the misses cheaper.
    let fast = b
        .clone()
        .with_topology(Some(Topology {
            host_link_bw_bytes_per_s: Some(1e12),
            ..Topology::new(1, 2, None, None).unwrap()
        }))
        .unwrap();
    let rf = evaluate(&fast, &plan(&fast), &model, CostDefinition::NeuroShard).unwrap();
    assert!(rf.devices[0].compute_ms < rb.devices[0].compute_ms);
    // TorchRec's estimator: fused_uvm_caching reads at (clf · HBM + (1 − clf) · host) / 10.
    let ta = price_plan(&a, &plan(&a), &TorchRecConfig::default()).unwrap().objective_ms;
    let tb = price_plan(&b, &plan(&b), &TorchRecConfig::default()).unwrap().objective_ms;
    assert!(tb > 5.0 * ta, "{tb} vs {ta}");
    let _ = model.name();
}

#[test]
fn host_memory_too_small_and_bad_shares_are_refused_by_name() {
    let t = table("t", 100_000_000, 128, 1.0).with_cache_load_factor(Some(0.01)).unwrap();
    let small = Topology { host_dram_bytes: Some(GIB), ..Topology::new(1, 2, None, None).unwrap() };
    let task = Task::new(vec![t], Devices::uniform(2, 8 * GIB).unwrap()).unwrap().with_topology(Some(small)).unwrap();
    let e = check_capacity(&task).unwrap_err().to_string();
    assert!(e.contains("host DRAM") && e.contains("1 host has 1.00 GiB"), "{e}");
    let e = serde_json::from_str::<planner_core::TableSpec>(
        r#"{"name": "x", "rows": 10, "dim": 4, "pooling_factor": 1, "cache_load_factor": 0}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("cache_load_factor") && e.contains("(0, 1]"), "{e}");
}
