//! `shardplan-train bench`: how fast a profile evaluates shards through planner-core (the incremental
//! API: cached piece embeddings summed, head run per set) and how long the end-to-end graph takes.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use planner_core::TableSpec;
use planner_core::cost::{CostModel, NeuralModel, PieceRef};
use planner_core::features::NEUROSHARD_LEN;
use rand::{RngExt, SeedableRng, rngs::ChaCha8Rng};
use tract_onnx::prelude::{Framework, InferenceModelExt, IntoRunnable, Tensor, tvec};

/// One benchmark line.
pub struct BenchLine {
    /// What was measured.
    pub what: String,
    /// Sets evaluated per second.
    pub sets_per_s: f64,
    /// Milliseconds per call.
    pub ms_per_call: f64,
}

fn random_sets(n: usize, seed: u64) -> Result<Vec<Vec<TableSpec>>> {
    let pool = planner_core::pool::dlrm_pool()?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let k = rng.random_range(1..16usize);
            (0..k)
                .map(|j| {
                    let dim = planner_core::pool::AUGMENT_DIMS[rng.random_range(0..6)];
                    Ok(pool[rng.random_range(0..pool.len())].at_dim(
                        format!("t{j}"),
                        dim,
                        planner_core::ElementType::Fp32,
                    )?)
                })
                .collect()
        })
        .collect()
}

/// Runs the benchmark on the profile in `dir` (`card.json` + graphs), loading it through `load`.
pub fn run(dir: &Path, load: impl Fn(bool) -> Result<NeuralModel>, sets: usize) -> Result<Vec<BenchLine>> {
    let tables = random_sets(sets, 7)?;
    let refs: Vec<Vec<PieceRef<'_>>> =
        tables.iter().map(|s| s.iter().map(|t| PieceRef::whole(t, t.dim)).collect()).collect();
    let slices: Vec<&[PieceRef<'_>]> = refs.iter().map(Vec::as_slice).collect();
    let mut out = Vec::new();

    // Warm the piece-embedding cache (pieces are embedded once in a planner's life), then time heads.
    let model = load(false)?;
    model.compute_many_ms(&slices)?;
    let start = Instant::now();
    for s in &slices {
        model.compute_ms(s)?;
    }
    let secs = start.elapsed().as_secs_f64();
    out.push(BenchLine {
        what: "incremental, one set per call, set cache off".into(),
        sets_per_s: sets as f64 / secs,
        ms_per_call: secs * 1e3 / sets as f64,
    });
    for batch in [64usize, 512] {
        let start = Instant::now();
        for chunk in slices.chunks(batch) {
            model.compute_many_ms(chunk)?;
        }
        let secs = start.elapsed().as_secs_f64();
        out.push(BenchLine {
            what: format!("incremental, {batch} sets per call, set cache off"),
            sets_per_s: sets as f64 / secs,
            ms_per_call: secs * 1e3 / (sets.div_ceil(batch)) as f64,
        });
    }
    let cached = load(true)?;
    cached.compute_many_ms(&slices)?;
    let start = Instant::now();
    for s in &slices {
        cached.compute_ms(s)?;
    }
    let secs = start.elapsed().as_secs_f64();
    out.push(BenchLine {
        what: "incremental, one set per call, set cache hit".into(),
        sets_per_s: sets as f64 / secs,
        ms_per_call: secs * 1e3 / sets as f64,
    });

    // End-to-end graph: padded sets + mask, as someone running the model elsewhere would.
    let card = model.card();
    let bytes = std::fs::read(dir.join(&card.compute.end_to_end_file)).context("reading the end-to-end graph")?;
    let plan = tract_onnx::onnx()
        .model_for_read(&mut &bytes[..])
        .and_then(InferenceModelExt::into_optimized)
        .and_then(IntoRunnable::into_runnable)
        .map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let t = 15;
    for batch in [1usize, 512] {
        let mut x = vec![0.0f32; batch * t * NEUROSHARD_LEN];
        let mut mask = vec![0.0f32; batch * t];
        for (b, s) in refs.iter().cycle().take(batch).enumerate() {
            for (i, p) in s.iter().enumerate() {
                let f = card.compute.normalisation.apply(&planner_core::cost::neural::piece_raw(p));
                x[(b * t + i) * NEUROSHARD_LEN..(b * t + i + 1) * NEUROSHARD_LEN].copy_from_slice(&f);
                mask[b * t + i] = 1.0;
            }
        }
        let calls = (2048 / batch).max(20);
        let start = Instant::now();
        for _ in 0..calls {
            let xs = Tensor::from_shape(&[batch, t, NEUROSHARD_LEN], &x).map_err(|e| anyhow::anyhow!("{e:#}"))?;
            let ms = Tensor::from_shape(&[batch, t], &mask).map_err(|e| anyhow::anyhow!("{e:#}"))?;
            plan.run(tvec!(xs.into(), ms.into())).map_err(|e| anyhow::anyhow!("{e:#}"))?;
        }
        let secs = start.elapsed().as_secs_f64();
        out.push(BenchLine {
            what: format!("end-to-end graph, {batch} padded set(s) of {t} per call"),
            sets_per_s: (calls * batch) as f64 / secs,
            ms_per_call: secs * 1e3 / calls as f64,
        });
    }
    Ok(out)
}
