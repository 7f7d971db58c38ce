//! The `shardplan` Python package's native module: planner-core's binding API
//! ([`planner_core::api`], the same one the browser module calls) with JSON text across the boundary.
//! The Python side (`python/shardplan/`) turns tables and options into that JSON and the results into
//! objects; this file holds no planning logic.
//!
//! Every call releases the GIL while planner-core works, turns planner-core's errors into
//! `shardplan.ShardplanError` (a `ValueError`) carrying the core's message, and catches a Rust panic
//! before it reaches Python (reported as a `ShardplanError` that says so).

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Instant;

use planner_core::api::{self, ModelOptions, PlanRequest};
use planner_core::cost::NeuralModel;
use planner_core::{CostModel, PlanDocument};
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde::Serialize;
use serde::de::DeserializeOwned;

create_exception!(_shardplan, ShardplanError, PyValueError, "An input shardplan refuses, or a plan it cannot make.");

/// A call's failure, before it becomes a Python exception.
struct Failure(String);

impl From<planner_core::Error> for Failure {
    fn from(e: planner_core::Error) -> Self {
        Self(e.to_string())
    }
}

fn parse<T: DeserializeOwned>(what: &str, json: &str) -> Result<T, Failure> {
    serde_json::from_str(json).map_err(|e| Failure(format!("{what}: {e}")))
}

fn to_json<T: Serialize>(value: &T) -> Result<String, Failure> {
    serde_json::to_string(value).map_err(|e| Failure(format!("serialising the result: {e}")))
}

/// Runs `work` without the GIL, with panics caught, and maps failures to `ShardplanError`.
fn call<T: Send>(py: Python<'_>, work: impl FnOnce() -> Result<T, Failure> + Send) -> PyResult<T> {
    let outcome = py.detach(|| catch_unwind(AssertUnwindSafe(work)));
    match outcome {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(Failure(message))) => Err(ShardplanError::new_err(message)),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".into());
            Err(ShardplanError::new_err(format!("internal error in shardplan (please report it): {what}")))
        }
    }
}

/// The package version (the workspace's).
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// A byte size as the CLI reads it (`4GiB`, `512MiB`, `17179869184`); `field` names it in errors.
#[pyfunction]
fn parse_bytes(py: Python<'_>, field: String, text: String) -> PyResult<u64> {
    call(py, move || Ok(planner_core::units::parse_bytes(&field, &text)?))
}

/// The planner used when none is named (the CLI's default).
#[pyfunction]
fn default_planner() -> &'static str {
    planner_core::planners::DEFAULT_PLANNER
}

/// The registered planners as JSON: `[{name, description, ...}]`.
#[pyfunction]
fn planners_json(py: Python<'_>) -> PyResult<String> {
    call(py, || to_json(&api::planners()))
}

/// The cost models this build knows as JSON.
#[pyfunction]
fn cost_models_json(py: Python<'_>) -> PyResult<String> {
    call(py, || to_json(&api::cost_models()))
}

/// Validates tables given as the CLI's tables JSON (or CSV) and returns them as task tables (JSON).
#[pyfunction]
#[pyo3(signature = (text, format, default_dim=None))]
fn parse_tables_json(py: Python<'_>, text: String, format: String, default_dim: Option<u32>) -> PyResult<String> {
    call(py, move || to_json(&api::parse_tables(&text, &format, default_dim)?))
}

/// The bytes of a profile directory `shardplan-train` wrote (its `card.json` and graph files), read by the
/// Python side and checked here by loading them once.
#[pyclass(frozen, module = "shardplan._shardplan")]
struct Profile {
    bytes: ProfileBytes,
    /// The card's name.
    #[pyo3(get)]
    name: String,
}

/// A profile's card and graph files, shared without copying.
#[derive(Clone)]
struct ProfileBytes {
    card_json: Arc<str>,
    files: Arc<BTreeMap<String, Vec<u8>>>,
}

impl ProfileBytes {
    fn model(&self) -> Result<NeuralModel, Failure> {
        Ok(NeuralModel::from_profile(&self.card_json, |f| self.files.get(f).map(Vec::as_slice))?)
    }
}

#[pymethods]
impl Profile {
    #[new]
    fn new(py: Python<'_>, card_json: String, files: BTreeMap<String, Vec<u8>>) -> PyResult<Self> {
        let bytes = ProfileBytes { card_json: card_json.into(), files: Arc::new(files) };
        let check = bytes.clone();
        let name = call(py, move || Ok(check.model()?.card().name.clone()))?;
        Ok(Self { bytes, name })
    }
}

/// The cost model of a request: a loaded profile with the request's options, or the named one.
fn model_for(options: &ModelOptions, profile: Option<&ProfileBytes>) -> Result<Box<dyn CostModel>, Failure> {
    Ok(match profile {
        Some(p) => options.build_loaded(p.model()?)?,
        None => options.build()?,
    })
}

/// Plans: a `PlanRequest` as JSON (`{task, planner, seed, model, memory, budget_ms}`) → `{document,
/// planning_ms}` as JSON.
/// With `profile`, the request's model options apply to that loaded profile.
#[pyfunction]
#[pyo3(signature = (request, profile=None))]
fn plan_json(py: Python<'_>, request: String, profile: Option<PyRef<'_, Profile>>) -> PyResult<String> {
    let profile = profile.map(|p| p.bytes.clone());
    call(py, move || {
        let req: PlanRequest = parse("plan request", &request)?;
        let model = model_for(&req.model, profile.as_ref())?;
        let start = Instant::now();
        to_json(&api::plan_with(&req, model.as_ref(), || start.elapsed().as_secs_f64() * 1e3)?)
    })
}

/// Re-evaluates a plan document (JSON) under a model (`ModelOptions` JSON; with `profile`, applied to it).
#[pyfunction]
#[pyo3(signature = (document, model, profile=None))]
fn evaluate_json(
    py: Python<'_>,
    document: String,
    model: String,
    profile: Option<PyRef<'_, Profile>>,
) -> PyResult<String> {
    let profile = profile.map(|p| p.bytes.clone());
    call(py, move || {
        let doc: PlanDocument = parse("plan document", &document)?;
        let options: ModelOptions = parse("model", &model)?;
        to_json(&api::evaluate_with(doc, model_for(&options, profile.as_ref())?.as_ref(), options.definition)?)
    })
}

/// A plan document (JSON) as TorchRec's sharding plan (JSON).
#[pyfunction]
#[pyo3(signature = (document, local_world_size=None))]
fn torchrec_json(py: Python<'_>, document: String, local_world_size: Option<usize>) -> PyResult<String> {
    call(py, move || {
        let doc: PlanDocument = parse("plan document", &document)?;
        to_json(&api::to_torchrec(&doc, local_world_size)?)
    })
}

/// The native module.
#[pymodule]
fn _shardplan(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ShardplanError", m.py().get_type::<ShardplanError>())?;
    m.add_class::<Profile>()?;
    m.add("MAX_DEVICES", planner_core::task::MAX_DEVICES)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(parse_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(default_planner, m)?)?;
    m.add_function(wrap_pyfunction!(planners_json, m)?)?;
    m.add_function(wrap_pyfunction!(cost_models_json, m)?)?;
    m.add_function(wrap_pyfunction!(parse_tables_json, m)?)?;
    m.add_function(wrap_pyfunction!(plan_json, m)?)?;
    m.add_function(wrap_pyfunction!(evaluate_json, m)?)?;
    m.add_function(wrap_pyfunction!(torchrec_json, m)?)?;
    Ok(())
}
