//! Trained cost-model profiles compiled into the library, so that a planner works out of the box (also
//! in the browser, where no profile directory can be read). Each profile is the directory
//! `shardplan-train profile` wrote, copied under `planner-core/profiles/<name>/`; its `card.json` says
//! what it was trained on, how accurate it is and which graphs it holds.
//!
//! [`DEFAULT_PROFILE`] is the profile measured on the hardware the project treats as the reference.

use crate::cost::NeuralModel;
use crate::error::{Error, Result};

/// One embedded profile: its name, card and graph files.
pub struct EmbeddedProfile {
    /// Name the CLI and the bindings select it by (`--cost-model <name>`).
    pub name: &'static str,
    /// What it was measured on, in a few words.
    pub hardware: &'static str,
    /// Analytical hardware preset that prices comm where the profile has no comm model for a device
    /// count (a single-GPU profile has none).
    pub comm_fallback_hw: &'static str,
    /// `card.json`.
    pub card_json: &'static str,
    /// The graph files the card names.
    pub files: &'static [(&'static str, &'static [u8])],
}

macro_rules! profile_file {
    ($dir:literal, $file:literal) => {
        ($file, include_bytes!(concat!("../../profiles/", $dir, "/", $file)).as_slice())
    };
}

/// Every embedded profile.
pub const EMBEDDED: &[EmbeddedProfile] = &[
    EmbeddedProfile {
        name: "h100",
        hardware: "one NVIDIA H100 80GB HBM3, fused fp32 embedding-bag forward + backward/SGD, batch 65,536",
        comm_fallback_hw: "h100",
        card_json: include_str!("../../profiles/h100/card.json"),
        files: &[
            profile_file!("h100", "compute_encoder.onnx"),
            profile_file!("h100", "compute_head.onnx"),
            profile_file!("h100", "compute_end_to_end.onnx"),
        ],
    },
    // The CPU profile prices the collector's CPU backend on one machine: useful beside that collector,
    // not in a browser, where its 0.46 MB (gzipped) of graphs would only weigh on the page.
    #[cfg(not(target_arch = "wasm32"))]
    EmbeddedProfile {
        name: "cpu-xeon-2t",
        hardware: "the CPU backend on 2 vCPUs of an Intel Xeon cloud host (transparent huge pages), batch 4,096, \
                   comm between 4 and 8 threads; trained through `shardplan-train calibrate`",
        comm_fallback_hw: "torchrec",
        card_json: include_str!("../../profiles/cpu-xeon-2t/card.json"),
        files: &[
            profile_file!("cpu-xeon-2t", "compute_encoder.onnx"),
            profile_file!("cpu-xeon-2t", "compute_head.onnx"),
            profile_file!("cpu-xeon-2t", "compute_end_to_end.onnx"),
            profile_file!("cpu-xeon-2t", "compute_encoder_m1.onnx"),
            profile_file!("cpu-xeon-2t", "compute_head_m1.onnx"),
            profile_file!("cpu-xeon-2t", "compute_encoder_m2.onnx"),
            profile_file!("cpu-xeon-2t", "compute_head_m2.onnx"),
            profile_file!("cpu-xeon-2t", "compute_encoder_m3.onnx"),
            profile_file!("cpu-xeon-2t", "compute_head_m3.onnx"),
            profile_file!("cpu-xeon-2t", "compute_encoder_m4.onnx"),
            profile_file!("cpu-xeon-2t", "compute_head_m4.onnx"),
            profile_file!("cpu-xeon-2t", "comm_d4_bw.onnx"),
            profile_file!("cpu-xeon-2t", "comm_d4_fw.onnx"),
            profile_file!("cpu-xeon-2t", "comm_d8_bw.onnx"),
            profile_file!("cpu-xeon-2t", "comm_d8_fw.onnx"),
        ],
    },
];

/// The profile a planner uses when none is named.
pub const DEFAULT_PROFILE: &str = "h100";

/// Names of the embedded profiles.
#[must_use]
pub fn names() -> Vec<&'static str> {
    EMBEDDED.iter().map(|p| p.name).collect()
}

/// The embedded profile called `name`, if there is one.
#[must_use]
pub fn find(name: &str) -> Option<&'static EmbeddedProfile> {
    EMBEDDED.iter().find(|p| p.name == name)
}

/// Loads the embedded profile called `name` into a [`NeuralModel`].
///
/// # Errors
/// [`Error::UnknownCostModel`] for a name that is not embedded; a load error if the card or a graph is
/// inconsistent (a build problem, caught by this module's tests).
pub fn load(name: &str) -> Result<NeuralModel> {
    let profile = find(name).ok_or_else(|| Error::UnknownCostModel {
        name: name.into(),
        known: format!("embedded profiles {}", names().join(", ")),
    })?;
    NeuralModel::from_profile(profile.card_json, |f| profile.files.iter().find(|(n, _)| *n == f).map(|(_, b)| *b))
}

/// Loads the embedded profile called `name` as the CLI and the browser run it: comm the profile has
/// no model for is priced by the analytical model of its hardware preset (at the default global batch).
///
/// # Errors
/// As [`load`].
pub fn load_with_comm_fallback(name: &str) -> Result<NeuralModel> {
    let model = load(name)?;
    let preset = find(name).map_or("torchrec", |p| p.comm_fallback_hw);
    let hw = crate::cost::HardwareProfile::builtin(preset)?;
    Ok(model.with_comm_fallback(crate::cost::AnalyticalModel::new(hw, crate::cost::analytical::DEFAULT_GLOBAL_BATCH)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{CostModel, ModelCard, PieceRef};
    use crate::pool::dlrm_pool;
    use crate::table::ElementType;

    #[test]
    fn every_embedded_profile_loads_and_names_itself() {
        assert!(find(DEFAULT_PROFILE).is_some());
        for p in EMBEDDED {
            let card = ModelCard::from_json(p.card_json).unwrap();
            assert_eq!(card.name, p.name, "card name of {}", p.name);
            let model = load(p.name).unwrap();
            // A real pool table costs a positive, finite time, and more of the same table costs more.
            let t = dlrm_pool().unwrap()[3].at_dim("t".into(), 64, ElementType::Fp32).unwrap();
            let one = model.compute_ms(&[PieceRef::whole(&t, 64)]).unwrap();
            let many = model.compute_ms(&vec![PieceRef::whole(&t, 64); 12]).unwrap();
            assert!(one.is_finite() && one > 0.0, "{}: {one}", p.name);
            assert!(many > one, "{}: 12 tables {many} <= 1 table {one}", p.name);
        }
    }

    #[test]
    fn an_unknown_profile_is_refused_by_name() {
        let Err(e) = load("a100-nope") else { panic!("an unknown profile loaded") };
        let e = e.to_string();
        assert!(e.contains("a100-nope") && e.contains("h100"), "{e}");
    }
}
