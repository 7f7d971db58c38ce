//! shardplan-fuzz: one function per parser of user data, `fn target(data: &[u8])`, for coverage-guided
//! fuzzing (`fuzz/libfuzzer/`, cargo-fuzz) and for the corpus replay test (`tests/corpus.rs`).
//!
//! Each target reads the bytes as the product reads them (UTF-8 text, refused otherwise, as
//! `read_to_string` does; a tables file also loses its byte-order mark, as the CLI's `read_text_capped`)
//! and, when parsing succeeds, does cheaply what a command does next: validate, plan with a greedy
//! baseline, price with the analytical cost model, export, apply edits, replay a stream. A refusal is
//! an `Err` and fine; a panic, an abort, an endless loop or an unbounded allocation is a bug in the
//! product. [`TARGETS`] lists them by name (the corpus directories and the cargo-fuzz targets use the
//! same names).
//!
//! Why a library: the same functions run under libFuzzer (which needs its own crate, outside the
//! workspace's normal build) and in `cargo test --workspace`, which replays every corpus file.

use planner_core::cost::analytical::DEFAULT_GLOBAL_BATCH;
use planner_core::dataset::{HardwarePolicy, SetRequest, parse_dataset};
use planner_core::document::MeasuredPlans;
use planner_core::planners::planner;
use planner_core::planners::torchrec::{TorchRecConfig, price_plan};
use planner_core::task::{SuiteTask, TASK_SCHEMA};
use planner_core::torchrec_plan::{TorchRecPlanDocument, to_torchrec_plan};
use planner_core::{
    AnalyticalModel, CostDefinition, Devices, ElementType, HardwareProfile, MemoryRule, OptimizerState, Plan,
    PlanContext, PlanDocument, TableInput, TableSpec, Task, evaluate, whatif,
};
use planner_wasm::api;
use serde::Deserialize;

/// A fuzz target: bytes in, nothing out; it must return for every input.
pub type Target = fn(&[u8]);

/// Every target by name.
pub const TARGETS: &[(&str, Target)] = &[
    ("tables_csv", tables_csv),
    ("tables_json", tables_json),
    ("plan_document", plan_document),
    ("measured_plans", measured_plans),
    ("torchrec_plan", torchrec_plan),
    ("task_suite", task_suite),
    ("dataset", dataset),
    ("model_card", model_card),
    ("whatif", whatif_edits),
    ("alis_csv", alis_csv),
    ("alis_jsonl", alis_jsonl),
    ("wasm_api", wasm_api),
];

/// Devices the tables targets plan on: two, as a small `--devices 2 --mem 4GiB`.
const FUZZ_DEVICES: usize = 2;
const FUZZ_CAP_BYTES: u64 = 4 << 30;

fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

fn analytical() -> AnalyticalModel {
    match HardwareProfile::builtin("torchrec").and_then(|hw| AnalyticalModel::new(hw, DEFAULT_GLOBAL_BATCH)) {
        Ok(m) => m,
        // The built-in preset and the default batch are constants; a unit test builds them.
        Err(e) => panic!("the analytical model with its defaults builds: {e}"),
    }
}

/// What `plan` does with a task: a greedy baseline, then the report under the analytical model in both
/// cost definitions, TorchRec's estimate, and the TorchRec export of the plan.
fn plan_and_price(task: &Task) {
    let model = analytical();
    let ctx = PlanContext::new(&model, 0);
    let Ok(entry) = planner("size-lookup") else { return };
    if let Ok(plan) = entry.build().plan(task, &ctx) {
        price(task, &plan);
    }
}

/// What `evaluate` and `export-torchrec` do with a valid plan.
fn price(task: &Task, plan: &Plan) {
    let model = analytical();
    for definition in [CostDefinition::NeuroShard, CostDefinition::FourPhase] {
        let _ = evaluate(task, plan, &model, definition);
    }
    let _ = price_plan(task, plan, &TorchRecConfig::default());
    let _ = plan.check_torchrec_buildable(task);
    let _ = to_torchrec_plan(task, plan, None);
}

fn tables_task(tables: Vec<TableSpec>) {
    let Ok(devices) = Devices::uniform(FUZZ_DEVICES, FUZZ_CAP_BYTES) else { return };
    let Ok(task) = Task::new(tables, devices) else { return };
    plan_and_price(&task);
    plan_and_price(&task.with_memory(MemoryRule::torchrec()));
}

fn tables_text(data: &[u8]) -> Option<&str> {
    text(data).map(|t| t.strip_prefix('\u{feff}').unwrap_or(t))
}

/// A tables CSV (`plan --tables x.csv`), with and without `--dim 64`, then a task on two devices.
pub fn tables_csv(data: &[u8]) {
    let Some(t) = tables_text(data) else { return };
    for default_dim in [None, Some(64)] {
        if let Ok(tables) = planner_core::input::parse_tables_csv(t, default_dim) {
            tables_task(tables);
        }
    }
}

/// A tables JSON, ours or TorchRec-style (auto-detected), then a task on two devices.
pub fn tables_json(data: &[u8]) {
    let Some(t) = tables_text(data) else { return };
    if let Ok(tables) = planner_core::input::parse_tables_json(t) {
        tables_task(tables);
    }
    // The TorchRec reader alone, as when the first record lacks `num_embeddings`.
    let _ = planner_core::input::parse_torchrec_tables_json(t);
}

/// A plan document (`shardplan.plan/v1`), validated against its task, then priced (`evaluate`,
/// `export-torchrec`).
pub fn plan_document(data: &[u8]) {
    let Some(t) = text(data) else { return };
    if let Ok((doc, plan)) = PlanDocument::from_json(t) {
        price(&doc.task, &plan);
    }
}

/// A measured-plans document (`shardplan.measured-plans/v1`).
pub fn measured_plans(data: &[u8]) {
    let Some(t) = text(data) else { return };
    if let Ok(doc) = MeasuredPlans::from_json(t) {
        let _ = doc.speed_factor(&analytical());
    }
}

/// A TorchRec plan file, matched against a task made of its own `tables` shapes on `world_size`
/// devices (as `evaluate FILE --tables T` matches it against T), then priced.
pub fn torchrec_plan(data: &[u8]) {
    let Some(t) = text(data) else { return };
    let Ok(doc) = TorchRecPlanDocument::from_json(t) else { return };
    let tables: Option<Vec<TableSpec>> = doc
        .tables
        .iter()
        .enumerate()
        .map(|(i, (name, shape))| {
            TableInput {
                name: Some(name.clone()),
                rows: shape.num_embeddings,
                dim: shape.embedding_dim,
                pooling_factor: 1.0,
                bins: None,
                dtype: ElementType::Fp32,
                optimizer: OptimizerState::None,
                cache_load_factor: None,
                compute_kernel: None,
            }
            .validate(i)
            .ok()
        })
        .collect();
    let Some(tables) = tables else { return };
    let Ok(devices) = Devices::uniform(doc.world_size, FUZZ_CAP_BYTES) else { return };
    let Ok(task) = Task::new(tables, devices) else { return };
    if let Ok(plan) = doc.to_plan(&task) {
        price(&task, &plan);
    }
}

/// A task suite (JSON Lines, `shardplan tasks` → `shardplan eval`): every task planned and priced.
pub fn task_suite(data: &[u8]) {
    let Some(t) = text(data) else { return };
    let suite: Option<Vec<SuiteTask>> =
        t.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).ok()).collect();
    for st in suite.unwrap_or_default() {
        if st.schema == TASK_SCHEMA {
            plan_and_price(&st.task);
        }
    }
}

/// A cost dataset (`shardplan.costs/v1`, JSON Lines) under both hardware policies, and set requests
/// (`shardplan.set-request/v1`), the other JSON Lines format of `dataset.rs`.
pub fn dataset(data: &[u8]) {
    let Some(t) = text(data) else { return };
    for policy in [HardwarePolicy::Single, HardwarePolicy::Mix] {
        if let Ok(records) = parse_dataset("fuzz", t, policy) {
            for r in &records {
                let _ = r.validate("fuzz");
            }
        }
    }
    for line in t.lines() {
        if let Ok(req) = serde_json::from_str::<SetRequest>(line) {
            let _ = req.validate("fuzz");
        }
    }
}

/// A model card (`shardplan.model-card/v1`).
pub fn model_card(data: &[u8]) {
    let Some(t) = text(data) else { return };
    let _ = planner_core::cost::card::ModelCard::from_json(t);
}

/// The plan every what-if edit is applied to: four tables on three devices, as NeuroShard plans them
/// (built once).
fn whatif_base() -> &'static (Task, Plan) {
    static BASE: std::sync::OnceLock<(Task, Plan)> = std::sync::OnceLock::new();
    BASE.get_or_init(|| {
        let built = planner_core::input::parse_tables_csv(
            "name,rows,dim,pooling_factor\nuser,1000000,64,1\nitem,200000,32,20\nad,5000,16,3\nctx,100,4,0\n",
            None,
        )
        .and_then(|tables| Task::new(tables, Devices::uniform(3, 1 << 30)?))
        .and_then(|task| {
            let model = analytical();
            let plan = planner("neuroshard")?.build().plan(&task, &PlanContext::new(&model, 0))?;
            Ok((task, plan))
        });
        match built {
            Ok(base) => base,
            // Constant tables that fit easily; a unit test builds them.
            Err(e) => panic!("the what-if base plan builds: {e}"),
        }
    })
}

/// What-if edits (`whatif::Edit` JSON: one edit, or a list applied in turn as the page's undo stack
/// does), each result priced.
pub fn whatif_edits(data: &[u8]) {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Edits {
        One(whatif::Edit),
        Many(Vec<whatif::Edit>),
    }
    let Some(t) = text(data) else { return };
    let edits = match serde_json::from_str::<Edits>(t) {
        Ok(Edits::One(e)) => vec![e],
        Ok(Edits::Many(v)) => v,
        Err(_) => return,
    };
    let (mut task, mut plan) = whatif_base().clone();
    for edit in &edits {
        let Ok((t, p)) = whatif::apply(&task, &plan, edit) else { continue };
        let _ = evaluate(&t, &p, &analytical(), CostDefinition::NeuroShard);
        (task, plan) = (t, p);
    }
}

/// What `shardplan dynamic` does with a stream: a replay through ALIS's strategy on four shards, windows of
/// a quarter of the requests.
fn replay_stream(stream: &alis::Stream) {
    let cfg = alis::StrategyConfig { shards: 4, ..alis::StrategyConfig::default() };
    let replay_cfg = alis::ReplayConfig {
        window_requests: stream.n_requests().div_ceil(4).max(1),
        latency: alis::LatencyModel::default(),
    };
    let _ = alis::replay(stream, "alis", &cfg, &replay_cfg, &mut || 0.0);
}

/// An ALIS request stream as CSV (`shardplan dynamic --stream x.csv`).
pub fn alis_csv(data: &[u8]) {
    if let Some(Ok(s)) = text(data).map(alis::parse_csv) {
        replay_stream(&s);
    }
}

/// An ALIS request stream as JSON Lines (`shardplan dynamic --stream x.jsonl`).
pub fn alis_jsonl(data: &[u8]) {
    if let Some(Ok(s)) = text(data).map(alis::parse_jsonl) {
        replay_stream(&s);
    }
}

/// The browser binding's entry points (`planner-wasm/src/api.rs`), natively: the first line names the
/// call, the rest is what JavaScript passes, as JSON (the binding reads JS values through
/// `JSON.stringify` + `serde_json`, so this is the same parse):
/// * `csv` / `json` — `parseTables(text, format)`, then `csv64` with `--dim 64`;
/// * `sample` — `sampleTask(request)`;
/// * `plan` — `plan(request)` (greedy baselines only: the searches are not what is fuzzed here);
/// * `evaluate` — `evaluatePlan(document, model)` as `{"document": ..., "model": ...}`;
/// * `what_if` — `whatIf(document, edit, model)` as `{"document": ..., "edit": ..., "model": ...}`.
///
/// A trained profile named as the cost model is priced by the analytical model instead: loading its
/// ONNX graphs would take most of every run, and the model options are still parsed and built.
pub fn wasm_api(data: &[u8]) {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Evaluate {
        document: PlanDocument,
        #[serde(default)]
        model: Option<api::ModelOptions>,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct WhatIf {
        document: PlanDocument,
        edit: whatif::Edit,
        #[serde(default)]
        model: Option<api::ModelOptions>,
    }
    fn cheap(model: Option<api::ModelOptions>) -> api::ModelOptions {
        let mut model = model.unwrap_or_default();
        if planner_core::cost::profiles::find(&model.cost_model).is_some() {
            model.cost_model = "analytical".into();
        }
        model
    }
    let Some(t) = text(data) else { return };
    let (call, body) = t.split_once('\n').unwrap_or((t, ""));
    match call.trim() {
        "csv" => drop(api::parse_tables(body, "csv", None)),
        "csv64" => drop(api::parse_tables(body, "csv", Some(64))),
        "json" => drop(api::parse_tables(body, "json", None)),
        "sample" => {
            if let Ok(req) = serde_json::from_str::<api::SampleRequest>(body) {
                let _ = api::sample_task(&req);
            }
        }
        "plan" => {
            if let Ok(mut req) = serde_json::from_str::<api::PlanRequest>(body)
                && planner(&req.planner).is_ok_and(|e| e.is_seed_baseline)
            {
                req.model = cheap(Some(req.model));
                req.repeat = req.repeat.min(2);
                let _ = api::plan(&req, || 0.0);
            }
        }
        "evaluate" => {
            if let Ok(e) = serde_json::from_str::<Evaluate>(body) {
                let _ = api::evaluate(e.document, &cheap(e.model));
            }
        }
        "what_if" => {
            if let Ok(w) = serde_json::from_str::<WhatIf>(body) {
                let _ = api::what_if(w.document, &w.edit, &cheap(w.model));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_inputs_build() {
        let (task, plan) = whatif_base();
        assert_eq!((task.tables.len(), task.devices.count()), (4, 3));
        assert!(plan.pieces().len() >= 4);
        assert_eq!(planner_core::CostModel::global_batch(&analytical()), Some(DEFAULT_GLOBAL_BATCH));
    }
}
