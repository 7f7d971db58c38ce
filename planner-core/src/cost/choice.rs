//! Choosing a cost model by name: the one rule the CLI (`--cost-model` and its flags) and the browser
//! binding (`ModelOptions`) share. A name is `analytical` (TorchRec's estimator on a hardware preset) or
//! an embedded profile ([`profiles::EMBEDDED`]); a profile read from elsewhere (the CLI's profile
//! directories) is finished with [`ModelChoice::finish`] under the same rules.

use super::analytical::DEFAULT_GLOBAL_BATCH;
use super::{AnalyticalModel, CostModel, HardwareProfile, NeuralModel, TermsModel, profiles};
use crate::error::{Error, Result};

/// Names this build knows: `analytical`, then the embedded profiles.
#[must_use]
pub fn model_names() -> Vec<&'static str> {
    let mut names = vec!["analytical"];
    names.extend(profiles::names());
    names
}

/// The analytical preset that prices a loaded profile's comm where it has no comm model (an embedded
/// profile names its own).
pub const LOADED_PROFILE_COMM_PRESET: &str = "torchrec";

/// A cost model by name, with the options every front end offers. [`ModelChoice::new`] gives the
/// defaults: the embedded default profile, its measured batch, no risk, comm fallback only where the
/// profile has no comm model at all.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelChoice {
    /// `analytical` or an embedded profile's name.
    pub name: String,
    /// Hardware preset of the analytical model ([`HardwareProfile::BUILTIN`]); default `torchrec`, or
    /// for a profile's comm the preset its card names.
    pub hw: Option<String>,
    /// Overrides the preset's HBM bandwidth, GB/s.
    pub hbm_gbps: Option<f64>,
    /// Overrides the preset's all-to-all bandwidth, GB/s.
    pub comm_gbps: Option<f64>,
    /// Global batch the costs are for. The analytical model prices any batch; a profile predicts only the
    /// batch it was measured at, so another one is refused (`None`: that batch).
    pub global_batch: Option<u64>,
    /// Ensemble risk (mean + `risk` standard deviations); 0 = the mean. Needs an ensemble profile.
    pub risk: f64,
    /// Price comm analytically for device counts the profile has no comm model for.
    pub comm_fallback: bool,
    /// Price a plan at the expected time of its slowest device under the profile's own error
    /// ([`crate::cost::expected_max_ms`]); needs a profile whose card records its validation error.
    pub expected_max: bool,
    /// Price compute with the profile's memory-terms model ([`crate::cost::terms`]) instead of its
    /// networks (comm stays the profile's); needs a card with `compute_terms`.
    pub compute_terms: bool,
}

impl ModelChoice {
    /// `name` with the default options.
    #[must_use]
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            hw: None,
            hbm_gbps: None,
            comm_gbps: None,
            global_batch: None,
            risk: 0.0,
            comm_fallback: false,
            expected_max: false,
            compute_terms: false,
        }
    }

    /// Whether [`ModelChoice::build`] knows the name (`analytical` or an embedded profile).
    #[must_use]
    pub fn is_known(&self) -> bool {
        self.name == "analytical" || profiles::find(&self.name).is_some()
    }

    /// Builds the model.
    ///
    /// # Errors
    /// [`Error::UnknownCostModel`] for a name this build does not know; [`Error::InvalidField`] for options
    /// the model cannot honour (a risk without an ensemble, a batch a profile was not measured at, a bad
    /// preset or bandwidth).
    pub fn build(&self) -> Result<Box<dyn CostModel>> {
        if self.name == "analytical" {
            if self.risk != 0.0 {
                return Err(Error::field(
                    "cost model `analytical`",
                    "risk",
                    self.risk,
                    "0: the analytical model has no ensemble to take a spread from",
                ));
            }
            if self.expected_max {
                return Err(Error::field(
                    "cost model `analytical`",
                    "expected_max",
                    true,
                    "false: the analytical model has no measured error to take a spread from",
                ));
            }
            if self.compute_terms {
                return Err(Error::field(
                    "cost model `analytical`",
                    "compute_terms",
                    true,
                    "false: only a measured profile has a fitted memory-terms model",
                ));
            }
            return Ok(Box::new(self.analytical("torchrec", self.global_batch.unwrap_or(DEFAULT_GLOBAL_BATCH))?));
        }
        let Some(p) = profiles::find(&self.name) else {
            return Err(Error::UnknownCostModel { name: self.name.clone(), known: model_names().join(", ") });
        };
        self.finish(profiles::load(p.name)?, p.comm_fallback_hw)
    }

    /// Applies the options to a profile loaded from outside the library (a directory `shardplan-train`
    /// wrote, read by the caller); its comm, where it has none, is priced with the `torchrec` preset unless
    /// [`ModelChoice::hw`] names another.
    ///
    /// # Errors
    /// As [`ModelChoice::build`].
    pub fn build_loaded(&self, model: NeuralModel) -> Result<Box<dyn CostModel>> {
        self.finish(model, LOADED_PROFILE_COMM_PRESET)
    }

    /// Applies the options to a loaded profile; `comm_preset` is the analytical preset that prices its comm
    /// where it has none (unless [`ModelChoice::hw`] names another).
    ///
    /// # Errors
    /// As [`ModelChoice::build`].
    pub fn finish(&self, model: NeuralModel, comm_preset: &str) -> Result<Box<dyn CostModel>> {
        let ctx = || format!("cost model `{}`", self.name);
        if self.risk != 0.0 && model.member_count() < 2 {
            return Err(Error::field(ctx(), "risk", self.risk, "0: this profile has one network, no ensemble"));
        }
        let measured_at = model.global_batch().unwrap_or(DEFAULT_GLOBAL_BATCH);
        if let Some(b) = self.global_batch.filter(|&b| b != measured_at) {
            return Err(Error::field(
                ctx(),
                "global_batch",
                b,
                format!(
                    "{measured_at}: the profile was measured at that global batch and predicts only it (the analytical model prices any batch)"
                ),
            ));
        }
        if self.compute_terms && self.risk != 0.0 {
            return Err(Error::field(
                ctx(),
                "risk",
                self.risk,
                "0: the memory-terms model is one fit, no ensemble to take a spread from",
            ));
        }
        let model = model.with_risk(self.risk)?.with_expected_max(self.expected_max && !self.compute_terms)?;
        let fallback = self.comm_fallback || model.comm_device_counts().is_empty();
        let model = if fallback { model.with_comm_fallback(self.analytical(comm_preset, measured_at)?) } else { model };
        if self.compute_terms {
            return Ok(Box::new(TermsModel::new(model, self.expected_max)?));
        }
        Ok(Box::new(model))
    }

    /// The analytical model on [`ModelChoice::hw`] (or `preset`) with the bandwidth overrides.
    fn analytical(&self, preset: &str, batch: u64) -> Result<AnalyticalModel> {
        let mut hw = HardwareProfile::builtin(self.hw.as_deref().unwrap_or(preset))?;
        for (what, gbps, field) in
            [("hbm", self.hbm_gbps, &mut hw.hbm_bw_bytes_per_s), ("comm", self.comm_gbps, &mut hw.comm_bw_bytes_per_s)]
        {
            if let Some(g) = gbps {
                if !g.is_finite() || g <= 0.0 || g > 1e6 {
                    return Err(Error::field(
                        "cost model",
                        format!("{what} bandwidth (GB/s)"),
                        g,
                        "a number in (0, 1e6]",
                    ));
                }
                *field = g * 1e9;
            }
        }
        if let Some(g) = self.hbm_gbps {
            hw.name = format!("{}+hbm{g}", hw.name);
        }
        if let Some(g) = self.comm_gbps {
            hw.name = format!("{}+comm{g}", hw.name);
        }
        AnalyticalModel::new(hw, batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_profile_and_the_analytical_model_build() {
        let h100 = ModelChoice::new(profiles::DEFAULT_PROFILE).build().unwrap();
        // The h100 profile has no comm model: its comm is priced by its card's preset, and the name says so.
        assert!(h100.name().contains("analytical"), "{}", h100.name());
        assert_eq!(h100.global_batch(), Some(65_536));
        let a = ModelChoice { global_batch: Some(1024), hbm_gbps: Some(100.0), ..ModelChoice::new("analytical") };
        let a = a.build().unwrap();
        assert_eq!(a.global_batch(), Some(1024));
        assert!(a.name().contains("+hbm100"), "{}", a.name());
        assert_eq!(model_names()[0], "analytical");
    }

    #[test]
    fn options_a_model_cannot_honour_are_refused_by_name() {
        let err = |c: ModelChoice| c.build().err().map(|e| e.to_string()).unwrap_or_default();
        let e = err(ModelChoice { risk: 1.0, ..ModelChoice::new("analytical") });
        assert!(e.contains("`risk` = 1"), "{e}");
        let e = err(ModelChoice { global_batch: Some(4096), ..ModelChoice::new("h100") });
        assert!(e.contains("`global_batch` = 4096") && e.contains("65536"), "{e}");
        // The embedded `h100` is an ensemble: risk works. The same card with one network refuses it.
        assert!(ModelChoice { risk: 1.0, ..ModelChoice::new("h100") }.build().is_ok());
        let p = profiles::find("h100").unwrap();
        let mut card: serde_json::Value = serde_json::from_str(p.card_json).unwrap();
        let compute = card["compute"].as_object_mut().unwrap();
        compute.remove("ensemble");
        compute.remove("interval");
        let single = crate::cost::NeuralModel::from_profile(&card.to_string(), |f| {
            p.files.iter().find(|(name, _)| *name == f).map(|(_, b)| *b)
        })
        .unwrap();
        let e = ModelChoice { risk: 1.0, ..ModelChoice::new("h100") }.finish(single, "h100").err().unwrap().to_string();
        assert!(e.contains("one network"), "{e}");
        let e = err(ModelChoice { expected_max: true, ..ModelChoice::new("analytical") });
        assert!(e.contains("`expected_max` = true") && e.contains("no measured error"), "{e}");
        let e = err(ModelChoice { comm_gbps: Some(f64::NAN), ..ModelChoice::new("analytical") });
        assert!(e.contains("comm bandwidth"), "{e}");
        let e = err(ModelChoice { hw: Some("tpu".into()), ..ModelChoice::new("analytical") });
        assert!(e.contains("tpu"), "{e}");
        let e = err(ModelChoice::new("oracle"));
        assert!(e.contains("oracle") && e.contains("analytical"), "{e}");
        assert!(!ModelChoice::new("oracle").is_known());
    }

    #[test]
    fn the_memory_terms_model_is_chosen_where_a_card_has_one() {
        let err = |c: ModelChoice| c.build().err().map(|e| e.to_string()).unwrap_or_default();
        let terms = ModelChoice { compute_terms: true, ..ModelChoice::new("cpu-epyc-2t") }.build().unwrap();
        assert_eq!(terms.name(), "terms:cpu-epyc-2t");
        assert!(terms.compute_is_additive());
        assert_eq!(terms.global_batch(), Some(4096));
        assert!(terms.reference_speed().is_some());
        // Comm is the profile's own, whichever model prices compute.
        let plain = ModelChoice::new("cpu-epyc-2t").build().unwrap();
        let dims = [96.0, 64.0, 160.0, 32.0];
        assert_eq!(terms.bw_comm_ms(&dims).unwrap(), plain.bw_comm_ms(&dims).unwrap());
        // Its own validation error sets the expected maximum's spread, not the networks'.
        let emax = ModelChoice { compute_terms: true, expected_max: true, ..ModelChoice::new("cpu-epyc-2t") };
        let emax = emax.build().unwrap();
        assert_eq!(emax.name(), "terms:cpu-epyc-2t+expected-max");
        let plain_emax = ModelChoice { expected_max: true, ..ModelChoice::new("cpu-epyc-2t") }.build().unwrap();
        assert_ne!(emax.plan_error_sd(), plain_emax.plan_error_sd());
        // Refused by name: a card without one, the analytical model, and a risk (one fit, no ensemble).
        let e = err(ModelChoice { compute_terms: true, ..ModelChoice::new("h100") });
        assert!(e.contains("`compute_terms` = true") && e.contains("fit-terms"), "{e}");
        let e = err(ModelChoice { compute_terms: true, ..ModelChoice::new("analytical") });
        assert!(e.contains("`compute_terms` = true"), "{e}");
        let e = err(ModelChoice { compute_terms: true, risk: 1.0, ..ModelChoice::new("cpu-epyc-2t") });
        assert!(e.contains("`risk` = 1") && e.contains("no ensemble"), "{e}");
    }
}
