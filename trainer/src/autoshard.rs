//! AutoShard's policy trainer (SPEC section 6, `docs/AUTOSHARD.md`): an LSTM policy-value network
//! trained by actor-critic with V-trace targets (IMPALA) on the MDP of
//! [`planner_core::planners::autoshard::Episode`], priced by the embedded `h100` compute model.
//!
//! How it differs from IMPALA's distributed setup: one process; the "actors" are a batch of episodes
//! rolled out each update with a *behaviour policy* that is the learner's parameters from one update
//! earlier (so V-trace corrects a fixed lag of one update, where IMPALA's asynchronous actors lag by a
//! varying amount); the unroll is the whole episode; Adam instead of `RMSProp`. The LSTM cell is written
//! here on candle tensors (no candle-nn); rollouts run the *exported* graphs through planner-core, so
//! every update also exercises the planner's evaluator.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use candle_core::{DType, Device, IndexOp, Tensor, Var};
use planner_core::cost::{CostModel, NeuralModel, PieceRef, profiles};
use planner_core::features::{DREAMSHARD_LEN, FeatureSchema};
use planner_core::planners::autoshard::{
    ACTION_LEN, AutoShard, AutoShardNet, Episode, HIDDEN, LATENT_LEN, LATENT_WIDTHS, LOGIT_WIDTHS, LSTM_LAYERS,
    ROLE_LATENT, ROLE_LOGIT, ROLE_VALUE, STEP_INPUT_LEN, VALUE_WIDTHS, lstm_role,
};
use planner_core::planners::{PlanContext, Planner};
use planner_core::policy::{LoadedPolicy, POLICY_CARD_SCHEMA, PolicyAlgorithm, PolicyCard, PolicyTraining};
use planner_core::task::{PoolHalf, Protocol, SuiteSpec, Task};
use rand::{RngExt, SeedableRng, rngs::ChaCha8Rng};

use crate::adam::Adam;
use crate::export::{LstmCellWeights, lstm_cell_graph, mlp_graph};
use crate::net::Mlp;
use crate::rl::{
    ILLEGAL_LOGIT, clip_grad_norm, entropy, linear_decay, masked_log_softmax, sample_categorical, write_policy_dir,
};

/// The cost profile the policy reads and is rewarded by.
pub const COST_PROFILE: &str = "h100";
/// Truncation of the importance weights in the value targets (ρ̄) and the traces (c̄).
pub const RHO_BAR: f64 = 1.0;
/// See [`RHO_BAR`].
pub const C_BAR: f64 = 1.0;
/// Discount (the only reward is the final one).
pub const GAMMA: f64 = 1.0;
/// Weight of the value loss.
pub const BASELINE_COST: f64 = 0.5;
/// Weight of the entropy bonus.
pub const ENTROPY_COST: f64 = 0.001;
/// Gradient-norm clip.
pub const MAX_GRAD_NORM: f64 = 40.0;
/// Validation tasks scored greedily.
pub const VALIDATION_TASKS: usize = 8;
/// Seed offset of the validation suite (other tasks from the training half of the pool).
const VALIDATION_SEED_XOR: u64 = 0xa5a5_0002;

/// V-trace targets of one trajectory (Espeholt et al. 2018, eq. 1 and the policy-gradient advantage).
///
/// `values[s]` = `V(x_s)`, `rewards[s]` = `r_s`, `ratios[s]` = `π(a_s|x_s) / μ(a_s|x_s)`, `bootstrap` =
/// `V(x_T)`. Returns `(v_s, ρ_s (r_s + γ v_{s+1} − V(x_s)))` for every step, with `ρ_s = min(ρ̄, ratio)`,
/// `c_s = min(c̄, ratio)`, computed backwards: `v_s = V(x_s) + δ_s + γ c_s (v_{s+1} − V(x_{s+1}))`.
#[must_use]
pub fn vtrace(
    values: &[f64],
    rewards: &[f64],
    ratios: &[f64],
    bootstrap: f64,
    gamma: f64,
    rho_bar: f64,
    c_bar: f64,
) -> (Vec<f64>, Vec<f64>) {
    let n = values.len();
    let mut vs = vec![0.0; n];
    let mut adv = vec![0.0; n];
    let (mut next_v, mut next_vs) = (bootstrap, bootstrap);
    for s in (0..n).rev() {
        let rho = ratios[s].min(rho_bar);
        let c = ratios[s].min(c_bar);
        let delta = rho * (rewards[s] + gamma * next_v - values[s]);
        vs[s] = values[s] + delta + gamma * c * (next_vs - next_v);
        adv[s] = rho * (rewards[s] + gamma * next_vs - values[s]);
        next_v = values[s];
        next_vs = vs[s];
    }
    (vs, adv)
}

fn sigmoid(x: &Tensor) -> Result<Tensor> {
    // σ(x) = (tanh(x/2) + 1) / 2: exact and stable for large |x|.
    Ok(((x * 0.5)?.tanh()? + 1.0)?.affine(0.5, 0.0)?)
}

/// One LSTM layer on candle variables, gates concatenated in [`GATES`] order along the last axis.
pub struct LstmLayer {
    /// `[in, 4·hidden]`.
    pub w: Var,
    /// `[hidden, 4·hidden]`.
    pub r: Var,
    /// `[4·hidden]`.
    pub b: Var,
}

impl LstmLayer {
    fn new(inputs: usize, rng: &mut ChaCha8Rng) -> Result<Self> {
        // PyTorch's LSTM initialisation: uniform ±1/√hidden.
        let bound = 1.0 / (HIDDEN as f32).sqrt();
        let mut draw = |n: usize| -> Vec<f32> { (0..n).map(|_| rng.random_range(-bound..bound)).collect() };
        let g = 4 * HIDDEN;
        let w = Tensor::from_vec(draw(inputs * g), (inputs, g), &Device::Cpu)?;
        let r = Tensor::from_vec(draw(HIDDEN * g), (HIDDEN, g), &Device::Cpu)?;
        let b = Tensor::from_vec(draw(g), g, &Device::Cpu)?;
        Ok(Self { w: Var::from_tensor(&w)?, r: Var::from_tensor(&r)?, b: Var::from_tensor(&b)? })
    }

    /// One step on `[N, in]`, `[N, hidden]`, `[N, hidden]` → `(h', c')`.
    #[allow(clippy::many_single_char_names)] // x, h, c and the gates i, f, g, o, as in the LSTM equations
    pub fn step(&self, x: &Tensor, h: &Tensor, c: &Tensor) -> Result<(Tensor, Tensor)> {
        let z = (x.matmul(self.w.as_tensor())? + h.matmul(self.r.as_tensor())?)?.broadcast_add(self.b.as_tensor())?;
        let i = sigmoid(&z.narrow(1, 0, HIDDEN)?)?;
        let f = sigmoid(&z.narrow(1, HIDDEN, HIDDEN)?)?;
        let g = z.narrow(1, 2 * HIDDEN, HIDDEN)?.tanh()?;
        let o = sigmoid(&z.narrow(1, 3 * HIDDEN, HIDDEN)?)?;
        let c2 = ((f * c)? + (i * g)?)?;
        let h2 = (o * c2.tanh()?)?;
        Ok((h2, c2))
    }

    fn export(&self) -> Result<LstmCellWeights> {
        let (inputs, g) = self.w.as_tensor().dims2()?;
        let w: Vec<f32> = self.w.as_tensor().flatten_all()?.to_vec1()?;
        let r: Vec<f32> = self.r.as_tensor().flatten_all()?.to_vec1()?;
        let b: Vec<f32> = self.b.as_tensor().to_vec1()?;
        let split = |m: &[f32], rows: usize, k: usize| -> Vec<f32> {
            (0..rows).flat_map(|row| m[row * g + k * HIDDEN..row * g + (k + 1) * HIDDEN].iter().copied()).collect()
        };
        Ok(LstmCellWeights {
            inputs,
            hidden: HIDDEN,
            w: std::array::from_fn(|k| split(&w, inputs, k)),
            r: std::array::from_fn(|k| split(&r, HIDDEN, k)),
            b: std::array::from_fn(|k| b[k * HIDDEN..(k + 1) * HIDDEN].to_vec()),
        })
    }
}

/// The AutoShard policy-value network on candle variables.
pub struct PolicyNet {
    /// Stacked LSTM layers (input 22, then 64).
    pub lstm: Vec<LstmLayer>,
    /// Table latent MLP 21 → 64 → 62.
    pub latent: Mlp,
    /// Logit MLP 192 → 128 → 128 → 64 → 1.
    pub logit: Mlp,
    /// Value head 64 → 64 → 1.
    pub value: Mlp,
}

/// What the learner's forward pass gives for one episode.
pub struct EpisodeForward {
    /// `[T, D]` log-probabilities (illegal devices at ≈ −1e9).
    pub log_p: Tensor,
    /// `[T]` log-probability of the action taken.
    pub action_log_p: Tensor,
    /// `[T]` entropy of each step's distribution.
    pub entropy: Tensor,
    /// `[T]` value estimates.
    pub values: Tensor,
    /// `[T, D]` raw logits.
    pub logits: Tensor,
}

impl PolicyNet {
    /// A freshly initialised network.
    pub fn new(seed: u64) -> Result<Self> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let lstm = (0..LSTM_LAYERS)
            .map(|l| LstmLayer::new(if l == 0 { STEP_INPUT_LEN } else { HIDDEN }, &mut rng))
            .collect::<Result<_>>()?;
        Ok(Self {
            lstm,
            latent: Mlp::new(&LATENT_WIDTHS, &mut rng)?,
            logit: Mlp::new(&LOGIT_WIDTHS, &mut rng)?,
            value: Mlp::new(&VALUE_WIDTHS, &mut rng)?,
        })
    }

    /// Every parameter, in a fixed order.
    #[must_use]
    pub fn vars(&self) -> Vec<&Var> {
        let mut v: Vec<&Var> = self.lstm.iter().flat_map(|l| [&l.w, &l.r, &l.b]).collect();
        v.extend(self.latent.vars());
        v.extend(self.logit.vars());
        v.extend(self.value.vars());
        v
    }

    /// The states of a batch of step-input sequences `[B, T, 22]` → `[B, T, 64]` (sequences shorter
    /// than `T` are padded at the end, which leaves their earlier states unchanged).
    #[allow(clippy::many_single_char_names)] // x, b, t, h, c: input, batch, time, hidden and cell state
    pub fn states(&self, x: &Tensor) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let zeros = Tensor::zeros((b, HIDDEN), DType::F32, &Device::Cpu)?;
        let mut h = vec![zeros.clone(); self.lstm.len()];
        let mut c = vec![zeros; self.lstm.len()];
        let mut out = Vec::with_capacity(t);
        for step in 0..t {
            let mut cur = x.i((.., step, ..))?.contiguous()?;
            for (l, layer) in self.lstm.iter().enumerate() {
                let (h2, c2) = layer.step(&cur, &h[l], &c[l])?;
                h[l] = h2.clone();
                c[l] = c2;
                cur = h2;
            }
            out.push(cur);
        }
        Ok(Tensor::stack(&out, 1)?)
    }

    /// Log-probabilities, entropies and values of an episode's recorded steps, given its states `[T, 64]`.
    pub fn episode_forward(&self, states: &Tensor, ep: &Rollout) -> Result<EpisodeForward> {
        let (t, d) = (ep.actions.len(), ep.devices);
        let dev = &Device::Cpu;
        let feats: Vec<f32> = ep.features.iter().flatten().copied().collect();
        let latents = self.latent.forward(&Tensor::from_vec(feats, (t, DREAMSHARD_LEN), dev)?)?;
        // occupancy[s·D + d, j] = 1 when the table of step j < s went to device d.
        let mut occ = vec![0.0f32; t * d * t];
        for s in 0..t {
            for (j, &a) in ep.actions[..s].iter().enumerate() {
                occ[(s * d + a) * t + j] = 1.0;
            }
        }
        let latent_sums = Tensor::from_vec(occ, (t * d, t), dev)?.matmul(&latents)?;
        let extras: Vec<f32> = ep.extras.iter().flatten().flat_map(|e| [e[0] as f32, e[1] as f32]).collect();
        let actions = Tensor::cat(&[latent_sums, Tensor::from_vec(extras, (t * d, 2), dev)?], 1)?;
        let s = states.unsqueeze(1)?.broadcast_as((t, d, HIDDEN))?.reshape((t * d, HIDDEN))?;
        let sa = (&s * &actions)?;
        let x = Tensor::cat(&[&s, &actions, &sa], 1)?;
        let logits = self.logit.forward(&x)?.reshape((t, d))?;
        let mask: Vec<f32> = ep.legal.iter().flatten().map(|&ok| if ok { 0.0 } else { ILLEGAL_LOGIT }).collect();
        let log_p = masked_log_softmax(&logits, &Tensor::from_vec(mask, (t, d), dev)?)?;
        let idx: Vec<u32> = ep.actions.iter().map(|&a| a as u32).collect();
        let action_log_p = log_p.gather(&Tensor::from_vec(idx, (t, 1), dev)?, 1)?.squeeze(1)?;
        let entropy = entropy(&log_p)?;
        let values = self.value.forward(states)?.squeeze(1)?;
        Ok(EpisodeForward { log_p, action_log_p, entropy, values, logits })
    }

    /// The exported graphs: role → (file name, ONNX bytes).
    pub fn export(&self) -> Result<BTreeMap<String, (String, Vec<u8>)>> {
        let mut out = BTreeMap::new();
        for (l, layer) in self.lstm.iter().enumerate() {
            let role = lstm_role(l);
            let doc = format!("AutoShard policy: LSTM layer {l} cell (x, h, c) -> (h_out, c_out)");
            out.insert(role.clone(), (format!("{role}.onnx"), lstm_cell_graph(&role, &layer.export()?, &doc)));
        }
        let mlps = [
            (ROLE_LATENT, &self.latent, "features", "latent", "AutoShard policy: table latent 21 -> 64 -> 62"),
            (ROLE_LOGIT, &self.logit, "state_action", "logit", "AutoShard policy: logit of [s, a, s*a]"),
            (ROLE_VALUE, &self.value, "state", "value", "AutoShard policy: value head"),
        ];
        for (role, mlp, input, output, doc) in mlps {
            out.insert(role.to_string(), (format!("{role}.onnx"), mlp_graph(role, input, output, &mlp.export()?, doc)));
        }
        Ok(out)
    }

    /// The exported graphs loaded back through planner-core under `card`.
    pub fn to_policy(&self, card: &PolicyCard) -> Result<(LoadedPolicy, BTreeMap<String, Vec<u8>>)> {
        let graphs = self.export()?;
        let files: BTreeMap<String, Vec<u8>> = graphs.values().cloned().collect();
        let mut card = card.clone();
        card.graphs = graphs.iter().map(|(role, (file, _))| (role.clone(), file.clone())).collect();
        let json = serde_json::to_string(&card)?;
        let policy = LoadedPolicy::from_card(&json, PolicyAlgorithm::AutoShard, |f| files.get(f).map(Vec::as_slice))?;
        Ok((policy, files))
    }

    /// The exported network as the planner evaluates it.
    pub fn to_native(&self, card: &PolicyCard) -> Result<AutoShardNet> {
        Ok(AutoShardNet::from_policy(&self.to_policy(card)?.0)?)
    }
}

/// One recorded episode.
pub struct Rollout {
    /// Devices of the task.
    pub devices: usize,
    /// Step inputs (22 wide) per step.
    pub inputs: Vec<[f32; STEP_INPUT_LEN]>,
    /// Features of the table placed at each step.
    pub features: Vec<[f32; DREAMSHARD_LEN]>,
    /// Device chosen at each step.
    pub actions: Vec<usize>,
    /// Legal devices at each step (all, when the table fit nowhere: the policy still chose).
    pub legal: Vec<Vec<bool>>,
    /// `[compute ms, size / cap]` of every device before each step.
    pub extras: Vec<Vec<[f64; 2]>>,
    /// Behaviour log-probability of each action.
    pub behaviour_log_p: Vec<f64>,
    /// Final reward.
    pub reward: f64,
}

fn log_softmax_legal(logits: &[f64], legal: &[bool]) -> Vec<f64> {
    let max = logits.iter().zip(legal).filter(|(_, ok)| **ok).map(|(v, _)| *v).fold(f64::NEG_INFINITY, f64::max);
    let lse = logits.iter().zip(legal).filter(|(_, ok)| **ok).map(|(v, _)| (v - max).exp()).sum::<f64>().ln() + max;
    logits.iter().zip(legal).map(|(v, ok)| if *ok { v - lse } else { f64::NEG_INFINITY }).collect()
}

/// Rolls out `net` on `task`: sampled actions with `rng`, or greedy (argmax) without.
pub fn rollout(
    net: &AutoShardNet,
    task: &Task,
    model: &dyn CostModel,
    rng: Option<&mut ChaCha8Rng>,
) -> Result<Rollout> {
    let mut rng = rng;
    let mut ep = Episode::new(task, model)?;
    let inputs = ep.step_inputs();
    let states = net.states(&inputs);
    let latents: Vec<Vec<f64>> = ep.features().iter().map(|f| net.latent(f)).collect();
    let features: Vec<[f32; DREAMSHARD_LEN]> = ep.order().iter().map(|&t| ep.features()[t]).collect();
    let n = inputs.len();
    let mut r = Rollout {
        devices: task.devices.count(),
        inputs,
        features,
        actions: Vec::with_capacity(n),
        legal: Vec::with_capacity(n),
        extras: Vec::with_capacity(n),
        behaviour_log_p: Vec::with_capacity(n),
        reward: 0.0,
    };
    while !ep.done() {
        let mut legal = ep.legal();
        if !legal.iter().any(|&ok| ok) {
            legal = vec![true; legal.len()];
        }
        let logits = net.logits(&states[ep.step()], &ep.action_features(&latents));
        let log_p = log_softmax_legal(&logits, &legal);
        let action = match rng.as_deref_mut() {
            Some(rng) => {
                let p: Vec<f32> = log_p.iter().map(|l| l.exp() as f32).collect();
                sample_categorical(&p, rng)
            }
            None => crate::rl::argmax_legal(&logits.iter().map(|&v| v as f32).collect::<Vec<_>>(), &legal).unwrap_or(0),
        };
        r.extras.push(ep.device_extras());
        r.legal.push(legal);
        r.behaviour_log_p.push(log_p[action]);
        r.actions.push(action);
        ep.place(action)?;
    }
    r.reward = ep.reward();
    Ok(r)
}

/// The greedy device of every table of `task` under the learner's candle network (its own forward,
/// independent of the exported graphs).
#[allow(clippy::many_single_char_names)] // t, x, d, a, s: steps, inputs, devices, actions, state
pub fn greedy_candle(net: &PolicyNet, task: &Task, model: &dyn CostModel) -> Result<(Vec<usize>, Vec<Vec<f32>>)> {
    let mut ep = Episode::new(task, model)?;
    let inputs = ep.step_inputs();
    let t = inputs.len();
    let dev = &Device::Cpu;
    let x = Tensor::from_vec(inputs.iter().flatten().copied().collect::<Vec<f32>>(), (1, t, STEP_INPUT_LEN), dev)?;
    let states = net.states(&x)?.squeeze(0)?;
    let feats: Vec<f32> = ep.features().iter().flatten().copied().collect();
    let latents: Vec<Vec<f32>> =
        net.latent.forward(&Tensor::from_vec(feats, (task.tables.len(), DREAMSHARD_LEN), dev)?)?.to_vec2()?;
    let mut all_logits = Vec::with_capacity(t);
    while !ep.done() {
        let d = task.devices.count();
        let mut a = vec![0.0f32; d * ACTION_LEN];
        for (dv, (tables, extra)) in ep.device_tables().iter().zip(ep.device_extras()).enumerate() {
            let row = &mut a[dv * ACTION_LEN..(dv + 1) * ACTION_LEN];
            for &tb in tables {
                for (x, l) in row.iter_mut().zip(&latents[tb]) {
                    *x += l;
                }
            }
            row[LATENT_LEN] = extra[0] as f32;
            row[LATENT_LEN + 1] = extra[1] as f32;
        }
        let a = Tensor::from_vec(a, (d, ACTION_LEN), dev)?;
        let s = states.i(ep.step())?.unsqueeze(0)?.broadcast_as((d, HIDDEN))?.contiguous()?;
        let sa = (&s * &a)?;
        let logits: Vec<f32> = net.logit.forward(&Tensor::cat(&[&s, &a, &sa], 1)?)?.squeeze(1)?.to_vec1()?;
        let legal = ep.legal();
        let device = crate::rl::argmax_legal(&logits, &legal).ok_or_else(|| ep.no_fit())?;
        all_logits.push(logits);
        ep.place(device)?;
    }
    Ok((ep.assignment().to_vec(), all_logits))
}

/// What to train.
#[derive(Debug, Clone)]
pub struct AutoShardOptions {
    /// Output directory.
    pub out: PathBuf,
    /// Seed of initialisation, tasks and sampling.
    pub seed: u64,
    /// Learner updates.
    pub updates: usize,
    /// Episodes per update.
    pub actors: usize,
    /// Table-count range `[lo, hi)` of training tasks.
    pub tables: (usize, usize),
    /// Adam learning rate.
    pub lr: f64,
    /// Greedy validation every this many updates (and after the last).
    pub eval_every: usize,
    /// Progress lines on stderr.
    pub progress: bool,
    /// The command line, recorded in the card.
    pub command: String,
}

/// What a training run produced.
pub struct AutoShardOutcome {
    /// The card written.
    pub card: PolicyCard,
    /// Mean greedy validation reward of the last update's weights.
    pub final_validation_reward: f64,
    /// Mean greedy validation reward of the exported (best-validation) weights.
    pub best_validation_reward: f64,
    /// The update whose weights were exported (0: the initial weights).
    pub best_update: usize,
    /// Mean wall-clock seconds per update.
    pub seconds_per_update: f64,
    /// Largest |candle − exported| logit difference on the checked validation task.
    pub max_logit_diff: f64,
}

fn suites(opts: &AutoShardOptions) -> (SuiteSpec, SuiteSpec) {
    let base = SuiteSpec {
        protocol: Protocol::AutoShard,
        devices: 0,
        max_dim: 32,
        tables: Some(opts.tables),
        pool_half: Some(PoolHalf::Train),
        count: (opts.updates * opts.actors).max(1),
        seed: opts.seed,
    };
    // Validation (checkpoint selection) draws other tasks from the training half, so the test half
    // stays unseen for the benchmark.
    let val = SuiteSpec {
        pool_half: Some(PoolHalf::Train),
        count: VALIDATION_TASKS,
        seed: opts.seed ^ VALIDATION_SEED_XOR,
        ..base.clone()
    };
    (base, val)
}

/// Balance (min/max device compute under `model`) of an unsplit assignment.
pub fn balance(task: &Task, devices: &[usize], model: &dyn CostModel) -> Result<f64> {
    let d = task.devices.count();
    let mut sets: Vec<Vec<PieceRef<'_>>> = vec![Vec::new(); d];
    for (t, &dv) in task.tables.iter().zip(devices) {
        sets[dv].push(PieceRef::whole(t, t.dim));
    }
    let costs: Vec<f64> =
        sets.iter().map(|s| if s.is_empty() { Ok(0.0) } else { model.compute_ms(s) }).collect::<Result<_, _>>()?;
    let max = costs.iter().copied().fold(0.0, f64::max);
    let min = costs.iter().copied().fold(f64::INFINITY, f64::min);
    Ok(if max > 0.0 { min / max } else { 1.0 })
}

fn greedy_validation(net: &AutoShardNet, tasks: &[Task], model: &NeuralModel) -> Result<f64> {
    let mut sum = 0.0;
    for t in tasks {
        sum += rollout(net, t, model, None)?.reward;
    }
    Ok(sum / tasks.len() as f64)
}

/// Losses of one update.
struct UpdateStats {
    loss: f64,
    pg: f64,
    value: f64,
    entropy: f64,
    grad_norm: f64,
}

fn learner_step(net: &PolicyNet, adam: &mut Adam, batch: &[Rollout]) -> Result<UpdateStats> {
    let dev = &Device::Cpu;
    let t_max = batch.iter().map(|r| r.actions.len()).max().unwrap_or(0);
    let mut x = vec![0.0f32; batch.len() * t_max * STEP_INPUT_LEN];
    for (b, r) in batch.iter().enumerate() {
        for (s, inp) in r.inputs.iter().enumerate() {
            x[(b * t_max + s) * STEP_INPUT_LEN..(b * t_max + s + 1) * STEP_INPUT_LEN].copy_from_slice(inp);
        }
    }
    let states = net.states(&Tensor::from_vec(x, (batch.len(), t_max, STEP_INPUT_LEN), dev)?)?;
    let steps: usize = batch.iter().map(|r| r.actions.len()).sum();
    let scale = 1.0 / steps.max(1) as f64;
    let mut per_episode = Vec::with_capacity(batch.len());
    for (b, r) in batch.iter().enumerate() {
        let t = r.actions.len();
        let fwd = net.episode_forward(&states.i(b)?.narrow(0, 0, t)?, r)?;
        let logp: Vec<f32> = fwd.action_log_p.to_vec1()?;
        let values: Vec<f32> = fwd.values.to_vec1()?;
        let values: Vec<f64> = values.into_iter().map(f64::from).collect();
        let ratios: Vec<f64> = logp.iter().zip(&r.behaviour_log_p).map(|(&p, &m)| (f64::from(p) - m).exp()).collect();
        let mut rewards = vec![0.0; t];
        if let Some(last) = rewards.last_mut() {
            *last = r.reward;
        }
        let (vs, adv) = vtrace(&values, &rewards, &ratios, 0.0, GAMMA, RHO_BAR, C_BAR);
        per_episode.push((fwd, vs, adv));
    }
    // The advantages are centred on their batch mean: a value estimate that lags a falling reward
    // otherwise makes every advantage negative, pushing probability away from every action taken —
    // towards the loaded devices — and the policy collapsed onto one device in probes.
    let adv_mean = per_episode.iter().flat_map(|(_, _, a)| a.iter()).sum::<f64>() / steps.max(1) as f64;
    let (mut pg_terms, mut v_terms, mut ent_terms) = (Vec::new(), Vec::new(), Vec::new());
    for (fwd, vs, adv) in per_episode {
        let t = vs.len();
        let adv = Tensor::from_vec(adv.iter().map(|&a| (a - adv_mean) as f32).collect::<Vec<_>>(), t, dev)?;
        let vs = Tensor::from_vec(vs.iter().map(|&a| a as f32).collect::<Vec<_>>(), t, dev)?;
        pg_terms.push((fwd.action_log_p * adv)?.sum_all()?.neg()?);
        v_terms.push((fwd.values - vs)?.sqr()?.sum_all()?);
        ent_terms.push(fwd.entropy.sum_all()?);
    }
    let pg = (Tensor::stack(&pg_terms, 0)?.sum_all()? * scale)?;
    let value = (Tensor::stack(&v_terms, 0)?.sum_all()? * scale)?;
    let ent = (Tensor::stack(&ent_terms, 0)?.sum_all()? * scale)?;
    let loss = ((&pg + (&value * BASELINE_COST)?)? - (&ent * ENTROPY_COST)?)?;
    let vars = net.vars();
    let mut grads = loss.backward()?;
    let grad_norm = clip_grad_norm(&vars, &mut grads, MAX_GRAD_NORM)?;
    adam.step(&vars, &grads)?;
    let f = |t: &Tensor| -> Result<f64> { Ok(f64::from(t.to_scalar::<f32>()?)) };
    Ok(UpdateStats { loss: f(&loss)?, pg: f(&pg)?, value: f(&value)?, entropy: f(&ent)?, grad_norm })
}

/// A card for the network before training metrics are known.
fn card(opts: &AutoShardOptions, train: &SuiteSpec) -> PolicyCard {
    PolicyCard {
        schema: POLICY_CARD_SCHEMA.into(),
        name: "autoshard".into(),
        algorithm: PolicyAlgorithm::AutoShard,
        feature_schema: FeatureSchema::DreamShard21,
        graphs: BTreeMap::new(),
        cost_profile: Some(COST_PROFILE.into()),
        training: PolicyTraining {
            command: opts.command.clone(),
            trainer_version: env!("CARGO_PKG_VERSION").into(),
            seed: opts.seed,
            suite: train.clone(),
            judge: format!("model:{COST_PROFILE} compute"),
            real_evaluations: 0,
            iterations: 0,
            episodes: 0,
            wall_s: 0.0,
            metrics: BTreeMap::new(),
            deviations: vec![
                "single process: the 8 actors are a batch of episodes per update, rolled out with the learner's parameters of one update earlier (IMPALA's actors are asynchronous and lag by varying amounts)".into(),
                "the unroll is the whole episode (one table per step), not a fixed 100-step window".into(),
                "Adam instead of RMSProp (both with the learning rate annealed linearly to 0); the default lr is 3e-4 because 1e-3 collapsed onto one device within 80 updates in a probe".into(),
                "losses are means over all steps of the batch, not sums".into(),
                "policy-gradient advantages are centred on their batch mean (the V-trace value targets are not)".into(),
                "the exported weights are those with the best greedy validation reward, scored every --eval-every updates".into(),
                "rewards priced by the h100 learned compute model, not measured on GPUs".into(),
                "a table that fits on no device lets the policy choose any device; the episode then ends with the memory penalty".into(),
            ],
        },
    }
}

/// Trains a policy and writes it to `opts.out`, then checks the planner reproduces the trainer.
pub fn train_autoshard(opts: &AutoShardOptions) -> Result<AutoShardOutcome> {
    if opts.updates == 0 || opts.actors == 0 || opts.eval_every == 0 {
        bail!("updates, actors and eval-every must be at least 1");
    }
    let start = Instant::now();
    let model = profiles::load(COST_PROFILE).context("loading the cost profile")?;
    let (train_suite, val_suite) = suites(opts);
    let val_tasks: Vec<Task> =
        val_suite.tasks().context("drawing validation tasks")?.into_iter().map(|s| s.task).collect();
    let mut card = card(opts, &train_suite);
    let net = PolicyNet::new(opts.seed)?;
    let mut adam = Adam::new(&net.vars(), opts.lr)?;
    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed ^ 0x1a3f_0002);
    std::fs::create_dir_all(&opts.out).with_context(|| format!("creating {}", opts.out.display()))?;
    let curve_path = opts.out.join("curve.csv");
    let mut curve = std::io::BufWriter::new(
        std::fs::File::create(&curve_path).with_context(|| format!("creating {}", curve_path.display()))?,
    );
    writeln!(curve, "update,episodes,wall_s,mean_reward,greedy_val_reward,loss,pg_loss,value_loss,entropy,grad_norm")?;
    let mut behaviour = net.to_native(&card)?;
    let mut last_val = greedy_validation(&behaviour, &val_tasks, &model)?;
    // The weights with the best greedy validation reward (the cost-model trainer keeps its best
    // validation weights too): RL runs can still degrade late.
    let snapshot =
        |net: &PolicyNet| -> Result<Vec<Tensor>> { net.vars().iter().map(|v| Ok(v.as_tensor().copy()?)).collect() };
    let (mut best_val, mut best_update, mut best_weights) = (last_val, 0usize, snapshot(&net)?);
    let mut recent: Vec<f64> = Vec::new();
    for update in 0..opts.updates {
        let mut batch = Vec::with_capacity(opts.actors);
        for a in 0..opts.actors {
            let st = train_suite.task(update * opts.actors + a).context("drawing a training task")?;
            batch.push(rollout(&behaviour, &st.task, &model, Some(&mut rng))?);
        }
        // The learner's current parameters become the next update's behaviour policy.
        let next_behaviour = net.to_native(&card)?;
        adam.lr = linear_decay(opts.lr, update, opts.updates);
        let stats = learner_step(&net, &mut adam, &batch)?;
        behaviour = next_behaviour;
        let mean_reward = batch.iter().map(|r| r.reward).sum::<f64>() / batch.len() as f64;
        recent.push(mean_reward);
        let last = update + 1 == opts.updates;
        let val = if (update + 1) % opts.eval_every == 0 || last {
            last_val = greedy_validation(&net.to_native(&card)?, &val_tasks, &model)?;
            if last_val > best_val {
                (best_val, best_update, best_weights) = (last_val, update + 1, snapshot(&net)?);
            }
            format!("{last_val:.5}")
        } else {
            String::new()
        };
        let wall = start.elapsed().as_secs_f64();
        writeln!(
            curve,
            "{},{},{wall:.2},{mean_reward:.5},{val},{:.6},{:.6},{:.6},{:.6},{:.4}",
            update + 1,
            (update + 1) * opts.actors,
            stats.loss,
            stats.pg,
            stats.value,
            stats.entropy,
            stats.grad_norm
        )?;
        if opts.progress && !val.is_empty() {
            eprintln!(
                "update {:>5}/{}  reward {mean_reward:.4}  greedy val {last_val:.4}  entropy {:.3}  {wall:.0}s",
                update + 1,
                opts.updates,
                stats.entropy
            );
        }
    }
    curve.flush()?;
    let wall_s = start.elapsed().as_secs_f64();
    let tail = &recent[recent.len().saturating_sub(10)..];
    card.training.iterations = opts.updates;
    card.training.episodes = opts.updates * opts.actors;
    card.training.wall_s = wall_s;
    let m = &mut card.training.metrics;
    m.insert("final_greedy_validation_reward".into(), last_val);
    m.insert("greedy_validation_reward".into(), best_val);
    m.insert("best_validation_update".into(), best_update as f64);
    for (v, w) in net.vars().iter().zip(&best_weights) {
        v.set(w)?;
    }
    m.insert("train_reward_last10".into(), tail.iter().sum::<f64>() / tail.len().max(1) as f64);
    m.insert("seconds_per_update".into(), wall_s / opts.updates as f64);
    for name in ["random", "size-lookup", "lookup"] {
        let entry = planner_core::planners::planner(name)?;
        let mut sum = 0.0;
        for t in &val_tasks {
            let plan = entry.build().plan(t, &PlanContext::new(&model, 0))?;
            let devices: Vec<usize> = plan.pieces().iter().map(|p| p.device).collect();
            sum += balance(t, &devices, &model)?;
        }
        m.insert(format!("validation_balance_{name}"), sum / val_tasks.len() as f64);
    }
    let (_, files) = net.to_policy(&card)?;
    let graphs = net.export()?;
    card.graphs = graphs.iter().map(|(role, (file, _))| (role.clone(), file.clone())).collect();
    let loaded = write_policy_dir(&opts.out, &card, &files)?;
    // The planner, from the files just written, must reproduce the trainer's own greedy rollout.
    let check = &val_tasks[0];
    let (expected, candle_logits) = greedy_candle(&net, check, &model)?;
    let plan = AutoShard::with_policy(loaded.clone()).plan(check, &PlanContext::new(&model, 0))?;
    let got: Vec<usize> = plan.pieces().iter().map(|p| p.device).collect();
    if got != expected {
        bail!("the planner's greedy plan differs from the trainer's greedy rollout on validation task 0");
    }
    let native = AutoShardNet::from_policy(&loaded)?;
    let max_logit_diff = logit_diff(&native, check, &model, &expected, &candle_logits)?;
    Ok(AutoShardOutcome {
        card,
        final_validation_reward: last_val,
        best_validation_reward: best_val,
        best_update,
        seconds_per_update: wall_s / opts.updates as f64,
        max_logit_diff,
    })
}

/// Largest |exported − candle| logit along the greedy trajectory `devices`.
fn logit_diff(
    native: &AutoShardNet,
    task: &Task,
    model: &dyn CostModel,
    devices: &[usize],
    candle_logits: &[Vec<f32>],
) -> Result<f64> {
    let mut ep = Episode::new(task, model)?;
    let states = native.states(&ep.step_inputs());
    let latents: Vec<Vec<f64>> = ep.features().iter().map(|f| native.latent(f)).collect();
    let mut max = 0.0f64;
    for step_logits in candle_logits {
        let logits = native.logits(&states[ep.step()], &ep.action_features(&latents));
        for (a, b) in logits.iter().zip(step_logits) {
            max = max.max((a - f64::from(*b)).abs());
        }
        let t = ep.current_table().context("trajectory longer than the episode")?;
        ep.place(devices[t])?;
    }
    Ok(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vtrace_matches_a_hand_computed_example() {
        // V = [0.5, 0.2, 0.4], reward 1 at the end, ratios [0.5, 2, 1] → ρ = c = [0.5, 1, 1], γ = 1.
        // δ2 = 1 − 0.4 = 0.6, v2 = 1.0; δ1 = 0.4 − 0.2 = 0.2, v1 = 0.2 + 0.2 + (1.0 − 0.4) = 1.0;
        // δ0 = 0.5·(0.2 − 0.5) = −0.15, v0 = 0.5 − 0.15 + 0.5·(1.0 − 0.2) = 0.75.
        // Advantages: a2 = 1 − 0.4 = 0.6, a1 = 1.0 − 0.2 = 0.8, a0 = 0.5·(1.0 − 0.5) = 0.25.
        let (vs, adv) = vtrace(&[0.5, 0.2, 0.4], &[0.0, 0.0, 1.0], &[0.5, 2.0, 1.0], 0.0, 1.0, 1.0, 1.0);
        for (a, b) in vs.iter().zip([0.75, 1.0, 1.0]) {
            assert!((a - b).abs() < 1e-12, "{vs:?}");
        }
        for (a, b) in adv.iter().zip([0.25, 0.8, 0.6]) {
            assert!((a - b).abs() < 1e-12, "{adv:?}");
        }
        // On-policy (ratios 1) with γ = 1, v_s is the Monte-Carlo return.
        let (vs, _) = vtrace(&[0.3, -0.2, 0.9], &[0.0, 0.5, 0.25], &[1.0; 3], 0.0, 1.0, 1.0, 1.0);
        for (a, b) in vs.iter().zip([0.75, 0.75, 0.25]) {
            assert!((a - b).abs() < 1e-12, "{vs:?}");
        }
    }

    fn small_task(seed: u64) -> Task {
        let suite = SuiteSpec {
            protocol: Protocol::AutoShard,
            devices: 0,
            max_dim: 32,
            tables: Some((20, 31)),
            pool_half: Some(PoolHalf::Train),
            count: 1,
            seed,
        };
        suite.task(0).unwrap().task
    }

    #[test]
    fn exported_graphs_reproduce_the_candle_forward() {
        let net = PolicyNet::new(7).unwrap();
        let opts = AutoShardOptions {
            out: PathBuf::new(),
            seed: 7,
            updates: 1,
            actors: 1,
            tables: (20, 31),
            lr: 1e-3,
            eval_every: 1,
            progress: false,
            command: String::new(),
        };
        let (train, _) = suites(&opts);
        let native = net.to_native(&card(&opts, &train)).unwrap();
        let model = profiles::load(COST_PROFILE).unwrap();
        let task = small_task(3);
        // Sampled trajectory through the native net; the candle forward on the same steps must agree.
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let r = rollout(&native, &task, &model, Some(&mut rng)).unwrap();
        let t = r.actions.len();
        let x: Vec<f32> = r.inputs.iter().flatten().copied().collect();
        let states = net.states(&Tensor::from_vec(x, (1, t, STEP_INPUT_LEN), &Device::Cpu).unwrap()).unwrap();
        let fwd = net.episode_forward(&states.squeeze(0).unwrap(), &r).unwrap();
        let lp: Vec<f32> = fwd.action_log_p.to_vec1().unwrap();
        for (a, b) in lp.iter().zip(&r.behaviour_log_p) {
            assert!((f64::from(*a) - b).abs() < 1e-4, "{a} vs {b}");
        }
        // Greedy: the exported graphs give the candle logits at every step, and the same plan.
        let (devices, logits) = greedy_candle(&net, &task, &model).unwrap();
        let diff = logit_diff(&native, &task, &model, &devices, &logits).unwrap();
        assert!(diff < 1e-4, "max logit difference {diff}");
        let greedy = rollout(&native, &task, &model, None).unwrap();
        let mut ep = Episode::new(&task, &model).unwrap();
        for a in &greedy.actions {
            ep.place(*a).unwrap();
        }
        assert_eq!(ep.assignment(), devices.as_slice());
    }

    #[test]
    fn a_short_training_run_writes_a_loadable_policy() {
        let dir = std::env::temp_dir().join(format!("autoshard-train-test-{}", std::process::id()));
        let opts = AutoShardOptions {
            out: dir.clone(),
            seed: 1,
            updates: 3,
            actors: 2,
            tables: (20, 31),
            lr: 1e-3,
            eval_every: 2,
            progress: false,
            command: "test".into(),
        };
        let out = train_autoshard(&opts).unwrap();
        assert!(out.max_logit_diff < 1e-4);
        let loaded = crate::rl::read_policy_dir(&dir, PolicyAlgorithm::AutoShard).unwrap();
        assert_eq!(loaded.card.training.iterations, 3);
        assert_eq!(loaded.card.training.episodes, 6);
        let curve = std::fs::read_to_string(dir.join("curve.csv")).unwrap();
        assert_eq!(curve.lines().count(), 4, "{curve}");
        let task = small_task(9);
        let model = profiles::load(COST_PROFILE).unwrap();
        let plan = AutoShard::with_policy(loaded).plan(&task, &PlanContext::new(&model, 0)).unwrap();
        assert_eq!(plan.pieces().len(), task.tables.len());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
