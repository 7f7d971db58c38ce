//! AutoShard (KDD'22, SPEC section 6): a learned policy places tables one per step, in descending
//! order of predicted single-table compute, and is trained by actor-critic with V-trace targets
//! (the trainer's `autoshard` module; `docs/AUTOSHARD.md`).
//!
//! The MDP, shared with the trainer so that the two cannot drift ([`Episode`]):
//! * **Order.** Tables sorted by the single-table compute of the card's cost profile, largest first
//!   (ties: larger size, then lower index).
//! * **State.** A two-layer LSTM (hidden 64) over the step inputs: the 21 task-normalised features of
//!   the table being placed and the fraction of tables placed so far (22 wide). The inputs do not
//!   depend on the actions, so the state of every step is known before the first placement.
//! * **Action features, per device.** The sum over the device's tables of a learned latent
//!   (MLP 21 → 64 → 62), the predicted compute of its current set in ms, its size sum over its cap
//!   (64 wide).
//! * **Logit per device.** An MLP on `[s, a, s⊙a]` (192 → 128 → 128 → 64 → 1); a value head on `s`
//!   (64 → 64 → 1) is used only in training.
//! * **Legal actions.** Devices where the table fits in the memory left; none → [`Error::NoFit`].
//!
//! Inference is greedy (argmax, ties to the lower device) and deterministic. The LSTM cells are ONNX
//! graphs (one per layer, `MatMul`/`Add`/`Sigmoid`/`Tanh`/`Mul` with the gate weights pre-split); they
//! are evaluated natively from the graph's initializers ([`LstmCell`]), and the integration tests check
//! the native cell against tract running the same graph. The MLPs run as [`NativeMlp`]s.
//!
//! The planner prices its state features with the card's cost profile (`h100` for the embedded
//! policy), whatever cost model the caller plans against: the policy was trained on those numbers.

use std::cell::OnceCell;
use std::collections::HashMap;

use crate::cost::onnx::TensorProto;

use super::{PlanContext, Planner, SearchStats, StatsCell};
use crate::cost::native::NativeMlp;
use crate::cost::{CostModel, NeuralModel, PieceRef, profiles};
use crate::error::{Error, Result};
use crate::features::{DREAMSHARD_LEN, dreamshard_task_features};
use crate::plan::Plan;
use crate::policy::{LoadedPolicy, PolicyAlgorithm, embedded};
use crate::task::Task;

/// Width of a step input: the table's 21 features and the fraction of tables placed.
pub const STEP_INPUT_LEN: usize = DREAMSHARD_LEN + 1;
/// LSTM hidden (and cell) width.
pub const HIDDEN: usize = 64;
/// Stacked LSTM layers.
pub const LSTM_LAYERS: usize = 2;
/// Width of a table latent.
pub const LATENT_LEN: usize = 62;
/// Width of a device's action features: latent sum, compute ms, size over cap.
pub const ACTION_LEN: usize = LATENT_LEN + 2;
/// Table latent MLP widths.
pub const LATENT_WIDTHS: [usize; 3] = [DREAMSHARD_LEN, 64, LATENT_LEN];
/// Logit MLP widths (input `[s, a, s⊙a]`).
pub const LOGIT_WIDTHS: [usize; 5] = [3 * HIDDEN, 128, 128, 64, 1];
/// Value head widths.
pub const VALUE_WIDTHS: [usize; 3] = [HIDDEN, 64, 1];
/// Gate order of the LSTM initializers (`W_i`, `R_i`, `B_i`, ...): input, forget, cell, output.
pub const GATES: [&str; 4] = ["i", "f", "g", "o"];

/// Graph role of LSTM layer `layer` in a policy card.
#[must_use]
pub fn lstm_role(layer: usize) -> String {
    format!("lstm_{layer}")
}

/// Graph role of the table latent MLP.
pub const ROLE_LATENT: &str = "latent";
/// Graph role of the logit MLP.
pub const ROLE_LOGIT: &str = "logit";
/// Graph role of the value head.
pub const ROLE_VALUE: &str = "value";

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// One LSTM cell read from its ONNX graph: inputs `x` `[N, in]`, `h` `[N, 64]`, `c` `[N, 64]`, outputs
/// `h_out`, `c_out`; initializers `W_k` `[in, 64]`, `R_k` `[64, 64]`, `B_k` `[64]` for every gate `k`
/// of [`GATES`].
#[derive(Debug, Clone, PartialEq)]
pub struct LstmCell {
    /// Input width.
    pub inputs: usize,
    /// Per gate: input weights, row-major `[in, 64]`.
    w: [Vec<f64>; 4],
    /// Per gate: recurrent weights, row-major `[64, 64]`.
    r: [Vec<f64>; 4],
    /// Per gate: bias `[64]`.
    b: [Vec<f64>; 4],
}

impl LstmCell {
    /// Reads the cell from ONNX bytes; the message names what is missing or of the wrong shape.
    pub fn from_onnx(bytes: &[u8]) -> std::result::Result<Self, String> {
        let model = crate::cost::onnx::decode_model(bytes)?;
        let graph = model.graph.as_ref().ok_or("model has no graph")?;
        let inits: HashMap<&str, &TensorProto> = graph.initializer.iter().map(|t| (t.name.as_str(), t)).collect();
        let get = |name: String, dims: &[usize]| -> std::result::Result<Vec<f64>, String> {
            let t = inits.get(name.as_str()).ok_or_else(|| format!("no initializer `{name}`"))?;
            let found: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
            if found != dims {
                return Err(format!("initializer `{name}` has dims {found:?}, expected {dims:?}"));
            }
            let v = crate::cost::native::tensor_f64(t)?;
            if v.len() != dims.iter().product::<usize>() {
                return Err(format!("initializer `{name}` holds {} values for dims {dims:?}", v.len()));
            }
            Ok(v)
        };
        let inputs = inits
            .get("W_i")
            .and_then(|t| t.dims.first())
            .map(|&d| d as usize)
            .ok_or("no initializer `W_i` (not an LSTM cell graph)")?;
        let mut w: [Vec<f64>; 4] = Default::default();
        let mut r: [Vec<f64>; 4] = Default::default();
        let mut b: [Vec<f64>; 4] = Default::default();
        for (k, gate) in GATES.iter().enumerate() {
            w[k] = get(format!("W_{gate}"), &[inputs, HIDDEN])?;
            r[k] = get(format!("R_{gate}"), &[HIDDEN, HIDDEN])?;
            b[k] = get(format!("B_{gate}"), &[HIDDEN])?;
        }
        for out in ["h_out", "c_out"] {
            if !graph.output.iter().any(|o| o.name == out) {
                return Err(format!("graph has no output `{out}`"));
            }
        }
        Ok(Self { inputs, w, r, b })
    }

    /// One step: `(h', c')` from input `x` and the previous `h`, `c`.
    #[must_use]
    #[allow(clippy::many_single_char_names)] // x, h, c and the gates i, f, g, o, as in the LSTM equations
    pub fn step(&self, x: &[f64], h: &[f64], c: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let mut pre = [[0.0f64; HIDDEN]; 4];
        for (k, p) in pre.iter_mut().enumerate() {
            p.copy_from_slice(&self.b[k]);
            for (i, xi) in x.iter().enumerate() {
                let row = &self.w[k][i * HIDDEN..(i + 1) * HIDDEN];
                for (pj, wj) in p.iter_mut().zip(row) {
                    *pj += xi * wj;
                }
            }
            for (i, hi) in h.iter().enumerate() {
                let row = &self.r[k][i * HIDDEN..(i + 1) * HIDDEN];
                for (pj, wj) in p.iter_mut().zip(row) {
                    *pj += hi * wj;
                }
            }
        }
        let mut h2 = vec![0.0; HIDDEN];
        let mut c2 = vec![0.0; HIDDEN];
        for j in 0..HIDDEN {
            let (i, f, g, o) = (sigmoid(pre[0][j]), sigmoid(pre[1][j]), pre[2][j].tanh(), sigmoid(pre[3][j]));
            c2[j] = f * c[j] + i * g;
            h2[j] = o * c2[j].tanh();
        }
        (h2, c2)
    }
}

/// The policy-value network of a loaded AutoShard policy, evaluated natively.
#[derive(Debug, Clone)]
pub struct AutoShardNet {
    lstm: Vec<LstmCell>,
    latent: NativeMlp,
    logit: NativeMlp,
    value: NativeMlp,
}

impl AutoShardNet {
    /// Reads every graph of `policy`, checking their widths.
    ///
    /// # Errors
    /// [`Error::ModelSchemaMismatch`] for a missing graph or one of other widths.
    pub fn from_policy(policy: &LoadedPolicy) -> Result<Self> {
        let mut lstm = Vec::with_capacity(LSTM_LAYERS);
        for layer in 0..LSTM_LAYERS {
            let role = lstm_role(layer);
            let expect_in = if layer == 0 { STEP_INPUT_LEN } else { HIDDEN };
            let mismatch = |found: String| Error::ModelSchemaMismatch {
                model: policy.card.name.clone(),
                what: format!("graph `{role}`"),
                expected: format!("an LSTM cell [N, {expect_in}] -> [N, {HIDDEN}]"),
                found,
            };
            let cell = LstmCell::from_onnx(policy.graph(&role)?).map_err(mismatch)?;
            if cell.inputs != expect_in {
                return Err(mismatch(format!("input width {}", cell.inputs)));
            }
            lstm.push(cell);
        }
        Ok(Self {
            lstm,
            latent: policy.mlp(ROLE_LATENT, LATENT_WIDTHS[0], LATENT_LEN)?,
            logit: policy.mlp(ROLE_LOGIT, LOGIT_WIDTHS[0], 1)?,
            value: policy.mlp(ROLE_VALUE, VALUE_WIDTHS[0], 1)?,
        })
    }

    /// The state of every step: the top LSTM layer's output after each step input.
    #[must_use]
    pub fn states(&self, inputs: &[[f32; STEP_INPUT_LEN]]) -> Vec<Vec<f64>> {
        let mut h = vec![vec![0.0; HIDDEN]; self.lstm.len()];
        let mut c = vec![vec![0.0; HIDDEN]; self.lstm.len()];
        let mut out = Vec::with_capacity(inputs.len());
        for x in inputs {
            let mut cur: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
            for (layer, cell) in self.lstm.iter().enumerate() {
                let (h2, c2) = cell.step(&cur, &h[layer], &c[layer]);
                h[layer].clone_from(&h2);
                c[layer] = c2;
                cur = h2;
            }
            out.push(cur);
        }
        out
    }

    /// The latent of a table from its 21 features.
    #[must_use]
    pub fn latent(&self, features: &[f32; DREAMSHARD_LEN]) -> Vec<f64> {
        let x: Vec<f64> = features.iter().map(|&v| f64::from(v)).collect();
        self.latent.forward(&x)
    }

    /// The logit of every device from the state and the devices' action features.
    #[must_use]
    pub fn logits(&self, state: &[f64], actions: &[[f64; ACTION_LEN]]) -> Vec<f64> {
        let mut x = vec![0.0; 3 * HIDDEN];
        x[..HIDDEN].copy_from_slice(state);
        actions
            .iter()
            .map(|a| {
                x[HIDDEN..2 * HIDDEN].copy_from_slice(a);
                for j in 0..HIDDEN {
                    x[2 * HIDDEN + j] = state[j] * a[j];
                }
                self.logit.forward(&x)[0]
            })
            .collect()
    }

    /// The value estimate of a state.
    #[must_use]
    pub fn value(&self, state: &[f64]) -> f64 {
        self.value.forward(state)[0]
    }
}

/// One placement episode of the AutoShard MDP on a task (the planner and the trainer step the same
/// code). Devices' compute comes from the cost model's incremental form when it has one, otherwise
/// from a set call.
pub struct Episode<'a> {
    task: &'a Task,
    model: &'a dyn CostModel,
    order: Vec<usize>,
    features: Vec<[f32; DREAMSHARD_LEN]>,
    /// Per table: weights plus optimizer state (placement order and the size feature).
    sizes: Vec<u64>,
    /// Per table: bytes under the task's memory rule (what fits where).
    needs: Vec<u64>,
    /// Per device: bytes its tables may use under the task's memory rule.
    usable: Vec<u64>,
    /// Per table: its fixed-point piece vector (incremental models).
    vectors: Vec<Vec<i64>>,
    device_tables: Vec<Vec<usize>>,
    /// Per device: the sizes of its tables (the size feature).
    device_bytes: Vec<u64>,
    /// Per device: the memory its tables use under the task's rule (never above `usable`).
    device_used: Vec<u64>,
    device_sums: Vec<Vec<i64>>,
    device_compute_ms: Vec<f64>,
    assignment: Vec<usize>,
    step: usize,
}

impl<'a> Episode<'a> {
    /// Starts an episode: features, single-table costs and the placement order.
    ///
    /// # Errors
    /// A cost-model error.
    pub fn new(task: &'a Task, model: &'a dyn CostModel) -> Result<Self> {
        let n = task.tables.len();
        let d = task.devices.count();
        let whole: Vec<PieceRef<'_>> = task.tables.iter().map(|t| PieceRef::whole(t, t.dim)).collect();
        let (vectors, single): (Vec<Vec<i64>>, Vec<f64>) = if let Some(inc) = model.incremental() {
            let len = inc.vector_len();
            let flat = inc.piece_vectors(&whole)?;
            let name = model.name();
            let vectors = flat
                .chunks_exact(len.max(1))
                .map(|c| c.iter().map(|&v| crate::cost::incremental::to_fixed(&name, v)).collect())
                .collect::<Result<Vec<Vec<i64>>>>()?;
            let single = vectors.iter().map(|v| inc.head_ms(v).max(0.0)).collect();
            (vectors, single)
        } else {
            let sets: Vec<&[PieceRef<'_>]> = whole.chunks(1).collect();
            (Vec::new(), model.compute_many_ms(&sets)?)
        };
        let sizes: Vec<u64> = task.tables.iter().map(crate::table::TableSpec::size_bytes).collect();
        let needs: Vec<u64> = task.tables.iter().map(|t| task.block_bytes(t, t.rows, t.dim)).collect::<Result<_>>()?;
        let usable = task.usable_bytes()?;
        let order = super::largest_first(&single, &sizes);
        let pairs: Vec<(&crate::table::TableSpec, u32)> = task.tables.iter().map(|t| (t, t.dim)).collect();
        let features = dreamshard_task_features(&pairs);
        let width = model.incremental().map_or(0, crate::cost::IncrementalCompute::vector_len);
        Ok(Self {
            task,
            model,
            order,
            features,
            sizes,
            needs,
            usable,
            vectors,
            device_tables: vec![Vec::new(); d],
            device_bytes: vec![0; d],
            device_used: vec![0; d],
            device_sums: vec![vec![0; width]; d],
            device_compute_ms: vec![0.0; d],
            assignment: vec![usize::MAX; n],
            step: 0,
        })
    }

    /// Tables in placement order.
    #[must_use]
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// The 21 task-normalised features of every table (by table index).
    #[must_use]
    pub fn features(&self) -> &[[f32; DREAMSHARD_LEN]] {
        &self.features
    }

    /// The step input of step `t`: features of the table placed at `t` and `t / tables`.
    #[must_use]
    pub fn step_input(&self, t: usize) -> [f32; STEP_INPUT_LEN] {
        let mut x = [0.0f32; STEP_INPUT_LEN];
        x[..DREAMSHARD_LEN].copy_from_slice(&self.features[self.order[t]]);
        x[DREAMSHARD_LEN] = t as f32 / self.order.len() as f32;
        x
    }

    /// Step inputs of every step.
    #[must_use]
    pub fn step_inputs(&self) -> Vec<[f32; STEP_INPUT_LEN]> {
        (0..self.order.len()).map(|t| self.step_input(t)).collect()
    }

    /// Steps taken so far.
    #[must_use]
    pub fn step(&self) -> usize {
        self.step
    }

    /// Whether every table is placed.
    #[must_use]
    pub fn done(&self) -> bool {
        self.step == self.order.len()
    }

    /// The table placed at this step.
    #[must_use]
    pub fn current_table(&self) -> Option<usize> {
        self.order.get(self.step).copied()
    }

    /// Devices the current table fits on under the task's memory rule (all false when done).
    #[must_use]
    pub fn legal(&self) -> Vec<bool> {
        match self.current_table() {
            Some(t) => self
                .device_used
                .iter()
                .zip(&self.usable)
                .map(|(&used, &usable)| crate::memory::fits(used, self.needs[t], usable))
                .collect(),
            None => vec![false; self.usable.len()],
        }
    }

    /// [`Error::NoFit`] for the current table (call when [`Episode::legal`] is all false).
    #[must_use]
    pub fn no_fit(&self) -> Error {
        let t = self.current_table().unwrap_or(0);
        Error::NoFit {
            table: self.task.tables.get(t).map(|x| x.name.clone()).unwrap_or_default(),
            need_bytes: self.needs.get(t).copied().unwrap_or(0),
            best_free_bytes: self
                .device_used
                .iter()
                .zip(&self.usable)
                .map(|(&u, &c)| c.saturating_sub(u))
                .max()
                .unwrap_or(0),
        }
    }

    /// The non-learned action features of every device: `[compute ms of its set, size sum / cap]`.
    #[must_use]
    pub fn device_extras(&self) -> Vec<[f64; 2]> {
        let caps = self.task.devices.mem_cap_bytes();
        self.device_compute_ms
            .iter()
            .zip(&self.device_bytes)
            .zip(caps)
            .map(|((&ms, &bytes), &cap)| [ms, bytes as f64 / cap.max(1) as f64])
            .collect()
    }

    /// Tables on every device so far.
    #[must_use]
    pub fn device_tables(&self) -> &[Vec<usize>] {
        &self.device_tables
    }

    /// Full action features of every device given every table's latent (by table index).
    #[must_use]
    pub fn action_features(&self, latents: &[Vec<f64>]) -> Vec<[f64; ACTION_LEN]> {
        self.device_tables
            .iter()
            .zip(self.device_extras())
            .map(|(tables, extra)| {
                let mut a = [0.0; ACTION_LEN];
                for &t in tables {
                    for (x, l) in a.iter_mut().zip(&latents[t]) {
                        *x += l;
                    }
                }
                a[LATENT_LEN] = extra[0];
                a[LATENT_LEN + 1] = extra[1];
                a
            })
            .collect()
    }

    /// Places the current table on `device` (memory is not checked here: see [`Episode::legal`]).
    ///
    /// # Errors
    /// [`Error::InvalidPlan`] when done or for a device out of range; a cost-model error.
    pub fn place(&mut self, device: usize) -> Result<()> {
        let t = self.current_table().ok_or_else(|| Error::InvalidPlan("every table is already placed".into()))?;
        if device >= self.device_tables.len() {
            return Err(Error::InvalidPlan(format!(
                "device {device} out of range for {} devices",
                self.device_tables.len()
            )));
        }
        self.assignment[t] = device;
        self.device_tables[device].push(t);
        self.device_bytes[device] = self.device_bytes[device].saturating_add(self.sizes[t]);
        self.device_used[device] = self.device_used[device].saturating_add(self.needs[t]);
        self.device_compute_ms[device] = if let Some(inc) = self.model.incremental() {
            crate::cost::incremental::add_into(&mut self.device_sums[device], &self.vectors[t]);
            inc.head_ms(&self.device_sums[device]).max(0.0)
        } else {
            let set: Vec<PieceRef<'_>> = self.device_tables[device]
                .iter()
                .map(|&i| PieceRef::whole(&self.task.tables[i], self.task.tables[i].dim))
                .collect();
            self.model.compute_ms(&set)?
        };
        self.step += 1;
        Ok(())
    }

    /// The device of every table (`usize::MAX` for tables not placed yet).
    #[must_use]
    pub fn assignment(&self) -> &[usize] {
        &self.assignment
    }

    /// Predicted compute of every device's current set, ms (0 for an empty device).
    #[must_use]
    pub fn device_compute_ms(&self) -> &[f64] {
        &self.device_compute_ms
    }

    /// The final reward: min/max device compute when every device is within its usable memory
    /// (the task's memory rule), otherwise the most negative `(usable − used) / usable` over devices.
    #[must_use]
    pub fn reward(&self) -> f64 {
        let headroom = self
            .device_used
            .iter()
            .zip(&self.usable)
            .map(|(&used, &usable)| (usable as f64 - used as f64) / usable.max(1) as f64)
            .fold(f64::INFINITY, f64::min);
        if headroom < 0.0 {
            return headroom;
        }
        let max = self.device_compute_ms.iter().copied().fold(0.0, f64::max);
        let min = self.device_compute_ms.iter().copied().fold(f64::INFINITY, f64::min);
        if max > 0.0 { min / max } else { 1.0 }
    }
}

/// A greedy rollout of `net` on `task` priced by `model`: the device of every table, and whether `stop`
/// (asked before every table) cut the policy short. Once it does, each table left goes to the legal
/// device with the least predicted compute. The devices' latent sums grow by one table per step (the same
/// sums, in the same order, as [`Episode::action_features`]), so a rollout is linear in the tables.
///
/// # Errors
/// [`Error::NoFit`] when a table fits on no device; a cost-model error.
pub fn greedy_assignment(
    net: &AutoShardNet,
    task: &Task,
    model: &dyn CostModel,
    stop: &dyn Fn() -> bool,
) -> Result<(Vec<usize>, bool)> {
    let mut ep = Episode::new(task, model)?;
    let states = net.states(&ep.step_inputs());
    let latents: Vec<Vec<f64>> = ep.features().iter().map(|f| net.latent(f)).collect();
    let mut sums = vec![[0.0; ACTION_LEN]; task.devices.count()];
    let mut stopped = false;
    while let Some(t) = ep.current_table() {
        let legal = ep.legal();
        stopped = stopped || stop();
        let best = if stopped {
            super::least_loaded_legal(ep.device_compute_ms(), &legal)
        } else {
            let actions: Vec<[f64; ACTION_LEN]> = sums
                .iter()
                .zip(ep.device_extras())
                .map(|(s, extra)| {
                    let mut a = *s;
                    a[LATENT_LEN] = extra[0];
                    a[LATENT_LEN + 1] = extra[1];
                    a
                })
                .collect();
            super::argmax_legal(&net.logits(&states[ep.step()], &actions), &legal)
        };
        let device = best.ok_or_else(|| ep.no_fit())?;
        ep.place(device)?;
        for (x, l) in sums[device].iter_mut().zip(&latents[t]) {
            *x += l;
        }
    }
    Ok((ep.assignment().to_vec(), stopped))
}

/// The AutoShard planner: a trained policy run greedily.
pub struct AutoShard {
    policy: Option<LoadedPolicy>,
    loaded: OnceCell<(AutoShardNet, NeuralModel)>,
    stats: StatsCell,
}

impl Default for AutoShard {
    /// The embedded default policy (loaded on first use).
    fn default() -> Self {
        Self { policy: None, loaded: OnceCell::new(), stats: StatsCell::default() }
    }
}

impl AutoShard {
    /// A planner running `policy` (e.g. one the trainer just wrote).
    #[must_use]
    pub fn with_policy(policy: LoadedPolicy) -> Self {
        Self { policy: Some(policy), loaded: OnceCell::new(), stats: StatsCell::default() }
    }

    fn load(policy: &LoadedPolicy) -> Result<(AutoShardNet, NeuralModel)> {
        let net = AutoShardNet::from_policy(policy)?;
        let profile = policy.card.cost_profile.as_deref().ok_or_else(|| Error::ModelSchemaMismatch {
            model: policy.card.name.clone(),
            what: "cost_profile".into(),
            expected: "the embedded cost profile the policy reads".into(),
            found: "none".into(),
        })?;
        Ok((net, profiles::load(profile)?))
    }

    /// The network and the cost profile it reads, loaded once.
    fn loaded(&self) -> Result<&(AutoShardNet, NeuralModel)> {
        if let Some(l) = self.loaded.get() {
            return Ok(l);
        }
        let loaded = if let Some(p) = &self.policy {
            Self::load(p)?
        } else {
            let e = embedded(PolicyAlgorithm::AutoShard).ok_or_else(|| Error::ModelSchemaMismatch {
                model: "autoshard".into(),
                what: "embedded policy".into(),
                expected: "a compiled-in AutoShard policy".into(),
                found: "none".into(),
            })?;
            Self::load(&e.load()?)?
        };
        Ok(self.loaded.get_or_init(|| loaded))
    }
}

impl Planner for AutoShard {
    fn name(&self) -> &'static str {
        "autoshard"
    }

    fn plan(&self, task: &Task, ctx: &PlanContext<'_>) -> Result<Plan> {
        let (net, model) = self.loaded()?;
        let watch = ctx.stopwatch();
        let (devices, stopped_early) = greedy_assignment(net, task, model, &|| watch.out_of_time())?;
        self.stats.set(SearchStats { stopped_early, ..SearchStats::default() });
        Plan::unsplit(task, &devices)
    }

    fn last_stats(&self) -> Option<SearchStats> {
        self.stats.get()
    }
}
