//! ONNX export (opset 17, IR version 8) built from tract's protobuf types, so the files run in tract,
//! onnxruntime and PyTorch alike. Graphs: an MLP (`Gemm` with `transB = 1` + `Relu`), used for the
//! compute encoder, the compute head and the comm models; and the end-to-end compute graph
//! (`features` `[B, T, 20]`, `mask` `[B, T]` → `cost_ms` `[B, 1]`); and one LSTM cell step (the
//! AutoShard policy's recurrent layers).

use prost::Message;
use tract_onnx::pb::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto, tensor_shape_proto::Dimension, tensor_shape_proto::dimension, type_proto,
};

/// Layer weights: `(w [out·in] row-major, b [out], out, in)`.
pub type Layers = [(Vec<f32>, Vec<f32>, usize, usize)];

const FLOAT: i32 = 1;
const INT64: i32 = 7;
const ATTR_INT: i32 = 2;

/// A dimension: fixed size or a named symbol.
pub enum Dim {
    /// Known size.
    Fixed(usize),
    /// Symbolic (`N`, `B`, `T`).
    Sym(&'static str),
}

fn value_info(name: &str, dims: &[Dim]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| Dimension {
            denotation: String::new(),
            value: Some(match d {
                Dim::Fixed(n) => dimension::Value::DimValue(*n as i64),
                Dim::Sym(s) => dimension::Value::DimParam((*s).to_string()),
            }),
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            denotation: String::new(),
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: FLOAT,
                shape: Some(TensorShapeProto { dim }),
            })),
        }),
        doc_string: String::new(),
    }
}

fn f32_tensor(name: &str, dims: &[usize], data: Vec<f32>) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.iter().map(|d| *d as i64).collect(),
        data_type: FLOAT,
        float_data: data,
        ..Default::default()
    }
}

fn i64_tensor(name: &str, data: Vec<i64>) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: vec![data.len() as i64],
        data_type: INT64,
        int64_data: data,
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], output: &str, attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| (*s).to_string()).collect(),
        output: vec![output.into()],
        name: output.into(),
        op_type: op.into(),
        attribute: attrs,
        ..Default::default()
    }
}

fn int_attr(name: &str, i: i64) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: ATTR_INT, i, ..Default::default() }
}

/// Appends `Gemm`/`Relu` nodes for `layers` reading `input`; returns the last output's name.
fn mlp_nodes(g: &mut GraphProto, prefix: &str, input: &str, layers: &Layers) -> String {
    let mut cur = input.to_string();
    for (i, (w, b, out, inp)) in layers.iter().enumerate() {
        let (wn, bn, yn) = (format!("{prefix}.{i}.weight"), format!("{prefix}.{i}.bias"), format!("{prefix}.{i}.out"));
        g.initializer.push(f32_tensor(&wn, &[*out, *inp], w.clone()));
        g.initializer.push(f32_tensor(&bn, &[*out], b.clone()));
        g.node.push(node("Gemm", &[&cur, &wn, &bn], &yn, vec![int_attr("transB", 1)]));
        cur = yn;
        if i + 1 < layers.len() {
            let rn = format!("{prefix}.{i}.relu");
            g.node.push(node("Relu", &[&cur], &rn, vec![]));
            cur = rn;
        }
    }
    cur
}

fn model(graph: GraphProto, doc: &str) -> Vec<u8> {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: 17 }],
        producer_name: "shardplan-train".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        doc_string: doc.into(),
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

/// An MLP graph `input` `[N, in]` → `output` `[N, out]`.
#[must_use]
pub fn mlp_graph(name: &str, input: &str, output: &str, layers: &Layers, doc: &str) -> Vec<u8> {
    let in_w = layers.first().map_or(0, |l| l.3);
    let out_w = layers.last().map_or(0, |l| l.2);
    let mut g = GraphProto { name: name.into(), ..Default::default() };
    g.input.push(value_info(input, &[Dim::Sym("N"), Dim::Fixed(in_w)]));
    let last = mlp_nodes(&mut g, name, input, layers);
    g.node.push(node("Identity", &[&last], output, vec![]));
    g.output.push(value_info(output, &[Dim::Sym("N"), Dim::Fixed(out_w)]));
    model(g, doc)
}

/// The end-to-end compute graph: encoder on every row, masked sum over the set axis, head.
#[must_use]
pub fn compute_end_to_end(encoder: &Layers, head: &Layers, doc: &str) -> Vec<u8> {
    let f = encoder.first().map_or(0, |l| l.3);
    let mut g = GraphProto { name: "compute_end_to_end".into(), ..Default::default() };
    g.input.push(value_info("features", &[Dim::Sym("B"), Dim::Sym("T"), Dim::Fixed(f)]));
    g.input.push(value_info("mask", &[Dim::Sym("B"), Dim::Sym("T")]));
    // Encoder on [B, T, F] with MatMul against transposed weights (Gemm is 2-D only).
    let mut cur = "features".to_string();
    for (i, (w, b, out, inp)) in encoder.iter().enumerate() {
        let mut wt = vec![0.0f32; w.len()];
        for r in 0..*out {
            for c in 0..*inp {
                wt[c * out + r] = w[r * inp + c];
            }
        }
        let (wn, bn) = (format!("encoder.{i}.weight_t"), format!("encoder.{i}.bias"));
        g.initializer.push(f32_tensor(&wn, &[*inp, *out], wt));
        g.initializer.push(f32_tensor(&bn, &[*out], b.clone()));
        let (mm, add) = (format!("encoder.{i}.matmul"), format!("encoder.{i}.add"));
        g.node.push(node("MatMul", &[&cur, &wn], &mm, vec![]));
        g.node.push(node("Add", &[&mm, &bn], &add, vec![]));
        cur = add;
        if i + 1 < encoder.len() {
            let rn = format!("encoder.{i}.relu");
            g.node.push(node("Relu", &[&cur], &rn, vec![]));
            cur = rn;
        }
    }
    g.initializer.push(i64_tensor("axis_2", vec![2]));
    g.initializer.push(i64_tensor("axis_1", vec![1]));
    g.node.push(node("Unsqueeze", &["mask", "axis_2"], "mask_3d", vec![]));
    g.node.push(node("Mul", &[&cur, "mask_3d"], "masked", vec![]));
    g.node.push(node("ReduceSum", &["masked", "axis_1"], "set_sum", vec![int_attr("keepdims", 0)]));
    let last = mlp_nodes(&mut g, "head", "set_sum", head);
    g.node.push(node("Identity", &[&last], "cost_ms", vec![]));
    g.output.push(value_info("cost_ms", &[Dim::Sym("B"), Dim::Fixed(1)]));
    model(g, doc)
}

/// The weights of one LSTM cell with its gates pre-split (order: input, forget, cell, output):
/// `w[k]` `[in, hidden]`, `r[k]` `[hidden, hidden]` (row-major, multiplied from the right), `b[k]` `[hidden]`.
pub struct LstmCellWeights {
    /// Input width.
    pub inputs: usize,
    /// Hidden width.
    pub hidden: usize,
    /// Input weights per gate.
    pub w: [Vec<f32>; 4],
    /// Recurrent weights per gate.
    pub r: [Vec<f32>; 4],
    /// Bias per gate (input and recurrent biases folded into one).
    pub b: [Vec<f32>; 4],
}

/// One LSTM cell step as a graph: `x` `[N, in]`, `h` `[N, hidden]`, `c` `[N, hidden]` → `h_out`,
/// `c_out` (`MatMul`, `Add`, `Sigmoid`, `Tanh`, `Mul`; initializers `W_k`, `R_k`, `B_k` per gate `k`).
#[must_use]
pub fn lstm_cell_graph(name: &str, cell: &LstmCellWeights, doc: &str) -> Vec<u8> {
    let (inp, hid) = (cell.inputs, cell.hidden);
    let mut g = GraphProto { name: name.into(), ..Default::default() };
    g.input.push(value_info("x", &[Dim::Sym("N"), Dim::Fixed(inp)]));
    g.input.push(value_info("h", &[Dim::Sym("N"), Dim::Fixed(hid)]));
    g.input.push(value_info("c", &[Dim::Sym("N"), Dim::Fixed(hid)]));
    for (k, gate) in ["i", "f", "g", "o"].iter().enumerate() {
        let (wn, rn, bn) = (format!("W_{gate}"), format!("R_{gate}"), format!("B_{gate}"));
        g.initializer.push(f32_tensor(&wn, &[inp, hid], cell.w[k].clone()));
        g.initializer.push(f32_tensor(&rn, &[hid, hid], cell.r[k].clone()));
        g.initializer.push(f32_tensor(&bn, &[hid], cell.b[k].clone()));
        let (xw, hr, s, z, a) = (
            format!("{gate}.xw"),
            format!("{gate}.hr"),
            format!("{gate}.sum"),
            format!("{gate}.pre"),
            format!("gate_{gate}"),
        );
        g.node.push(node("MatMul", &["x", &wn], &xw, vec![]));
        g.node.push(node("MatMul", &["h", &rn], &hr, vec![]));
        g.node.push(node("Add", &[&xw, &hr], &s, vec![]));
        g.node.push(node("Add", &[&s, &bn], &z, vec![]));
        g.node.push(node(if *gate == "g" { "Tanh" } else { "Sigmoid" }, &[&z], &a, vec![]));
    }
    g.node.push(node("Mul", &["gate_f", "c"], "c_keep", vec![]));
    g.node.push(node("Mul", &["gate_i", "gate_g"], "c_write", vec![]));
    g.node.push(node("Add", &["c_keep", "c_write"], "c_out", vec![]));
    g.node.push(node("Tanh", &["c_out"], "c_out_tanh", vec![]));
    g.node.push(node("Mul", &["gate_o", "c_out_tanh"], "h_out", vec![]));
    g.output.push(value_info("h_out", &[Dim::Sym("N"), Dim::Fixed(hid)]));
    g.output.push(value_info("c_out", &[Dim::Sym("N"), Dim::Fixed(hid)]));
    model(g, doc)
}
