//! The bindings' operations on Rust values (the browser module's and the Python package's): request
//! types in, planner-core calls, documents out.
//! Nothing here touches JavaScript or Python, so it is tested natively; the clock is passed in.

use crate::cost::{ModelChoice, profiles};
use crate::planners::planner;
use crate::units::GIB;
use crate::{
    CostDefinition, CostModel, Devices, Error, HardwareProfile, MemoryRule, PLAN_SCHEMA, Plan, PlanContext,
    PlanDocument, REGISTRY, Result, Task, whatif,
};
use serde::{Deserialize, Serialize};

/// Names of the cost models this build knows (the CLI's `--cost-model`): the analytical model and the
/// embedded trained profiles.
#[must_use]
pub fn cost_model_names() -> Vec<&'static str> {
    crate::cost::model_names()
}

/// Which cost model prices plans; every field has the CLI's default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelOptions {
    /// Cost model name (see [`cost_model_names`]); default: the embedded default profile.
    pub cost_model: String,
    /// Hardware preset of the analytical model ([`HardwareProfile::BUILTIN`]); default `torchrec`, or for
    /// a trained profile's comm the preset of its hardware.
    pub hw: Option<String>,
    /// Cost definition.
    pub definition: CostDefinition,
    /// Global batch size the costs are for (default: the analytical model's 65,536, or the batch a
    /// profile was measured at; a profile refuses any other).
    pub global_batch: Option<u64>,
}

impl Default for ModelOptions {
    fn default() -> Self {
        Self {
            cost_model: profiles::DEFAULT_PROFILE.into(),
            hw: None,
            definition: CostDefinition::NeuroShard,
            global_batch: None,
        }
    }
}

impl ModelOptions {
    /// Builds the model through planner-core's one rule ([`ModelChoice`]). As in the browser a task can
    /// have any device count, a profile prices comm analytically where it has no comm model for it (the
    /// model's name says so).
    pub fn build(&self) -> Result<Box<dyn CostModel>> {
        self.choice().build()
    }

    /// The options applied to a profile loaded from outside the library (a directory the caller read):
    /// the same rule, with [`ModelOptions::cost_model`] unused.
    pub fn build_loaded(&self, model: crate::cost::NeuralModel) -> Result<Box<dyn CostModel>> {
        self.choice().build_loaded(model)
    }

    fn choice(&self) -> ModelChoice {
        ModelChoice {
            hw: self.hw.clone(),
            global_batch: self.global_batch,
            comm_fallback: true,
            ..ModelChoice::new(self.cost_model.as_str())
        }
    }
}

/// A registered planner as listed to JavaScript.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannerInfo {
    /// Registry name.
    pub name: &'static str,
    /// One line on what it does.
    pub summary: &'static str,
    /// Whether it is a seed-paper baseline.
    pub is_seed_baseline: bool,
}

/// Every registered planner, in report order.
#[must_use]
pub fn planners() -> Vec<PlannerInfo> {
    REGISTRY
        .iter()
        .map(|e| PlannerInfo { name: e.name, summary: e.summary, is_seed_baseline: e.is_seed_baseline })
        .collect()
}

/// A cost model as listed to JavaScript.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostModelInfo {
    /// Name for [`ModelOptions::cost_model`].
    pub name: &'static str,
    /// One line on what it is.
    pub summary: &'static str,
    /// Whether it prices plans when no cost model is named.
    pub is_default: bool,
    /// Hardware profiles it accepts.
    pub hardware: &'static [&'static str],
    /// Cost definitions.
    pub definitions: &'static [&'static str],
}

/// Every cost model this build knows.
#[must_use]
pub fn cost_models() -> Vec<CostModelInfo> {
    let mut models = vec![CostModelInfo {
        name: "analytical",
        summary: "TorchRec's perf estimator (table/column-wise shards, fused HBM kernels); reports forward/backward compute",
        is_default: false,
        hardware: HardwareProfile::BUILTIN,
        definitions: &["neuroshard", "four-phase"],
    }];
    models.extend(profiles::EMBEDDED.iter().map(|p| CostModelInfo {
        name: p.name,
        summary: p.hardware,
        is_default: p.name == profiles::DEFAULT_PROFILE,
        hardware: HardwareProfile::BUILTIN,
        definitions: &["neuroshard", "four-phase"],
    }));
    models
}

/// How to draw a task from the built-in pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SampleRequest {
    /// Number of devices.
    pub devices: usize,
    /// Cap of every device (default 4 GiB, the seeds' protocol).
    #[serde(default)]
    pub mem_cap_bytes: Option<u64>,
    /// Largest dim (a power of two in 4..=128; default 128).
    #[serde(default)]
    pub max_dim: Option<u32>,
    /// Number of tables; absent: the NeuroShard protocol draws it (2.5–15 per device, within memory).
    #[serde(default)]
    pub tables: Option<usize>,
    /// Seed.
    #[serde(default)]
    pub seed: u64,
    /// Index of the task in the NeuroShard suite of `seed` (default 0): the same task as line `index`
    /// of `shardplan tasks --seed <seed>`.
    #[serde(default)]
    pub index: usize,
}

/// Draws a task as [`SampleRequest`] says.
pub fn sample_task(req: &SampleRequest) -> Result<Task> {
    let ctx = "sample request";
    let max_dim = req.max_dim.unwrap_or(128);
    let cap = req.mem_cap_bytes.unwrap_or(4 * GIB);
    if cap == 0 {
        return Err(Error::field(ctx, "mem_cap_bytes", 0, "at least 1 byte"));
    }
    if req.devices == 0 {
        return Err(Error::field(ctx, "devices", 0, "at least 1"));
    }
    crate::task::sample_task(Devices::uniform(req.devices, cap)?, max_dim, req.tables, req.seed, req.index)
}

/// Parses uploaded tables text as `format` (`csv` or `json`).
pub fn parse_tables(text: &str, format: &str, default_dim: Option<u32>) -> Result<Vec<crate::TableSpec>> {
    match format.to_ascii_lowercase().as_str() {
        "csv" => crate::input::parse_tables_csv(text, default_dim),
        "json" => crate::input::parse_tables_json(text),
        other => Err(Error::field("uploaded tables", "format", format!("{other:?}"), "\"csv\" or \"json\"")),
    }
}

/// What to plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanRequest {
    /// The task.
    pub task: Task,
    /// Planner name (see [`planners`]).
    pub planner: String,
    /// Seed of randomised planners.
    #[serde(default)]
    pub seed: u64,
    /// Cost model (default: analytical, TorchRec bandwidths, NeuroShard definition).
    #[serde(default)]
    pub model: ModelOptions,
    /// Run the planner this many times (1..=10,000, default 1) and report the mean time per run:
    /// browsers round `performance.now()` to 0.1 ms, coarser than a fast planner's run.
    #[serde(default = "one")]
    pub repeat: u32,
    /// The memory rule the task is planned and judged under (it replaces the task's own `memory`);
    /// default: TorchRec's rule with TorchRec's defaults, as the CLI.
    #[serde(default = "MemoryRule::torchrec")]
    pub memory: MemoryRule,
    /// Milliseconds the planner may search (each run): a search returns its best plan when they are
    /// spent, as `shardplan plan --budget-ms` (the page gives every planner the same budget, so a slow
    /// search cannot hold up the others). Default: no limit.
    #[serde(default)]
    pub budget_ms: Option<f64>,
    /// The hosts the task's devices are on (it replaces the task's own `topology` when given; see
    /// [`topology_presets`]). Default: the task's own, or one host.
    #[serde(default)]
    pub topology: Option<crate::topology::TopologySpec>,
    /// Memory tiers: `"auto"` (default, as the CLI: tables move to host memory behind HBM caches when
    /// they do not fit in HBM) or `"hbm"`.
    #[serde(default = "auto_tiers")]
    pub tiers: String,
}

fn auto_tiers() -> String {
    "auto".into()
}

/// A topology preset as listed to the bindings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopologyPresetInfo {
    /// Name for [`crate::topology::TopologySpec::preset`].
    pub name: &'static str,
    /// One line on what it is.
    pub description: &'static str,
    /// Devices per host.
    pub devices_per_host: usize,
    /// Network bandwidth per device, GB/s.
    pub network_gbps: f64,
    /// Network latency, µs.
    pub network_latency_us: f64,
    /// Host DRAM per host, bytes.
    pub host_dram_bytes: u64,
}

/// Every topology preset.
#[must_use]
pub fn topology_presets() -> Vec<TopologyPresetInfo> {
    crate::topology::TOPOLOGY_PRESETS
        .iter()
        .map(|p| TopologyPresetInfo {
            name: p.name,
            description: p.description,
            devices_per_host: p.devices_per_host,
            network_gbps: p.network.bw_bytes_per_s / 1e9,
            network_latency_us: p.network.latency_ms * 1e3,
            host_dram_bytes: p.host_dram_bytes,
        })
        .collect()
}

fn one() -> u32 {
    1
}

/// Most runs [`PlanRequest::repeat`] allows.
pub const MAX_REPEAT: u32 = 10_000;

/// A plan and how long the planner took.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanOutcome {
    /// The plan with its report (`shardplan.plan/v1`).
    pub document: PlanDocument,
    /// Wall time of the planner call alone, ms (not evaluation or conversion).
    pub planning_ms: f64,
}

/// Plans `req.task` with `req.planner`; `now_ms` is a monotonic clock in ms.
pub fn plan(req: &PlanRequest, now_ms: impl Fn() -> f64) -> Result<PlanOutcome> {
    plan_with(req, req.model.build()?.as_ref(), now_ms)
}

/// [`plan`] with a cost model the caller built (a loaded profile: [`ModelOptions::build_loaded`]);
/// `req.model` gives only the cost definition.
pub fn plan_with(req: &PlanRequest, model: &dyn CostModel, now_ms: impl Fn() -> f64) -> Result<PlanOutcome> {
    let entry = planner(&req.planner)?;
    let planner = entry.build();
    if !(1..=MAX_REPEAT).contains(&req.repeat) {
        return Err(Error::field("plan request", "repeat", req.repeat, format!("1..={MAX_REPEAT}")));
    }
    let clock: &dyn Fn() -> f64 = &now_ms;
    let ctx = match req.budget_ms {
        None => PlanContext::new(model, req.seed),
        Some(ms) if ms.is_finite() && ms > 0.0 => PlanContext::new(model, req.seed).with_budget(clock, ms),
        Some(ms) => return Err(Error::field("plan request", "budget_ms", ms, "a positive number of milliseconds")),
    };
    let mut task = req.task.clone().with_memory(req.memory);
    if let Some(spec) = &req.topology {
        let topology = spec.resolve(task.devices.count())?;
        task = task.with_topology(topology)?;
    }
    let tiers = crate::tier::TierMode::parse(&req.tiers)?;
    let start = now_ms();
    let (task, mut plan) = crate::planners::plan_tiered(planner.as_ref(), &task, &ctx, tiers)?;
    for _ in 1..req.repeat {
        plan = planner.plan(&task, &ctx)?;
    }
    let planning_ms = (now_ms() - start) / f64::from(req.repeat);
    let report = crate::evaluate(&task, &plan, model, req.model.definition)?;
    Ok(PlanOutcome { document: PlanDocument::new(entry.name, req.seed, task, &plan, report), planning_ms })
}

fn validated(doc: &PlanDocument) -> Result<Plan> {
    if doc.schema != PLAN_SCHEMA {
        return Err(Error::field("plan document", "schema", format!("{:?}", doc.schema), format!("{PLAN_SCHEMA:?}")));
    }
    Plan::new(&doc.task, doc.pieces.clone())
}

/// Re-evaluates a plan document under `model`.
pub fn evaluate(doc: PlanDocument, model: &ModelOptions) -> Result<PlanDocument> {
    evaluate_with(doc, model.build()?.as_ref(), model.definition)
}

/// [`evaluate`] with a cost model the caller built, under `definition`.
pub fn evaluate_with(doc: PlanDocument, model: &dyn CostModel, definition: CostDefinition) -> Result<PlanDocument> {
    let plan = validated(&doc)?;
    let report = crate::evaluate(&doc.task, &plan, model, definition)?;
    Ok(PlanDocument { report, ..doc })
}

/// A plan document as TorchRec's sharding plan (`shardplan export --format torchrec`): per table its
/// sharding type, compute kernel, ranks and shard metadata; `local_world_size` groups ranks into hosts
/// for table-row-wise sharding.
pub fn to_torchrec(
    doc: &PlanDocument,
    local_world_size: Option<usize>,
) -> Result<crate::torchrec_plan::TorchRecPlanDocument> {
    let plan = validated(doc)?;
    crate::torchrec_plan::to_torchrec_plan(&doc.task, &plan, local_world_size)
}

/// Suffix of the planner name of an edited plan, so a downloaded plan says it was edited by hand.
pub const EDITED_SUFFIX: &str = "+what-if";

/// Applies `edit` to a plan document and re-evaluates it.
pub fn what_if(doc: PlanDocument, edit: &whatif::Edit, model: &ModelOptions) -> Result<PlanDocument> {
    let plan = validated(&doc)?;
    let (task, plan) = whatif::apply(&doc.task, &plan, edit)?;
    let report = crate::evaluate(&task, &plan, model.build()?.as_ref(), model.definition)?;
    let planner =
        if doc.planner.ends_with(EDITED_SUFFIX) { doc.planner } else { format!("{}{EDITED_SUFFIX}", doc.planner) };
    Ok(PlanDocument::new(&planner, doc.seed, task, &plan, report))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SuiteSpec;

    fn sample() -> Task {
        sample_task(&SampleRequest {
            devices: 4,
            mem_cap_bytes: None,
            max_dim: Some(64),
            tables: None,
            seed: 7,
            index: 0,
        })
        .unwrap()
    }

    #[test]
    fn samples_the_same_task_as_the_suite() {
        let t = sample();
        assert_eq!(t, SuiteSpec::neuroshard(4, 64, 1, 7).task(0).unwrap().task);
        let n = sample_task(&SampleRequest { tables: Some(12), ..serde_json::from_str(r#"{"devices": 2}"#).unwrap() })
            .unwrap();
        assert_eq!((n.tables.len(), n.devices.count()), (12, 2));
        let e = sample_task(&serde_json::from_str(r#"{"devices": 0}"#).unwrap()).unwrap_err().to_string();
        assert!(e.contains("`devices` = 0"), "{e}");
        // The suite index is bounded as `shardplan tasks --count` is (it once overflowed `index + 1`).
        let e = sample_task(&serde_json::from_str(r#"{"devices": 2, "index": 18446744073709551615}"#).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("`index` = 18446744073709551615"), "{e}");
        let last = sample_task(&serde_json::from_str(r#"{"devices": 2, "index": 999999}"#).unwrap()).unwrap();
        assert_eq!(last.devices.count(), 2);
    }

    #[test]
    fn plan_evaluate_and_edit_agree() {
        let req = PlanRequest {
            task: sample(),
            planner: "size-lookup".into(),
            seed: 0,
            model: ModelOptions::default(),
            repeat: 1,
            memory: MemoryRule::torchrec(),
            budget_ms: None,
            topology: None,
            tiers: "auto".into(),
        };
        let ticks = std::cell::Cell::new(1.0);
        let out = plan(&req, || ticks.replace(3.5)).unwrap();
        assert_eq!(out.planning_ms, 2.5);
        let ticks = std::cell::Cell::new(1.0);
        let five = plan(&PlanRequest { repeat: 5, ..req.clone() }, || ticks.replace(11.0)).unwrap();
        assert_eq!((five.planning_ms, &five.document), (2.0, &out.document));
        let e = plan(&PlanRequest { repeat: 0, ..req.clone() }, || 0.0).unwrap_err().to_string();
        assert!(e.contains("`repeat` = 0"), "{e}");
        let doc = out.document;
        assert_eq!(doc.schema, PLAN_SCHEMA);
        assert!(doc.report.cost_ms > 0.0 && doc.report.feasible);
        // Re-evaluating gives the same report; another definition gives another one.
        assert_eq!(evaluate(doc.clone(), &ModelOptions::default()).unwrap(), doc);
        let four = ModelOptions { definition: CostDefinition::FourPhase, ..ModelOptions::default() };
        assert_eq!(evaluate(doc.clone(), &four).unwrap().report.definition, CostDefinition::FourPhase);
        // Moving a piece off the bottleneck device changes the cost and marks the plan as edited.
        let p = doc.pieces.iter().find(|p| p.device == doc.report.bottleneck_device).unwrap();
        let to_device = (p.device + 1) % 4;
        let edit = whatif::Edit::Move { table_id: p.table_id, col_offset: p.col_offset, to_device };
        let edited = what_if(doc.clone(), &edit, &ModelOptions::default()).unwrap();
        assert_ne!(edited.report.cost_ms, doc.report.cost_ms);
        assert_eq!(edited.planner, "size-lookup+what-if");
        let again = what_if(edited, &edit, &ModelOptions::default()).unwrap();
        assert_eq!(again.planner, "size-lookup+what-if");
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        let req = PlanRequest {
            task: sample(),
            planner: "magic".into(),
            seed: 0,
            model: ModelOptions::default(),
            repeat: 1,
            memory: MemoryRule::torchrec(),
            budget_ms: None,
            topology: None,
            tiers: "auto".into(),
        };
        assert!(plan(&req, || 0.0).unwrap_err().to_string().contains("unknown planner `magic`"));
        let bad_hw = ModelOptions { hw: Some("tpu".into()), ..ModelOptions::default() };
        assert!(bad_hw.build().err().unwrap().to_string().contains("\"tpu\""));
        let bad_model = ModelOptions { cost_model: "oracle".into(), ..ModelOptions::default() };
        assert!(bad_model.build().err().unwrap().to_string().contains("oracle"));
        let e = parse_tables("rows", "xml", None).unwrap_err().to_string();
        assert!(e.contains("`format` = \"xml\""), "{e}");
        let e = parse_tables("rows,dim,pooling_factor\n10,6,1\n", "csv", None).unwrap_err().to_string();
        assert!(e.contains("`dim` = 6"), "{e}");
        let out = plan(&PlanRequest { planner: "dim".into(), ..req }, || 0.0).unwrap();
        let doc = PlanDocument { schema: "other/v9".into(), ..out.document };
        let e = evaluate(doc, &ModelOptions::default()).unwrap_err().to_string();
        assert!(e.contains("`schema`") && e.contains("other/v9"), "{e}");
    }

    #[test]
    fn lists_every_registered_planner() {
        let names: Vec<&str> = planners().iter().map(|p| p.name).collect();
        assert_eq!(names, REGISTRY.iter().map(|e| e.name).collect::<Vec<_>>());
        let models: Vec<&str> = cost_models().iter().map(|m| m.name).collect();
        assert_eq!(models, cost_model_names());
        assert_eq!(cost_models().iter().filter(|m| m.is_default).count(), 1);
        // The default prices with the embedded H100 profile and says so.
        assert!(ModelOptions::default().build().unwrap().name().starts_with("neural:h100"));
    }
}
