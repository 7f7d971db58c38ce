//! Every planner under one memory rule: what a planner returns fits the usable bytes the report
//! shows (the random baseline excepted, whose report says when it does not), and byte counts never wrap.

use planner_core::cost::{AnalyticalModel, CostDefinition, evaluate};
use planner_core::planners::{PlanContext, REGISTRY};
use planner_core::table::{ElementType, NUM_BINS, OptimizerState, TableSpec};
use planner_core::task::{Devices, SuiteSpec, Task};
use planner_core::{Error, MemoryRule, Plan};

/// NeuroShard-protocol tasks (4 GiB caps) on 4 and 8 devices, at small and large dims.
fn protocol_tasks() -> Vec<(u64, Task)> {
    let mut out = Vec::new();
    for (devices, max_dim, seed) in [(4, 128, 1), (4, 32, 2), (8, 64, 3), (8, 128, 4)] {
        for st in SuiteSpec::neuroshard(devices, max_dim, 2, seed).tasks().unwrap() {
            out.push((st.seed, st.task));
        }
    }
    out
}

#[test]
fn every_planner_fits_the_torchrec_rule_or_says_why_not() {
    let model = AnalyticalModel::default();
    let (mut fitted, mut refused, mut random_over) = (0, 0, 0);
    for (seed, task) in protocol_tasks() {
        let task = task.with_memory(MemoryRule::torchrec());
        let usable = task.usable_bytes().unwrap();
        assert!(usable.iter().zip(task.devices.mem_cap_bytes()).all(|(u, c)| *u < c * 85 / 100));
        for entry in REGISTRY {
            let ctx = PlanContext::new(&model, seed);
            let plan = match entry.build().plan(&task, &ctx) {
                Ok(plan) => plan,
                Err(Error::NoFit { need_bytes, best_free_bytes, .. }) => {
                    assert!(need_bytes > best_free_bytes, "{}", entry.name);
                    refused += 1;
                    continue;
                }
                Err(Error::NoPlan { .. }) => {
                    refused += 1;
                    continue;
                }
                Err(e) => panic!("{}: {e}", entry.name),
            };
            let r = evaluate(&task, &plan, &model, CostDefinition::NeuroShard).unwrap();
            assert_eq!(r.memory_rule, task.memory);
            let mut over = Vec::new();
            for d in &r.devices {
                let m = &d.memory;
                assert_eq!(m.usable_bytes, usable[d.device], "{}", entry.name);
                assert_eq!(m.reserved_bytes + m.usable_bytes, d.mem_cap_bytes);
                assert_eq!(d.bytes, m.weights_bytes + m.optimizer_bytes + m.buffer_bytes);
                assert!(m.buffer_bytes > 0 || d.pieces.is_empty());
                if d.bytes > m.usable_bytes {
                    over.push(d.device);
                }
            }
            if entry.name == "random" {
                // It never checks memory, and says so when it overfills.
                assert_eq!(r.feasible, over.is_empty());
                assert_eq!(r.violations.len(), over.len(), "{:?}", r.violations);
                for (v, d) in r.violations.iter().zip(&over) {
                    assert!(v.starts_with(&format!("device {d}:")) && v.contains("usable"), "{v}");
                }
                random_over += usize::from(!over.is_empty());
            } else {
                assert!(r.feasible && over.is_empty(), "{}: {:?}", entry.name, r.violations);
                fitted += 1;
            }
        }
    }
    // The cases exist: most plans fit, some tasks are refused, and random overfills some.
    assert!(fitted >= 40 && refused >= 1 && random_over >= 1, "{fitted} fitted, {refused} refused, {random_over}");
}

#[test]
fn plans_made_under_the_weights_rule_overfill_under_torchrec() {
    // Why the rule must reach the planners: a search that fills devices by weights alone makes plans
    // that TorchRec's own estimate says run out of memory.
    let model = AnalyticalModel::default();
    let mut overfull = 0;
    for (seed, task) in protocol_tasks() {
        let entry = planner_core::planners::planner("neuroshard").unwrap();
        let Ok(plan) = entry.build().plan(&task, &PlanContext::new(&model, seed)) else { continue };
        let torchrec = task.clone().with_memory(MemoryRule::torchrec());
        let before = evaluate(&task, &plan, &model, CostDefinition::NeuroShard).unwrap();
        let after = evaluate(&torchrec, &plan, &model, CostDefinition::NeuroShard).unwrap();
        assert!(before.feasible);
        assert!(after.devices.iter().zip(&before.devices).all(|(a, b)| a.bytes > b.bytes));
        overfull += usize::from(!after.feasible);
    }
    assert!(overfull >= 2, "{overfull} weights-rule plans overfill under the torchrec rule");
}

#[test]
fn byte_counts_never_wrap() {
    // 100 of the largest tables (2^40 rows x 2^16 columns, fp32, Adam: 2^58 + 2^59 bytes each) on two
    // devices of u64::MAX bytes: about 8.3 times what fits. Each table is countable; their sums are not.
    let mut bins = [0.0; NUM_BINS];
    bins[0] = 1.0;
    let tables: Vec<TableSpec> = (0..100)
        .map(|i| {
            let name = format!("t{i}");
            TableSpec::new("t", name, 1 << 40, 1 << 16, 1.0, bins, ElementType::Fp32, OptimizerState::Adam).unwrap()
        })
        .collect();
    let model = AnalyticalModel::default();
    for rule in [MemoryRule::Weights, MemoryRule::torchrec()] {
        let task = Task::new(tables.clone(), Devices::uniform(2, u64::MAX).unwrap()).unwrap().with_memory(rule);
        let check = |what: &str, plan: &Plan| match evaluate(&task, plan, &model, CostDefinition::NeuroShard) {
            Ok(r) => assert!(!r.feasible, "{what} under {}: a wrapped count says it fits", rule.name()),
            Err(e) => assert!(matches!(e, Error::ByteOverflow { .. }), "{what}: {e}"),
        };
        // Two tables alone fit; 50 on each device overflow the count itself.
        let alternate: Vec<usize> = (0..100).map(|i| i % 2).collect();
        check("alternating", &Plan::unsplit(&task, &alternate).unwrap());
        match evaluate(&task, &Plan::unsplit(&task, &alternate).unwrap(), &model, CostDefinition::NeuroShard) {
            Err(Error::ByteOverflow { value_bytes, .. }) => assert!(value_bytes.parse::<u128>().unwrap() > 1 << 64),
            other => panic!("expected an overflow naming the sum, got {other:?}"),
        }
        for entry in REGISTRY {
            match entry.build().plan(&task, &PlanContext::new(&model, 0)) {
                Ok(plan) => check(entry.name, &plan),
                Err(Error::NoFit { need_bytes, best_free_bytes, .. }) => {
                    assert!(need_bytes > best_free_bytes, "{}", entry.name);
                }
                Err(Error::NoPlan { .. }) => {}
                Err(e) => panic!("{} under {}: {e}", entry.name, rule.name()),
            }
        }
    }
}

#[test]
fn a_task_larger_than_all_memory_is_refused_first_with_both_totals() {
    // 40 tables of 2^26 rows x 64 fp32 (16 GiB each, 640 GiB) on 4 devices of 4 GiB.
    let mut bins = [0.0; NUM_BINS];
    bins[0] = 1.0;
    let tables: Vec<TableSpec> = (0..40)
        .map(|i| {
            TableSpec::new("t", format!("t{i}"), 1 << 26, 64, 1.0, bins, ElementType::Fp32, OptimizerState::None)
                .unwrap()
        })
        .collect();
    let task = Task::new(tables.clone(), Devices::uniform(4, 4 << 30).unwrap()).unwrap();
    let e = planner_core::memory::check_capacity(&task).unwrap_err();
    assert!(matches!(e, Error::TaskTooLarge { tables: 40, devices: 4, .. }), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("640.00 GiB (687,194,767,360 bytes)") && text.contains("16.00 GiB usable in total"),
        "{text}"
    );
    assert!(text.contains("at least 160 devices of 4.00 GiB"), "{text}");
    // Under the torchrec rule the reservation is named.
    let e = planner_core::memory::check_capacity(&task.clone().with_memory(MemoryRule::torchrec())).unwrap_err();
    assert!(e.to_string().contains("reserved by the torchrec memory rule"), "{e}");
    // Enough devices: the check passes (a plan may still need splitting, which is the planners' job).
    let roomy = Task::new(tables, Devices::uniform(200, 4 << 30).unwrap()).unwrap();
    planner_core::memory::check_capacity(&roomy).unwrap();
}

#[test]
fn violations_name_bytes_in_units_with_the_exact_count() {
    let dm = planner_core::memory::DeviceMemory { cap_bytes: 4 << 30, reserved_bytes: 0, usable_bytes: 4 << 30 };
    let v = planner_core::memory::violation(2, &dm, 25_193_800_000, "weights").unwrap();
    assert_eq!(v, "device 2: 23.46 GiB (25,193,800,000 bytes) placed, 19.46 GiB over its cap of 4.00 GiB");
    let dm = planner_core::memory::DeviceMemory { cap_bytes: 4 << 30, reserved_bytes: 1 << 30, usable_bytes: 3 << 30 };
    let v = planner_core::memory::violation(0, &dm, 7 << 29, "torchrec").unwrap();
    assert!(v.contains("3.50 GiB (3,758,096,384 bytes) placed, 512.0 MiB over its 3.00 GiB usable"), "{v}");
    assert!(v.contains("1.00 GiB reserved by the torchrec memory rule"), "{v}");
    assert_eq!(planner_core::memory::violation(0, &dm, 3 << 30, "torchrec"), None);
}
