//! planner-wasm: planner-core for JavaScript (browsers, Web Workers, Node), through wasm-bindgen.
//!
//! Every export is `deserialize → one planner-core call → serialize`, returning `Result<_, JsError>`:
//! a refused input becomes a JS exception carrying the core's message (which names the field and the
//! value). Inputs and outputs are plain JS objects with exactly the schema of the CLI's JSON files
//! (`docs/FORMATS.md`): a [`Task`] is `{tables, devices}`, a plan is a [`PlanDocument`]
//! (`shardplan.plan/v1`), an edit is a [`whatif::Edit`] (`{op: "move", table_id, col_offset,
//! to_device}`). So a plan made in the browser can be downloaded and read by the CLI, and the other
//! way round.
//!
//! Key pieces:
//! * [`api`] — the same operations on Rust values (requests in, documents out), tested natively; the
//!   `#[wasm_bindgen]` functions below only convert at the boundary.
//! * [`ModelOptions`] — which cost model prices plans (the CLI's `--cost-model/--hw/--definition/--batch`).
//! * Inputs are read with `JSON.stringify` + `serde_json` (the CLI's parser: unknown fields refused, the
//!   same messages); outputs are built directly as JS objects by serde-wasm-bindgen.
//! * Planning time is measured here with `performance.now()` around the planner call (planner-core
//!   never reads clocks), so it means the same as the CLI's planning time.
//!
//! Why: the logic lives in planner-core, where it is tested on every target; the binding holds only
//! what must touch JavaScript. A panic hook reports Rust panics on the console with their message
//! instead of a bare `unreachable` trap.

/// The binding's operations on Rust values, shared with the Python package.
pub use planner_core::api;

use serde::Serialize;
use wasm_bindgen::prelude::*;

pub use api::{ModelOptions, PlanOutcome, PlanRequest, SampleRequest};
pub use planner_core::{PlanDocument, Task, whatif};

#[wasm_bindgen]
extern "C" {
    /// `performance.now()`: present in browsers, Web Workers and Node >= 16.
    #[wasm_bindgen(js_namespace = performance, js_name = now)]
    fn performance_now() -> f64;
    /// `JSON.stringify(value)`: throws on cycles and `BigInt`s.
    #[wasm_bindgen(js_namespace = JSON, js_name = stringify, catch)]
    fn json_stringify(value: &JsValue) -> Result<JsValue, JsValue>;
}

fn init() {
    console_error_panic_hook::set_once();
}

fn to_js<T: Serialize>(value: &T) -> Result<JsValue, JsError> {
    // JSON-compatible: maps become objects and `None` becomes `null`, as in the CLI's JSON files.
    value.serialize(&serde_wasm_bindgen::Serializer::json_compatible()).map_err(|e| JsError::new(&format!("{e:#}")))
}

/// Reads a JS value through `JSON.stringify` and `serde_json`, so it is parsed exactly as the CLI parses
/// its files: unknown fields are refused by name (serde-wasm-bindgen would skip them silently) and the
/// error messages are the same. `undefined` reads as `null` (an absent optional argument).
fn from_js<T: serde::de::DeserializeOwned>(what: &str, value: &JsValue) -> Result<T, JsError> {
    let text = if value.is_undefined() {
        "null".to_string()
    } else {
        json_stringify(value)
            .ok()
            .and_then(|t| t.as_string())
            .ok_or_else(|| JsError::new(&format!("{what}: not a JSON value (a cycle, a BigInt or a function?)")))?
    };
    serde_json::from_str(&text).map_err(|e| JsError::new(&format!("{what}: {e:#}")))
}

fn core<T>(r: planner_core::Result<T>) -> Result<T, JsError> {
    r.map_err(|e| JsError::new(&format!("{e:#}")))
}

/// The version of this package.
#[wasm_bindgen]
#[must_use]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// Registered planners: `[{name, summary, is_seed_baseline}]`, in report order.
#[wasm_bindgen(js_name = listPlanners)]
pub fn list_planners() -> Result<JsValue, JsError> {
    init();
    to_js(&api::planners())
}

/// Known cost models: `[{name, summary, hardware: [...], definitions: [...]}]`.
#[wasm_bindgen(js_name = listCostModels)]
pub fn list_cost_models() -> Result<JsValue, JsError> {
    init();
    to_js(&api::cost_models())
}

/// Samples a task from the built-in 856-table pool: `{devices, mem_cap_bytes?, max_dim?, tables?,
/// seed?, index?}` → `{tables, devices}`. Without `tables`, task `index` of the NeuroShard protocol
/// suite for `devices`/`max_dim`/`seed` (as `shardplan tasks`); with it, that many tables.
#[wasm_bindgen(js_name = sampleTask)]
pub fn sample_task(request: &JsValue) -> Result<JsValue, JsError> {
    init();
    let req: SampleRequest = from_js("sample request", request)?;
    to_js(&core(api::sample_task(&req))?)
}

/// Parses uploaded tables: `format` is `"csv"` or `"json"`; `default_dim` applies to a CSV without a
/// `dim` column. Returns the validated tables (the `tables` of a task).
#[wasm_bindgen(js_name = parseTables)]
pub fn parse_tables(text: &str, format: &str, default_dim: Option<u32>) -> Result<JsValue, JsError> {
    init();
    to_js(&core(api::parse_tables(text, format, default_dim))?)
}

/// The topology presets: `[{name, description, devices_per_host, network_gbps, network_latency_us,
/// host_dram_bytes}]`.
#[wasm_bindgen(js_name = listTopologies)]
pub fn list_topologies() -> Result<JsValue, JsError> {
    init();
    to_js(&api::topology_presets())
}

/// Resolves a topology (`{preset?, hosts?, devices_per_host?, network_gbps?, network_latency_us?,
/// host_dram_bytes?}`) for `devices` devices: the task's `topology`, or `null` for one host; an error
/// naming the field otherwise.
#[wasm_bindgen(js_name = resolveTopology)]
pub fn resolve_topology(spec: &JsValue, devices: usize) -> Result<JsValue, JsError> {
    init();
    let spec: planner_core::topology::TopologySpec = from_js("topology", spec)?;
    to_js(&core(spec.resolve(devices))?)
}

/// Plans a task: `{task, planner, seed?, model?, repeat?}` → `{document, planning_ms}`, where
/// `document` is a `shardplan.plan/v1` plan with its report and `planning_ms` the planner call's time
/// (the mean over `repeat` runs).
#[wasm_bindgen]
pub fn plan(request: &JsValue) -> Result<JsValue, JsError> {
    init();
    let req: PlanRequest = from_js("plan request", request)?;
    to_js(&core(api::plan(&req, performance_now))?)
}

/// Re-evaluates a plan document (validating its task and pieces) under `model` (default: the
/// analytical model): returns the document with a fresh report.
#[wasm_bindgen(js_name = evaluatePlan)]
pub fn evaluate_plan(document: &JsValue, model: &JsValue) -> Result<JsValue, JsError> {
    init();
    let doc: PlanDocument = from_js("plan document", document)?;
    let model: Option<ModelOptions> = from_js("model options", model)?;
    to_js(&core(api::evaluate(doc, &model.unwrap_or_default()))?)
}

/// Applies a what-if edit (`{op: "move" | "split" | "merge" | "set_device_count" | "set_mem_cap", ...}`)
/// to a plan document and returns the edited document with its new report.
#[wasm_bindgen(js_name = whatIf)]
pub fn what_if(document: &JsValue, edit: &JsValue, model: &JsValue) -> Result<JsValue, JsError> {
    init();
    let doc: PlanDocument = from_js("plan document", document)?;
    let edit: whatif::Edit = from_js("what-if edit", edit)?;
    let model: Option<ModelOptions> = from_js("model options", model)?;
    to_js(&core(api::what_if(doc, &edit, &model.unwrap_or_default()))?)
}
