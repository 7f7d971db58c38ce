//! planner-core: the sans-IO heart of shardplan.
//!
//! Given embedding tables ([`TableSpec`]) and devices ([`Devices`]) — a [`Task`] — a [`Planner`]
//! returns a [`Plan`] (column-wise halving splits and a device per piece), and a [`CostModel`]
//! prices it through [`evaluate`] into a [`PlanReport`] (per device: bytes, dim sum, compute and
//! comm times, the bottleneck).
//!
//! Why it is shaped this way:
//! * **Sans-IO.** Bytes and structs in, structs out: no file system, environment, clocks, threads or
//!   printing. The same code runs in the CLI, in a browser (wasm32) and inside someone else's service;
//!   time budgets and progress arrive as arguments.
//! * **One source of truth.** Feature schemas ([`features`]), the table pool ([`pool`]), task
//!   samplers ([`task`]) and plan/cost types live here once, so the collector, the trainer and the
//!   planners cannot drift apart.
//! * **Validated input.** Raw records ([`TableInput`], CSV rows) become spec types only through
//!   constructors that name the field, the value and the allowed range on refusal ([`Error`]).
//! * **Deterministic.** Seeded ChaCha8 generators, ties broken by index: the same input gives the same
//!   plan everywhere.
//!
//! **Where to start.** A user of the library needs [`prelude`]: reading tables, building a task,
//! choosing a cost model and a planner, planning, pricing, the plan document. The other modules are
//! public because the collector and the trainer build on them (`dataset`, `features`, `policy`,
//! `bound`, `pool`, the learned planners' networks and episodes in `planners::dreamshard` /
//! `planners::autoshard`); their API follows those tools and may change between releases.

pub mod api;
pub mod bound;
pub mod cost;
pub mod dataset;
pub mod document;
pub mod error;
pub mod eval;
pub mod features;
pub mod input;
pub mod memory;
pub mod plan;
pub mod planners;
pub mod policy;
pub mod pool;
pub mod table;
pub mod task;
pub mod tier;
pub mod topology;
pub mod torchrec_plan;
pub mod units;
pub mod whatif;

/// What a user of the library needs, in one import. Plan a task drawn from the pool and price it with
/// TorchRec's analytical estimator:
///
/// ```
/// use planner_core::prelude::*;
///
/// let task = SuiteSpec::neuroshard(4, 128, 1, 7).task(0)?.task;
/// let model = AnalyticalModel::default();
/// let plan = planner("size-lookup")?.build().plan(&task, &PlanContext::new(&model, 0))?;
/// let report = evaluate(&task, &plan, &model, CostDefinition::NeuroShard)?;
/// println!("{:.2} ms, bottleneck device {}", report.cost_ms, report.bottleneck_device);
/// # Ok::<(), planner_core::Error>(())
/// ```
///
/// Tables from a file's text: [`input::parse_tables_csv`] / [`input::parse_tables_json`] (TorchRec-style
/// definitions too), then [`Task::new`] on [`Devices`]; the embedded trained profiles:
/// `ModelChoice::new("h100").build()`.
pub mod prelude {
    pub use crate::cost::{
        AnalyticalModel, CostDefinition, CostModel, DeviceReport, HardwareProfile, ModelChoice, PlanReport, evaluate,
        model_names,
    };
    pub use crate::document::PlanDocument;
    pub use crate::error::{Error, Result};
    pub use crate::input::{parse_tables_csv, parse_tables_json};
    pub use crate::memory::{MemoryRule, TorchRecMemory};
    pub use crate::plan::{Piece, Plan, SplitRule};
    pub use crate::planners::{PlanContext, Planner, PlannerEntry, REGISTRY, planner};
    pub use crate::table::{ElementType, OptimizerState, TableInput, TableSpec};
    pub use crate::task::{Devices, SuiteSpec, Task, sample_task};
}

pub use cost::{
    AnalyticalModel, CostDefinition, CostModel, DeviceReport, HardwareProfile, PieceRef, PlanReport, evaluate,
};
pub use document::{PLAN_SCHEMA, PlanDocument};
pub use error::{Error, Result};
pub use memory::{MemoryRule, TorchRecMemory};
pub use plan::{Piece, Plan, SplitRule};
pub use planners::{PlanContext, Planner, PlannerEntry, REGISTRY};
pub use table::{ElementType, OptimizerState, TableInput, TableSpec};
pub use task::{Devices, Protocol, SuiteSpec, SuiteTask, Task};
