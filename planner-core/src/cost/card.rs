//! Model cards: what a trained cost profile is, where its numbers came from, and how to feed it.
//!
//! A *profile* is one card (JSON) plus the ONNX graphs it names: the compute model as a per-table
//! encoder and a head (so planners keep per-device vector sums), the end-to-end compute graph (padded
//! set + mask, for running the model elsewhere), and forward/backward comm models per device count.
//! planner-core refuses a card whose schema, feature names, normalisation or graph shapes do not match
//! what this build computes ([`crate::Error::ModelSchemaMismatch`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::terms::TermsCard;
use crate::error::{Error, Result};
use crate::features::{FeatureSchema, Normalisation};

/// Schema tag of model cards.
pub const CARD_SCHEMA: &str = "shardplan.model-card/v1";

/// Layer widths of the compute model: per-table encoder and head (SPEC section 5).
pub const ENCODER_WIDTHS: [usize; 3] = [20, 128, 32];
/// Head widths (input = encoder output).
pub const HEAD_WIDTHS: [usize; 3] = [32, 64, 1];
/// Hidden widths of a comm model (input = D or 2·D, output = D).
pub const COMM_HIDDEN: [usize; 4] = [128, 64, 32, 16];

/// Accuracy of a model on one split, in the model's output unit (ms).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitMetrics {
    /// Samples in the split.
    pub samples: usize,
    /// Mean squared error, ms².
    pub mse: f64,
    /// Mean absolute error, ms.
    pub mae: f64,
    /// Mean absolute percentage error, %.
    pub mape_pct: f64,
}

/// The relative standard deviation of a model's error on held-out sets from the metric `key` in
/// `metrics`: its MAPE × `√(π/2)` (the mean absolute value of a normal error is `√(2/π)` of its standard
/// deviation). `None` without a positive MAPE there.
#[must_use]
pub fn error_sd_from(metrics: &BTreeMap<String, SplitMetrics>, key: &str) -> Option<f64> {
    let mape = metrics.get(key)?.mape_pct;
    (mape.is_finite() && mape > 0.0).then(|| mape / 100.0 * (std::f64::consts::PI / 2.0).sqrt())
}

/// The dataset a model was trained on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetInfo {
    /// File name(s) of the dataset as shipped.
    pub files: Vec<String>,
    /// SHA-256 of the dataset bytes (hex), in file order, concatenated.
    pub sha256: String,
    /// Records used.
    pub samples: usize,
}

/// The compute model of a profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputeCard {
    /// Feature schema of the encoder input.
    pub feature_schema: FeatureSchema,
    /// Feature names in order (checked against the schema).
    pub feature_names: Vec<String>,
    /// z-score applied to raw features before the encoder.
    pub normalisation: Normalisation,
    /// Encoder graph file (input `features` [N, 20] → output `embedding` [N, 32]).
    pub encoder_file: String,
    /// Head graph file (input `set_sum` [N, 32] → output `cost_ms` [N, 1]).
    pub head_file: String,
    /// End-to-end graph file (inputs `features` [B, T, 20], `mask` [B, T] → `cost_ms` [B, 1]).
    pub end_to_end_file: String,
    /// Further members of an ensemble: networks of the same shape trained from other seeds on bootstrap
    /// resamples of the training split. The profile's compute cost is the mean over all members (the
    /// files above and these); their spread gives the prediction interval. Empty for a single model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ensemble: Vec<MemberFiles>,
    /// How wide the prediction interval is, calibrated on held-out data; absent without an ensemble.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<IntervalCard>,
    /// Batch size (bags per table) of the measurements.
    pub batch_size: u32,
    /// The machine speed the times are expressed at: every training sample's time was multiplied by this
    /// over the collector's reference-kernel reading taken right after it, so the model predicts the
    /// machine when its reference kernel takes this long (ms). Absent: raw times (`docs/COST_MODELS.md`,
    /// "Speed").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_ms: Option<f64>,
    /// Metrics per named evaluation (e.g. `random/test`, `unseen/test`, `analytical/random/test`).
    pub metrics: BTreeMap<String, SplitMetrics>,
    /// Training data.
    pub dataset: DatasetInfo,
    /// The networks learned the measured time *over the card's memory-terms model* (`compute_terms`): a
    /// set's compute is the terms model's time of the set times the head's output, so the networks learn
    /// only what the terms miss (fusion, contention), and the cache behaviour the terms count from the
    /// access bins is not left to extrapolation. The end-to-end and head graphs then output that factor,
    /// not milliseconds. Absent (false) in cards written before it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub on_terms: bool,
}

/// The graph files of one further ensemble member (same shapes as the first member's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberFiles {
    /// Encoder graph file.
    pub encoder_file: String,
    /// Head graph file.
    pub head_file: String,
}

/// A calibrated prediction interval: `mean ± z · sd` over the ensemble's members covered `coverage` of
/// the held-out samples it was calibrated on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntervalCard {
    /// Multiplier of the members' standard deviation.
    pub z: f64,
    /// Share of the calibration samples inside the interval (the target, e.g. 0.9).
    pub coverage: f64,
    /// Which samples it was calibrated on (e.g. `validation split, 410 samples`).
    pub calibrated_on: String,
    /// Share of the test split inside the interval (samples it was not calibrated on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_coverage: Option<f64>,
}

/// One device count's comm models.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommCard {
    /// Device count D the models are for.
    pub devices: usize,
    /// z-score of the backward model input (D dim sums).
    pub bw_normalisation: Normalisation,
    /// z-score of the forward model input (D dim sums, then D delays in ms).
    pub fw_normalisation: Normalisation,
    /// Backward graph file (input `x` [N, D] → `comm_ms` [N, D]).
    pub bw_file: String,
    /// Forward graph file (input `x` [N, 2D] → `comm_ms` [N, D]).
    pub fw_file: String,
    /// Whether the forward graph predicts each device's forward time beyond its wait for the last device
    /// to start ([`super::start_wait_ms`]), which the model then adds back. An exchange cannot finish on
    /// any device before every device has joined it; measured, that wait is almost all of a waiting
    /// device's forward time, and a network left to learn it from a few hundred samples learns it badly.
    /// `false` (cards written before it): the graph predicts the whole forward time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fw_after_wait: bool,
    /// Metrics per named evaluation (e.g. `bw/test`, `fw/test`).
    pub metrics: BTreeMap<String, SplitMetrics>,
    /// Training data.
    pub dataset: DatasetInfo,
}

/// A trained cost profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelCard {
    /// Always [`CARD_SCHEMA`].
    pub schema: String,
    /// Profile name (selects it: `--cost-model <name>`).
    pub name: String,
    /// What the hardware was, as the collector recorded it (backend, fingerprint, devices, software).
    pub hardware: serde_json::Value,
    /// Output unit of every model.
    pub units: String,
    /// Version of the trainer that wrote it.
    pub trainer_version: String,
    /// Seed of the training run.
    pub seed: u64,
    /// The command that reproduces the profile.
    pub command: String,
    /// The compute model.
    pub compute: ComputeCard,
    /// Comm models, one per device count.
    pub comm: Vec<CommCard>,
    /// The memory-terms compute model fitted on the same measured sets ([`crate::cost::terms`]); absent
    /// in cards written before it or without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_terms: Option<TermsCard>,
}

/// How the machine `here` differs from `recorded`, the hardware record a card keeps of where its
/// profile's data was measured: `None` when it is the same machine, or when `recorded` has no
/// fingerprint. The one rule for "the same machine": the same fingerprint and, for a CPU, the same
/// last-level cache the collector reported (two cloud hosts report one "Intel(R) Xeon(R) Processor" with
/// 260 and 480 MiB, and the CPU backend's costs differ between them; `docs/COST_MODELS.md`, "Another
/// machine is not another speed"), and the same CPU generation where both records name one (two hosts
/// report one "AMD EPYC" with 32 MiB; records written before the generation was recorded name none).
/// Another collector version is the same machine.
#[must_use]
pub fn other_machine(recorded: &serde_json::Value, here: &crate::dataset::Hardware) -> Option<String> {
    let fingerprint = recorded.get("fingerprint")?.as_str()?;
    let software = recorded.get("software").and_then(serde_json::Value::as_str).unwrap_or("");
    let (cache, here_cache) = (last_level_cache(software), last_level_cache(&here.software));
    let (generation, here_generation) = (cpu_generation(software), cpu_generation(&here.software));
    let same_generation = generation.is_none() || here_generation.is_none() || generation == here_generation;
    if fingerprint == here.fingerprint && cache == here_cache && same_generation {
        return None;
    }
    let describe = |fp: &str, cache: Option<&str>, generation: Option<&str>| {
        let notes: Vec<&str> = cache.into_iter().chain(generation).collect();
        if notes.is_empty() { format!("`{fp}`") } else { format!("`{fp}` ({})", notes.join(", ")) }
    };
    Some(format!(
        "measured on {}, and this machine is {}",
        describe(fingerprint, cache, generation),
        describe(&here.fingerprint, here_cache, here_generation)
    ))
}

/// The CPU generation clause of a CPU hardware record's `software` text ("family 26 model 2 stepping
/// 1", as the collector writes it from `/proc/cpuinfo`), if it has one.
#[must_use]
pub fn cpu_generation(software: &str) -> Option<&str> {
    software.split(';').map(str::trim).find(|part| part.starts_with("family "))
}

/// The clause a CPU hardware record's `software` text gives its last-level cache in (`last-level cache
/// 260.0 MiB`, or `last-level cache unknown`): written by the collector, read by [`other_machine`] and by
/// `--cost-model cpu`.
#[must_use]
pub fn last_level_cache_clause(llc_bytes: Option<u64>) -> String {
    format!("last-level cache {}", llc_bytes.map_or_else(|| "unknown".into(), crate::units::format_bytes))
}

/// The "last-level cache …" clause of a CPU hardware record's `software` text, if it has one.
#[must_use]
pub fn last_level_cache(software: &str) -> Option<&str> {
    software.split(';').map(str::trim).find(|part| part.starts_with("last-level cache"))
}

impl ModelCard {
    /// Parses and checks a card against what this build computes.
    pub fn from_json(text: &str) -> Result<Self> {
        let card: Self = serde_json::from_str(text)
            .map_err(|e| Error::Parse { context: "model card".into(), message: e.to_string() })?;
        card.check()?;
        Ok(card)
    }

    /// Refuses a card whose schema does not match this build.
    pub fn check(&self) -> Result<()> {
        let mismatch = |what: &str, expected: String, found: String| {
            Err(Error::ModelSchemaMismatch { model: self.name.clone(), what: what.into(), expected, found })
        };
        if self.schema != CARD_SCHEMA {
            return mismatch("card schema", CARD_SCHEMA.into(), self.schema.clone());
        }
        if self.units != "ms" {
            return mismatch("units", "ms".into(), self.units.clone());
        }
        let c = &self.compute;
        if c.feature_schema != FeatureSchema::NeuroShard20 {
            return mismatch("compute feature schema", "neuro_shard20".into(), format!("{:?}", c.feature_schema));
        }
        let names = FeatureSchema::NeuroShard20.names();
        if c.feature_names != names {
            return mismatch("compute feature names", names.join(","), c.feature_names.join(","));
        }
        let n = names.len();
        if c.normalisation.mean.len() != n || c.normalisation.std.len() != n {
            return mismatch(
                "compute normalisation length",
                n.to_string(),
                format!("mean {} / std {}", c.normalisation.mean.len(), c.normalisation.std.len()),
            );
        }
        check_norm(&self.name, "compute normalisation", &c.normalisation)?;
        if let Some(i) = &c.interval {
            if !(i.z.is_finite() && i.z > 0.0 && (0.0..=1.0).contains(&i.coverage)) {
                return mismatch(
                    "compute interval",
                    "z > 0 and coverage in [0, 1]".into(),
                    format!("z {} coverage {}", i.z, i.coverage),
                );
            }
            if c.ensemble.is_empty() {
                return mismatch("compute interval", "an ensemble of at least two members".into(), "one member".into());
            }
        }
        if let Some(t) = &self.compute_terms {
            t.coefficients(&self.name)?;
        } else if c.on_terms {
            return mismatch(
                "compute on_terms",
                "a memory-terms model (`compute_terms`) for the networks to scale".into(),
                "none".into(),
            );
        }
        for comm in &self.comm {
            let d = comm.devices;
            if comm.bw_normalisation.mean.len() != d || comm.fw_normalisation.mean.len() != 2 * d {
                return mismatch(
                    "comm normalisation length",
                    format!("{d} (backward) and {} (forward)", 2 * d),
                    format!("{} and {}", comm.bw_normalisation.mean.len(), comm.fw_normalisation.mean.len()),
                );
            }
            check_norm(&self.name, "comm backward normalisation", &comm.bw_normalisation)?;
            check_norm(&self.name, "comm forward normalisation", &comm.fw_normalisation)?;
        }
        Ok(())
    }
}

fn check_norm(model: &str, what: &str, n: &Normalisation) -> Result<()> {
    let ok = n.mean.len() == n.std.len()
        && n.mean.iter().all(|m| m.is_finite())
        && n.std.iter().all(|s| s.is_finite() && *s > 0.0)
        && n.log1p.iter().all(|&j| j < n.mean.len());
    if ok {
        Ok(())
    } else {
        Err(Error::ModelSchemaMismatch {
            model: model.into(),
            what: what.into(),
            expected: "finite means and positive standard deviations of equal length, logged features among them"
                .into(),
            found: format!("{} means, {} stds", n.mean.len(), n.std.len()),
        })
    }
}
