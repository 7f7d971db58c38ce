//! ALIS: dynamic row-level sharding of embedding tables for recommendation inference, and the prequential
//! replay that measures it.
//!
//! Its own crate because it shares nothing with planner-core's training-time planners: it reads request
//! streams, not table statistics, places rows, not table pieces, and has its own errors and registry.
//!
//! Rows (entries) of embedding tables are spread over `S` inference shards so that each request touches few
//! shards (its *fanout*), every shard holds at most `⌈(1+ε)·rows/S⌉` rows, and the placement follows drifting
//! request patterns without moving many rows or spending long on each update.
//!
//! Key types:
//! - [`Stream`] (`stream.rs`): validated requests with rows interned to dense indices in first-appearance
//!   order; [`parse_jsonl`] and [`parse_csv`] read the documented file formats from text.
//! - [`Strategy`] and the registry [`STRATEGY_NAMES`] / [`make_strategy`] (`strategy/`): hash, range, static,
//!   direct (the latest window from scratch), periodic full re-partition, greedy incremental, light
//!   incremental (`alis-base`) and ALIS, all sharing [`Placement`] (`placement.rs`), the one capacity rule
//!   (place by preference, spill to the next shard with room; ALIS may also move rows its window does not
//!   touch off shards its window's rows fill).
//! - [`partition()`] (`partition/`): the hypergraph partitioner for the connectivity objective (km1, the
//!   fanout less one per request) under per-shard caps, used on one window by ALIS and `direct` and on the
//!   whole history by the full re-partition. Multilevel by default (heavy-net coarsening, recursive
//!   multilevel bisection with seeded tries, label propagation and FM refinement at every level, integer
//!   gains); the crate's first, flat partitioner (LDG initialisation, probabilistic-fanout local search,
//!   swaps) stays selectable ([`Partitioner`]). Written here because no pure-Rust crate partitions
//!   hypergraphs for this objective and builds for wasm32; `tools/alis_kahypar.py` measures it against
//!   Mt-KaHyPar.
//! - [`SparseWeights`] (`weights.rs`): the global weight matrix W with `top_k` (shard, weight) slots per row
//!   and lazy age decay, so memory is `rows · top_k · 6` bytes instead of the paper's `rows · S · 4`.
//!   With the placement, the interim set and the window index, ALIS holds 36 bytes per row at `top_k = 4`.
//! - [`replay()`] (`replay.rs`) and [`metrics`]: score the placement made *before* each window, then update.
//! - [`synthetic::generate`]: the seeded drifting-community generator used by tests and benchmarks.
//!
//! Why: scoring on the window a partition was built from overstates its quality, hence the prequential
//! replay; the paper's two parameters called α are named `incr_ratio` (share of the newest window the light
//! step partitions) and `decay` (per-window age decay of accumulated evidence) here so they cannot be
//! confused. Like planner-core, the crate is sans-IO (text and structs in, structs out; no file system, clock
//! or printing) and builds for `wasm32-unknown-unknown`: update times come from a clock closure passed in by
//! the caller.

pub mod metrics;
pub mod partition;
pub mod placement;
pub mod replay;
pub mod strategy;
pub mod stream;
pub mod synthetic;
pub mod weights;

pub use metrics::{LatencyModel, RunSummary, WindowMetrics};
pub use partition::{Hypergraph, PARTITIONER_NAMES, PartitionParams, Partitioner, partition};
pub use placement::{Placement, hash_shard};
pub use replay::{ReplayConfig, ReplayResult, replay};
pub use strategy::{
    STRATEGY_NAMES, Scope, Strategy, StrategyConfig, decayed_partition_input, make_strategy, scope_partition_input,
};
pub use stream::{MAX_STREAM_FILE_BYTES, RawRequest, STREAM_EXTENSIONS, Stream, parse_csv, parse_jsonl, parse_named};
pub use synthetic::SyntheticParams;
pub use weights::SparseWeights;

/// Errors of the ALIS crate; each names what the caller can fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum AlisError {
    /// A parameter is outside its allowed range.
    #[error("invalid {field} = {value} (allowed: {allowed})")]
    InvalidParam {
        /// Parameter name.
        field: &'static str,
        /// Value given.
        value: String,
        /// Allowed values.
        allowed: String,
    },
    /// A stream file could not be read.
    #[error("line {line}: bad {field} {value:?}: {reason}")]
    Parse {
        /// 1-based line in the input.
        line: usize,
        /// Field (or `json` / `record` / `header` for whole-line problems).
        field: &'static str,
        /// Offending text (truncated).
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// The stream holds no request.
    #[error("the stream holds no request")]
    EmptyStream,
    /// No strategy has this name.
    #[error("unknown strategy {name:?} (known: {known})")]
    UnknownStrategy {
        /// Name given.
        name: String,
        /// Registered names.
        known: String,
    },
}
