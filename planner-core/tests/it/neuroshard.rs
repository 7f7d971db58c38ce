//! NeuroShard, refinement, the native head, the lower bound and the exact search. Tasks are few and
//! small where a test is about validity (debug builds are slow); the paper's hyper-parameters run in
//! `paper_defaults_never_lose_to_the_unsplit_grid_search` and `the_cache_changes_speed_not_plans`.

use planner_core::bound::{ExactConfig, exact, lower_bound};
use planner_core::cost::{AnalyticalModel, CostDefinition, CostModel, PieceRef, evaluate, profiles};
use planner_core::planners::neuroshard::{NeuroShard, NeuroShardConfig};
use planner_core::planners::refine::{RefineConfig, refine};
use planner_core::planners::{PlanContext, Planner, Progress, REGISTRY};
use planner_core::task::{Devices, SuiteSpec, Task};
use planner_core::{Error, Plan};
use rand::{RngExt, SeedableRng, rngs::ChaCha8Rng};

use super::{check_plan, table};

fn small() -> NeuroShardConfig {
    NeuroShardConfig { candidates: 3, beam_width: 2, max_rounds: 3, grid_points: 4, ..NeuroShardConfig::default() }
}

fn cost(task: &Task, plan: &Plan, model: &dyn CostModel) -> f64 {
    evaluate(task, plan, model, CostDefinition::NeuroShard).unwrap().cost_ms
}

fn h100() -> Box<dyn CostModel> {
    let preset = profiles::find("h100").unwrap().comm_fallback_hw;
    let fallback = AnalyticalModel::new(planner_core::HardwareProfile::builtin(preset).unwrap(), 65_536).unwrap();
    Box::new(profiles::load("h100").unwrap().with_comm_fallback(fallback))
}

/// Protocol tasks at both device counts, max dim 128 (the setting with splits).
fn tasks() -> Vec<Task> {
    let mut out: Vec<Task> = (0..3).map(|i| SuiteSpec::neuroshard(4, 128, 3, 11).task(i).unwrap().task).collect();
    out.push(SuiteSpec::neuroshard(8, 64, 1, 12).task(0).unwrap().task);
    out
}

#[test]
fn neuroshard_returns_valid_plans_under_both_models() {
    let models: Vec<Box<dyn CostModel>> = vec![Box::new(AnalyticalModel::default()), h100()];
    for model in &models {
        for task in tasks() {
            let plan = NeuroShard::new(small()).plan(&task, &PlanContext::new(model.as_ref(), 0)).unwrap();
            check_plan(&task, &plan, model.as_ref(), false);
        }
    }
}

/// The analytical model seen only through the basic `CostModel` methods: no incremental compute, so
/// the searches price every set with `compute_ms` (the path any third-party model takes).
struct Opaque(AnalyticalModel);

impl CostModel for Opaque {
    fn name(&self) -> String {
        format!("opaque {}", self.0.name())
    }
    fn compute_ms(&self, set: &[PieceRef<'_>]) -> planner_core::Result<f64> {
        self.0.compute_ms(set)
    }
    fn bw_comm_ms(&self, dims: &[f64]) -> planner_core::Result<Vec<f64>> {
        self.0.bw_comm_ms(dims)
    }
    fn fw_comm_ms(&self, dims: &[f64], delays_ms: &[f64]) -> planner_core::Result<Vec<f64>> {
        self.0.fw_comm_ms(dims, delays_ms)
    }
}

#[test]
fn a_model_without_incremental_compute_gets_the_same_search() {
    let fast = AnalyticalModel::default();
    let opaque = Opaque(AnalyticalModel::default());
    assert!(opaque.incremental().is_none() && fast.incremental().is_some());
    for task in tasks().into_iter().take(2) {
        let a = NeuroShard::new(small()).plan(&task, &PlanContext::new(&fast, 0)).unwrap();
        let (b, sb) = NeuroShard::new(small()).plan_with_stats(&task, &PlanContext::new(&opaque, 0)).unwrap();
        check_plan(&task, &b, &opaque, false);
        // Fixed-point sums against f64 sums can only break exact ties differently.
        let (ca, cb) = (cost(&task, &a, &fast), cost(&task, &b, &fast));
        assert!((ca - cb).abs() <= 1e-6 * ca, "{ca} vs {cb}");
        assert!(sb.set_cache_hits > 0, "the cache serves opaque models: {sb:?}");
    }
}

#[test]
fn paper_defaults_never_lose_to_the_unsplit_grid_search() {
    // The beam starts from the unsplit state and keeps the best plan seen, so more rounds never hurt.
    let model = h100();
    let task = SuiteSpec::neuroshard(4, 128, 1, 3).task(0).unwrap().task;
    let ctx = PlanContext::new(model.as_ref(), 0);
    let (full, stats) = NeuroShard::default().plan_with_stats(&task, &ctx).unwrap();
    let unsplit =
        NeuroShard::new(NeuroShardConfig { max_rounds: 0, ..NeuroShardConfig::default() }).plan(&task, &ctx).unwrap();
    check_plan(&task, &full, model.as_ref(), false);
    assert_eq!(unsplit.split_tables(), 0);
    assert!(cost(&task, &full, model.as_ref()) <= cost(&task, &unsplit, model.as_ref()) + 1e-9);
    assert!(stats.rounds > 0 && stats.grid_searches > 1, "{stats:?}");
    // An incremental model's set compute is a head call, cheaper than a cache lookup: no cache.
    assert_eq!(stats.set_cache_hits, 0, "{stats:?}");
}

#[test]
fn the_cache_changes_speed_not_plans() {
    let task = SuiteSpec::neuroshard(4, 128, 1, 21).task(0).unwrap().task;
    let off_cfg = NeuroShardConfig { set_cache: false, ..NeuroShardConfig::default() };
    // A model that prices a set from its pieces is cached; the cache serves repeats and changes nothing.
    let opaque = Opaque(AnalyticalModel::default());
    let ctx = PlanContext::new(&opaque, 0);
    let (on, s_on) = NeuroShard::default().plan_with_stats(&task, &ctx).unwrap();
    let (off, s_off) = NeuroShard::new(off_cfg).plan_with_stats(&task, &ctx).unwrap();
    assert_eq!(on, off);
    assert!(s_on.set_cache_hits > 0 && s_off.set_cache_hits == 0);
    assert!(s_off.set_cache_misses > s_on.set_cache_misses);
    // Incremental models (the analytical model, the learned profile's native head) price a set with one
    // head call over a vector sum, cheaper than hashing the set: no cache, whatever the setting.
    let models: Vec<Box<dyn CostModel>> = vec![Box::new(AnalyticalModel::default()), h100()];
    for model in &models {
        let ctx = PlanContext::new(model.as_ref(), 0);
        let (on, s_on) = NeuroShard::default().plan_with_stats(&task, &ctx).unwrap();
        let (off, s_off) = NeuroShard::new(off_cfg).plan_with_stats(&task, &ctx).unwrap();
        assert_eq!(on, off, "{}", model.name());
        assert_eq!((s_on.set_cache_hits, s_off.set_cache_hits), (0, 0), "{}", model.name());
        assert_eq!(s_on.set_cache_misses, s_off.set_cache_misses, "{}", model.name());
    }
}

/// Four 1 GiB devices; `big` holds 1.5 GiB (dim 128), so it must be split to fit anywhere.
fn oversized_task(big_rows: u64) -> Task {
    let mut tables = vec![table("big", big_rows, 128, 20.0)];
    for i in 0..6 {
        tables.push(table(&format!("s{i}"), 100_000 + 10_000 * i, 32, 5.0 + i as f64));
    }
    Task::new(tables, Devices::uniform(4, 1 << 30).unwrap()).unwrap()
}

#[test]
fn a_table_larger_than_any_device_gets_split() {
    let task = oversized_task(3 << 20); // 3·2^20 rows · 128 · 4 B = 1.5 GiB
    let model = AnalyticalModel::default();
    let ctx = PlanContext::new(&model, 0);
    // The seed baselines cannot place it.
    let greedy = planner_core::planners::planner("size").unwrap().build();
    assert!(matches!(greedy.plan(&task, &ctx), Err(Error::NoFit { .. })));
    for config in [small(), NeuroShardConfig::default()] {
        let plan = NeuroShard::new(config).plan(&task, &ctx).unwrap();
        check_plan(&task, &plan, &model, false);
        assert!(plan.pieces().iter().filter(|p| p.table_id == 0).count() >= 2);
    }
    // Refinement keeps it fitting (it may not merge the halves back).
    let plan = NeuroShard::new(small()).plan(&task, &ctx).unwrap();
    let (refined, _) = refine(&task, &plan, &ctx, &RefineConfig::default()).unwrap();
    check_plan(&task, &refined, &model, false);
}

#[test]
fn no_split_makes_an_impossible_table_fit() {
    // 6 GiB at dim 8: its smallest pieces (dim 4, 3 GiB) still exceed every 1 GiB device.
    let mut tables = vec![table("huge", 3 << 27, 8, 1.0)];
    tables.push(table("small", 1000, 8, 1.0));
    let task = Task::new(tables, Devices::uniform(8, 1 << 30).unwrap()).unwrap();
    let model = AnalyticalModel::default();
    let err = NeuroShard::default().plan(&task, &PlanContext::new(&model, 0));
    assert!(matches!(err, Err(Error::NoFit { ref table, .. }) if table == "huge"), "{err:?}");
}

#[test]
fn the_budget_and_the_callback_stop_the_search_with_a_plan() {
    let model = AnalyticalModel::default();
    let task = SuiteSpec::neuroshard(4, 128, 1, 5).task(0).unwrap().task;
    let stop = |p: Progress| p.step < 1;
    let ctx = PlanContext::new(&model, 0).with_progress(&stop);
    let (plan, stats) = NeuroShard::default().plan_with_stats(&task, &ctx).unwrap();
    check_plan(&task, &plan, &model, false);
    assert!(stats.stopped_early && stats.rounds == 1, "{stats:?}");
    // A clock that has always run out: only the unsplit grid search runs.
    let clock = std::cell::Cell::new(0.0);
    let tick = || {
        clock.set(clock.get() + 1000.0);
        clock.get()
    };
    let ctx = PlanContext::new(&model, 0).with_budget(&tick, 10.0);
    let (plan, stats) = NeuroShard::default().plan_with_stats(&task, &ctx).unwrap();
    check_plan(&task, &plan, &model, false);
    assert!(stats.stopped_early && stats.rounds == 0, "{stats:?}");
}

#[test]
fn a_refined_planner_shares_one_budget_with_its_inner_planner() {
    let model = AnalyticalModel::default();
    let task = SuiteSpec::neuroshard(4, 128, 1, 5).task(0).unwrap().task;
    let entry = planner_core::planners::planner("neuroshard+refine").unwrap();
    // Unbounded, the refinement finds improvements on this task ...
    let free = entry.build();
    let unbounded = free.plan(&task, &PlanContext::new(&model, 0)).unwrap();
    assert!(free.last_stats().unwrap().rounds > 0, "{:?}", free.last_stats());
    // ... but once the inner search has spent the budget, the refinement stops before its first pass.
    let clock = std::cell::Cell::new(0.0);
    let tick = || {
        clock.set(clock.get() + 1000.0);
        clock.get()
    };
    let bounded = entry.build();
    let plan = bounded.plan(&task, &PlanContext::new(&model, 0).with_budget(&tick, 10.0)).unwrap();
    let stats = bounded.last_stats().unwrap();
    assert!(stats.stopped_early && stats.rounds == 0, "{stats:?}");
    check_plan(&task, &plan, &model, false);
    assert!(cost(&task, &unbounded, &model) <= cost(&task, &plan, &model) + 1e-9);
}

#[test]
fn native_head_equals_tract() {
    let model = profiles::load("h100").unwrap();
    let native = model.native_head().expect("the h100 head is a dense chain");
    let head = profiles::find("h100").unwrap().files.iter().find(|(f, _)| *f == "compute_head.onnx").unwrap().1;
    let via_tract = |rows: &[[f32; 32]]| -> Vec<f64> {
        let data: Vec<f32> = rows.iter().flatten().copied().collect();
        super::native_graphs::tract_rows(head, rows.len(), 32, &data)
            .into_iter()
            .map(|v| f64::from(v).max(0.0))
            .collect()
    };
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let rows: Vec<[f32; 32]> = (0..256).map(|_| std::array::from_fn(|_| rng.random_range(-4.0f32..4.0))).collect();
    let tract = via_tract(&rows);
    for (x, t) in rows.iter().zip(&tract) {
        let xs: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
        let n = native.forward(&xs)[0].max(0.0);
        // tract sums in f32, the native head in f64: agreement to 1e-5 relative, or 1e-6 ms near zero.
        assert!((n - t).abs() <= 1e-5 * t.abs() + 1e-6, "native {n} vs tract {t}");
    }
    // The set costs a member reports (native head over fixed-point sums) equal tract's head over
    // the f32 sum of the encoder's embeddings.
    let task = SuiteSpec::neuroshard(4, 128, 1, 2).task(0).unwrap().task;
    let set: Vec<PieceRef<'_>> = task.tables.iter().take(9).map(|t| PieceRef::whole(t, t.dim)).collect();
    let emb = model.embed(&set).unwrap();
    let mut sum = [0.0f32; 32];
    for e in &emb {
        for (s, v) in sum.iter_mut().zip(e) {
            *s += v;
        }
    }
    let via_tract = via_tract(&[sum])[0];
    // The first member's cost (the model reports the ensemble's mean of its members).
    let reported = model.compute_members_ms(&set).unwrap()[0];
    assert!((reported - via_tract).abs() <= 1e-5 * via_tract.abs() + 1e-6, "{reported} vs {via_tract}");
    // The head graph run on f32 sums (`head_ms`) is the same chain.
    let head_ms = model.head_ms(&[sum]).unwrap()[0];
    assert!((head_ms - via_tract).abs() <= 1e-5 * via_tract.abs() + 1e-6, "{head_ms} vs {via_tract}");
}

#[test]
fn refine_never_worsens_and_keeps_plans_valid() {
    let models: Vec<Box<dyn CostModel>> = vec![Box::new(AnalyticalModel::default()), h100()];
    for model in &models {
        for (k, task) in tasks().into_iter().enumerate().take(3) {
            let ctx = PlanContext::new(model.as_ref(), k as u64);
            for name in ["random", "size-lookup", "dim"] {
                // A baseline that cannot place an oversized table has nothing to refine.
                let Ok(plan) = planner_core::planners::planner(name).unwrap().build().plan(&task, &ctx) else {
                    continue;
                };
                let before = evaluate(&task, &plan, model.as_ref(), CostDefinition::NeuroShard).unwrap();
                let config = RefineConfig { max_passes: 40, ..RefineConfig::default() };
                let (refined, _) = refine(&task, &plan, &ctx, &config).unwrap();
                let after = evaluate(&task, &refined, model.as_ref(), CostDefinition::NeuroShard).unwrap();
                check_plan(&task, &refined, model.as_ref(), !before.feasible);
                if before.feasible {
                    assert!(after.feasible);
                    assert!(after.cost_ms <= before.cost_ms + 1e-6, "{name}: {} -> {}", before.cost_ms, after.cost_ms);
                }
            }
        }
    }
}

/// One very hot table with a few small ones on 4 devices: under TorchRec's estimator a row-wise split
/// serves a quarter of the lookups per device, so refinement makes it row-wise in TorchRec's layout
/// (one range per device, TorchRec's split), and can make it whole again.
#[test]
fn refine_makes_a_hot_table_row_wise_in_torchrecs_layout() {
    // A model that charges each piece for the whole table.
    struct Whole(AnalyticalModel);
    impl CostModel for Whole {
        fn name(&self) -> String {
            "whole".into()
        }
        fn compute_ms(&self, set: &[PieceRef<'_>]) -> planner_core::Result<f64> {
            self.0.compute_ms(&set.iter().map(|p| PieceRef::whole(p.table, p.dim)).collect::<Vec<_>>())
        }
        fn bw_comm_ms(&self, dims: &[f64]) -> planner_core::Result<Vec<f64>> {
            self.0.bw_comm_ms(dims)
        }
        fn fw_comm_ms(&self, dims: &[f64], delays_ms: &[f64]) -> planner_core::Result<Vec<f64>> {
            self.0.fw_comm_ms(dims, delays_ms)
        }
    }
    let mut tables = vec![table("hot", 400_000, 64, 60.0)];
    tables.extend((0..3).map(|i| table(&format!("small{i}"), 1000, 16, 1.0)));
    let task = Task::new(tables, Devices::uniform(4, 1 << 30).unwrap()).unwrap();
    let model = AnalyticalModel::default();
    let ctx = PlanContext::new(&model, 0);
    let plan = Plan::unsplit(&task, &[0, 1, 2, 3]).unwrap();
    let (refined, _) = refine(&task, &plan, &ctx, &RefineConfig::default()).unwrap();
    check_plan(&task, &refined, &model, false);
    let rows: Vec<_> = refined.pieces().iter().filter(|p| p.table_id == 0).collect();
    assert_eq!(rows.len(), 4, "{:?}", refined.pieces());
    let split = planner_core::planners::torchrec::row_split(400_000, task.devices.mem_cap_bytes());
    for (d, p) in rows.iter().enumerate() {
        let r = p.rows.expect("a row range");
        assert_eq!((p.device, r.count), (d, split[d]));
    }
    assert!(cost(&task, &refined, &model) < cost(&task, &plan, &model));
    // From the row-wise plan, on a model that charges each piece for the whole table, refinement
    // makes the table whole again.
    let whole = Whole(AnalyticalModel::default());
    let (back, _) = refine(&task, &refined, &PlanContext::new(&whole, 0), &RefineConfig::default()).unwrap();
    assert!(back.pieces().iter().all(|p| p.rows.is_none()), "{:?}", back.pieces());
}

/// Every registry planner's plan on `task`, with the fast configs where the registry's would be slow.
fn all_plans(task: &Task, model: &dyn CostModel) -> Vec<(String, Plan)> {
    let ctx = PlanContext::new(model, 0);
    let mut out = Vec::new();
    for entry in REGISTRY {
        if entry.name.starts_with("neuroshard") {
            continue;
        }
        if let Ok(p) = entry.build().plan(task, &ctx) {
            out.push((entry.name.to_string(), p));
        }
    }
    out.push(("neuroshard(small)".into(), NeuroShard::new(small()).plan(task, &ctx).unwrap()));
    out
}

#[test]
fn no_plan_beats_the_lower_bound_under_the_analytical_model() {
    let model = AnalyticalModel::default();
    for task in tasks().into_iter().take(3) {
        let bound = lower_bound(&task, &model).unwrap();
        assert!(bound.proven && bound.work_bound_ms.is_some());
        for (name, plan) in all_plans(&task, &model) {
            let report = evaluate(&task, &plan, &model, CostDefinition::NeuroShard).unwrap();
            // Row-wise plans are outside the bounded space (module doc of `bound`).
            if !report.feasible || plan.row_split_tables() > 0 {
                continue;
            }
            assert!(report.cost_ms >= bound.cost_ms - 1e-9, "{name}: {} < bound {}", report.cost_ms, bound.cost_ms);
        }
    }
}

/// A tiny task: `n` pool-like tables on `d` devices. Each device holds `cap_factor` times an even
/// share of the bytes, but never less than the largest table (so that every table fits unsplit and
/// the brute force over unsplit placements has something to find); `cap_factor` near 1 makes memory
/// the binding constraint.
fn tiny(seed: u64, n: usize, d: usize, cap_factor: f64) -> Task {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let tables: Vec<_> = (0..n)
        .map(|i| {
            let dim = [8, 16, 32, 64][rng.random_range(0..4)];
            table(&format!("t{i}"), rng.random_range(1_000..2_000_000), dim, rng.random_range(0.5..40.0))
        })
        .collect();
    let total: u64 = tables.iter().map(planner_core::TableSpec::size_bytes).sum();
    let largest = tables.iter().map(planner_core::TableSpec::size_bytes).max().unwrap();
    let cap = largest.max((total as f64 * cap_factor / d as f64) as u64);
    Task::new(tables, Devices::uniform(d, cap).unwrap()).unwrap()
}

fn brute_force(task: &Task, model: &dyn CostModel) -> f64 {
    let (n, d) = (task.tables.len(), task.devices.count());
    let mut best = f64::INFINITY;
    for code in 0..d.pow(n as u32) {
        let devices: Vec<usize> = (0..n).map(|t| code / d.pow(t as u32) % d).collect();
        let plan = Plan::unsplit(task, &devices).unwrap();
        let r = evaluate(task, &plan, model, CostDefinition::NeuroShard).unwrap();
        if r.feasible {
            best = best.min(r.cost_ms);
        }
    }
    best
}

/// Whether every table of `plan` is cut into equal pieces at most `depth` halvings deep.
fn equal_halvings(task: &Task, plan: &Plan, depth: u32) -> bool {
    task.tables.iter().enumerate().all(|(t, table)| {
        let dims: Vec<u32> = plan.pieces().iter().filter(|p| p.table_id == t).map(|p| p.dim).collect();
        dims.iter().all(|&w| w == dims[0] && p2_level(table.dim / w) <= depth) && plan.row_split_tables() == 0
    })
}

fn p2_level(x: u32) -> u32 {
    if x.is_power_of_two() { x.trailing_zeros() } else { u32::MAX }
}

#[test]
fn exact_search_is_optimal_on_tiny_tasks() {
    let model = AnalyticalModel::default();
    // Loose memory, tight memory (some placements overflow), and in between.
    for (seed, cap_factor) in [(1, 10.0), (2, 1.1), (3, 1.4)] {
        let task = tiny(seed, 6, 3, cap_factor);
        let bound = lower_bound(&task, &model).unwrap();
        let flat = exact(&task, &model, &ExactConfig::default()).unwrap();
        assert!(flat.complete);
        let brute = brute_force(&task, &model);
        assert!((flat.cost_ms - brute).abs() <= 1e-6 * brute, "exact {} vs brute force {brute}", flat.cost_ms);
        assert!((cost(&task, &flat.plan, &model) - flat.cost_ms).abs() <= 1e-6 * brute);
        assert!(flat.cost_ms >= bound.cost_ms - 1e-9);
        let deep = exact(&task, &model, &ExactConfig { max_split_depth: 1, ..ExactConfig::default() }).unwrap();
        assert!(deep.cost_ms <= flat.cost_ms + 1e-12);
        for (name, plan) in all_plans(&task, &model) {
            let r = evaluate(&task, &plan, &model, CostDefinition::NeuroShard).unwrap();
            // The searches sum set vectors in fixed point (2^-24 per piece), `evaluate` in f64.
            let tol = 1e-7 * r.cost_ms;
            if r.feasible && equal_halvings(&task, &plan, 1) {
                assert!(deep.cost_ms <= r.cost_ms + tol, "{name}: {} < exact {}", r.cost_ms, deep.cost_ms);
            }
            if r.feasible && equal_halvings(&task, &plan, 0) {
                assert!(flat.cost_ms <= r.cost_ms + tol, "{name}: {} < exact {}", r.cost_ms, flat.cost_ms);
            }
        }
    }
}

/// Under the TorchRec split rule every registry planner's plan is one TorchRec can build (equal column
/// blocks), NeuroShard and refinement still split, and refinement never worsens the rule's plan.
#[test]
fn the_torchrec_split_rule_gives_buildable_plans_from_every_planner() {
    use planner_core::SplitRule;
    let model = AnalyticalModel::default();
    let mut split_some = false;
    for (k, task) in tasks().into_iter().enumerate() {
        let strict = task.clone().with_splits(SplitRule::TorchRec);
        let ctx = PlanContext::new(&model, k as u64);
        for (name, plan) in all_plans(&strict, &model) {
            plan.check_torchrec_buildable(&strict).unwrap_or_else(|e| panic!("{name}: {e}"));
            check_plan(&strict, &plan, &model, name == "random");
        }
        let first = NeuroShard::new(small()).plan(&strict, &ctx).unwrap();
        let config = RefineConfig { max_passes: 60, ..RefineConfig::default() };
        let (refined, _) = refine(&strict, &first, &ctx, &config).unwrap();
        refined.check_torchrec_buildable(&strict).unwrap();
        assert!(cost(&strict, &refined, &model) <= cost(&strict, &first, &model) + 1e-6);
        split_some |= refined.split_tables() > 0;
    }
    assert!(split_some, "no table was split under the rule on any task");
}

/// The equal-block moves: halving a table's blocks spreads it, pairing merges them back.
#[test]
fn refine_halves_and_pairs_equal_blocks() {
    use planner_core::{Piece, SplitRule};
    // One wide hot table and a cold one on 2 devices: spreading the hot table is cheaper.
    let tables = vec![table("hot", 200_000, 128, 40.0), table("cold", 1000, 8, 1.0)];
    let task = Task::new(tables, Devices::uniform(2, 1 << 30).unwrap()).unwrap().with_splits(SplitRule::TorchRec);
    let model = AnalyticalModel::default();
    let ctx = PlanContext::new(&model, 0);
    let whole = Plan::unsplit(&task, &[0, 0]).unwrap();
    let (spread, _) = refine(&task, &whole, &ctx, &RefineConfig::default()).unwrap();
    spread.check_torchrec_buildable(&task).unwrap();
    let hot: Vec<&Piece> = spread.pieces().iter().filter(|p| p.table_id == 0).collect();
    assert!(hot.len() >= 2 && hot.iter().any(|p| p.device == 1), "{:?}", spread.pieces());
    assert!(cost(&task, &spread, &model) < cost(&task, &whole, &model));
    // Four quarters on one device: pairing them back into halves (or whole) is cheaper than keeping
    // four lookups of the same rows.
    let quarters = Plan::new(
        &task,
        vec![
            Piece::cols(0, 0, 32, 0),
            Piece::cols(0, 32, 32, 0),
            Piece::cols(0, 64, 32, 1),
            Piece::cols(0, 96, 32, 1),
            Piece::cols(1, 0, 8, 0),
        ],
    )
    .unwrap();
    let (paired, _) = refine(&task, &quarters, &ctx, &RefineConfig::default()).unwrap();
    paired.check_torchrec_buildable(&task).unwrap();
    assert!(paired.pieces().iter().filter(|p| p.table_id == 0).count() < 4, "{:?}", paired.pieces());
}

/// The element type reaches the learned models: an fp16 piece costs what the fp32 piece of the same row
/// bytes costs (half the dim).
#[test]
fn learned_models_price_an_fp16_piece_by_its_bytes() {
    use planner_core::{ElementType, TableSpec};
    let model = h100();
    let fp16 = TableSpec { dtype: ElementType::Fp16, ..table("t", 200_000, 64, 8.0) };
    let narrow = table("t", 200_000, 32, 8.0);
    let c = |t: &TableSpec| model.compute_ms(&[PieceRef::whole(t, t.dim)]).unwrap();
    assert!((c(&fp16) - c(&narrow)).abs() <= 1e-9 * c(&narrow), "{} vs {}", c(&fp16), c(&narrow));
    assert_eq!(planner_core::cost::neural::piece_raw(&PieceRef::whole(&fp16, 64))[0], 32.0);
}

/// A table of dim 4 (no column split possible) larger than any device: NeuroShard finds nothing that
/// fits, and `neuroshard+refine` repairs its closest plan by sharding the table row-wise.
#[test]
fn refinement_repairs_a_plan_no_column_split_can_fit() {
    let tables = vec![table("long", 1_000_000, 4, 2.0), table("small", 1000, 8, 1.0)];
    let task = Task::new(tables, Devices::uniform(2, 10 << 20).unwrap()).unwrap();
    let model = AnalyticalModel::default();
    let ctx = PlanContext::new(&model, 0);
    assert!(matches!(NeuroShard::new(small()).plan(&task, &ctx), Err(Error::NoFit { .. })));
    let refined = planner_core::planners::planner("neuroshard+refine").unwrap().build().plan(&task, &ctx).unwrap();
    check_plan(&task, &refined, &model, false);
    assert!(refined.pieces().iter().any(|p| p.table_id == 0 && p.rows.is_some()), "{:?}", refined.pieces());
    // With no way to fit at all (caps too small even row-wise), the inner planner's error stands.
    let hopeless = Task::new(vec![table("long", 1_000_000, 4, 2.0)], Devices::uniform(2, 4 << 20).unwrap()).unwrap();
    let e = planner_core::planners::planner("neuroshard+refine").unwrap().build().plan(&hopeless, &ctx).unwrap_err();
    assert!(matches!(e, Error::NoFit { .. }), "{e}");
}

/// `torchrec+refine` starts from the TorchRec port's plan and keeps only what the cost model prices lower:
/// never dearer than that plan, always within memory, and on some task it changes it. `neuroshard+torchrec`
/// returns the cheaper of `neuroshard`'s and `torchrec+refine`'s plans.
#[test]
fn torchrec_refine_improves_on_torchrecs_plan_under_the_model() {
    let model = profiles::load("cpu-epyc-2t").unwrap();
    let mut changed = false;
    let mut tried = 0;
    for (k, task) in tasks().into_iter().enumerate() {
        let ctx = PlanContext::new(&model, k as u64);
        let by_name = |name: &str| planner_core::planners::planner(name).unwrap().build();
        let Ok(start) = by_name("torchrec").plan(&task, &ctx) else { continue };
        tried += 1;
        let refined = by_name("torchrec+refine").plan(&task, &ctx).unwrap();
        check_plan(&task, &refined, &model, false);
        let (a, b) = (cost(&task, &start, &model), cost(&task, &refined, &model));
        assert!(b <= a * (1.0 + 1e-9), "task {k}: refined {b} ms > TorchRec's {a} ms");
        changed |= b < a * (1.0 - 1e-6);
        let ns = cost(&task, &by_name("neuroshard").plan(&task, &ctx).unwrap(), &model);
        let both = by_name("neuroshard+torchrec").plan(&task, &ctx).unwrap();
        check_plan(&task, &both, &model, false);
        assert_eq!(cost(&task, &both, &model), ns.min(b), "task {k}");
    }
    assert!(tried >= 2, "TorchRec's port planned {tried} tasks");
    assert!(changed, "refinement changed no TorchRec plan");
}

/// `auto` returns the cheapest of `size-lookup`, `neuroshard-fast` and `torchrec+refine`
/// (earlier on ties) while the task is at most `AUTO_TORCHREC_LIMIT` tables × devices; a portfolio member
/// limited to a size is skipped past it and run up to it.
#[test]
fn auto_weighs_torchrecs_refined_plan_up_to_its_size_limit() {
    use planner_core::planners::AUTO_TORCHREC_LIMIT;
    use planner_core::planners::portfolio::Portfolio;
    // A learned profile and TorchRec's own estimator, under which TorchRec's plans are strongest: which
    // member wins depends on the model, and some task must be won by TorchRec's refined plan.
    let models: Vec<Box<dyn CostModel>> =
        vec![Box::new(profiles::load("cpu-epyc-2t").unwrap()), Box::new(AnalyticalModel::default())];
    let by_name = |name: &str| planner_core::planners::planner(name).unwrap().build();
    let mut torchrec_kept = 0;
    for (k, task) in models.iter().flat_map(|m| tasks().into_iter().map(move |t| (m, t))).enumerate() {
        let (model, task) = (task.0.as_ref(), task.1);
        assert!(task.tables.len() * task.devices.count() <= AUTO_TORCHREC_LIMIT);
        let ctx = PlanContext::new(model, k as u64);
        let member = |name: &str| by_name(name).plan(&task, &ctx).ok().map(|p| cost(&task, &p, model));
        let costs = ["size-lookup", "neuroshard-fast", "torchrec+refine"].map(member);
        let Ok(auto) = by_name("auto").plan(&task, &ctx) else {
            assert!(costs.iter().all(Option::is_none), "task {k}: auto refused, members {costs:?}");
            continue;
        };
        check_plan(&task, &auto, model, false);
        let best = costs.iter().flatten().copied().fold(f64::INFINITY, f64::min);
        assert_eq!(cost(&task, &auto, model), best, "task {k}: members {costs:?}");
        torchrec_kept += usize::from(costs[2] == Some(best) && costs[..2].iter().all(|&c| c != Some(best)));
        // The same member limited below and at the task's size.
        let size = task.tables.len() * task.devices.count();
        let limited = |limit: usize| {
            Portfolio::new("p", vec![by_name("size-lookup")]).member_up_to(by_name("torchrec+refine"), limit)
        };
        if let Some(first) = costs[0] {
            let below = limited(size - 1).plan(&task, &ctx).unwrap();
            assert_eq!(cost(&task, &below, model), first, "task {k}");
            if let Some(third) = costs[2] {
                let at = limited(size).plan(&task, &ctx).unwrap();
                assert_eq!(cost(&task, &at, model), first.min(third), "task {k}");
            }
        }
    }
    assert!(torchrec_kept >= 1, "auto never kept the TorchRec-started plan");
    // The registry's summary states the limit the code applies.
    let limit = format!("{},{:03}", AUTO_TORCHREC_LIMIT / 1000, AUTO_TORCHREC_LIMIT % 1000);
    let summary = planner_core::planners::planner("auto").unwrap().summary;
    assert!(summary.contains(&limit), "{summary}");
}

/// Without reshaping, refinement only moves and swaps: the pieces stay the same (a wide hot table the
/// full refinement spreads by halving stays whole) and the plan is never worse.
#[test]
fn refine_without_reshaping_keeps_every_piece_and_only_places_them() {
    let tables = vec![
        table("hot", 200_000, 128, 40.0),
        table("warm", 50_000, 64, 10.0),
        table("cold", 1000, 8, 1.0),
        table("cool", 4000, 16, 2.0),
    ];
    let task = Task::new(tables, Devices::uniform(2, 1 << 30).unwrap()).unwrap();
    let model = AnalyticalModel::default();
    let ctx = PlanContext::new(&model, 0);
    let start = Plan::unsplit(&task, &[0, 0, 0, 0]).unwrap();
    let (full, _) = refine(&task, &start, &ctx, &RefineConfig::default()).unwrap();
    assert!(full.split_tables() > 0, "the full refinement splits: {:?}", full.pieces());
    let placing = RefineConfig { reshape: false, ..RefineConfig::default() };
    let (placed, _) = refine(&task, &start, &ctx, &placing).unwrap();
    let shape = |p: &Plan| {
        let mut v: Vec<_> = p.pieces().iter().map(|x| (x.table_id, x.col_offset, x.dim, x.rows)).collect();
        v.sort_by_key(|&(t, o, d, _)| (t, o, d));
        v
    };
    assert_eq!(shape(&placed), shape(&start));
    assert!(placed.pieces().iter().any(|p| p.device == 1), "nothing was moved: {:?}", placed.pieces());
    assert!(cost(&task, &placed, &model) < cost(&task, &start, &model));
}

/// Refining a plan the model already searched for keeps its result only when the model predicts a gain of
/// at least its measured error of a device's time (`refine::SEARCHED_MIN_GAIN_SD` of it): below that, the
/// search's plan comes back and the stats say what was declined; with the floor off, the refined plan
/// comes back; under a model with no measured error (the analytical one), every gain is kept. The
/// registry's `neuroshard+refine` has the floor; `torchrec+refine` does not.
#[test]
fn refining_a_searched_plan_keeps_only_gains_over_the_models_error() {
    use planner_core::planners::refine::{Refined, SEARCHED_MIN_GAIN_SD};
    let learned = profiles::load("cpu-epyc-2t").unwrap();
    let sd = learned.measured_error_sd().expect("the CPU profile records a validation error");
    assert!(sd > 0.05 && sd < 0.5, "{sd}");
    let models: Vec<Box<dyn CostModel>> = vec![Box::new(learned), Box::new(AnalyticalModel::default())];
    let (mut declined, mut kept) = (0, 0);
    for (m, model) in models.iter().enumerate() {
        let floor = model.measured_error_sd().map(|s| SEARCHED_MIN_GAIN_SD * s);
        assert_eq!(floor.is_some(), m == 0);
        for (k, task) in tasks().into_iter().enumerate() {
            let ctx = PlanContext::new(model.as_ref(), k as u64);
            let searched = NeuroShard::new(small()).plan(&task, &ctx).unwrap();
            let open = Refined::new("open", Box::new(NeuroShard::new(small())));
            let refined = open.plan(&task, &ctx).unwrap();
            assert_eq!(open.last_stats().unwrap().declined_gain, None);
            let floored =
                Refined::new("floored", Box::new(NeuroShard::new(small()))).with_min_gain_sd(SEARCHED_MIN_GAIN_SD);
            let plan = floored.plan(&task, &ctx).unwrap();
            check_plan(&task, &plan, model.as_ref(), false);
            let gain = 1.0 - cost(&task, &refined, model.as_ref()) / cost(&task, &searched, model.as_ref());
            if let Some(d) = floored.last_stats().unwrap().declined_gain {
                assert_eq!(plan.pieces(), searched.pieces(), "model {m} task {k}");
                assert!((d.gain - gain).abs() < 1e-9 && d.floor == floor.unwrap() && gain < d.floor, "{d:?} {gain}");
                declined += usize::from(gain > 1e-6);
            } else {
                assert!(floor.is_none_or(|f| gain >= f), "model {m} task {k}: gain {gain} kept under {floor:?}");
                assert_eq!(plan.pieces(), refined.pieces(), "model {m} task {k}");
                kept += usize::from(gain > 1e-6);
            }
        }
    }
    assert!(declined >= 1 && kept >= 1, "declined {declined}, kept {kept}: the test saw only one side");
    // The registry: the floor on refining NeuroShard's plans, off on refining TorchRec's.
    let model = profiles::load("cpu-epyc-2t").unwrap();
    let task = &tasks()[0];
    let ctx = PlanContext::new(&model, 0);
    for (name, floored) in [("neuroshard+refine", true), ("neuroshard+place", true), ("torchrec+refine", false)] {
        let p = planner_core::planners::planner(name).unwrap().build();
        let start = if name.starts_with("torchrec") { "torchrec" } else { "neuroshard" };
        let first = planner_core::planners::planner(start).unwrap().build().plan(task, &ctx).unwrap();
        let plan = p.plan(task, &ctx).unwrap();
        let gain = 1.0 - cost(task, &plan, &model) / cost(task, &first, &model);
        let stats = p.last_stats().unwrap();
        assert!(
            floored || stats.declined_gain.is_none(),
            "{name}: declined {:?} though it has no floor",
            stats.declined_gain
        );
        if floored {
            // Either the gain cleared the floor, or the search's own plan came back.
            assert!(gain >= sd || plan.pieces() == first.pieces(), "{name}: gain {gain} under {sd} kept");
        }
    }
}
