//! What the two policy trainers (DreamShard, AutoShard) share: masked log-softmax over legal devices,
//! gradient-norm clipping, linear learning-rate decay, sampling from a categorical distribution, and
//! writing a policy directory (`policy.json` + ONNX graphs) that planner-core loads back.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, bail};
use candle_core::{D, Tensor, Var, backprop::GradStore};
use planner_core::policy::{LoadedPolicy, PolicyCard};
use rand::{RngExt, rngs::ChaCha8Rng};
use shardplan_files::write_atomic;

/// Added to the logits of illegal actions (a device the table does not fit on): their probability is
/// exactly 0 in f32 after the softmax.
pub const ILLEGAL_LOGIT: f32 = -1e9;

/// `log_softmax(logits + mask_bias)` along the last axis, where `mask_bias` is 0 for legal actions
/// and [`ILLEGAL_LOGIT`] for illegal ones (same shape as `logits`).
pub fn masked_log_softmax(logits: &Tensor, mask_bias: &Tensor) -> Result<Tensor> {
    let z = (logits + mask_bias)?;
    let max = z.max_keepdim(D::Minus1)?;
    let shifted = z.broadcast_sub(&max)?;
    let lse = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
    Ok(shifted.broadcast_sub(&lse)?)
}

/// Entropy of the distributions whose log-probabilities are `log_p` (last axis), illegal actions
/// contributing 0.
pub fn entropy(log_p: &Tensor) -> Result<Tensor> {
    // p·log p is 0 for p = 0; clamp keeps 0·(−1e9) finite.
    let p = log_p.exp()?;
    Ok((p * log_p.clamp(-1e4f32, 0f32)?)?.sum(D::Minus1)?.neg()?)
}

/// Scales every gradient of `vars` so their global L2 norm is at most `max_norm`; returns the norm
/// before clipping.
pub fn clip_grad_norm(vars: &[&Var], grads: &mut GradStore, max_norm: f64) -> Result<f64> {
    let mut sq = 0.0f64;
    for v in vars {
        if let Some(g) = grads.get(v.as_tensor()) {
            sq += f64::from(g.sqr()?.sum_all()?.to_scalar::<f32>()?);
        }
    }
    let norm = sq.sqrt();
    if !norm.is_finite() {
        bail!("gradient norm is {norm}: training diverged");
    }
    if norm > max_norm {
        let scale = max_norm / norm;
        for v in vars {
            if let Some(g) = grads.get(v.as_tensor()) {
                let scaled = (g * scale)?;
                grads.insert(v.as_tensor(), scaled);
            }
        }
    }
    Ok(norm)
}

/// Learning rate after `step` of `total` steps of linear decay from `lr0` to 0 (never below 1% of it).
#[must_use]
pub fn linear_decay(lr0: f64, step: usize, total: usize) -> f64 {
    let frac = if total == 0 { 1.0 } else { 1.0 - step as f64 / total as f64 };
    lr0 * frac.max(0.01)
}

/// Draws an index from the probabilities `p` (they need not sum exactly to 1; zeros are never drawn
/// unless every entry is zero, when the first index is returned).
pub fn sample_categorical(p: &[f32], rng: &mut ChaCha8Rng) -> usize {
    let total: f32 = p.iter().sum();
    let mut u = rng.random_range(0.0..1.0f32) * total;
    let mut last = 0;
    for (i, &x) in p.iter().enumerate() {
        if x > 0.0 {
            last = i;
            if u < x {
                return i;
            }
            u -= x;
        }
    }
    last
}

pub use planner_core::planners::argmax_legal;

/// Writes `card` as `policy.json` and every graph of `graphs` (file name → bytes) into `dir`, then
/// loads the directory back through planner-core (so a card that names a missing graph fails here).
pub fn write_policy_dir(dir: &Path, card: &PolicyCard, graphs: &BTreeMap<String, Vec<u8>>) -> Result<LoadedPolicy> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (name, bytes) in graphs {
        write_atomic(&dir.join(name), bytes)?;
    }
    let json = serde_json::to_string_pretty(card)?;
    write_atomic(&dir.join("policy.json"), json.as_bytes())?;
    read_policy_dir(dir, card.algorithm)
}

/// Loads a policy directory (`policy.json` + the graphs it names).
pub fn read_policy_dir(dir: &Path, algorithm: planner_core::policy::PolicyAlgorithm) -> Result<LoadedPolicy> {
    let json = std::fs::read_to_string(dir.join("policy.json"))
        .with_context(|| format!("reading {}", dir.join("policy.json").display()))?;
    let files = crate::onnx_files(dir)?;
    Ok(LoadedPolicy::from_card(&json, algorithm, |f| files.get(f).map(Vec::as_slice))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;
    use rand::SeedableRng;

    #[test]
    fn masked_softmax_gives_illegal_actions_zero_probability() {
        let logits = Tensor::new(&[[1.0f32, 5.0, 2.0]], &Device::Cpu).unwrap();
        let mask = Tensor::new(&[[0.0f32, ILLEGAL_LOGIT, 0.0]], &Device::Cpu).unwrap();
        let lp = masked_log_softmax(&logits, &mask).unwrap();
        let p: Vec<f32> = lp.exp().unwrap().flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(p[1], 0.0);
        assert!((p[0] + p[2] - 1.0).abs() < 1e-6 && p[2] > p[0]);
        let h: Vec<f32> = entropy(&lp).unwrap().to_vec1().unwrap();
        let expect = -(p[0] * p[0].ln() + p[2] * p[2].ln());
        assert!((h[0] - expect).abs() < 1e-5, "{h:?} vs {expect}");
    }

    #[test]
    fn sampling_and_argmax_never_pick_an_illegal_action() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for _ in 0..1000 {
            assert_ne!(sample_categorical(&[0.3, 0.0, 0.7], &mut rng), 1);
        }
        assert_eq!(argmax_legal(&[1.0, 9.0, 2.0], &[true, false, true]), Some(2));
        assert_eq!(argmax_legal(&[1.0, 9.0], &[false, false]), None);
        assert_eq!(linear_decay(1.0, 5, 10), 0.5);
    }
}
