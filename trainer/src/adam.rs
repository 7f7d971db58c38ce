//! Adam (Kingma & Ba) over candle variables, with its state exposed so checkpoints resume exactly.

use std::collections::HashMap;

use anyhow::{Context, Result, bail};
use candle_core::{Device, Tensor, Var, backprop::GradStore};

/// Adam with bias correction (β1 = 0.9, β2 = 0.999, ε = 1e-8), as `torch.optim.Adam` defaults.
pub struct Adam {
    /// Learning rate.
    pub lr: f64,
    /// Steps taken.
    pub step: u64,
    m: Vec<Tensor>,
    v: Vec<Tensor>,
}

const B1: f64 = 0.9;
const B2: f64 = 0.999;
const EPS: f64 = 1e-8;

impl Adam {
    /// Zero state for `vars`.
    pub fn new(vars: &[&Var], lr: f64) -> Result<Self> {
        let zeros = |v: &&Var| v.as_tensor().zeros_like();
        Ok(Self {
            lr,
            step: 0,
            m: vars.iter().map(zeros).collect::<candle_core::Result<_>>()?,
            v: vars.iter().map(zeros).collect::<candle_core::Result<_>>()?,
        })
    }

    /// One update of `vars` from `grads` (variables without a gradient are left alone).
    pub fn step(&mut self, vars: &[&Var], grads: &GradStore) -> Result<()> {
        self.step += 1;
        let t = self.step as i32;
        let c1 = 1.0 - B1.powi(t);
        let c2 = 1.0 - B2.powi(t);
        for (i, var) in vars.iter().enumerate() {
            let Some(g) = grads.get(var.as_tensor()) else { continue };
            // A gradient computed from tracked tensors tracks ops itself: detached, the moments do not
            // keep every earlier step's graph alive.
            let g = &g.detach();
            self.m[i] = ((&self.m[i] * B1)? + (g * (1.0 - B1))?)?;
            self.v[i] = ((&self.v[i] * B2)? + (g.sqr()? * (1.0 - B2))?)?;
            let m_hat = (&self.m[i] / c1)?;
            let v_hat = (&self.v[i] / c2)?;
            let update = (m_hat / (v_hat.sqrt()? + EPS)?)?;
            var.set(&(var.as_tensor() - (update * self.lr)?)?)?;
        }
        Ok(())
    }

    /// Named state tensors for a checkpoint.
    pub fn state(&self, prefix: &str) -> Result<HashMap<String, Tensor>> {
        let mut out = HashMap::new();
        for (i, (m, v)) in self.m.iter().zip(&self.v).enumerate() {
            out.insert(format!("{prefix}.m.{i}"), m.clone());
            out.insert(format!("{prefix}.v.{i}"), v.clone());
        }
        out.insert(format!("{prefix}.step"), Tensor::new(&[self.step as f64], &Device::Cpu)?);
        Ok(out)
    }

    /// Restores state written by [`Adam::state`].
    pub fn load_state(&mut self, prefix: &str, tensors: &HashMap<String, Tensor>) -> Result<()> {
        let get = |k: String| tensors.get(&k).cloned().with_context(|| format!("checkpoint lacks {k}"));
        for i in 0..self.m.len() {
            let (m, v) = (get(format!("{prefix}.m.{i}"))?, get(format!("{prefix}.v.{i}"))?);
            if m.dims() != self.m[i].dims() || v.dims() != self.v[i].dims() {
                bail!("checkpoint optimizer state {i} has shape {:?}, expected {:?}", m.dims(), self.m[i].dims());
            }
            self.m[i] = m;
            self.v[i] = v;
        }
        let step: Vec<f64> = get(format!("{prefix}.step"))?.to_vec1()?;
        self.step = step.first().copied().unwrap_or(0.0) as u64;
        Ok(())
    }
}
