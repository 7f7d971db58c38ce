//! The prequential replay driver: for every window, score the placement made before seeing it, then let the
//! strategy update on it and count what moved.

use crate::AlisError;
use crate::metrics::{LatencyModel, RunSummary, WindowMetrics, score_window, summarise};
use crate::placement::hash_shard;
use crate::strategy::{StrategyConfig, make_strategy};
use crate::stream::Stream;

/// Replay settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplayConfig {
    /// Requests per window (one strategy update per window).
    pub window_requests: usize,
    /// Latency model used for scoring.
    pub latency: LatencyModel,
}

/// The result of replaying one strategy.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayResult {
    /// Per-window metrics (window 0 is scored before any update: every strategy serves it by hash).
    pub windows: Vec<WindowMetrics>,
    /// Summary over the scored windows.
    pub summary: RunSummary,
}

/// Replays `stream` through the strategy `name` built from `cfg`. `clock_ms` is read immediately before and after
/// every update (the core has no clock of its own); pass a constant closure when time does not matter.
pub fn replay(
    stream: &Stream,
    name: &str,
    cfg: &StrategyConfig,
    replay_cfg: &ReplayConfig,
    clock_ms: &mut dyn FnMut() -> f64,
) -> Result<ReplayResult, AlisError> {
    let mut strategy = make_strategy(name, cfg)?;
    let windows = stream.windows(replay_cfg.window_requests)?;
    // Window 0 is served before any update and left out of the summaries: one window would score nothing.
    if windows.len() < 2 {
        let n = stream.n_requests();
        return Err(AlisError::InvalidParam {
            field: "window_requests",
            value: replay_cfg.window_requests.to_string(),
            allowed: if n < 2 {
                format!(
                    "none: the stream has {n} request{}, and a replay needs two windows",
                    if n == 1 { "" } else { "s" }
                )
            } else {
                format!("1..={} for this stream of {n} requests (a replay needs two windows)", n - 1)
            },
        });
    }
    let mut out = Vec::with_capacity(windows.len());
    let mut prev: Vec<u16> = Vec::new();
    for (w, range) in windows.into_iter().enumerate() {
        let mut m = score_window(stream, range.clone(), strategy.placement(), &replay_cfg.latency, w);
        prev.clear();
        prev.extend_from_slice(strategy.placement().as_slice());
        let t0 = clock_ms();
        strategy.update(stream, range)?;
        let t1 = clock_ms();
        let now = strategy.placement().as_slice();
        let moved_known = prev.iter().zip(now).filter(|(a, b)| a != b).count();
        let moved_new = (prev.len()..now.len()).filter(|&r| hash_shard(stream, r as u32, cfg.shards) != now[r]).count();
        m.migrated_rows = (moved_known + moved_new) as u64;
        m.update_ms = t1 - t0;
        out.push(m);
    }
    let summary = summarise(name, cfg.seed, &out, strategy.state_bytes());
    Ok(ReplayResult { windows: out, summary })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::LatencyModel;
    use crate::strategy::STRATEGY_NAMES;
    use crate::stream::RawRequest;
    use crate::synthetic::{SyntheticParams, generate};

    /// A small drifting stream: 6 windows of 300 requests over ~1 600 rows, with the shift at window 3.
    fn small(seed: u64) -> (Stream, ReplayConfig) {
        let p = SyntheticParams {
            seed,
            communities: 16,
            items_per_community: 100,
            windows: 6,
            requests_per_window: 300,
            shift_window: 3,
            ..SyntheticParams::default()
        };
        let s = generate(&p).unwrap_or_else(|e| panic!("{e}"));
        (s, ReplayConfig { window_requests: 300, latency: LatencyModel::default() })
    }

    fn cfg(shards: usize, seed: u64) -> StrategyConfig {
        StrategyConfig { shards, seed, max_iters: 4, ..StrategyConfig::default() }
    }

    #[test]
    fn hash_fanout_matches_closed_form() {
        // For k distinct rows hashed uniformly onto S shards, E[fanout] = S·(1 − (1 − 1/S)^k).
        // Ids are a creation counter and communities random, so residues mod S are close to iid uniform; the
        // rest is sampling noise of one hash realisation (hot rows recur), hence a 2 % tolerance. A wrong
        // fallback rule, capacity spilling or a miscounted fanout moves the mean by far more (range or a
        // partition sit 30–60 % below it).
        let p = SyntheticParams { seed: 11, windows: 4, requests_per_window: 3000, ..SyntheticParams::default() };
        let s = generate(&p).unwrap_or_else(|e| panic!("{e}"));
        for shards in [4usize, 8, 16] {
            let rc = ReplayConfig { window_requests: 3000, latency: LatencyModel::default() };
            let r = replay(&s, "hash", &cfg(shards, 0), &rc, &mut || 0.0).unwrap_or_else(|e| panic!("{e}"));
            let sf = shards as f64;
            let expected: f64 = (3000..s.n_requests())
                .map(|i| sf * (1.0 - (1.0 - 1.0 / sf).powf(s.request(i).len() as f64)))
                .sum::<f64>()
                / (s.n_requests() - 3000) as f64;
            let got = r.summary.mean_fanout;
            assert!((got - expected).abs() / expected < 0.02, "S={shards}: measured {got}, closed form {expected}");
        }
    }

    #[test]
    fn every_strategy_respects_capacity_and_places_every_seen_row() {
        let (s, rc) = small(5);
        for shards in [4usize, 16] {
            // ALIS also with its global step, on its last windows and on all history.
            let global = |global_windows| StrategyConfig { global_every: 2, global_windows, ..cfg(shards, 1) };
            let cases = STRATEGY_NAMES.map(|name| (name, cfg(shards, 1))).into_iter();
            let polished = ("alis", StrategyConfig { polish: true, ..cfg(shards, 1) });
            for (name, c) in cases.chain([("alis", global(3)), ("alis-base", global(0)), polished]) {
                let mut strategy = make_strategy(name, &c).unwrap_or_else(|e| panic!("{e}"));
                for w in s.windows(rc.window_requests).unwrap_or_else(|e| panic!("{e}")) {
                    let end = w.end;
                    strategy.update(&s, w).unwrap();
                    let pl = strategy.placement();
                    assert_eq!(pl.len(), s.rows_known_after(end), "{name}");
                    let max = pl.loads().iter().copied().max().unwrap_or(0);
                    assert!(max <= pl.cap(), "{name} S={shards}: max load {max} > cap {}", pl.cap());
                    assert_eq!(pl.loads().iter().sum::<usize>(), pl.len(), "{name}");
                }
            }
        }
    }

    #[test]
    fn capacity_binds_when_epsilon_is_zero() {
        // With ε = 0 the cap is exactly ⌈rows/S⌉, so co-location pressure must spill; loads stay within it.
        let (s, rc) = small(6);
        for name in STRATEGY_NAMES {
            let c = StrategyConfig { epsilon: 0.0, ..cfg(4, 2) };
            let r = replay(&s, name, &c, &rc, &mut || 0.0).unwrap_or_else(|e| panic!("{e}"));
            let worst = r.windows.iter().map(|w| w.row_imbalance).fold(0.0, f64::max);
            assert!(worst <= 1.0 + 4.0 / 1600.0 + 1e-9, "{name}: row imbalance {worst}");
        }
    }

    #[test]
    fn alis_without_aggregate_equals_light_incremental() {
        let (s, rc) = small(7);
        // A slow decay, so that older shard sets can outvote the newest one and the aggregate visibly acts.
        let c = StrategyConfig { decay: 0.9, ..cfg(8, 3) };
        let base = replay(&s, "alis-base", &c, &rc, &mut || 0.0).unwrap_or_else(|e| panic!("{e}"));
        // β = 0 with a full history: the votes are computed but must not change anything.
        let beta0 = StrategyConfig { beta: 0.0, ..c };
        let a = replay(&s, "alis", &beta0, &rc, &mut || 0.0).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a.windows, base.windows);
        // No history (β = 0.8): nothing votes, so again plain light incremental.
        let none = StrategyConfig { history_sets: 0, ..c };
        let b = replay(&s, "alis", &none, &rc, &mut || 0.0).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(b.windows, base.windows);
        // And the aggregate does act when enabled (otherwise the equalities above would prove nothing).
        let full = replay(&s, "alis", &c, &rc, &mut || 0.0).unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(full.windows, base.windows);
    }

    #[test]
    fn cold_rows_give_way_so_that_a_hot_group_gathers() {
        // 20 rows on 2 shards (cap ⌈1.05·20/2⌉ = 11). The first window pairs row i with row i + 10, so its
        // partition (ALIS's first placement) keeps pairs together and splits rows 0..10 over both shards;
        // afterwards only rows 0..10 are requested, always together. They can share one shard only if the cold
        // rows 10..20 there make room.
        let mut raw: Vec<RawRequest> = (0..10u64)
            .map(|i| RawRequest { request_id: i, time: i as f64, row_ids: vec![i, i + 10], table_ids: None })
            .collect();
        for i in 10..40u64 {
            raw.push(RawRequest { request_id: i, time: i as f64, row_ids: (0..10).collect(), table_ids: None });
        }
        let s = Stream::from_raw(raw, 1).unwrap_or_else(|e| panic!("{e}"));
        let hot_shards = |evict_cold: bool| {
            let c = StrategyConfig { shards: 2, evict_cold, ..StrategyConfig::default() };
            let strategy = run_within_caps("alis-base", &c, &s, 10, 20);
            let row = |id: u64| (0..s.n_rows() as u32).find(|&r| s.row_key(r) == id).unwrap_or(u32::MAX);
            let mut shards: Vec<u16> = (0..10).map(|id| strategy.placement().as_slice()[row(id) as usize]).collect();
            shards.sort_unstable();
            shards.dedup();
            shards.len()
        };
        assert_eq!(hot_shards(true), 1, "with eviction the hot group shares one shard");
        assert_eq!(hot_shards(false), 2, "without it the cold rows pin the group apart");
    }

    #[test]
    fn the_light_step_reads_the_previous_window() {
        // 20 rows on 2 shards (ε = 0.5: cap 15, so the groups cannot share a shard), windows of 18 requests,
        // D_new = the newest 9. Window 1 pairs row i with row i + 10, so the first placement splits group A
        // (rows 0..10) and group B (rows 10..20) over both shards. Windows 2 to 6 each request A as a chain of
        // pairs, then B likewise. Alone, D_new (B's chain) never touches A, which stays split. With the
        // previous window in the light step, both chains are partitioned and, once W's evidence has turned
        // (older placements decay), each group gathers.
        let groups_apart = |history_windows: usize| {
            groups_gather(
                "alis-base",
                StrategyConfig { shards: 2, epsilon: 0.5, history_windows, ..StrategyConfig::default() },
            )
        };
        assert!(groups_apart(1), "with the previous window each group gathers on its own shard");
        assert!(!groups_apart(0), "D_new alone never touches A, which stays split");
    }

    #[test]
    fn a_decayed_full_follows_what_is_requested_now() {
        // 4 rows on 2 shards (ε = 0: cap 2), windows of 20 requests. Windows 1–3 request {0, 1} and {2, 3};
        // window 4 requests {0, 2} and {1, 3}. Undecayed, all history still pairs 0 with 1 (60 requests
        // against 10); with decay 0.1 the latest window outweighs the older ones (3.3 against 10) and `full`
        // regroups the rows as they are requested now.
        let mut raw = Vec::new();
        for w in 0..4u64 {
            let pairs: [[u64; 2]; 2] = if w < 3 { [[0, 1], [2, 3]] } else { [[0, 2], [1, 3]] };
            for i in 0..20u64 {
                let id = w * 20 + i;
                raw.push(RawRequest {
                    request_id: id,
                    time: id as f64,
                    row_ids: pairs[(i % 2) as usize].to_vec(),
                    table_ids: None,
                });
            }
        }
        let s = Stream::from_raw(raw, 1).unwrap_or_else(|e| panic!("{e}"));
        let together = |full_decay: f64, a: u64, b: u64| {
            let c = StrategyConfig { shards: 2, epsilon: 0.0, full_decay, ..StrategyConfig::default() };
            let strategy = run_within_caps("full", &c, &s, 20, 4);
            let row = |id: u64| (0..s.n_rows() as u32).find(|&r| s.row_key(r) == id).unwrap_or(u32::MAX);
            let pl = strategy.placement().as_slice();
            pl[row(a) as usize] == pl[row(b) as usize]
        };
        assert!(together(1.0, 0, 1) && !together(1.0, 0, 2), "undecayed, all history pairs 0 with 1");
        assert!(together(0.1, 0, 2) && together(0.1, 1, 3), "decayed, the latest window's pairs");
    }

    /// Strategy `name` updated on every window of `size` requests of `s`, each placement checked to keep
    /// every shard within its cap and all `rows` rows placed.
    fn run_within_caps(
        name: &str,
        c: &StrategyConfig,
        s: &Stream,
        size: usize,
        rows: usize,
    ) -> Box<dyn crate::strategy::Strategy> {
        let mut strategy = make_strategy(name, c).unwrap_or_else(|e| panic!("{e}"));
        for w in s.windows(size).unwrap_or_else(|e| panic!("{e}")) {
            strategy.update(s, w).unwrap();
            let pl = strategy.placement();
            assert!(pl.loads().iter().all(|&l| l <= pl.cap()), "{:?} cap {}", pl.loads(), pl.cap());
            assert_eq!(pl.loads().iter().sum::<usize>(), rows);
        }
        strategy
    }

    /// 20 rows on 2 shards (ε = 0.5: cap 15), windows of 18 requests: window 1 pairs row i with row i + 10,
    /// so the first placement splits group A (rows 0..10) and group B (rows 10..20) over both shards; later
    /// windows request A as a chain of pairs, then B likewise. Whether A and B each end on one shard under
    /// strategy `name`.
    fn groups_gather(name: &str, c: StrategyConfig) -> bool {
        let req = |id: u64, row_ids: Vec<u64>| RawRequest { request_id: id, time: id as f64, row_ids, table_ids: None };
        let mut raw: Vec<RawRequest> = (0..18u64).map(|i| req(i, vec![i % 10, i % 10 + 10])).collect();
        for base in [0u64, 10].repeat(5) {
            for i in 0..9 {
                let id = raw.len() as u64;
                raw.push(req(id, vec![base + i, base + i + 1]));
            }
        }
        let s = Stream::from_raw(raw, 1).unwrap_or_else(|e| panic!("{e}"));
        let strategy = run_within_caps(name, &c, &s, 18, 20);
        let row = |id: u64| (0..s.n_rows() as u32).find(|&r| s.row_key(r) == id).unwrap_or(u32::MAX);
        let on_one_shard = |ids: std::ops::Range<u64>| {
            let mut v: Vec<u16> = ids.map(|id| strategy.placement().as_slice()[row(id) as usize]).collect();
            v.sort_unstable();
            v.dedup();
            v.len() == 1
        };
        on_one_shard(0..10) && on_one_shard(10..20)
    }

    #[test]
    fn the_global_step_gathers_groups_the_light_step_leaves_split() {
        // D_new alone (no previous window) never touches A, so the light step leaves it split; a global step
        // every second update reads the last two windows, where both chains are, and moves the halves.
        let light = StrategyConfig { shards: 2, epsilon: 0.5, history_windows: 0, ..StrategyConfig::default() };
        assert!(!groups_gather("alis", light), "the light step alone leaves A split");
        let global = StrategyConfig { global_every: 2, global_windows: 2, ..light };
        assert!(groups_gather("alis", global), "with the global step both groups gather");
        // Off (global_every = 0) the global-step settings change nothing.
        let off = StrategyConfig { global_every: 0, global_windows: 3, ..light };
        let (s, rc) = small(4);
        let a = replay(&s, "alis", &StrategyConfig { shards: 8, ..light }, &rc, &mut || 0.0).unwrap();
        let b = replay(&s, "alis", &StrategyConfig { shards: 8, ..off }, &rc, &mut || 0.0).unwrap();
        assert_eq!(a.windows, b.windows);
    }

    #[test]
    fn a_polish_lowers_alis_fanout_and_leaves_alis_base_alone() {
        // The polish moves rows the vote left where the light step's requests would gather them: over a
        // drifting stream ALIS's fanout drops. `alis-base` has no vote, so the setting changes nothing there.
        let (s, rc) = small(6);
        for shards in [4usize, 8] {
            let on = StrategyConfig { polish: true, ..cfg(shards, 1) };
            let run = |name: &str, c: &StrategyConfig| replay(&s, name, c, &rc, &mut || 0.0).unwrap();
            assert_eq!(run("alis-base", &on).windows, run("alis-base", &cfg(shards, 1)).windows, "S={shards}");
            let (plain, polished) = (run("alis", &cfg(shards, 1)).summary, run("alis", &on).summary);
            assert!(
                polished.mean_fanout < plain.mean_fanout,
                "S={shards}: polished {} not below {}",
                polished.mean_fanout,
                plain.mean_fanout
            );
        }
    }

    #[test]
    fn alis_starts_from_the_partition_direct_deploys() {
        // Nothing is placed before the first update: ALIS (and alis-base) deploy the fresh partition of the
        // whole first window, exactly as `direct` does, instead of refining half of it from the hash placement.
        let (s, rc) = small(3);
        let first = s.windows(rc.window_requests).unwrap_or_else(|e| panic!("{e}"))[0].clone();
        let placed = |name: &str| {
            let mut strategy = make_strategy(name, &cfg(8, 2)).unwrap_or_else(|e| panic!("{e}"));
            strategy.update(&s, first.clone()).unwrap();
            strategy.placement().as_slice().to_vec()
        };
        let direct = placed("direct");
        assert_eq!(placed("alis"), direct);
        assert_eq!(placed("alis-base"), direct);
    }

    #[test]
    fn replay_is_deterministic_per_seed() {
        for name in STRATEGY_NAMES {
            let (s1, rc) = small(9);
            let (s2, _) = small(9);
            let a = replay(&s1, name, &cfg(8, 4), &rc, &mut || 0.0).unwrap_or_else(|e| panic!("{e}"));
            let b = replay(&s2, name, &cfg(8, 4), &rc, &mut || 0.0).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(a, b, "{name}");
        }
        // A different generator seed gives a different stream and different scores.
        let (s3, rc) = small(10);
        let (s1, _) = small(9);
        let a = replay(&s1, "alis", &cfg(8, 4), &rc, &mut || 0.0).unwrap_or_else(|e| panic!("{e}"));
        let c = replay(&s3, "alis", &cfg(8, 4), &rc, &mut || 0.0).unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(a.windows, c.windows);
    }

    #[test]
    fn update_time_comes_from_the_callers_clock() {
        let (s, rc) = small(1);
        let mut t = 0.0;
        let r = replay(&s, "hash", &cfg(4, 0), &rc, &mut || {
            t += 1.5;
            t
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(r.windows.iter().all(|w| (w.update_ms - 1.5).abs() < 1e-12));
    }

    #[test]
    fn partitioning_strategies_beat_hash_on_a_community_stream() {
        let (s, rc) = small(12);
        let hash = replay(&s, "hash", &cfg(8, 0), &rc, &mut || 0.0).unwrap_or_else(|e| panic!("{e}"));
        for name in ["direct", "full", "alis", "alis-base"] {
            let r = replay(&s, name, &cfg(8, 0), &rc, &mut || 0.0).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                r.summary.mean_fanout < 0.85 * hash.summary.mean_fanout,
                "{name}: {} vs hash {}",
                r.summary.mean_fanout,
                hash.summary.mean_fanout
            );
        }
    }

    #[test]
    fn a_replay_needs_two_windows() {
        let (stream, mut rc) = small(1);
        let n = stream.n_requests();
        let cfg = StrategyConfig { shards: 4, ..StrategyConfig::default() };
        rc.window_requests = n;
        let err = replay(&stream, "alis", &cfg, &rc, &mut || 0.0).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("window_requests") && err.contains(&format!("1..={}", n - 1)), "{err}");
        rc.window_requests = n - 1;
        assert!(replay(&stream, "alis", &cfg, &rc, &mut || 0.0).is_ok());
    }

    #[test]
    fn bad_parameters_are_named() {
        let (s, rc) = small(1);
        let e = replay(&s, "nope", &cfg(4, 0), &rc, &mut || 0.0).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("nope") && e.contains("alis"), "{e}");
        let c = StrategyConfig { incr_ratio: 0.0, ..cfg(4, 0) };
        let e = replay(&s, "alis", &c, &rc, &mut || 0.0).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("incr_ratio") && e.contains("(0, 1]"), "{e}");
        let c = StrategyConfig { history_windows: 65, ..cfg(4, 0) };
        let e = replay(&s, "alis", &c, &rc, &mut || 0.0).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("history_windows") && e.contains("65") && e.contains("0..=64"), "{e}");
        let c = StrategyConfig { full_decay: 0.0, ..cfg(4, 0) };
        let e = replay(&s, "full", &c, &rc, &mut || 0.0).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("full_decay") && e.contains("(0, 1]"), "{e}");
        let c = StrategyConfig { global_windows: 2_000_000, ..cfg(4, 0) };
        let e = replay(&s, "alis", &c, &rc, &mut || 0.0).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("global_windows") && e.contains("2000000"), "{e}");
        let c = StrategyConfig { shards: 0, ..cfg(4, 0) };
        assert!(replay(&s, "hash", &c, &rc, &mut || 0.0).is_err());
        let rc0 = ReplayConfig { window_requests: 0, ..rc };
        assert!(replay(&s, "hash", &cfg(4, 0), &rc0, &mut || 0.0).is_err());
    }
}
