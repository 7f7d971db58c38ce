//! Learned placement policies (DreamShard, AutoShard): the policy card that travels with the exported
//! ONNX graphs, loading a policy from bytes, and the policies compiled into the library.
//!
//! Why a card of its own: a policy is only meaningful with the feature schema it was trained on, the
//! cost model whose numbers it reads (AutoShard reads a compute model's shard costs), the task
//! protocol it was trained on and how many real evaluations it used. The card says all of that and
//! names the graph of every role; the planners refuse a card whose algorithm, schema or graphs do not
//! match what they compute ([`Error::ModelSchemaMismatch`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cost::native::NativeMlp;
use crate::error::{Error, Result};
use crate::features::FeatureSchema;

/// Schema tag of `policy.json`.
pub const POLICY_CARD_SCHEMA: &str = "shardplan.policy-card/v1";

/// Which seed system a policy implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyAlgorithm {
    /// DreamShard: cost network + policy network trained by REINFORCE on the estimated MDP.
    DreamShard,
    /// AutoShard: LSTM policy-value network trained by actor-critic with V-trace targets.
    AutoShard,
}

/// How a policy was trained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyTraining {
    /// The trainer's command line.
    pub command: String,
    /// Trainer version.
    pub trainer_version: String,
    /// Seed of the run.
    pub seed: u64,
    /// The suite training tasks were drawn from (protocol, devices, table range, pool half).
    pub suite: crate::task::SuiteSpec,
    /// What produced the "real" evaluations (e.g. `model:h100 four-phase`, `collector:cpu`).
    pub judge: String,
    /// Real evaluations used (DreamShard; 0 for a policy trained on a cost model alone).
    pub real_evaluations: usize,
    /// Training iterations (DreamShard outer loops, AutoShard learner updates).
    pub iterations: usize,
    /// Episodes rolled out in total.
    pub episodes: usize,
    /// Wall-clock seconds the training took.
    pub wall_s: f64,
    /// Named end-of-training numbers (e.g. validation cost, cost-net MSE).
    #[serde(default)]
    pub metrics: BTreeMap<String, f64>,
    /// Where this implementation differs from the paper, in a sentence each.
    #[serde(default)]
    pub deviations: Vec<String>,
}

/// The card of a trained policy (`policy.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyCard {
    /// [`POLICY_CARD_SCHEMA`].
    pub schema: String,
    /// Name the planner reports.
    pub name: String,
    /// Which algorithm's graphs these are.
    pub algorithm: PolicyAlgorithm,
    /// Table features the graphs read.
    pub feature_schema: FeatureSchema,
    /// Graph file of every role (e.g. `policy_table` → `policy_table.onnx`).
    pub graphs: BTreeMap<String, String>,
    /// The embedded cost profile whose compute costs the policy reads, when it reads one.
    #[serde(default)]
    pub cost_profile: Option<String>,
    /// Training provenance.
    pub training: PolicyTraining,
}

/// A policy card with its graph bytes.
#[derive(Debug, Clone)]
pub struct LoadedPolicy {
    /// The card.
    pub card: PolicyCard,
    files: BTreeMap<String, Vec<u8>>,
}

impl LoadedPolicy {
    /// Parses `card_json` and reads every graph it names through `file` (a file name → its bytes).
    ///
    /// # Errors
    /// A parse error naming the card; [`Error::ModelSchemaMismatch`] for another schema tag, another
    /// algorithm than `expect`, another feature schema, or a graph `file` cannot provide.
    pub fn from_card<'a>(
        card_json: &str,
        expect: PolicyAlgorithm,
        file: impl Fn(&str) -> Option<&'a [u8]>,
    ) -> Result<Self> {
        let card: PolicyCard = serde_json::from_str(card_json)
            .map_err(|e| Error::Parse { context: "policy card".into(), message: e.to_string() })?;
        let mismatch = |what: &str, expected: String, found: String| Error::ModelSchemaMismatch {
            model: card.name.clone(),
            what: what.into(),
            expected,
            found,
        };
        if card.schema != POLICY_CARD_SCHEMA {
            return Err(mismatch("card schema", POLICY_CARD_SCHEMA.into(), card.schema.clone()));
        }
        if card.algorithm != expect {
            return Err(mismatch("algorithm", format!("{expect:?}"), format!("{:?}", card.algorithm)));
        }
        if card.feature_schema != FeatureSchema::DreamShard21 {
            return Err(mismatch("feature schema", "dream_shard21".into(), format!("{:?}", card.feature_schema)));
        }
        let mut files = BTreeMap::new();
        for (role, name) in &card.graphs {
            let bytes =
                file(name).ok_or_else(|| mismatch(&format!("graph `{role}`"), name.clone(), "no such file".into()))?;
            files.insert(role.clone(), bytes.to_vec());
        }
        Ok(Self { card, files })
    }

    /// The bytes of the graph of `role`.
    ///
    /// # Errors
    /// [`Error::ModelSchemaMismatch`] when the card names no graph for `role`.
    pub fn graph(&self, role: &str) -> Result<&[u8]> {
        self.files.get(role).map(Vec::as_slice).ok_or_else(|| Error::ModelSchemaMismatch {
            model: self.card.name.clone(),
            what: "graphs".into(),
            expected: format!("a graph for role `{role}`"),
            found: self.files.keys().cloned().collect::<Vec<_>>().join(", "),
        })
    }

    /// The graph of `role` as a native MLP, checked to map `inputs` to `outputs` values.
    ///
    /// # Errors
    /// [`Error::ModelSchemaMismatch`] when the graph is missing, not a plain MLP, or of other widths.
    pub fn mlp(&self, role: &str, inputs: usize, outputs: usize) -> Result<NativeMlp> {
        let mismatch = |expected: String, found: String| Error::ModelSchemaMismatch {
            model: self.card.name.clone(),
            what: format!("graph `{role}`"),
            expected,
            found,
        };
        let mlp = NativeMlp::from_onnx(self.graph(role)?).map_err(|e| mismatch("a chain of dense layers".into(), e))?;
        if mlp.input_width() != inputs || mlp.output_width() != outputs {
            return Err(mismatch(
                format!("[N, {inputs}] -> [N, {outputs}]"),
                format!("[N, {}] -> [N, {}]", mlp.input_width(), mlp.output_width()),
            ));
        }
        Ok(mlp)
    }
}

/// One policy compiled into the library.
pub struct EmbeddedPolicy {
    /// Directory name under `planner-core/policies/`.
    pub name: &'static str,
    /// Which algorithm it is.
    pub algorithm: PolicyAlgorithm,
    /// `policy.json`.
    pub card_json: &'static str,
    /// The graph files the card names.
    pub files: &'static [(&'static str, &'static [u8])],
}

impl EmbeddedPolicy {
    /// Loads it.
    ///
    /// # Errors
    /// As [`LoadedPolicy::from_card`] (a build problem, caught by the planners' tests).
    pub fn load(&self) -> Result<LoadedPolicy> {
        LoadedPolicy::from_card(self.card_json, self.algorithm, |f| {
            self.files.iter().find(|(n, _)| *n == f).map(|(_, b)| *b)
        })
    }
}

/// The embedded default policy of `algorithm`, if one is compiled in.
#[must_use]
pub fn embedded(algorithm: PolicyAlgorithm) -> Option<&'static EmbeddedPolicy> {
    EMBEDDED_POLICIES.iter().find(|p| p.algorithm == algorithm)
}

macro_rules! policy_file {
    ($dir:literal, $file:literal) => {
        ($file, include_bytes!(concat!("../policies/", $dir, "/", $file)).as_slice())
    };
}

/// Every embedded policy (at most one per algorithm: the default the planner of that name runs).
/// Each is the directory the trainer wrote, copied under `planner-core/policies/<name>/`.
pub const EMBEDDED_POLICIES: &[EmbeddedPolicy] = &[
    EmbeddedPolicy {
        name: "dreamshard",
        algorithm: PolicyAlgorithm::DreamShard,
        card_json: include_str!("../policies/dreamshard/policy.json"),
        files: &[
            policy_file!("dreamshard", "cost_table.onnx"),
            policy_file!("dreamshard", "cost_compute.onnx"),
            policy_file!("dreamshard", "cost_fw_comm.onnx"),
            policy_file!("dreamshard", "cost_bw_comm.onnx"),
            policy_file!("dreamshard", "cost_overall.onnx"),
            policy_file!("dreamshard", "policy_table.onnx"),
            policy_file!("dreamshard", "policy_cost.onnx"),
            policy_file!("dreamshard", "policy_out.onnx"),
        ],
    },
    EmbeddedPolicy {
        name: "autoshard",
        algorithm: PolicyAlgorithm::AutoShard,
        card_json: include_str!("../policies/autoshard/policy.json"),
        files: &[
            policy_file!("autoshard", "lstm_0.onnx"),
            policy_file!("autoshard", "lstm_1.onnx"),
            policy_file!("autoshard", "latent.onnx"),
            policy_file!("autoshard", "logit.onnx"),
            policy_file!("autoshard", "value.onnx"),
        ],
    },
];
