//! DreamShard (SPEC section 6): a learned policy places the tables one by one, greedily (argmax).
//!
//! The MDP: tables in descending order of their predicted single-table cost; device d is described by
//! the sum of a table MLP over its tables and three predicted costs of its set (compute, forward comm,
//! backward comm) from the cost network, both taken with the table being placed added (the outcome of
//! choosing d); legal actions are the devices where the table still fits. The policy scores each
//! device as `out([Σ policy_table ‖ policy_cost(costs)])`.
//! The cost network's overall head, on the element-wise max of the device sums, predicts the plan's
//! cost: the reward the policy was trained on (the trainer, `shardplan-train dreamshard`).
//!
//! Both networks run natively from their exported ONNX graphs ([`NativeMlp`]), so a plan of a hundred
//! tables takes well under a millisecond, in the browser too. The sum and max reductions are what let
//! one trained policy plan any table count and any device count.

use std::sync::OnceLock;

use super::{PlanContext, Planner, SearchStats, StatsCell};
use crate::cost::native::NativeMlp;
use crate::error::{Error, Result};
use crate::features::{DREAMSHARD_LEN, dreamshard_task_features};
use crate::plan::Plan;
use crate::policy::{LoadedPolicy, PolicyAlgorithm, embedded};
use crate::task::Task;

/// Width of the table embeddings (cost and policy table MLPs).
pub const EMBED: usize = 32;
/// Per-device cost features: compute, forward comm, backward comm (ms).
pub const COST_FEATURES: usize = 3;
/// Graph roles of a DreamShard policy, in the order of [`DreamShardNets`]' fields, with their widths.
pub const ROLES: [(&str, usize, usize); 8] = [
    ("cost_table", DREAMSHARD_LEN, EMBED),
    ("cost_compute", EMBED, 1),
    ("cost_fw_comm", EMBED, 1),
    ("cost_bw_comm", EMBED, 1),
    ("cost_overall", EMBED, 1),
    ("policy_table", DREAMSHARD_LEN, EMBED),
    ("policy_cost", COST_FEATURES, EMBED),
    ("policy_out", 2 * EMBED, 1),
];

/// The cost and policy networks of a trained DreamShard policy.
#[derive(Debug, Clone)]
pub struct DreamShardNets {
    /// Policy name (from its card).
    pub name: String,
    cost_table: NativeMlp,
    cost_heads: [NativeMlp; COST_FEATURES],
    cost_overall: NativeMlp,
    policy_table: NativeMlp,
    policy_cost: NativeMlp,
    policy_out: NativeMlp,
}

/// Per-table embeddings of a task under both table MLPs.
#[derive(Debug, Clone)]
pub struct TaskEmbeddings {
    /// Cost-network table embeddings, one per table.
    pub cost: Vec<Vec<f64>>,
    /// Policy-network table embeddings, one per table.
    pub policy: Vec<Vec<f64>>,
}

impl DreamShardNets {
    /// Reads every graph of `policy`.
    ///
    /// # Errors
    /// [`Error::ModelSchemaMismatch`] when a graph is missing or of other widths than [`ROLES`].
    pub fn from_policy(policy: &LoadedPolicy) -> Result<Self> {
        if policy.card.algorithm != PolicyAlgorithm::DreamShard {
            return Err(Error::ModelSchemaMismatch {
                model: policy.card.name.clone(),
                what: "algorithm".into(),
                expected: "DreamShard".into(),
                found: format!("{:?}", policy.card.algorithm),
            });
        }
        let mut nets =
            ROLES.iter().map(|&(role, i, o)| policy.mlp(role, i, o)).collect::<Result<Vec<_>>>()?.into_iter();
        let mut next = || nets.next().ok_or_else(|| Error::InvalidPlan("role list exhausted".into()));
        Ok(Self {
            name: policy.card.name.clone(),
            cost_table: next()?,
            cost_heads: [next()?, next()?, next()?],
            cost_overall: next()?,
            policy_table: next()?,
            policy_cost: next()?,
            policy_out: next()?,
        })
    }

    /// The embedded default policy.
    ///
    /// # Errors
    /// [`Error::UnknownCostModel`] when this build embeds no DreamShard policy; a load error otherwise.
    pub fn embedded() -> Result<Self> {
        let p = embedded(PolicyAlgorithm::DreamShard).ok_or_else(|| Error::UnknownCostModel {
            name: "dreamshard policy".into(),
            known: "none embedded in this build".into(),
        })?;
        Self::from_policy(&p.load()?)
    }

    /// Both table embeddings of every table of `task` (DreamShard features, task-normalised).
    #[must_use]
    pub fn embed(&self, task: &Task) -> TaskEmbeddings {
        let feats = dreamshard_task_features(&task.tables.iter().map(|t| (t, t.dim)).collect::<Vec<_>>());
        let raw: Vec<Vec<f64>> = feats.iter().map(|f| f.iter().map(|&x| f64::from(x)).collect()).collect();
        TaskEmbeddings {
            cost: raw.iter().map(|f| self.cost_table.forward(f)).collect(),
            policy: raw.iter().map(|f| self.policy_table.forward(f)).collect(),
        }
    }

    /// Predicted (compute, forward comm, backward comm) of a device whose cost-embedding sum is `sum`.
    #[must_use]
    pub fn device_costs(&self, sum: &[f64]) -> [f64; COST_FEATURES] {
        let mut out = [0.0; COST_FEATURES];
        for (o, head) in out.iter_mut().zip(&self.cost_heads) {
            *o = head.forward(sum)[0];
        }
        out
    }

    /// Predicted overall cost of a plan whose devices have cost-embedding sums `sums`.
    #[must_use]
    pub fn overall_ms(&self, sums: &[Vec<f64>]) -> f64 {
        let mut max = vec![f64::NEG_INFINITY; EMBED];
        for s in sums {
            for (m, v) in max.iter_mut().zip(s) {
                *m = m.max(*v);
            }
        }
        if sums.is_empty() {
            max.fill(0.0);
        }
        self.cost_overall.forward(&max)[0]
    }

    /// The policy's logit for a device with policy-embedding sum `policy_sum` and cost features `costs`.
    #[must_use]
    pub fn logit(&self, policy_sum: &[f64], costs: &[f64; COST_FEATURES]) -> f64 {
        let mut x = policy_sum.to_vec();
        x.extend(self.policy_cost.forward(costs));
        self.policy_out.forward(&x)[0]
    }

    /// Placement order: tables by predicted single-table cost (the three device costs of a device
    /// holding only that table), largest first; ties by size, then index.
    #[must_use]
    pub fn order(&self, task: &Task, emb: &TaskEmbeddings) -> Vec<usize> {
        let single: Vec<f64> = emb.cost.iter().map(|e| self.device_costs(e).iter().sum()).collect();
        let sizes: Vec<u64> = task.tables.iter().map(crate::table::TableSpec::size_bytes).collect();
        super::largest_first(&single, &sizes)
    }

    /// Places every table greedily (argmax over legal devices, ties → lowest index); returns each
    /// table's device.
    ///
    /// # Errors
    /// [`Error::NoFit`] when a table fits on no device.
    pub fn place(&self, task: &Task) -> Result<Vec<usize>> {
        Ok(self.rollout(task, greedy_choice)?.device_of)
    }

    /// [`DreamShardNets::place`] until `stop` (asked before every table) says so; then each table left
    /// goes to the legal device with the least summed lookups (pooling factor × dim). Returns each
    /// table's device and whether `stop` cut the policy short.
    ///
    /// # Errors
    /// [`Error::NoFit`] when a table fits on no device.
    pub fn place_until(&self, task: &Task, stop: &dyn Fn() -> bool) -> Result<(Vec<usize>, bool)> {
        let r = self.rollout_until(task, greedy_choice, stop)?;
        let stopped = r.steps.len() < task.tables.len();
        Ok((r.device_of, stopped))
    }

    /// Runs the MDP on `task`, `choose` picking a device from the logits of every device and which
    /// devices are legal (it must return a legal one). Records every step, so a trainer can rebuild
    /// the log-probabilities of the actions taken.
    ///
    /// # Errors
    /// [`Error::NoFit`] when a table fits on no device; [`Error::InvalidPlan`] when `choose` returns an
    /// illegal device.
    pub fn rollout(&self, task: &Task, choose: impl FnMut(&[f64], &[bool]) -> usize) -> Result<Rollout> {
        self.rollout_until(task, choose, &|| false)
    }

    /// [`DreamShardNets::rollout`] with a stop: once `stop` says so, no more steps are recorded and the
    /// tables left go to the legal device with the least summed lookups.
    fn rollout_until(
        &self,
        task: &Task,
        mut choose: impl FnMut(&[f64], &[bool]) -> usize,
        stop: &dyn Fn() -> bool,
    ) -> Result<Rollout> {
        let d = task.devices.count();
        let mut lookups = vec![0.0; d];
        let mut stopped = false;
        let usable = task.usable_bytes()?;
        let emb = self.embed(task);
        let mut cost_sum = vec![vec![0.0; EMBED]; d];
        let mut policy_sum = vec![vec![0.0; EMBED]; d];
        let mut used = vec![0u64; d];
        let mut device_of = vec![0usize; task.tables.len()];
        let order = self.order(task, &emb);
        let mut steps = Vec::with_capacity(order.len());
        for &t in &order {
            let table = &task.tables[t];
            let need = task.block_bytes(table, table.rows, table.dim)?;
            let legal: Vec<bool> = (0..d).map(|r| crate::memory::fits(used[r], need, usable[r])).collect();
            if !legal.contains(&true) {
                return Err(Error::NoFit {
                    table: table.name.clone(),
                    need_bytes: need,
                    best_free_bytes: (0..d).map(|r| usable[r].saturating_sub(used[r])).max().unwrap_or(0),
                });
            }
            stopped = stopped || stop();
            if stopped {
                let r = super::least_loaded_legal(&lookups, &legal).unwrap_or(0);
                used[r] += need;
                lookups[r] += table.pooling_factor * f64::from(table.dim);
                for (s, v) in cost_sum[r].iter_mut().zip(&emb.cost[t]) {
                    *s += v;
                }
                device_of[t] = r;
                continue;
            }
            // Every device as it would be with the table: its cost features and policy sum after the
            // placement (the action's outcome), so the policy scores what each choice leads to.
            let mut costs = Vec::with_capacity(d);
            let mut logits = Vec::with_capacity(d);
            let mut with = vec![0.0; EMBED];
            for r in 0..d {
                add_into(&mut with, &cost_sum[r], &emb.cost[t]);
                let c = self.device_costs(&with);
                add_into(&mut with, &policy_sum[r], &emb.policy[t]);
                logits.push(self.logit(&with, &c));
                costs.push(c);
            }
            let r = choose(&logits, &legal);
            if !legal.get(r).copied().unwrap_or(false) {
                return Err(Error::InvalidPlan(format!(
                    "table `{}` sent to device {r}, where it does not fit",
                    table.name
                )));
            }
            used[r] += need;
            lookups[r] += table.pooling_factor * f64::from(table.dim);
            for (s, v) in cost_sum[r].iter_mut().zip(&emb.cost[t]) {
                *s += v;
            }
            for (s, v) in policy_sum[r].iter_mut().zip(&emb.policy[t]) {
                *s += v;
            }
            device_of[t] = r;
            steps.push(Step { table: t, legal, costs, logits, action: r });
        }
        let predicted_ms = self.overall_ms(&cost_sum);
        let slowest_device_ms =
            cost_sum.iter().map(|s| self.device_costs(s).iter().sum::<f64>()).fold(f64::NEG_INFINITY, f64::max);
        Ok(Rollout { device_of, steps, predicted_ms, slowest_device_ms })
    }
}

/// `out = a + b`, element-wise.
fn add_into(out: &mut [f64], a: &[f64], b: &[f64]) {
    for ((o, x), y) in out.iter_mut().zip(a).zip(b) {
        *o = x + y;
    }
}

/// The greedy chooser of [`DreamShardNets::rollout`]: the largest logit among legal devices (ties →
/// lowest index); 0 when none is legal (the rollout refuses that case before asking).
#[must_use]
pub fn greedy_choice(logits: &[f64], legal: &[bool]) -> usize {
    super::argmax_legal(logits, legal).unwrap_or(0)
}

/// One decision of a rollout.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The table placed.
    pub table: usize,
    /// Devices it fitted on.
    pub legal: Vec<bool>,
    /// Every device's cost features if the table went there.
    pub costs: Vec<[f64; COST_FEATURES]>,
    /// Every device's logit.
    pub logits: Vec<f64>,
    /// The device chosen.
    pub action: usize,
}

/// A finished episode of the MDP.
#[derive(Debug, Clone, PartialEq)]
pub struct Rollout {
    /// Each table's device.
    pub device_of: Vec<usize>,
    /// The decisions, in placement order.
    pub steps: Vec<Step>,
    /// The cost network's overall head on the final plan, ms.
    pub predicted_ms: f64,
    /// The slowest device of the final plan by the cost network's per-device heads (the four-phase
    /// definition on predicted phases), ms.
    pub slowest_device_ms: f64,
}

/// The `dreamshard` planner: a trained policy run greedily. Table-wise only (DreamShard never splits).
#[derive(Default)]
pub struct DreamShard {
    nets: OnceLock<DreamShardNets>,
    stats: StatsCell,
}

impl DreamShard {
    /// A planner running `nets` instead of the embedded default policy.
    #[must_use]
    pub fn with_nets(nets: DreamShardNets) -> Self {
        let cell = OnceLock::new();
        let _ = cell.set(nets);
        Self { nets: cell, stats: StatsCell::default() }
    }

    fn nets(&self) -> Result<&DreamShardNets> {
        if let Some(n) = self.nets.get() {
            return Ok(n);
        }
        let loaded = DreamShardNets::embedded()?;
        Ok(self.nets.get_or_init(|| loaded))
    }
}

impl Planner for DreamShard {
    fn name(&self) -> &'static str {
        "dreamshard"
    }

    fn plan(&self, task: &Task, ctx: &PlanContext<'_>) -> Result<Plan> {
        let watch = ctx.stopwatch();
        let (device_of, stopped_early) = self.nets()?.place_until(task, &|| watch.out_of_time())?;
        self.stats.set(SearchStats { stopped_early, ..SearchStats::default() });
        Plan::unsplit(task, &device_of)
    }

    fn last_stats(&self) -> Option<SearchStats> {
        self.stats.get()
    }
}
