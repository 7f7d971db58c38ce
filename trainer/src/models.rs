//! The trainable models over loaded data, and their accuracy metrics.

use anyhow::Result;
use candle_core::{Device, Tensor, Var};
use planner_core::cost::card::SplitMetrics;
use planner_core::features::Normalisation;

use crate::data::{CommSample, ComputeSample};
use crate::net::{ComputeNet, Mlp, matrix, pad_sets};
use crate::train::Trainable;

/// What the compute model minimises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Loss {
    /// Mean squared error in ms² (SPEC section 5): large sets dominate.
    #[default]
    Mse,
    /// Mean squared *relative* error, `((pred − y) / max(y, 0.01 ms))²`: every set counts by its
    /// relative error, as a planner comparing devices of very different loads needs.
    Relative,
}

/// What the compute networks learn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ComputeTarget {
    /// The measured time (SPEC section 5).
    #[default]
    Time,
    /// The measured time over the memory-terms model's time of the set, fitted first on the same
    /// training split (`ComputeCard::on_terms`); needs the machine's cache size in the data.
    OverTerms,
}

/// The compute set model over compute samples.
pub struct ComputeModel<'a> {
    /// The network.
    pub net: &'a ComputeNet,
    /// All samples (indices refer to this slice).
    pub data: &'a [ComputeSample],
    /// The loss minimised.
    pub loss: Loss,
    /// Per sample, the memory-terms model's time (ms) the network's output multiplies, when the network
    /// learns on the terms (`ComputeCard::on_terms`); `None`: the output is the time.
    pub base: Option<&'a [f64]>,
}

impl ComputeModel<'_> {
    /// Predicted ms of the samples `idx` (the network's output times the sample's terms time, when it
    /// learns on the terms).
    pub fn predict(&self, idx: &[usize]) -> Result<Vec<f64>> {
        let mut out = Vec::with_capacity(idx.len());
        for chunk in idx.chunks(1024) {
            let sets: Vec<&[Vec<f32>]> = chunk.iter().map(|&i| self.data[i].features.as_slice()).collect();
            let (x, m) = pad_sets(&sets, planner_core::features::NEUROSHARD_LEN)?;
            let raw = self.net.forward(&x, &m)?.to_vec1::<f32>()?;
            out.extend(chunk.iter().zip(raw).map(|(&i, v)| f64::from(v) * self.base.map_or(1.0, |b| b[i])));
        }
        Ok(out)
    }
}

impl Trainable for ComputeModel<'_> {
    fn vars(&self) -> Vec<&Var> {
        self.net.vars()
    }

    fn loss(&self, idx: &[usize]) -> Result<Tensor> {
        let sets: Vec<&[Vec<f32>]> = idx.iter().map(|&i| self.data[i].features.as_slice()).collect();
        let (x, m) = pad_sets(&sets, planner_core::features::NEUROSHARD_LEN)?;
        let y: Vec<f32> = idx.iter().map(|&i| self.data[i].target_ms as f32).collect();
        let mut out = self.net.forward(&x, &m)?;
        if let Some(base) = self.base {
            let b: Vec<f32> = idx.iter().map(|&i| base[i] as f32).collect();
            out = (out * Tensor::from_vec(b, idx.len(), &Device::Cpu)?)?;
        }
        let diff = (out - Tensor::from_vec(y.clone(), idx.len(), &Device::Cpu)?)?;
        match self.loss {
            Loss::Mse => Ok(diff.sqr()?.mean_all()?),
            Loss::Relative => {
                let inv: Vec<f32> = y.iter().map(|v| 1.0 / v.max(MAPE_FLOOR_MS as f32)).collect();
                let inv = Tensor::from_vec(inv, idx.len(), &Device::Cpu)?;
                Ok((diff * inv)?.sqr()?.mean_all()?)
            }
        }
    }
}

/// Which comm direction a [`CommModel`] predicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Backward: input = D dim sums.
    Backward,
    /// Forward: input = D dim sums then D delays.
    Forward,
}

/// A comm MLP over comm samples of one device count.
pub struct CommModel {
    /// The network (`in → 128 → 64 → 32 → 16 → D`).
    pub net: Mlp,
    /// Input normalisation (fitted on the training split).
    pub norm: Normalisation,
    x: Vec<Vec<f32>>,
    /// Targets: the measured times less `wait`.
    y: Vec<Vec<f32>>,
    /// Per sample and device, the part of the time the network does not learn: the forward wait for the
    /// last device to start ([`planner_core::cost::start_wait_ms`]); zeros backward.
    wait: Vec<Vec<f64>>,
    d: usize,
}

impl CommModel {
    /// Builds inputs/targets for `dir`; the normalisation is fitted on `train` only.
    pub fn new(data: &[CommSample], dir: Direction, train: &[usize], seed: u64) -> Result<Self> {
        use rand::SeedableRng;
        let d = data.first().map_or(0, |s| s.dims.len());
        let raw: Vec<Vec<f64>> = data
            .iter()
            .map(|s| match dir {
                Direction::Backward => s.dims.clone(),
                Direction::Forward => s.dims.iter().chain(&s.delays_ms).copied().collect(),
            })
            .collect();
        let fit_rows: Vec<Vec<f64>> = train.iter().map(|&i| raw[i].clone()).collect();
        let norm = Normalisation::fit(&fit_rows);
        let x = raw.iter().map(|r| norm.apply(r)).collect();
        // Forward: the network learns the exchange beyond each device's wait for the last one to start
        // (`CommCard::fw_after_wait`); the wait is added back to every prediction.
        let wait: Vec<Vec<f64>> = data
            .iter()
            .map(|s| match dir {
                Direction::Backward => vec![0.0; s.bw_ms.len()],
                Direction::Forward => planner_core::cost::start_wait_ms(&s.delays_ms),
            })
            .collect();
        let y = data
            .iter()
            .zip(&wait)
            .map(|(s, w)| {
                let t = if dir == Direction::Backward { &s.bw_ms } else { &s.fw_ms };
                t.iter().zip(w).map(|(v, w)| (v - w) as f32).collect()
            })
            .collect();
        let in_w = if dir == Direction::Backward { d } else { 2 * d };
        let mut widths = vec![in_w];
        widths.extend(planner_core::cost::card::COMM_HIDDEN);
        widths.push(d);
        let mut rng = rand::rngs::ChaCha8Rng::seed_from_u64(seed);
        Ok(Self { net: Mlp::new(&widths, &mut rng)?, norm, x, y, wait, d })
    }

    /// Predicted per-device ms of samples `idx` (flattened, D per sample), and the measured times alike,
    /// the wait included in both: what the planner's model returns (a negative network output counts 0).
    pub fn predict(&self, idx: &[usize]) -> Result<(Vec<f64>, Vec<f64>)> {
        let rows: Vec<Vec<f32>> = idx.iter().map(|&i| self.x[i].clone()).collect();
        let x = matrix(&rows, rows.first().map_or(0, Vec::len))?;
        let p = self.net.forward(&x)?.flatten_all()?.to_vec1::<f32>()?;
        let wait: Vec<f64> = idx.iter().flat_map(|&i| self.wait[i].iter().copied()).collect();
        let t = idx.iter().flat_map(|&i| self.y[i].iter().zip(&self.wait[i]).map(|(v, w)| f64::from(*v) + w)).collect();
        Ok((p.into_iter().zip(wait).map(|(v, w)| f64::from(v).max(0.0) + w).collect(), t))
    }
}

impl Trainable for CommModel {
    fn vars(&self) -> Vec<&Var> {
        self.net.vars()
    }

    fn loss(&self, idx: &[usize]) -> Result<Tensor> {
        let rows: Vec<Vec<f32>> = idx.iter().map(|&i| self.x[i].clone()).collect();
        let ys: Vec<Vec<f32>> = idx.iter().map(|&i| self.y[i].clone()).collect();
        let x = matrix(&rows, rows.first().map_or(0, Vec::len))?;
        let y = matrix(&ys, self.d)?;
        Ok((self.net.forward(&x)? - y)?.sqr()?.mean_all()?)
    }
}

/// Targets below this (ms) are left out of MAPE: a percentage of almost nothing says nothing.
pub const MAPE_FLOOR_MS: f64 = 0.01;

/// MSE, MAE and MAPE of predictions against targets.
#[must_use]
pub fn metrics(pred: &[f64], target: &[f64]) -> SplitMetrics {
    let n = pred.len().max(1) as f64;
    let mse = pred.iter().zip(target).map(|(p, t)| (p - t).powi(2)).sum::<f64>() / n;
    let mae = pred.iter().zip(target).map(|(p, t)| (p - t).abs()).sum::<f64>() / n;
    let pct: Vec<f64> =
        pred.iter().zip(target).filter(|(_, t)| t.abs() >= MAPE_FLOOR_MS).map(|(p, t)| ((p - t) / t).abs()).collect();
    let mape_pct = 100.0 * pct.iter().sum::<f64>() / pct.len().max(1) as f64;
    SplitMetrics { samples: pred.len(), mse, mae, mape_pct }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_by_hand() {
        let m = metrics(&[1.0, 3.0, 0.0], &[2.0, 3.0, 0.001]);
        assert!((m.mse - (1.0 + 0.0 + 0.000_001) / 3.0).abs() < 1e-12);
        assert!((m.mae - (1.0 + 0.001) / 3.0).abs() < 1e-12);
        // The 0.001 ms target is below the floor and left out of MAPE: (50% + 0%) / 2.
        assert!((m.mape_pct - 25.0).abs() < 1e-9);
    }

    #[test]
    fn forward_comm_learns_the_exchange_beyond_the_wait() {
        // Forward times = each device's wait for the last to start + 0.5 ms. The network is trained on the
        // 0.5 ms alone; whatever it predicts, the wait comes back in full, and the measured times are
        // reported as measured.
        let data: Vec<CommSample> = (0..4)
            .map(|i| {
                let delays_ms = vec![0.0, 3.0 + f64::from(i), 1.0];
                let last = delays_ms.iter().copied().fold(0.0, f64::max);
                CommSample {
                    dims: vec![64.0, 32.0, 16.0],
                    fw_ms: delays_ms.iter().map(|d| last - d + 0.5).collect(),
                    bw_ms: vec![0.2; 3],
                    delays_ms,
                }
            })
            .collect();
        let all: Vec<usize> = (0..data.len()).collect();
        let m = CommModel::new(&data, Direction::Forward, &all, 1).unwrap();
        for (y, s) in m.y.iter().zip(&data) {
            assert!(y.iter().all(|v| (v - 0.5).abs() < 1e-6), "{y:?}");
            assert_eq!(m.wait[0].len(), s.fw_ms.len());
        }
        let (p, t) = m.predict(&all).unwrap();
        let measured: Vec<f64> = data.iter().flat_map(|s| s.fw_ms.iter().copied()).collect();
        for ((p, t), w) in p.iter().zip(&t).zip(m.wait.iter().flatten()) {
            assert!(p >= w, "prediction {p} below the wait {w}");
            assert!(t.is_finite());
        }
        for (t, m) in t.iter().zip(&measured) {
            assert!((t - m).abs() < 1e-5);
        }
        let bw = CommModel::new(&data, Direction::Backward, &all, 1).unwrap();
        assert!(bw.y.iter().flatten().all(|v| (v - 0.2).abs() < 1e-6));
    }
}
