//! Learned cost models loaded from ONNX bytes (native and wasm32).
//!
//! The compute model is a set model: per-table encoder (20, 128, 32 wide, `ReLU` between), a *sum*
//! over the set, and a head (32, 64, 1 wide, `ReLU` between), predicting milliseconds (SPEC section 5). Because
//! the set representation is a sum, [`NeuralModel`] embeds each distinct piece once (cached by its
//! feature vector), evaluates a device's set by adding vectors and running only the head, and caches
//! set costs by the multiset of pieces. Comm models are plain MLPs per device count.
//!
//! A profile's networks may have learned the measured time over its memory-terms model
//! ([`super::card::ComputeCard::on_terms`]): a set's compute is then the terms' time of the set
//! ([`super::terms::Terms`], a sum over pieces) times the head's output, and a piece's incremental vector
//! carries its terms time as one more component.
//!
//! A profile may hold an *ensemble*: several compute networks of the same shape trained from other seeds
//! on bootstrap resamples. The compute cost is the mean of the members, and their spread, scaled by the
//! card's calibrated `z`, is the prediction interval ([`NeuralModel::compute_members_ms`], used by
//! [`crate::cost::evaluate`]). A piece's incremental vector is the concatenation of its members' vectors.
//!
//! Every graph the trainer exports is a chain of dense layers, evaluated by [`NativeMlp`] in f64 on every
//! target (the same numbers natively and in the browser). A graph of another shape runs through tract
//! in a native build with planner-core's `tract` feature (on by default) and is refused without it (the
//! browser bundle, which would otherwise carry a whole ONNX runtime: docs/WEB.md, "Size"). ONNX keeps
//! the models inspectable and runnable elsewhere (onnxruntime, PyTorch).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

#[cfg(feature = "tract")]
use tract_onnx::prelude::{Framework, InferenceModelExt, IntoRunnable, Tensor, TypedRunnableModel, tvec};

use super::card::{CommCard, ENCODER_WIDTHS, HEAD_WIDTHS, ModelCard};
use super::incremental::{IncrementalCompute, add_into, to_fixed};
use super::native::NativeMlp;
use super::terms::Terms;
use super::{AnalyticalModel, CostModel, PieceRef};
use crate::error::{Error, Result};
use crate::features::{NEUROSHARD_LEN, Normalisation, neuroshard_raw};

/// Width of a piece embedding.
pub const EMBED_LEN: usize = ENCODER_WIDTHS[2];

/// How a [`Graph`] is evaluated.
enum Runtime {
    /// A chain of dense layers, in plain Rust.
    Native(NativeMlp),
    /// Any other graph, through tract.
    #[cfg(feature = "tract")]
    Tract(std::sync::Arc<TypedRunnableModel>),
}

/// One loaded ONNX graph with a single `[N, in]` input and a single `[N, out]` output.
pub struct Graph {
    name: String,
    runtime: Runtime,
    input_width: usize,
    output_width: usize,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let runtime = if self.native().is_some() { "native" } else { "tract" };
        write!(f, "Graph({}: [N, {}] -> [N, {}], {runtime})", self.name, self.input_width, self.output_width)
    }
}

impl Graph {
    /// Loads an ONNX graph, checking it maps `[1, input_width]` to `[1, output_width]`: natively when it
    /// is a chain of dense layers, otherwise through tract (refused in a build without it).
    pub fn load(model: &str, what: &str, bytes: &[u8], input_width: usize, output_width: usize) -> Result<Self> {
        let runtime = match NativeMlp::from_onnx(bytes) {
            Ok(mlp) => Runtime::Native(mlp),
            Err(why) => Self::general(model, what, bytes, &why)?,
        };
        let g = Self { name: format!("{model}/{what}"), runtime, input_width, output_width };
        let probe = g.run(1, &vec![0.0; input_width]).map_err(|e| Error::ModelSchemaMismatch {
            model: model.into(),
            what: format!("{what} graph shape"),
            expected: format!("[N, {input_width}] -> [N, {output_width}]"),
            found: e.to_string(),
        })?;
        if probe.len() != output_width {
            return Err(Error::ModelSchemaMismatch {
                model: model.into(),
                what: format!("{what} graph output"),
                expected: format!("{output_width} values per row"),
                found: format!("{} values", probe.len()),
            });
        }
        Ok(g)
    }

    /// A graph that is not a dense chain (`why` says what broke the chain), through tract.
    #[cfg(feature = "tract")]
    fn general(model: &str, what: &str, bytes: &[u8], why: &str) -> Result<Runtime> {
        tract_onnx::onnx()
            .model_for_read(&mut &bytes[..])
            .and_then(InferenceModelExt::into_optimized)
            .and_then(IntoRunnable::into_runnable)
            .map(Runtime::Tract)
            .map_err(|e| Error::CostModel {
                model: model.into(),
                message: format!("{what}: not a chain of dense layers ({why}), and tract cannot run it: {e:#}"),
            })
    }

    /// Without tract only dense chains load.
    #[cfg(not(feature = "tract"))]
    fn general(model: &str, what: &str, _bytes: &[u8], why: &str) -> Result<Runtime> {
        Err(Error::CostModel {
            model: model.into(),
            message: format!(
                "{what}: the graph is not a chain of dense layers ({why}), and this build evaluates only those \
                 (planner-core without its `tract` feature, as in the browser)"
            ),
        })
    }

    /// The graph as plain Rust, when it is a dense chain.
    #[must_use]
    pub fn native(&self) -> Option<&NativeMlp> {
        match &self.runtime {
            Runtime::Native(mlp) => Some(mlp),
            #[cfg(feature = "tract")]
            Runtime::Tract(_) => None,
        }
    }

    /// Runs `rows` rows of `input_width` values; returns `rows × output_width` values.
    pub fn run(&self, rows: usize, data: &[f32]) -> Result<Vec<f32>> {
        let err = |m: String| Error::CostModel { model: self.name.clone(), message: m };
        if rows == 0 {
            return Ok(Vec::new());
        }
        if data.len() != rows * self.input_width {
            return Err(err(format!("{} input values for {rows} rows of {}", data.len(), self.input_width)));
        }
        let values: Vec<f32> = match &self.runtime {
            Runtime::Native(mlp) => {
                if mlp.input_width() != self.input_width {
                    return Err(err(format!(
                        "the graph takes {} values per row, not {}",
                        mlp.input_width(),
                        self.input_width
                    )));
                }
                let mut x = Vec::with_capacity(self.input_width);
                let mut values = Vec::with_capacity(rows * mlp.output_width());
                for row in data.chunks_exact(self.input_width) {
                    x.clear();
                    x.extend(row.iter().map(|&v| f64::from(v)));
                    values.extend(mlp.forward(&x).into_iter().map(|v| v as f32));
                }
                values
            }
            #[cfg(feature = "tract")]
            Runtime::Tract(plan) => {
                let input = Tensor::from_shape(&[rows, self.input_width], data).map_err(|e| err(format!("{e:#}")))?;
                let out = plan.run(tvec!(input.into())).map_err(|e| err(format!("{e:#}")))?;
                let first = out.first().ok_or_else(|| err("graph returned no output".into()))?;
                let view = first.to_plain_array_view::<f32>().map_err(|e| err(format!("{e:#}")))?;
                view.iter().copied().collect()
            }
        };
        if values.len() != rows * self.output_width || values.iter().any(|v| !v.is_finite()) {
            return Err(err(format!(
                "expected {} finite outputs for {rows} rows, got {}",
                rows * self.output_width,
                values.len(),
            )));
        }
        Ok(values)
    }
}

/// Bit-exact identity of a piece as the compute model sees it (its raw features).
type PieceKey = [u64; NEUROSHARD_LEN];

/// Raw NeuroShard features of a piece. A row-wise piece is priced as a table of its own rows serving
/// its share of the lookups (pooling factor × row fraction) with the table's access distribution —
/// an approximation: the bins of a row range are not measured separately. An element type other than
/// fp32 enters as the dim of the fp32 piece with the same row bytes (`dim × bytes / 4`: an fp16 piece
/// of 64 columns reads what an fp32 piece of 32 does; the kernels are bound by memory traffic) — the
/// profiles were measured on fp32 tables, so this is the model's assumption, not a measurement.
#[must_use]
pub fn piece_raw(p: &PieceRef<'_>) -> [f64; NEUROSHARD_LEN] {
    let mut f = neuroshard_raw(p.table, p.dim);
    f[0] = f64::from(p.dim) * p.table.dtype.bytes() as f64 / 4.0;
    f[1] = p.pooling_factor();
    f[2] = p.rows as f64;
    f
}

fn piece_key(p: &PieceRef<'_>) -> PieceKey {
    piece_raw(p).map(f64::to_bits)
}

/// Cache statistics of a [`NeuralModel`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheStats {
    /// Set-cost lookups answered from the cache.
    pub set_hits: u64,
    /// Set-cost lookups that ran the head.
    pub set_misses: u64,
    /// Distinct pieces embedded.
    pub pieces_embedded: u64,
}

#[derive(Default)]
struct Caches {
    piece_ids: HashMap<PieceKey, u32>,
    embeddings: Vec<[f32; EMBED_LEN]>,
    /// Fixed-point first-layer projections of the embeddings (with a native head).
    projections: Vec<Vec<i64>>,
    /// Fixed-point memory-terms time of each piece, ms (a profile whose networks learned on the terms).
    bases: Vec<i64>,
    sets: HashMap<Vec<u32>, f64>,
    stats: CacheStats,
}

struct CommGraphs {
    card: CommCard,
    bw: Graph,
    fw: Graph,
}

/// One compute network of a profile: encoder and head.
struct Member {
    encoder: Graph,
    head: Graph,
}

impl Member {
    fn load(model: &str, k: usize, encoder: &[u8], head: &[u8]) -> Result<Self> {
        let tag = if k == 0 { String::new() } else { format!(" (member {k})") };
        let encoder = Graph::load(model, &format!("compute encoder{tag}"), encoder, ENCODER_WIDTHS[0], EMBED_LEN)?;
        let head = Graph::load(model, &format!("compute head{tag}"), head, HEAD_WIDTHS[0], HEAD_WIDTHS[2])?;
        // A dense-chain head (every head the trainer exports) is also priced incrementally, from
        // fixed-point sums of first-layer projections; any other head runs on f32 embedding sums.
        Ok(Self { encoder, head })
    }

    fn native_head(&self) -> Option<&NativeMlp> {
        self.head.native()
    }
}

/// A trained profile as a [`CostModel`].
pub struct NeuralModel {
    card: ModelCard,
    members: Vec<Member>,
    /// Every member has a native head (then the incremental API is available).
    native: bool,
    comm: BTreeMap<usize, CommGraphs>,
    comm_fallback: Option<AnalyticalModel>,
    caches: Mutex<Caches>,
    use_set_cache: bool,
    /// Standard deviations of the members added to their mean ([`NeuralModel::with_risk`]).
    risk: f64,
    /// The relative error plans are priced with at their expected slowest device
    /// ([`NeuralModel::with_expected_max`]; `None`: at their largest device total).
    plan_sd: Option<f64>,
    /// The memory-terms model the networks' output scales, when the card says they learned on it
    /// ([`super::card::ComputeCard::on_terms`]).
    terms: Option<Terms>,
}

/// A fixed-point sum back in ms.
fn from_fixed_sum(v: i64) -> f64 {
    v as f64 / super::incremental::FIXED_SCALE
}

/// Mean and sample standard deviation of an ensemble's members' predictions (sd 0 for one member).
#[must_use]
pub fn members_mean_sd(members: &[f64]) -> (f64, f64) {
    let k = members.len() as f64;
    let mean = members.iter().sum::<f64>() / k.max(1.0);
    if members.len() < 2 {
        return (mean, 0.0);
    }
    (mean, (members.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (k - 1.0)).sqrt())
}

/// Mean of `members` plus `risk` standard deviations (sample sd; 0 for one member).
fn risk_adjusted(members: &[f64], risk: f64) -> f64 {
    let (mean, sd) = members_mean_sd(members);
    if risk == 0.0 { mean } else { mean + risk * sd }
}

impl NeuralModel {
    /// Loads a profile: its card and a lookup from the file names the card gives to their bytes.
    pub fn from_profile<'a>(card_json: &str, file: impl Fn(&str) -> Option<&'a [u8]>) -> Result<Self> {
        let card = ModelCard::from_json(card_json)?;
        let get = |f: &str| {
            file(f).ok_or_else(|| Error::CostModel {
                model: card.name.clone(),
                message: format!("the card names file {f:?}, which the profile does not contain"),
            })
        };
        let c = &card.compute;
        let mut members = vec![Member::load(&card.name, 0, get(&c.encoder_file)?, get(&c.head_file)?)?];
        for (k, m) in c.ensemble.iter().enumerate() {
            members.push(Member::load(&card.name, k + 1, get(&m.encoder_file)?, get(&m.head_file)?)?);
        }
        let native = members.iter().all(|m| m.native_head().is_some());
        let mut comm = BTreeMap::new();
        for cc in &card.comm {
            let d = cc.devices;
            let bw = Graph::load(&card.name, &format!("bw comm D={d}"), get(&cc.bw_file)?, d, d)?;
            let fw = Graph::load(&card.name, &format!("fw comm D={d}"), get(&cc.fw_file)?, 2 * d, d)?;
            comm.insert(d, CommGraphs { card: cc.clone(), bw, fw });
        }
        let terms = match (&card.compute_terms, card.compute.on_terms) {
            (Some(t), true) => Some(Terms::new(t, card.compute.batch_size, &card.name)?),
            _ => None,
        };
        Ok(Self {
            card,
            members,
            native,
            comm,
            comm_fallback: None,
            caches: Mutex::new(Caches::default()),
            use_set_cache: true,
            risk: 0.0,
            plan_sd: None,
            terms,
        })
    }

    /// Prices a set at the members' mean plus `risk` standard deviations (`risk` ≥ 0; 0 is the mean):
    /// a search then pays for going where the ensemble disagrees, which is where it was trained least.
    /// The name says so (`+risk<r>`). Refused for a negative or non-finite `risk`.
    pub fn with_risk(mut self, risk: f64) -> Result<Self> {
        if !risk.is_finite() || risk < 0.0 {
            return Err(Error::field("cost model", "risk", risk, "a finite number >= 0"));
        }
        self.risk = risk;
        self.caches = Mutex::new(Caches::default());
        Ok(self)
    }

    /// Prices a plan at the expected time of its slowest device, each device's compute off by the profile's
    /// own error ([`NeuralModel::error_sd`]), instead of its largest predicted total
    /// ([`crate::cost::expected_max_ms`]); the name says so (`+expected-max`). Refused for a profile whose
    /// card records no validation error.
    pub fn with_expected_max(mut self, on: bool) -> Result<Self> {
        self.plan_sd = if on {
            Some(self.error_sd().ok_or_else(|| {
                Error::field(
                    format!("cost model `{}`", self.card.name),
                    "expected_max",
                    on,
                    "false: the profile's card records no validation error (`neural/random/val`) to take a spread from",
                )
            })?)
        } else {
            None
        };
        Ok(self)
    }

    /// The relative standard deviation of the profile's compute error: its card's validation MAPE times
    /// `√(π/2)` (the mean absolute value of a normal error is `√(2/π)` of its standard deviation). The
    /// validation split was held out of training and its targets carry the measurement's own noise, which a
    /// measured plan carries too. `None` when the card records no positive validation MAPE.
    #[must_use]
    pub fn error_sd(&self) -> Option<f64> {
        super::card::error_sd_from(&self.card.compute.metrics, "neural/random/val")
    }

    /// Uses `fallback` for device counts the profile has no comm models for (the name says so).
    #[must_use]
    pub fn with_comm_fallback(mut self, fallback: AnalyticalModel) -> Self {
        self.comm_fallback = Some(fallback);
        self
    }

    /// Whether comm is priced by the analytical fallback for device counts the profile has no comm
    /// models for ([`NeuralModel::with_comm_fallback`]).
    #[must_use]
    pub fn has_comm_fallback(&self) -> bool {
        self.comm_fallback.is_some()
    }

    /// Turns the set-cost cache on or off (results are identical; only speed differs).
    #[must_use]
    pub fn with_set_cache(mut self, on: bool) -> Self {
        self.use_set_cache = on;
        self
    }

    /// The profile's card.
    #[must_use]
    pub fn card(&self) -> &ModelCard {
        &self.card
    }

    /// Device counts with comm models.
    #[must_use]
    pub fn comm_device_counts(&self) -> Vec<usize> {
        self.comm.keys().copied().collect()
    }

    /// Cache statistics so far.
    #[must_use]
    pub fn cache_stats(&self) -> CacheStats {
        self.caches.lock().map(|c| c.stats).unwrap_or_default()
    }

    /// Normalised encoder inputs of pieces, row-major `[n, 20]`.
    fn encoder_input(norm: &Normalisation, pieces: &[PieceRef<'_>]) -> Vec<f32> {
        pieces.iter().flat_map(|p| norm.apply(&piece_raw(p))).collect()
    }

    /// Members of the ensemble (1 for a single model).
    #[must_use]
    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    /// Embeds pieces through the first member's encoder graph (no cache).
    pub fn embed(&self, pieces: &[PieceRef<'_>]) -> Result<Vec<[f32; EMBED_LEN]>> {
        self.embed_with(0, pieces)
    }

    fn embed_with(&self, member: usize, pieces: &[PieceRef<'_>]) -> Result<Vec<[f32; EMBED_LEN]>> {
        let input = Self::encoder_input(&self.card.compute.normalisation, pieces);
        let out = self.members[member].encoder.run(pieces.len(), &input)?;
        Ok(out
            .chunks_exact(EMBED_LEN)
            .map(|c| {
                let mut v = [0.0; EMBED_LEN];
                v.copy_from_slice(c);
                v
            })
            .collect())
    }

    /// The first member's head as plain Rust, when its graph is a dense chain (see [`NativeMlp`]).
    #[must_use]
    pub fn native_head(&self) -> Option<&NativeMlp> {
        self.members[0].native_head()
    }

    /// Runs the first member's head graph on f32 set sums (not the fixed-point path the set costs take);
    /// costs in ms, clamped at 0 (a step never takes negative time) — for a profile whose networks learned
    /// on the memory-terms model, the factor over the set's terms time instead.
    pub fn head_ms(&self, sums: &[[f32; EMBED_LEN]]) -> Result<Vec<f64>> {
        self.member_head_ms(0, sums)
    }

    fn member_head_ms(&self, member: usize, sums: &[[f32; EMBED_LEN]]) -> Result<Vec<f64>> {
        let input: Vec<f32> = sums.iter().flatten().copied().collect();
        Ok(self.members[member].head.run(sums.len(), &input)?.into_iter().map(|v| f64::from(v).max(0.0)).collect())
    }

    /// The compute time of `set` under every member, ms (one value for a single model).
    pub fn compute_members_ms(&self, set: &[PieceRef<'_>]) -> Result<Vec<f64>> {
        let mut caches = self.lock()?;
        let ids = self.intern(&mut caches, set)?;
        self.members_of(&caches, &ids)
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Caches>> {
        self.caches.lock().map_err(|_| Error::CostModel {
            model: self.card.name.clone(),
            message: "cache lock poisoned by an earlier failure".into(),
        })
    }

    /// Per-member costs of the set of interned pieces `ids`.
    fn members_of(&self, caches: &Caches, ids: &[u32]) -> Result<Vec<f64>> {
        let k = self.members.len();
        let scale = self.terms_scale(caches, ids);
        if self.native {
            let width = self.head_width() / k;
            let mut sum = vec![0i64; width * k];
            for &id in ids {
                add_into(&mut sum, &caches.projections[id as usize]);
            }
            return Ok(self.native_members(&sum, width).map(|v| v * scale).collect());
        }
        (0..k)
            .map(|m| {
                let mut s = [0.0f32; EMBED_LEN];
                for &id in ids {
                    for (a, b) in s.iter_mut().zip(&caches.embeddings[id as usize * k + m]) {
                        *a += b;
                    }
                }
                Ok(self.member_head_ms(m, &[s])?.first().copied().unwrap_or(0.0) * scale)
            })
            .collect()
    }

    /// Every member's head output (clamped at 0) from a fixed-point sum of first-layer projections,
    /// `width` values per member.
    fn native_members<'s>(&'s self, sum: &'s [i64], width: usize) -> impl Iterator<Item = f64> + 's {
        self.members.iter().enumerate().map(move |(m, member)| {
            member
                .native_head()
                .map_or(0.0, |n| n.output_from_fixed_projection(&sum[m * width..(m + 1) * width]).max(0.0))
        })
    }

    /// What the heads' output is multiplied by: the memory-terms time (ms) of the set of interned pieces
    /// `ids` when the networks learned on the terms, else 1.
    fn terms_scale(&self, caches: &Caches, ids: &[u32]) -> f64 {
        if self.terms.is_none() {
            return 1.0;
        }
        from_fixed_sum(ids.iter().map(|&id| caches.bases[id as usize]).sum())
    }

    /// Length of the members' first-layer projections, one after another (the incremental vector less
    /// the terms time).
    fn head_width(&self) -> usize {
        self.members.iter().map(|m| m.native_head().map_or(0, NativeMlp::first_width)).sum()
    }

    /// The calibrated interval multiplier of the ensemble, if the profile has one.
    #[must_use]
    pub fn interval_z(&self) -> Option<f64> {
        self.card.compute.interval.as_ref().map(|i| i.z).filter(|_| self.members.len() > 1)
    }

    /// Interns pieces, embedding the ones never seen through every member; returns their ids. Piece
    /// `id` has embeddings `id·k .. id·k + k` (one per member) and one projection holding the members'
    /// first-layer projections one after another.
    fn intern(&self, caches: &mut Caches, pieces: &[PieceRef<'_>]) -> Result<Vec<u32>> {
        let keys: Vec<PieceKey> = pieces.iter().map(piece_key).collect();
        let mut missing: Vec<usize> = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            if !caches.piece_ids.contains_key(k) && !missing.iter().any(|&j| keys[j] == *k) {
                missing.push(i);
            }
        }
        if !missing.is_empty() {
            let new: Vec<PieceRef<'_>> = missing.iter().map(|&i| pieces[i]).collect();
            let per_member = (0..self.members.len()).map(|m| self.embed_with(m, &new)).collect::<Result<Vec<_>>>()?;
            for (j, i) in missing.iter().enumerate() {
                let id = caches.piece_ids.len() as u32;
                let mut projection = Vec::new();
                for (m, member) in self.members.iter().enumerate() {
                    let emb = per_member[m][j];
                    if let (Some(native), true) = (member.native_head(), self.native) {
                        let x: Vec<f64> = emb.iter().map(|&v| f64::from(v)).collect();
                        for v in native.project_first(&x) {
                            projection.push(to_fixed(&self.card.name, v)?);
                        }
                    }
                    caches.embeddings.push(emb);
                }
                if self.native {
                    caches.projections.push(projection);
                }
                if let Some(t) = &self.terms {
                    caches.bases.push(to_fixed(&self.card.name, t.piece_ms(&pieces[*i]))?);
                }
                caches.piece_ids.insert(keys[*i], id);
                caches.stats.pieces_embedded += 1;
            }
        }
        Ok(keys.iter().map(|k| caches.piece_ids.get(k).copied().unwrap_or(0)).collect())
    }

    fn comm_for(&self, d: usize) -> Result<Option<&CommGraphs>> {
        match self.comm.get(&d) {
            Some(g) => Ok(Some(g)),
            None if self.comm_fallback.is_some() => Ok(None),
            None => Err(Error::CostModel {
                model: self.card.name.clone(),
                message: format!(
                    "no comm model for {d} devices (profile has {:?}); collect comm samples for D={d} or allow the analytical comm fallback",
                    self.comm_device_counts()
                ),
            }),
        }
    }
}

/// With native heads: a piece's vector is, for every member, its embedding through that member's head's
/// first layer (weights only), one after another; a set's cost is the mean over members of the rest of
/// each head on its part of the sum plus the first layer's bias — the same numbers
/// [`CostModel::compute_ms`] gives.
impl IncrementalCompute for NeuralModel {
    fn vector_len(&self) -> usize {
        if !self.native {
            return 0;
        }
        self.head_width() + usize::from(self.terms.is_some())
    }

    fn piece_vectors(&self, pieces: &[PieceRef<'_>]) -> Result<Vec<f64>> {
        let mut caches = self.lock()?;
        let ids = self.intern(&mut caches, pieces)?;
        let mut out = Vec::with_capacity(ids.len() * self.vector_len());
        for id in ids {
            let p = caches.projections.get(id as usize).ok_or_else(|| Error::CostModel {
                model: self.card.name.clone(),
                message: "no native head: piece vectors are unavailable".into(),
            })?;
            out.extend(super::incremental::from_fixed(p));
            if self.terms.is_some() {
                out.push(from_fixed_sum(caches.bases[id as usize]));
            }
        }
        Ok(out)
    }

    fn head_ms_with(&self, sum: &[i64], extra: &[i64], scratch: &mut [i64]) -> f64 {
        if let [member] = &self.members[..]
            && let Some(n) = member.native_head()
        {
            // The search's hot path: the sum is never stored.
            let w = n.first_width();
            let scale = self.terms.as_ref().map_or(1.0, |_| from_fixed_sum(sum[w] + extra[w]));
            return risk_adjusted(&[n.output_from_fixed_pair(&sum[..w], &extra[..w]).max(0.0) * scale], self.risk);
        }
        for ((s, a), b) in scratch.iter_mut().zip(sum).zip(extra) {
            *s = a + b;
        }
        IncrementalCompute::head_ms(self, scratch)
    }

    fn head_ms(&self, sum: &[i64]) -> f64 {
        let k = self.members.len();
        // The vector is the members' projections, then (on the terms) the set's terms time.
        let (sum, scale) = match (&self.terms, sum.split_last()) {
            (Some(_), Some((base, heads))) => (heads, from_fixed_sum(*base)),
            _ => (sum, 1.0),
        };
        if let [member] = &self.members[..] {
            // One model: no members to average (the search's hot path; no allocation).
            let v = member.native_head().map_or(0.0, |n| n.output_from_fixed_projection(sum).max(0.0));
            return risk_adjusted(&[v * scale], self.risk);
        }
        let members: Vec<f64> = self.native_members(sum, sum.len() / k.max(1)).map(|v| v * scale).collect();
        risk_adjusted(&members, self.risk)
    }
}

impl CostModel for NeuralModel {
    fn forget_memo(&self) {
        if let Ok(mut caches) = self.caches.lock() {
            let stats = caches.stats;
            *caches = Caches { stats, ..Caches::default() };
        }
    }

    fn incremental(&self) -> Option<&dyn IncrementalCompute> {
        self.native.then_some(self as &dyn IncrementalCompute)
    }

    fn compute_members_ms(&self, set: &[PieceRef<'_>]) -> Result<Option<Vec<f64>>> {
        if self.members.len() < 2 {
            return Ok(None);
        }
        NeuralModel::compute_members_ms(self, set).map(Some)
    }

    fn interval_z(&self) -> Option<f64> {
        NeuralModel::interval_z(self)
    }

    fn plan_error_sd(&self) -> Option<f64> {
        self.plan_sd
    }

    fn measured_error_sd(&self) -> Option<f64> {
        self.error_sd()
    }

    fn global_batch(&self) -> Option<u64> {
        Some(u64::from(self.card.compute.batch_size))
    }

    fn measured_on(&self) -> Option<&serde_json::Value> {
        Some(&self.card.hardware)
    }

    fn reference_speed(&self) -> Option<(String, f64)> {
        let fingerprint = self.card.hardware.get("fingerprint")?.as_str()?.to_string();
        self.card.compute.reference_ms.map(|r| (fingerprint, r))
    }

    fn name(&self) -> String {
        let mut risk = if self.risk > 0.0 { format!("+risk{}", self.risk) } else { String::new() };
        if self.plan_sd.is_some() {
            risk.push_str("+expected-max");
        }
        let comm = if self.has_comm_fallback() { "+analytical-comm" } else { "" };
        format!("neural:{}{risk}{comm}", self.card.name)
    }

    fn compute_ms(&self, set: &[PieceRef<'_>]) -> Result<f64> {
        Ok(self.compute_many_ms(&[set])?.first().copied().unwrap_or(0.0))
    }

    fn compute_many_ms(&self, sets: &[&[PieceRef<'_>]]) -> Result<Vec<f64>> {
        let mut caches = self.lock()?;
        let mut out = vec![0.0; sets.len()];
        for (i, set) in sets.iter().enumerate() {
            let mut ids = self.intern(&mut caches, set)?;
            ids.sort_unstable();
            if let Some(c) = self.use_set_cache.then(|| caches.sets.get(&ids).copied()).flatten() {
                out[i] = c;
                caches.stats.set_hits += 1;
                continue;
            }
            let members = self.members_of(&caches, &ids)?;
            let c = risk_adjusted(&members, self.risk);
            out[i] = c;
            caches.stats.set_misses += 1;
            if self.use_set_cache {
                caches.sets.insert(ids, c);
            }
        }
        Ok(out)
    }

    fn bw_comm_ms(&self, dims: &[f64]) -> Result<Vec<f64>> {
        match (self.comm_for(dims.len())?, &self.comm_fallback) {
            (Some(g), _) => {
                let x = g.card.bw_normalisation.apply(dims);
                Ok(g.bw.run(1, &x)?.into_iter().map(|v| f64::from(v).max(0.0)).collect())
            }
            (None, Some(f)) => f.bw_comm_ms(dims),
            (None, None) => Ok(Vec::new()),
        }
    }

    fn fw_comm_ms(&self, dims: &[f64], delays_ms: &[f64]) -> Result<Vec<f64>> {
        match (self.comm_for(dims.len())?, &self.comm_fallback) {
            (Some(g), _) => {
                let raw: Vec<f64> = dims.iter().chain(delays_ms).copied().collect();
                let x = g.card.fw_normalisation.apply(&raw);
                let exchange = g.fw.run(1, &x)?.into_iter().map(|v| f64::from(v).max(0.0));
                if !g.card.fw_after_wait {
                    return Ok(exchange.collect());
                }
                Ok(exchange.zip(super::start_wait_ms(delays_ms)).map(|(e, w)| e + w).collect())
            }
            (None, Some(f)) => f.fw_comm_ms(dims, delays_ms),
            (None, None) => Ok(Vec::new()),
        }
    }
}
