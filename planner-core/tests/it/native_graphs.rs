//! The plain-Rust evaluators against tract on every graph compiled into the library: the dense chains
//! (`cost::native`) that the cost models and policies run on every target, the browser included.

use planner_core::cost::native::NativeMlp;
use planner_core::cost::profiles;
use planner_core::policy::EMBEDDED_POLICIES;
use rand::{RngExt, SeedableRng, rngs::ChaCha8Rng};
use tract_onnx::prelude::{Framework, InferenceModelExt, IntoRunnable, Tensor, tvec};

/// Every embedded graph: (where, file name, bytes).
fn embedded_graphs() -> Vec<(&'static str, &'static str, &'static [u8])> {
    let profiles = profiles::EMBEDDED.iter().flat_map(|p| p.files.iter().map(|(f, b)| (p.name, *f, *b)));
    let policies = EMBEDDED_POLICIES.iter().flat_map(|p| p.files.iter().map(|(f, b)| (p.name, *f, *b)));
    profiles.chain(policies).collect()
}

/// Runs `rows` rows of `width` values through the ONNX graph `bytes` in tract.
pub(crate) fn tract_rows(bytes: &[u8], rows: usize, width: usize, data: &[f32]) -> Vec<f32> {
    let plan = tract_onnx::onnx()
        .model_for_read(&mut &bytes[..])
        .and_then(InferenceModelExt::into_optimized)
        .and_then(IntoRunnable::into_runnable)
        .unwrap();
    let out = plan.run(tvec!(Tensor::from_shape(&[rows, width], data).unwrap().into())).unwrap();
    out[0].to_plain_array_view::<f32>().unwrap().iter().copied().collect()
}

#[test]
fn every_embedded_graph_but_the_lstm_cells_and_the_set_graph_is_a_dense_chain() {
    let mut chains = 0;
    for (owner, file, bytes) in embedded_graphs() {
        let native = NativeMlp::from_onnx(bytes);
        // AutoShard's LSTM cells have their own evaluator (`LstmCell`, checked in autoshard.rs); the
        // end-to-end set graph is for other runtimes (the trainer's tests run it in tract).
        let other = file.starts_with("lstm_") || file == "compute_end_to_end.onnx";
        assert_eq!(native.is_ok(), !other, "{owner}/{file}: {native:?}");
        chains += usize::from(!other);
    }
    assert!(chains >= 15, "{chains} dense chains");
}

#[test]
fn dense_chains_evaluate_as_tract_does() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for (owner, file, bytes) in embedded_graphs() {
        let Ok(mlp) = NativeMlp::from_onnx(bytes) else { continue };
        let (rows, width) = (64, mlp.input_width());
        let data: Vec<f32> = (0..rows * width).map(|_| rng.random_range(-3.0f32..3.0)).collect();
        let tract = tract_rows(bytes, rows, width, &data);
        assert_eq!(tract.len(), rows * mlp.output_width(), "{owner}/{file}");
        let mut scale = 0.0f64;
        let mut worst = 0.0f64;
        for (r, row) in data.chunks_exact(width).enumerate() {
            let x: Vec<f64> = row.iter().map(|&v| f64::from(v)).collect();
            let out = mlp.forward(&x);
            for (o, v) in out.iter().enumerate() {
                let t = f64::from(tract[r * out.len() + o]);
                scale = scale.max(t.abs());
                worst = worst.max((v - t).abs());
            }
        }
        // tract sums in f32, the native chain in f64: agreement to 1e-5 of the outputs' scale.
        assert!(worst <= 1e-5 * scale.max(1.0), "{owner}/{file}: max difference {worst} at output scale {scale}");
    }
}

#[test]
fn what_is_not_a_dense_chain_is_refused_with_the_reason() {
    // The set graph (encoder, mask, sum, head) is not a chain.
    let (_, bytes) =
        profiles::find("h100").unwrap().files.iter().find(|(f, _)| *f == "compute_end_to_end.onnx").unwrap();
    let err = NativeMlp::from_onnx(bytes).unwrap_err();
    assert!(err.contains("operator") || err.contains("chain") || err.contains("inputs"), "{err}");
    assert!(NativeMlp::from_onnx(b"not an onnx file \xff\xff").unwrap_err().contains("not an ONNX model"));
}

#[test]
fn a_cost_model_graph_loads_natively_and_refuses_what_does_not_fit() {
    use planner_core::cost::neural::Graph;
    let h100 = profiles::find("h100").unwrap();
    let file = |name: &str| h100.files.iter().find(|(f, _)| *f == name).unwrap().1;
    let encoder = Graph::load("h100", "encoder", file("compute_encoder.onnx"), 20, 32).unwrap();
    assert!(encoder.native().is_some(), "the encoder is a dense chain and runs natively");
    assert_eq!(encoder.run(3, &[0.5; 60]).unwrap().len(), 96);
    // Rows and values that disagree are refused, not read past.
    assert!(encoder.run(3, &[0.5; 59]).unwrap_err().to_string().contains("59 input values"));
    // The wrong widths are a schema mismatch naming both.
    let err = Graph::load("h100", "encoder", file("compute_encoder.onnx"), 20, 16).unwrap_err().to_string();
    assert!(err.contains("16") && err.contains("32"), "{err}");
    let err = Graph::load("h100", "encoder", file("compute_encoder.onnx"), 21, 32).unwrap_err().to_string();
    assert!(err.contains("20") && err.contains("21"), "{err}");
    // A graph that is not a chain goes to tract, which runs it or says why not (here: the set graph takes
    // two inputs), together with what broke the chain.
    let err = Graph::load("h100", "set", file("compute_end_to_end.onnx"), 20, 1).unwrap_err().to_string();
    assert!(err.contains("set"), "{err}");
    let err = Graph::load("h100", "junk", b"\x08\xff", 20, 1).unwrap_err().to_string();
    assert!(err.contains("junk") && err.contains("not an ONNX model"), "{err}");
}
