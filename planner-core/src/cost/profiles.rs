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

/// The graphs of a profile as `shardplan-train calibrate` writes it: a 5-member compute ensemble, and for
/// a CPU backend (`with comm`) comm models for 4 and 8 devices; a single-GPU profile has no comm model.
macro_rules! ensemble_profile_files {
    ($dir:literal $(, $comm:literal)*) => {
        &[
            profile_file!($dir, "compute_encoder.onnx"),
            profile_file!($dir, "compute_head.onnx"),
            profile_file!($dir, "compute_end_to_end.onnx"),
            profile_file!($dir, "compute_encoder_m1.onnx"),
            profile_file!($dir, "compute_head_m1.onnx"),
            profile_file!($dir, "compute_encoder_m2.onnx"),
            profile_file!($dir, "compute_head_m2.onnx"),
            profile_file!($dir, "compute_encoder_m3.onnx"),
            profile_file!($dir, "compute_head_m3.onnx"),
            profile_file!($dir, "compute_encoder_m4.onnx"),
            profile_file!($dir, "compute_head_m4.onnx"),
            $(profile_file!($dir, $comm),)*
        ]
    };
}

/// Every embedded profile.
pub const EMBEDDED: &[EmbeddedProfile] = &[
    EmbeddedProfile {
        name: "h100",
        hardware: "one NVIDIA H100 80GB HBM3, fused fp32 embedding-bag forward + backward/SGD, batch 65,536; \
                   calibrated through `shardplan-train calibrate` on the planners' own device sets",
        comm_fallback_hw: "h100",
        card_json: include_str!("../../profiles/h100/card.json"),
        files: ensemble_profile_files!("h100"),
    },
    // A CPU profile prices the collector's CPU backend on one kind of machine (`--cost-model cpu` picks
    // the one of the machine it runs on): useful beside that collector, not in a browser, where its
    // 0.46 MB (gzipped) of graphs would only weigh on the page.
    #[cfg(not(target_arch = "wasm32"))]
    EmbeddedProfile {
        name: "cpu-xeon-2t",
        hardware: "the CPU backend on 2 vCPUs of an Intel Xeon cloud host (260 MiB last-level cache, transparent \
                   huge pages), batch 4,096, comm between 4 and 8 threads; trained through `shardplan-train \
                   calibrate`",
        comm_fallback_hw: "torchrec",
        card_json: include_str!("../../profiles/cpu-xeon-2t/card.json"),
        files: ensemble_profile_files!(
            "cpu-xeon-2t",
            "comm_d4_bw.onnx",
            "comm_d4_fw.onnx",
            "comm_d8_bw.onnx",
            "comm_d8_fw.onnx"
        ),
    },
    #[cfg(not(target_arch = "wasm32"))]
    EmbeddedProfile {
        name: "cpu-epyc-2t",
        hardware: "the CPU backend on 2 vCPUs of an AMD EPYC cloud host (32 MiB last-level cache, transparent huge \
                   pages), batch 4,096, comm between 4 and 8 threads; trained through `shardplan-train calibrate`",
        comm_fallback_hw: "torchrec",
        card_json: include_str!("../../profiles/cpu-epyc-2t/card.json"),
        files: ensemble_profile_files!(
            "cpu-epyc-2t",
            "comm_d4_bw.onnx",
            "comm_d4_fw.onnx",
            "comm_d8_bw.onnx",
            "comm_d8_fw.onnx"
        ),
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

/// The name that picks the embedded CPU profile of the machine a binary runs on (`--cost-model cpu`).
pub const CPU_ALIAS: &str = "cpu";

/// The CPU model a profile's card records (the collector's hardware record of a `cpu` backend names the
/// model as its one device); `None` for a GPU profile or a card without one.
#[must_use]
pub fn cpu_model_of(profile: &EmbeddedProfile) -> Option<String> {
    cpu_machine_of(profile).map(|(model, _)| model)
}

/// The CPU model and the last-level cache clause (`cost::card::last_level_cache_clause`) a CPU profile's
/// card records, its card read once; `None` for a GPU profile or a card without a CPU model.
fn cpu_machine_of(profile: &EmbeddedProfile) -> Option<(String, String)> {
    let card = crate::cost::ModelCard::from_json(profile.card_json).ok()?;
    if card.hardware.get("backend")?.as_str()? != "cpu" {
        return None;
    }
    let model = card.hardware.get("devices")?.get(0)?.as_str()?.to_string();
    let software = card.hardware.get("software").and_then(serde_json::Value::as_str).unwrap_or("");
    let cache = crate::cost::card::last_level_cache(software)
        .map_or_else(|| crate::cost::card::last_level_cache_clause(None), str::to_string);
    Some((model, cache))
}

/// The embedded CPU profile measured on this machine: a CPU of model `model` (`/proc/cpuinfo`'s "model
/// name", as the collector records it) with a last-level cache of `llc_bytes` (sysfs; `None` where it is
/// not known). A CPU profile prices the collector's CPU backend on one kind of machine only: another CPU's
/// caches and memory change the costs by tens of percent, and so does another cache behind the same model
/// name (two cloud hosts report one "Intel(R) Xeon(R) Processor" with 260 and 480 MiB;
/// `docs/COST_MODELS.md`, "Another machine is not another speed").
///
/// # Errors
/// [`Error::CostModel`] when no embedded profile was measured on that CPU with that cache, naming the CPU,
/// its cache and the CPU profiles there are with theirs (and how to use one anyway, or calibrate one).
pub fn cpu_profile_for(model: &str, llc_bytes: Option<u64>) -> Result<&'static EmbeddedProfile> {
    let here_cache = crate::cost::card::last_level_cache_clause(llc_bytes);
    let cpu: Vec<(&'static EmbeddedProfile, String, String)> =
        EMBEDDED.iter().filter_map(|p| cpu_machine_of(p).map(|(m, c)| (p, m, c))).collect();
    if let Some((p, _, _)) = cpu.iter().find(|(_, m, c)| m == model && *c == here_cache) {
        return Ok(p);
    }
    let known: Vec<String> = cpu.iter().map(|(p, m, c)| format!("{} ({m}, {c})", p.name)).collect();
    let anyway = cpu.iter().find(|(_, m, _)| m == model).map_or_else(String::new, |(p, _, _)| {
        format!(
            ". To plan with the profile of another cache anyway, name it (--cost-model {}); its costs are another machine's",
            p.name
        )
    });
    Err(Error::CostModel {
        model: CPU_ALIAS.into(),
        message: format!(
            "no embedded CPU profile was measured on this machine's CPU ({model}, {here_cache}); the embedded ones are {}{anyway}. \
             Calibrate one here with `shardplan-train calibrate` and pass its directory to --cost-model",
            if known.is_empty() { "none".to_string() } else { known.join(", ") }
        ),
    })
}

/// How the machine `hardware` differs from the one the embedded profile behind `cost_model` was measured
/// on (`cost_model` as a plan report names it, `neural:<name>`, or the bare name), by the one rule of
/// [`crate::cost::card::other_machine`]: `None` when it is the same machine, and when `cost_model` names
/// no embedded profile (the analytical model, a profile read from a directory).
#[must_use]
pub fn other_machine(cost_model: &str, hardware: &crate::dataset::Hardware) -> Option<String> {
    let name = cost_model.strip_prefix("neural:").unwrap_or(cost_model);
    let card = crate::cost::ModelCard::from_json(find(name)?.card_json).ok()?;
    crate::cost::card::other_machine(&card.hardware, hardware).map(|why| format!("{name} was {why}"))
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
    with_preset_comm(model, preset, crate::cost::analytical::DEFAULT_GLOBAL_BATCH)
}

/// `model` with the comm it has no model for priced by the analytical model of the built-in hardware
/// `preset` at `global_batch`.
///
/// # Errors
/// An unknown preset or a batch the analytical model refuses.
pub fn with_preset_comm(model: NeuralModel, preset: &str, global_batch: u64) -> Result<NeuralModel> {
    let hw = crate::cost::HardwareProfile::builtin(preset)?;
    Ok(model.with_comm_fallback(crate::cost::AnalyticalModel::new(hw, global_batch)?))
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
    fn a_profile_judged_on_another_machine_is_named() {
        use crate::dataset::{BackendKind, Hardware};
        let of = |p: &EmbeddedProfile| {
            let card = ModelCard::from_json(p.card_json).unwrap();
            let text = |k: &str| card.hardware.get(k).and_then(serde_json::Value::as_str).unwrap().to_string();
            Hardware {
                backend: BackendKind::Cpu,
                fingerprint: text("fingerprint"),
                devices: vec![],
                software: text("software"),
            }
        };
        let cpu: Vec<&EmbeddedProfile> = EMBEDDED.iter().filter(|p| cpu_model_of(p).is_some()).collect();
        assert!(!cpu.is_empty(), "no embedded CPU profile");
        for p in &cpu {
            let own = of(p);
            assert_eq!(other_machine(&format!("neural:{}", p.name), &own), None, "{} on its own machine", p.name);
            // Another collector version on the same machine is the same machine.
            let newer = Hardware {
                software: own.software.replace("shardplan-collect 0.1.0", "shardplan-collect 9.9"),
                ..own.clone()
            };
            assert_eq!(other_machine(p.name, &newer), None);
            // The same CPU model with another last-level cache is another machine.
            let cache = own.software.split(';').map(str::trim).find(|c| c.starts_with("last-level cache")).unwrap();
            let bigger =
                Hardware { software: own.software.replace(cache, "last-level cache 999.0 MiB"), ..own.clone() };
            let why = other_machine(&format!("neural:{}", p.name), &bigger).unwrap();
            assert!(why.contains(cache) && why.contains("999.0 MiB") && why.contains(p.name), "{why}");
            // A record that names a CPU generation is compared with one that names another, and not with
            // the embedded cards, written before the generation was recorded.
            let with_generation = |g: &str| Hardware { software: format!("{}; {g}", own.software), ..own.clone() };
            let (zen5, zen4) = (with_generation("family 26 model 2 stepping 1"), with_generation("family 25 model 17"));
            assert_eq!(other_machine(p.name, &zen5), None);
            let zen5_card = serde_json::json!({"fingerprint": zen5.fingerprint, "software": zen5.software});
            assert_eq!(crate::cost::card::other_machine(&zen5_card, &zen5), None);
            let why = crate::cost::card::other_machine(&zen5_card, &zen4).unwrap();
            assert!(why.contains("family 26 model 2 stepping 1") && why.contains("family 25 model 17"), "{why}");
            let elsewhere = Hardware { fingerprint: "cpu:Some Other CPU:2t:thp".into(), ..own.clone() };
            let why = other_machine(p.name, &elsewhere).unwrap();
            assert!(why.contains(&own.fingerprint) && why.contains("Some Other CPU"), "{why}");
            // Neither the analytical model nor a profile read from a directory names a machine.
            assert_eq!(other_machine("analytical:torchrec", &elsewhere), None);
            assert_eq!(other_machine("neural:out/profile", &elsewhere), None);
            // A card that records no fingerprint names no machine.
            assert_eq!(crate::cost::card::other_machine(&serde_json::json!({"backend": "cpu"}), &elsewhere), None);
        }
    }

    #[test]
    fn the_cpu_alias_finds_the_profile_of_its_cpu_and_names_the_others() {
        let cpu: Vec<_> = EMBEDDED.iter().filter_map(|p| cpu_model_of(p).map(|m| (p.name, m))).collect();
        assert!(!cpu.is_empty(), "no embedded CPU profile");
        assert!(cpu_model_of(find(DEFAULT_PROFILE).unwrap()).is_none(), "the GPU profile has no CPU model");
        let cache_of = |name: &str| {
            let card = ModelCard::from_json(find(name).unwrap().card_json).unwrap();
            let software = card.hardware["software"].as_str().unwrap().to_string();
            let mib = software.split("last-level cache ").nth(1).unwrap().split(" MiB").next().unwrap();
            let bytes = mib.strip_suffix(".0").unwrap().parse::<u64>().unwrap() << 20;
            assert_eq!(crate::cost::card::last_level_cache_clause(Some(bytes)), format!("last-level cache {mib} MiB"));
            bytes
        };
        for (name, model) in &cpu {
            assert_eq!(cpu_profile_for(model, Some(cache_of(name))).unwrap().name, *name);
        }
        let Err(e) = cpu_profile_for("Some Other CPU 9000", Some(32 << 20)) else {
            panic!("an unknown CPU found a profile")
        };
        let e = e.to_string();
        assert!(e.contains("Some Other CPU 9000") && e.contains("calibrate"), "{e}");
        for (name, model) in &cpu {
            assert!(e.contains(name) && e.contains(model.as_str()), "{e}");
        }
        // The same CPU model behind another cache is another machine: refused, naming both caches and the
        // profile to name explicitly.
        let (name, model) = &cpu[0];
        let other = cache_of(name) * 2 + (1 << 20);
        let Err(e) = cpu_profile_for(model, Some(other)) else { panic!("another cache found {name}") };
        let e = e.to_string();
        let here = crate::cost::card::last_level_cache_clause(Some(other));
        assert!(e.contains(&here) && e.contains(&format!("--cost-model {name}")), "{e}");
        assert!(cpu_profile_for(model, None).is_err(), "an unknown cache matched {name}");
    }

    #[test]
    fn an_unknown_profile_is_refused_by_name() {
        let Err(e) = load("a100-nope") else { panic!("an unknown profile loaded") };
        let e = e.to_string();
        assert!(e.contains("a100-nope") && e.contains("h100"), "{e}");
    }
}
