//! The part of the ONNX protobuf schema (`onnx.proto3`, same field numbers) that the plain-Rust
//! evaluators read: a model's graph, its nodes, their attributes, its initializers and the names of its
//! inputs and outputs. Decoding is prost's; fields this subset leaves out are skipped as protobuf
//! requires, so any valid ONNX file decodes.
//!
//! Why not tract's own protobuf types: they come with tract's whole runtime, which the browser bundle
//! does not carry (the graphs the trainer exports run in [`super::native`] and
//! `planners::autoshard::LstmCell`; tract is the native build's runtime for any other graph).

/// `ModelProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelProto {
    /// The graph.
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphProto>,
}

/// `GraphProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphProto {
    /// Nodes, in topological order.
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeProto>,
    /// Constant tensors.
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorProto>,
    /// Inputs (initializers may be listed here too).
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<ValueInfoProto>,
    /// Outputs.
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<ValueInfoProto>,
}

/// `ValueInfoProto`: only the name is read.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueInfoProto {
    /// Value name.
    #[prost(string, tag = "1")]
    pub name: String,
}

/// `NodeProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeProto {
    /// Input value names.
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    /// Output value names.
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    /// Node name.
    #[prost(string, tag = "3")]
    pub name: String,
    /// Operator.
    #[prost(string, tag = "4")]
    pub op_type: String,
    /// Attributes.
    #[prost(message, repeated, tag = "5")]
    pub attribute: Vec<AttributeProto>,
}

/// `AttributeProto`: the scalar int and float values.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeProto {
    /// Attribute name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Float value.
    #[prost(float, tag = "2")]
    pub f: f32,
    /// Int value.
    #[prost(int64, tag = "3")]
    pub i: i64,
}

/// `TensorProto`: dims, element type and the float payload.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    /// Dimensions.
    #[prost(int64, repeated, tag = "1")]
    pub dims: Vec<i64>,
    /// Element type (`DataType`; 1 is `FLOAT`).
    #[prost(int32, tag = "2")]
    pub data_type: i32,
    /// Values of a float tensor stored as `float_data`.
    #[prost(float, repeated, tag = "4")]
    pub float_data: Vec<f32>,
    /// Tensor name.
    #[prost(string, tag = "8")]
    pub name: String,
    /// Values stored as little-endian bytes.
    #[prost(bytes = "vec", tag = "9")]
    pub raw_data: Vec<u8>,
}

/// Decodes an ONNX model; the message says why the bytes are not one.
pub fn decode_model(bytes: &[u8]) -> Result<ModelProto, String> {
    <ModelProto as prost::Message>::decode(bytes).map_err(|e| format!("not an ONNX model: {e}"))
}
