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
pub mod torchrec_plan;
pub mod units;
pub mod whatif;

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
