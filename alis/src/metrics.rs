//! Per-window scores of a placement and their summaries over windows and seeds.

use serde::{Deserialize, Serialize};

use crate::placement::Placement;
use crate::stream::Stream;

/// The per-shard RPC latency model: a request sends one RPC to every shard it touches, in parallel, after
/// the caller has issued them one by one:
/// `latency_us = fanout · issue_us + max_s (rpc_base_us + rows_s · row_bytes / bw_bytes_per_us)`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatencyModel {
    /// Fixed cost of one RPC round trip (network + server dispatch), microseconds.
    pub rpc_base_us: f64,
    /// Caller-side cost of issuing one more RPC (serialisation, syscall), microseconds.
    pub issue_us: f64,
    /// Link bandwidth in bytes per microsecond (12 500 = 100 Gbit/s).
    pub bw_bytes_per_us: f64,
    /// Bytes of one embedding row (dim · 4 for f32).
    pub row_bytes: f64,
}

impl Default for LatencyModel {
    fn default() -> Self {
        LatencyModel { rpc_base_us: 20.0, issue_us: 2.0, bw_bytes_per_us: 12_500.0, row_bytes: 64.0 }
    }
}

/// Scores of one window under the placement made before it was seen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowMetrics {
    /// Window index.
    pub window: usize,
    /// Requests in the window.
    pub requests: usize,
    /// Mean distinct shards per request.
    pub mean_fanout: f64,
    /// 99th percentile of fanout.
    pub p99_fanout: f64,
    /// Rows not on the request's home shard (the shard holding most of its rows), summed over requests.
    pub remote_rows: u64,
    /// `remote_rows · row_bytes`.
    pub remote_bytes: f64,
    /// Max rows on a shard / mean rows per shard (placed rows).
    pub row_imbalance: f64,
    /// Max row accesses on a shard / mean accesses per shard in this window.
    pub traffic_imbalance: f64,
    /// Mean modelled latency, microseconds.
    pub mean_latency_us: f64,
    /// 99th percentile modelled latency, microseconds.
    pub p99_latency_us: f64,
    /// Rows whose serving shard changed in the update that followed this window.
    pub migrated_rows: u64,
    /// Wall time of that update in milliseconds (measured by the caller's clock).
    pub update_ms: f64,
}

/// Scores requests `window` of `stream` under `placement` (rows not placed yet are served by the hash rule).
#[must_use]
pub fn score_window(
    stream: &Stream,
    window: std::ops::Range<usize>,
    placement: &Placement,
    model: &LatencyModel,
    index: usize,
) -> WindowMetrics {
    let s_count = placement.shards();
    let mut per_shard = vec![0u32; s_count];
    let mut traffic = vec![0u64; s_count];
    let mut touched: Vec<u16> = Vec::new();
    let mut fanouts = Vec::with_capacity(window.len());
    let mut lat = Vec::with_capacity(window.len());
    let mut remote = 0u64;
    for i in window.clone() {
        touched.clear();
        let req = stream.request(i);
        for &r in req {
            let s = placement.shard_of(stream, r);
            if per_shard[s as usize] == 0 {
                touched.push(s);
            }
            per_shard[s as usize] += 1;
            traffic[s as usize] += 1;
        }
        let mut max_rows = 0u32;
        let mut max_rpc = 0f64;
        for &s in &touched {
            let n = per_shard[s as usize];
            max_rows = max_rows.max(n);
            max_rpc = max_rpc.max(model.rpc_base_us + f64::from(n) * model.row_bytes / model.bw_bytes_per_us);
            per_shard[s as usize] = 0;
        }
        remote += (req.len() as u32 - max_rows) as u64;
        fanouts.push(touched.len() as f64);
        lat.push(touched.len() as f64 * model.issue_us + max_rpc);
    }
    let n = fanouts.len().max(1) as f64;
    let mean_fanout = fanouts.iter().sum::<f64>() / n;
    let mean_latency_us = lat.iter().sum::<f64>() / n;
    let loads = placement.loads();
    let placed: usize = loads.iter().sum();
    let row_imbalance =
        if placed == 0 { 1.0 } else { *loads.iter().max().unwrap_or(&0) as f64 / (placed as f64 / s_count as f64) };
    let accesses: u64 = traffic.iter().sum();
    let traffic_imbalance = if accesses == 0 {
        1.0
    } else {
        *traffic.iter().max().unwrap_or(&0) as f64 / (accesses as f64 / s_count as f64)
    };
    WindowMetrics {
        window: index,
        requests: window.len(),
        mean_fanout,
        p99_fanout: quantile(&mut fanouts, 0.99),
        remote_rows: remote,
        remote_bytes: remote as f64 * model.row_bytes,
        row_imbalance,
        traffic_imbalance,
        mean_latency_us,
        p99_latency_us: quantile(&mut lat, 0.99),
        migrated_rows: 0,
        update_ms: 0.0,
    }
}

/// The `q` quantile (nearest rank) of `xs`; 0 for an empty slice. Reorders `xs`.
#[must_use]
pub fn quantile(xs: &mut [f64], q: f64) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let k = ((q * xs.len() as f64).ceil() as usize).clamp(1, xs.len()) - 1;
    let (_, v, _) = xs.select_nth_unstable_by(k, f64::total_cmp);
    *v
}

/// Mean and sample standard deviation (0 for fewer than two values).
#[must_use]
pub fn mean_sd(xs: &[f64]) -> (f64, f64) {
    if xs.is_empty() {
        return (0.0, 0.0);
    }
    let n = xs.len() as f64;
    let m = xs.iter().sum::<f64>() / n;
    if xs.len() < 2 {
        return (m, 0.0);
    }
    let v = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1.0);
    (m, v.sqrt())
}

/// One strategy on one stream (one seed), summarised over the scored windows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// Strategy name (`policy` in files written before the row-sharding rules were called strategies).
    #[serde(alias = "policy")]
    pub strategy: String,
    /// Seed of the run.
    pub seed: u64,
    /// Request-weighted mean fanout over scored windows.
    pub mean_fanout: f64,
    /// Mean of the per-window P99 fanout.
    pub p99_fanout: f64,
    /// Standard deviation of the per-window mean fanout (window-to-window variability).
    pub window_fanout_sd: f64,
    /// Mean `|fanout_t − fanout_{t−1}|` over consecutive scored windows.
    pub window_fanout_mad: f64,
    /// Window-to-window standard deviation from successive differences (von Neumann):
    /// `sqrt(Σ (fanout_t − fanout_{t−1})² / (2·(n−1)))`. It equals the plain sd for a series without trend,
    /// but unlike it does not grow with a slow trend such as a strategy's improvement over the run.
    #[serde(default)]
    pub window_fanout_step_sd: f64,
    /// Remote rows per request.
    pub remote_rows_per_request: f64,
    /// Remote bytes per request.
    pub remote_bytes_per_request: f64,
    /// Largest row imbalance seen.
    pub max_row_imbalance: f64,
    /// Mean traffic imbalance.
    pub mean_traffic_imbalance: f64,
    /// Rows migrated per update (mean over all updates).
    pub migrated_rows_per_update: f64,
    /// Mean update wall time in milliseconds.
    pub update_ms: f64,
    /// Request-weighted mean modelled latency, microseconds.
    pub mean_latency_us: f64,
    /// Mean of the per-window P99 modelled latency, microseconds.
    pub p99_latency_us: f64,
    /// Heap bytes of the strategy state after the last update.
    pub state_bytes: usize,
    /// Windows scored (all but window 0). With fewer than 2 the window-to-window figures are undefined
    /// and reported as 0.
    #[serde(default)]
    pub scored_windows: usize,
}

/// Summarises `windows` (all updates, scored or not) of one run; window 0 (scored before any update) is
/// excluded from quality figures.
#[must_use]
pub fn summarise(strategy: &str, seed: u64, windows: &[WindowMetrics], state_bytes: usize) -> RunSummary {
    let scored: Vec<&WindowMetrics> = windows.iter().filter(|w| w.window > 0).collect();
    let reqs: f64 = scored.iter().map(|w| w.requests as f64).sum::<f64>().max(1.0);
    let wmean = |f: &dyn Fn(&WindowMetrics) -> f64| scored.iter().map(|w| f(w) * w.requests as f64).sum::<f64>() / reqs;
    let plain =
        |f: &dyn Fn(&WindowMetrics) -> f64| scored.iter().map(|w| f(w)).sum::<f64>() / scored.len().max(1) as f64;
    let per_window: Vec<f64> = scored.iter().map(|w| w.mean_fanout).collect();
    let mad = if per_window.len() < 2 {
        0.0
    } else {
        per_window.windows(2).map(|p| (p[1] - p[0]).abs()).sum::<f64>() / (per_window.len() - 1) as f64
    };
    let step_sd = if per_window.len() < 2 {
        0.0
    } else {
        (per_window.windows(2).map(|p| (p[1] - p[0]).powi(2)).sum::<f64>() / (2 * (per_window.len() - 1)) as f64).sqrt()
    };
    let n_upd = windows.len().max(1) as f64;
    RunSummary {
        strategy: strategy.to_string(),
        seed,
        mean_fanout: wmean(&|w| w.mean_fanout),
        p99_fanout: plain(&|w| w.p99_fanout),
        window_fanout_sd: mean_sd(&per_window).1,
        window_fanout_mad: mad,
        window_fanout_step_sd: step_sd,
        remote_rows_per_request: scored.iter().map(|w| w.remote_rows as f64).sum::<f64>() / reqs,
        remote_bytes_per_request: scored.iter().map(|w| w.remote_bytes).sum::<f64>() / reqs,
        max_row_imbalance: scored.iter().map(|w| w.row_imbalance).fold(1.0, f64::max),
        mean_traffic_imbalance: plain(&|w| w.traffic_imbalance),
        migrated_rows_per_update: windows.iter().map(|w| w.migrated_rows as f64).sum::<f64>() / n_upd,
        update_ms: windows.iter().map(|w| w.update_ms).sum::<f64>() / n_upd,
        mean_latency_us: wmean(&|w| w.mean_latency_us),
        p99_latency_us: plain(&|w| w.p99_latency_us),
        state_bytes,
        scored_windows: scored.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reports written before the rename name the strategy `policy`; they must still read.
    #[test]
    fn run_summaries_read_the_old_policy_field() {
        let summary = summarise("alis", 3, &[], 0);
        let mut value = serde_json::to_value(&summary).unwrap();
        let fields = value.as_object_mut().unwrap();
        let name = fields.remove("strategy").unwrap();
        fields.insert("policy".to_string(), name);
        assert_eq!(serde_json::from_value::<RunSummary>(value).unwrap(), summary);
    }
}
