//! The networks, on candle tensors: a plain MLP (`ReLU` between layers, none after the last), the
//! compute set model (encoder → masked sum → head) and the comm MLP. Weights are `[out, in]`, the
//! layout ONNX `Gemm` reads with `transB = 1`.

use anyhow::{Result, bail};
use candle_core::{DType, Device, Tensor, Var};
use rand::{RngExt, SeedableRng, rngs::ChaCha8Rng};

/// One layer's weights as plain vectors: `(w [out·in] row-major, b [out], out, in)`.
pub type LayerWeights = (Vec<f32>, Vec<f32>, usize, usize);

/// One dense layer.
pub struct Dense {
    /// `[out, in]`.
    pub w: Var,
    /// `[out]`.
    pub b: Var,
}

/// A multi-layer perceptron with `ReLU` between layers.
pub struct Mlp {
    /// Layers in order.
    pub layers: Vec<Dense>,
}

impl Mlp {
    /// PyTorch's default `nn.Linear` initialisation (uniform ±1/√in for weights and biases), seeded.
    pub fn new(widths: &[usize], rng: &mut ChaCha8Rng) -> Result<Self> {
        if widths.len() < 2 {
            bail!("an MLP needs at least an input and an output width, got {widths:?}");
        }
        let layers = widths
            .windows(2)
            .map(|w| {
                let (fan_in, fan_out) = (w[0], w[1]);
                let bound = 1.0 / (fan_in as f32).sqrt();
                let mut draw = |n: usize| -> Vec<f32> { (0..n).map(|_| rng.random_range(-bound..bound)).collect() };
                let w = Tensor::from_vec(draw(fan_in * fan_out), (fan_out, fan_in), &Device::Cpu)?;
                let b = Tensor::from_vec(draw(fan_out), fan_out, &Device::Cpu)?;
                Ok(Dense { w: Var::from_tensor(&w)?, b: Var::from_tensor(&b)? })
            })
            .collect::<Result<_>>()?;
        Ok(Self { layers })
    }

    /// Applies the MLP to `[N, in]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = x.clone();
        let last = self.layers.len() - 1;
        for (i, l) in self.layers.iter().enumerate() {
            h = h.matmul(&l.w.as_tensor().t()?)?.broadcast_add(l.b.as_tensor())?;
            if i < last {
                h = h.relu()?;
            }
        }
        Ok(h)
    }

    /// Every parameter, in a fixed order (weights then bias per layer).
    #[must_use]
    pub fn vars(&self) -> Vec<&Var> {
        self.layers.iter().flat_map(|l| [&l.w, &l.b]).collect()
    }

    /// Weights as plain vectors: `(w [out·in] row-major, b [out], out, in)` per layer.
    pub fn export(&self) -> Result<Vec<LayerWeights>> {
        self.layers
            .iter()
            .map(|l| {
                let (out, inp) = l.w.as_tensor().dims2()?;
                Ok((l.w.as_tensor().flatten_all()?.to_vec1()?, l.b.as_tensor().to_vec1()?, out, inp))
            })
            .collect()
    }
}

/// The compute cost model: per-table encoder, masked sum over the set, head.
pub struct ComputeNet {
    /// `20 → 128 → 32`.
    pub encoder: Mlp,
    /// `32 → 64 → 1`.
    pub head: Mlp,
}

impl ComputeNet {
    /// A freshly initialised network.
    pub fn new(seed: u64) -> Result<Self> {
        use planner_core::cost::card::{ENCODER_WIDTHS, HEAD_WIDTHS};
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        Ok(Self { encoder: Mlp::new(&ENCODER_WIDTHS, &mut rng)?, head: Mlp::new(&HEAD_WIDTHS, &mut rng)? })
    }

    /// `x` `[B, T, 20]` normalised features (padding rows arbitrary), `mask` `[B, T]` (1 = real table) → `[B]` ms.
    pub fn forward(&self, x: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (b, t, f) = x.dims3()?;
        let emb = self.encoder.forward(&x.reshape((b * t, f))?)?;
        let width = emb.dim(1)?;
        let emb = emb.reshape((b, t, width))?.broadcast_mul(&mask.unsqueeze(2)?)?;
        let sum = emb.sum(1)?;
        Ok(self.head.forward(&sum)?.squeeze(1)?)
    }

    /// Every parameter.
    #[must_use]
    pub fn vars(&self) -> Vec<&Var> {
        let mut v = self.encoder.vars();
        v.extend(self.head.vars());
        v
    }
}

/// Builds `[B, T, F]` features and a `[B, T]` mask from variable-size sets (padded with zeros).
pub fn pad_sets(sets: &[&[Vec<f32>]], width: usize) -> Result<(Tensor, Tensor)> {
    let t = sets.iter().map(|s| s.len()).max().unwrap_or(0).max(1);
    let b = sets.len();
    let mut x = vec![0.0f32; b * t * width];
    let mut m = vec![0.0f32; b * t];
    for (i, set) in sets.iter().enumerate() {
        for (j, row) in set.iter().enumerate() {
            x[(i * t + j) * width..(i * t + j + 1) * width].copy_from_slice(row);
            m[i * t + j] = 1.0;
        }
    }
    Ok((Tensor::from_vec(x, (b, t, width), &Device::Cpu)?, Tensor::from_vec(m, (b, t), &Device::Cpu)?))
}

/// A `[rows, cols]` f32 tensor from row vectors.
pub fn matrix(rows: &[Vec<f32>], cols: usize) -> Result<Tensor> {
    let data: Vec<f32> = rows.iter().flatten().copied().collect();
    Ok(Tensor::from_vec(data, (rows.len(), cols), &Device::Cpu)?.to_dtype(DType::F32)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::many_single_char_names)] // a, b, x, m, y, z: inputs, mask and outputs
    fn padding_does_not_change_a_set_cost() {
        let net = ComputeNet::new(1).unwrap();
        let a = vec![vec![0.5f32; 20], vec![-1.0f32; 20]];
        let b = vec![vec![0.5f32; 20], vec![-1.0f32; 20], vec![2.0; 20], vec![3.0; 20]];
        let (x, m) = pad_sets(&[&a, &b[..2]], 20).unwrap();
        let y = net.forward(&x, &m).unwrap().to_vec1::<f32>().unwrap();
        assert!((y[0] - y[1]).abs() < 1e-6);
        // The same set padded to a longer batch gives the same cost.
        let (x, m) = pad_sets(&[&a, &b], 20).unwrap();
        let z = net.forward(&x, &m).unwrap().to_vec1::<f32>().unwrap();
        assert!((y[0] - z[0]).abs() < 1e-6);
        assert!((z[0] - z[1]).abs() > 1e-6, "a different set should cost differently");
    }

    #[test]
    fn initialisation_is_seeded() {
        let a = ComputeNet::new(3).unwrap().encoder.export().unwrap();
        let b = ComputeNet::new(3).unwrap().encoder.export().unwrap();
        let c = ComputeNet::new(4).unwrap().encoder.export().unwrap();
        assert_eq!(a[0].0, b[0].0);
        assert_ne!(a[0].0, c[0].0);
    }
}
