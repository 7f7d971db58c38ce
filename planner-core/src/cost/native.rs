//! A plain-Rust evaluator for the small MLP graphs the trainer exports (`Gemm` with `transB`, or
//! `MatMul` + `Add`, `Relu`, and `Identity` renames), read from the ONNX protobuf itself.
//!
//! Every graph the trainer exports for a cost model or a policy MLP is such a chain (AutoShard's LSTM
//! cell has its own evaluator), so this is the runtime of the learned models on every target:
//! - speed: a tract call costs microseconds whatever the batch, and a sharding search prices hundreds of
//!   thousands of device sets. The compute head is 32 → 64 → 1 wide, a few thousand multiply-adds, so
//!   evaluating it natively is two orders of magnitude cheaper than a runtime call. Its first layer is
//!   linear in the set sum, so [`NativeMlp::project_first`] lets a planner push each piece through that
//!   layer once and sum 64-vectors instead (see [`super::incremental`]);
//! - size: the browser bundle carries this file instead of a general ONNX runtime (docs/WEB.md, "Size");
//! - one answer: the same arithmetic (f64) natively and in the browser.
//!
//! The graph stays the source of truth: a graph of any other shape is refused here and, in a native
//! build with the `tract` feature, run through tract instead; tests check the two agree on every
//! embedded graph.

use std::collections::HashMap;

use super::onnx::{GraphProto, NodeProto, TensorProto};

/// One dense layer `y = W x + b`, optionally followed by `ReLU`.
#[derive(Debug, Clone, PartialEq)]
pub struct Dense {
    /// Weights, row-major `[out, in]`.
    pub weights: Vec<f64>,
    /// Bias, `[out]`.
    pub bias: Vec<f64>,
    /// Input width.
    pub inputs: usize,
    /// Output width.
    pub outputs: usize,
    /// Whether a `ReLU` follows.
    pub relu: bool,
}

impl Dense {
    fn apply_linear(&self, x: &[f64], with_bias: bool, out: &mut Vec<f64>) {
        out.clear();
        for o in 0..self.outputs {
            let row = &self.weights[o * self.inputs..(o + 1) * self.inputs];
            let mut acc = if with_bias { self.bias[o] } else { 0.0 };
            for (w, v) in row.iter().zip(x) {
                acc += w * v;
            }
            out.push(acc);
        }
    }
}

/// A chain of dense layers read from an ONNX graph.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeMlp {
    /// The layers, input first.
    pub layers: Vec<Dense>,
}

fn unsupported(what: impl Into<String>) -> String {
    what.into()
}

/// The values of a float initializer (`float_data` or little-endian `raw_data`), checked against its dims.
pub(crate) fn tensor_f64(t: &TensorProto) -> Result<Vec<f64>, String> {
    // ONNX `FLOAT` is data type 1.
    if t.data_type != 1 {
        return Err(unsupported(format!("initializer `{}` has data type {}, not float", t.name, t.data_type)));
    }
    let n: i64 = t.dims.iter().product();
    let values: Vec<f64> = if t.float_data.is_empty() {
        t.raw_data.chunks_exact(4).map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect()
    } else {
        t.float_data.iter().map(|&v| f64::from(v)).collect()
    };
    if values.len() as i64 != n {
        return Err(unsupported(format!(
            "initializer `{}` holds {} values for dims {:?}",
            t.name,
            values.len(),
            t.dims
        )));
    }
    Ok(values)
}

fn int_attr(node: &NodeProto, name: &str, default: i64) -> i64 {
    node.attribute.iter().find(|a| a.name == name).map_or(default, |a| a.i)
}

fn float_attr(node: &NodeProto, name: &str, default: f32) -> f32 {
    node.attribute.iter().find(|a| a.name == name).map_or(default, |a| a.f)
}

impl NativeMlp {
    /// Reads the MLP from ONNX bytes. Returns a message naming what is not supported when the graph
    /// is not a plain chain of dense layers and `ReLU`s on its single input.
    pub fn from_onnx(bytes: &[u8]) -> Result<Self, String> {
        let model = super::onnx::decode_model(bytes)?;
        let graph = model.graph.as_ref().ok_or_else(|| unsupported("model has no graph"))?;
        Self::from_graph(graph)
    }

    fn from_graph(graph: &GraphProto) -> Result<Self, String> {
        let inits: HashMap<&str, &TensorProto> = graph.initializer.iter().map(|t| (t.name.as_str(), t)).collect();
        let inputs: Vec<&str> =
            graph.input.iter().map(|i| i.name.as_str()).filter(|n| !inits.contains_key(n)).collect();
        let [input] = inputs.as_slice() else {
            return Err(unsupported(format!("graph has {} non-constant inputs, not 1", inputs.len())));
        };
        let mut current = (*input).to_string();
        let mut layers: Vec<Dense> = Vec::new();
        // A MatMul waiting for its bias Add: (weights [out, in], in, out).
        let mut pending: Option<(Vec<f64>, usize, usize)> = None;
        for node in &graph.node {
            let ins: Vec<&str> = node.input.iter().map(String::as_str).collect();
            if ins.first() != Some(&current.as_str()) {
                return Err(unsupported(format!(
                    "node `{}` ({}) does not continue the chain",
                    node.name, node.op_type
                )));
            }
            let init = |k: usize| -> Result<(Vec<f64>, &TensorProto), String> {
                let name = ins.get(k).ok_or_else(|| unsupported(format!("{} lacks input {k}", node.op_type)))?;
                let t = inits.get(name).ok_or_else(|| unsupported(format!("`{name}` is not a constant")))?;
                Ok((tensor_f64(t)?, t))
            };
            match node.op_type.as_str() {
                "Gemm" => {
                    if pending.is_some() || int_attr(node, "transA", 0) != 0 {
                        return Err(unsupported("Gemm after an unbiased MatMul, or with transA"));
                    }
                    let (w, wt) = init(1)?;
                    let [a, b] = wt.dims[..] else { return Err(unsupported("Gemm weights are not 2-D")) };
                    let (a, b) = (a as usize, b as usize);
                    let trans_b = int_attr(node, "transB", 0) != 0;
                    let (inputs, outputs) = if trans_b { (b, a) } else { (a, b) };
                    let alpha = f64::from(float_attr(node, "alpha", 1.0));
                    let beta = f64::from(float_attr(node, "beta", 1.0));
                    let mut weights = vec![0.0; inputs * outputs];
                    for o in 0..outputs {
                        for i in 0..inputs {
                            weights[o * inputs + i] =
                                alpha * if trans_b { w[o * inputs + i] } else { w[i * outputs + o] };
                        }
                    }
                    let bias = if ins.len() > 2 { init(2)?.0 } else { vec![0.0; outputs] };
                    let bias = match bias.len() {
                        1 => vec![beta * bias[0]; outputs],
                        n if n == outputs => bias.iter().map(|v| beta * v).collect(),
                        n => return Err(unsupported(format!("Gemm bias of {n} values for {outputs} outputs"))),
                    };
                    layers.push(Dense { weights, bias, inputs, outputs, relu: false });
                }
                "MatMul" => {
                    let (w, wt) = init(1)?;
                    let [inputs, outputs] = wt.dims[..] else { return Err(unsupported("MatMul weights are not 2-D")) };
                    let (inputs, outputs) = (inputs as usize, outputs as usize);
                    let mut weights = vec![0.0; inputs * outputs];
                    for o in 0..outputs {
                        for i in 0..inputs {
                            weights[o * inputs + i] = w[i * outputs + o];
                        }
                    }
                    pending = Some((weights, inputs, outputs));
                }
                "Add" => {
                    let Some((weights, inputs, outputs)) = pending.take() else {
                        return Err(unsupported("Add not after a MatMul"));
                    };
                    let bias = init(1)?.0;
                    if bias.len() != outputs {
                        return Err(unsupported(format!("bias of {} values for {outputs} outputs", bias.len())));
                    }
                    layers.push(Dense { weights, bias, inputs, outputs, relu: false });
                }
                // A renamed output (exporters end graphs with one); it changes nothing.
                "Identity" if pending.is_none() => {}
                "Relu" => {
                    let last = layers.last_mut().filter(|l| !l.relu && pending.is_none());
                    let Some(last) = last else { return Err(unsupported("Relu not after a dense layer")) };
                    last.relu = true;
                }
                other => return Err(unsupported(format!("operator {other}"))),
            }
            current = node.output.first().cloned().ok_or_else(|| unsupported("node without output"))?;
        }
        if let Some((weights, inputs, outputs)) = pending {
            layers.push(Dense { weights, bias: vec![0.0; outputs], inputs, outputs, relu: false });
        }
        let outputs: Vec<&str> = graph.output.iter().map(|o| o.name.as_str()).collect();
        if outputs != [current.as_str()] {
            return Err(unsupported(format!("graph outputs {outputs:?} are not the chain's end `{current}`")));
        }
        if layers.is_empty() || layers.windows(2).any(|w| w[0].outputs != w[1].inputs) {
            return Err(unsupported("no layers, or layer widths do not chain"));
        }
        Ok(Self { layers })
    }

    /// Input width.
    #[must_use]
    pub fn input_width(&self) -> usize {
        self.layers[0].inputs
    }

    /// Output width.
    #[must_use]
    pub fn output_width(&self) -> usize {
        self.layers[self.layers.len() - 1].outputs
    }

    /// Width of the first layer's output.
    #[must_use]
    pub fn first_width(&self) -> usize {
        self.layers[0].outputs
    }

    /// Runs the whole MLP on one input row.
    #[must_use]
    pub fn forward(&self, x: &[f64]) -> Vec<f64> {
        let mut h = Vec::new();
        self.layers[0].apply_linear(x, false, &mut h);
        self.forward_from_projection(&h)
    }

    /// The first layer's weights times `x`, without bias or activation: linear in `x`, so the projection
    /// of a sum is the sum of projections.
    #[must_use]
    pub fn project_first(&self, x: &[f64]) -> Vec<f64> {
        let mut h = Vec::new();
        self.layers[0].apply_linear(x, false, &mut h);
        h
    }

    /// The MLP's single output from a fixed-point sum of first-layer projections
    /// ([`super::incremental::to_fixed`] of [`NativeMlp::project_first`]); allocation-free for the
    /// two-layer, one-output heads the trainer exports.
    #[must_use]
    pub fn output_from_fixed_projection(&self, sum: &[i64]) -> f64 {
        self.two_layer(sum.len(), |j| sum[j]).unwrap_or_else(|| {
            let projection = super::incremental::from_fixed(sum);
            self.forward_from_projection(&projection).first().copied().unwrap_or(0.0)
        })
    }

    /// [`NativeMlp::output_from_fixed_projection`] of the element-wise sum `a + b`, without storing it
    /// (a search prices "set + one piece" this way).
    #[must_use]
    pub fn output_from_fixed_pair(&self, a: &[i64], b: &[i64]) -> f64 {
        let n = a.len().min(b.len());
        let (a, b) = (&a[..n], &b[..n]);
        self.two_layer(n, |j| a[j] + b[j]).unwrap_or_else(|| {
            let sum: Vec<i64> = a.iter().zip(b).map(|(x, y)| x + y).collect();
            self.output_from_fixed_projection(&sum)
        })
    }

    /// The two-layer, one-output head on the fixed-point first-layer input `input(j)`, `j < n`; `None`
    /// for any other shape.
    fn two_layer(&self, n: usize, input: impl Fn(usize) -> i64) -> Option<f64> {
        let first = &self.layers[0];
        let [_, last] = &self.layers[..] else { return None };
        if last.outputs != 1 {
            return None;
        }
        let n = n.min(first.bias.len()).min(last.weights.len());
        let (bias, weights) = (&first.bias[..n], &last.weights[..n]);
        let acc = if first.relu {
            partial_sums::<true>(bias, weights, input)
        } else {
            partial_sums::<false>(bias, weights, input)
        };
        let out = last.bias[0] + (((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])));
        Some(if last.relu { out.max(0.0) } else { out })
    }

    /// The rest of the MLP from the first layer's projection ([`NativeMlp::project_first`] of the input).
    #[must_use]
    pub fn forward_from_projection(&self, projection: &[f64]) -> Vec<f64> {
        let first = &self.layers[0];
        let mut h: Vec<f64> = projection
            .iter()
            .zip(&first.bias)
            .map(|(p, b)| if first.relu { (p + b).max(0.0) } else { p + b })
            .collect();
        let mut next = Vec::with_capacity(h.len());
        for layer in &self.layers[1..] {
            layer.apply_linear(&h, true, &mut next);
            if layer.relu {
                for v in &mut next {
                    *v = v.max(0.0);
                }
            }
            std::mem::swap(&mut h, &mut next);
        }
        h
    }
}

/// `Σ_j weights[j] · act(input(j) / FIXED_SCALE + bias[j])` in eight partial sums in a fixed order (the
/// same value for the same input every time, without one long chain of dependent additions: the
/// search's hot loop), `act` being `ReLU` when `RELU`; the caller adds them up.
fn partial_sums<const RELU: bool>(bias: &[f64], weights: &[f64], input: impl Fn(usize) -> i64) -> [f64; 8] {
    let n = bias.len().min(weights.len());
    let hidden = |j: usize| {
        let h = input(j) as f64 / super::incremental::FIXED_SCALE + bias[j];
        if RELU { h.max(0.0) } else { h }
    };
    let mut acc = [0.0f64; 8];
    let whole = n - n % 8;
    for base in (0..whole).step_by(8) {
        for (l, a) in acc.iter_mut().enumerate() {
            *a += weights[base + l] * hidden(base + l);
        }
    }
    for (j, w) in weights.iter().enumerate().take(n).skip(whole) {
        acc[0] += w * hidden(j);
    }
    acc
}
