//! The plan file: a versioned, self-contained JSON document (task, pieces, report) that the CLI
//! writes, the collector measures and the browser reads. Schema: `docs/FORMATS.md`.

use serde::{Deserialize, Serialize};

use crate::cost::PlanReport;
use crate::error::{Error, Result};
use crate::plan::{Piece, Plan};
use crate::task::Task;

/// Schema tag of plan documents.
pub const PLAN_SCHEMA: &str = "shardplan.plan/v1";

/// A plan with everything needed to read it on its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanDocument {
    /// Always [`PLAN_SCHEMA`].
    pub schema: String,
    /// Planner that made it.
    pub planner: String,
    /// Seed it was made with.
    pub seed: u64,
    /// The task.
    pub task: Task,
    /// The pieces and their devices.
    pub pieces: Vec<Piece>,
    /// Its cost when written.
    pub report: PlanReport,
}

impl PlanDocument {
    /// A document for a plan of `task`.
    #[must_use]
    pub fn new(planner: &str, seed: u64, task: Task, plan: &Plan, report: PlanReport) -> Self {
        Self { schema: PLAN_SCHEMA.into(), planner: planner.into(), seed, task, pieces: plan.pieces().to_vec(), report }
    }

    /// Parses and validates a document (schema tag, task, plan).
    pub fn from_json(text: &str) -> Result<(Self, Plan)> {
        let doc: Self = serde_json::from_str(text)
            .map_err(|e| Error::Parse { context: "plan JSON".into(), message: e.to_string() })?;
        if doc.schema != PLAN_SCHEMA {
            return Err(Error::field("plan JSON", "schema", format!("{:?}", doc.schema), format!("{PLAN_SCHEMA:?}")));
        }
        let plan = Plan::new(&doc.task, doc.pieces.clone())?;
        Ok((doc, plan))
    }
}
