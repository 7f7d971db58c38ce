//! One serving run: S shard servers, a router replaying a stream window by window with real RPCs, and a
//! strategy of the `alis` crate re-placing rows after every window while requests keep flowing.
//!
//! The migration protocol, per update (epoch e → e + 1), run by the controller thread:
//! 1. **Copy**: every destination pulls its incoming rows from their current holders (its sources one after
//!    the other, destinations in parallel, in calls of at most `MIGRATION_CALL_ROWS` rows) and syncs them to
//!    its log before it answers. Routing still says epoch e, so no lookup reads a copy being made.
//! 2. **Switch**: the routing table of epoch e + 1 is published in one pointer swap. Every lookup takes a
//!    snapshot of the routing (and counts itself in the snapshot's in-flight counter) under the same lock
//!    as the swap, so each lookup is routed wholly by one epoch.
//! 3. **Drain**: wait until no lookup routed by epoch e is in flight.
//! 4. **Delete**: each source deletes the rows that moved away, guarded by epoch (only copies written
//!    before e + 1), logged and synced.
//!
//! A lookup under epoch e reads from epoch e's holder, which has had the row since before e was published
//! and keeps it until every epoch-e reader is done; a lookup under e + 1 reads from a holder that synced the
//! row before e + 1 was published. So no lookup can miss, and no row is visible before it is whole and
//! durable. With `kill_prob`, the controller kills a server (SIGKILL) at a random step of a migration and
//! restarts it on its log; calls to it fail until it is back and are retried. Afterwards every server's
//! inventory is compared with the routing: rows missing where routed (lost), held with other values, or
//! held where not routed.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, mpsc};
use std::time::{Duration, Instant};

use alis::{StrategyConfig, Stream, hash_shard, make_strategy};
use anyhow::{Context, bail};
use futures_util::future::join_all;
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::cluster::{Cluster, Servers};
use crate::wire::{BATCH_ROWS, Key, MIGRATION_CALL_ROWS, Request, Response, fill_row, row_matches, values_hash};

/// Time limit of one lookup or control call before it is retried.
const CALL_LIMIT: Duration = Duration::from_secs(10);
/// How long a migration step may keep retrying (a server restart takes milliseconds).
const CONTROL_LIMIT: Duration = Duration::from_mins(2);
/// Pause before a failed call is retried.
const RETRY_PAUSE: Duration = Duration::from_millis(2);
/// Latest moment of a kill after its step began, microseconds.
const KILL_DELAY_MAX_US: u64 = 3000;

/// The load generator.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Load {
    /// `concurrency` clients, each sending its next request when the previous one is answered.
    Closed {
        /// Requests in flight.
        concurrency: usize,
    },
    /// Requests at a fixed rate whatever the answers; latency counts from each request's scheduled time, so
    /// a stalled server shows as latency rather than as fewer requests sent.
    Open {
        /// Requests per second.
        rate_per_s: f64,
    },
}

/// Settings of one serving run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// The binary whose `server` subcommand runs a shard server.
    pub exe: PathBuf,
    /// Directory for this run's server logs (must not exist yet).
    pub data_dir: PathBuf,
    /// Values (f32) per embedding row.
    pub dim: usize,
    /// Requests per window (one strategy update per window).
    pub window_requests: usize,
    /// Load generator.
    pub load: Load,
    /// Data connections per server.
    pub lanes: usize,
    /// Longest time requests are sent for.
    pub duration: Duration,
    /// Probability that a migration gets a server killed during it.
    pub kill_prob: f64,
    /// A request not answered in full within this time (retries included) counts as failed.
    pub request_limit: Duration,
    /// A deliberate protocol fault, so that tests can show the checks catch one (the binary never sets it).
    pub fault: Option<Fault>,
    /// Rows per migration call, 1..=[`MIGRATION_CALL_ROWS`] (the binary uses the largest; tests use fewer
    /// so that a small stream's migrations span many calls).
    pub migration_call_rows: usize,
    /// Scheduling priority of the controller thread (strategy updates and migrations).
    pub controller_priority: ControllerPriority,
}

/// Scheduling priority of the controller thread, which runs the strategy's updates and the migrations on
/// the same cores as the router and the servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ControllerPriority {
    /// The priority it is started with (the process's).
    #[default]
    Normal,
    /// The lowest of its scheduling policy (nice 19 on Linux): an update runs when the router and the
    /// servers leave a core free, and gives way to them as soon as they wake.
    Low,
}

impl ControllerPriority {
    /// The name the command line takes.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            ControllerPriority::Normal => "normal",
            ControllerPriority::Low => "low",
        }
    }

    /// Sets the calling thread's priority (nothing for `Normal`).
    fn apply(self) -> anyhow::Result<()> {
        match self {
            ControllerPriority::Normal => Ok(()),
            ControllerPriority::Low => {
                thread_priority::set_current_thread_priority(thread_priority::ThreadPriority::Min)
                    .map_err(|e| anyhow::anyhow!("setting the controller thread's priority to low: {e:?}"))
            }
        }
    }
}

/// A deliberate break of the migration protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Switch the routing without copying the rows first (then drain and delete as usual): every moved row
    /// is lost, and lookups of it miss.
    SkipCopy,
}

/// Migration phases (where a kill landed).
pub const PHASES: [&str; 4] = ["copy", "switch", "drain", "delete"];

/// What one run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CellReport {
    /// Strategy name.
    pub strategy: String,
    /// Servers S.
    pub shards: usize,
    /// Seed (strategy, and the generator's when synthetic).
    pub seed: u64,
    /// Which of the `--repeats` runs of this strategy, shard count and seed (0 for the first).
    #[serde(default)]
    pub repeat: usize,
    /// Load generator.
    pub load: Load,
    /// Requests answered, all windows.
    pub requests: u64,
    /// Requests of windows 1.. (window 0 is served by hash under every strategy): the latency figures.
    pub scored_requests: u64,
    /// Windows whose every request was answered.
    pub windows_served: usize,
    /// Seconds from the first scored request sent to the last answered.
    pub scored_wall_s: f64,
    /// Scored requests per second.
    pub throughput_rps: f64,
    /// Latency percentiles and mean over scored requests, microseconds.
    pub p50_us: f64,
    /// 95th percentile.
    pub p95_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Largest.
    pub max_us: f64,
    /// Mean.
    pub mean_us: f64,
    /// Mean servers touched per scored request (RPCs of its first attempt).
    pub mean_fanout: f64,
    /// Mean updates the routing used by a scored request was behind (0: it used the placement made after
    /// the window before its own).
    pub mean_epoch_lag: f64,
    /// Strategy updates applied (one per window served).
    pub updates: usize,
    /// Rows moved, per update in order.
    pub migrated_rows: Vec<u64>,
    /// Rows moved over all updates.
    pub migrated_total: u64,
    /// Mean strategy update time, milliseconds.
    pub update_ms: f64,
    /// Mean and largest wall time of a migration (copy, switch, drain, delete), milliseconds, over
    /// migrations that moved rows.
    pub migration_ms: f64,
    /// Largest.
    pub migration_max_ms: f64,
    /// Lookups of a row its server did not hold.
    pub misses: u64,
    /// Rows read with values other than the row's (bit for bit).
    pub wrong_values: u64,
    /// Lookup RPCs sent again (server down or restarting).
    pub retries: u64,
    /// Requests not answered in full within the request limit.
    pub failed_requests: u64,
    /// Lookups routed by an epoch older than a delete their server had applied (servers' counters since
    /// their last start).
    pub stale_lookups: u64,
    /// Copy batches refused because a newer migration had begun at their server: a copy whose caller timed
    /// out and asked again, still writing (servers' counters since their last start).
    #[serde(default)]
    pub stale_copies: u64,
    /// Servers killed mid-migration.
    pub kills: u64,
    /// Kills per phase, in [`PHASES`] order.
    pub kills_by_phase: [u64; 4],
    /// Kills that broke the RPC of their step (the server died before answering it).
    pub kills_interrupting: u64,
    /// Bytes of torn log tail dropped by restarted servers.
    pub torn_bytes: u64,
    /// Inventory checks (after each migration with a kill, and at the end).
    pub checks: u64,
    /// Rows routed to a server that did not hold them, summed over checks.
    pub lost_rows: u64,
    /// Rows held with other values, summed over checks.
    pub wrong_at_rest: u64,
    /// Rows held by a server they are not routed to, summed over checks.
    pub stray_rows: u64,
    /// Rows a migration's source did not hold.
    pub source_missing: u64,
}

/// The routing table of one epoch.
struct Routing {
    epoch: u64,
    shard: Vec<u16>,
    in_flight: AtomicUsize,
}

/// A lookup's hold on one routing epoch; dropping it lets the epoch drain.
struct Snapshot(Arc<Routing>);

impl Drop for Snapshot {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Default)]
struct Counters {
    misses: AtomicU64,
    wrong: AtomicU64,
    retries: AtomicU64,
    failed: AtomicU64,
}

struct Router {
    stream: Arc<Stream>,
    keys: Vec<Key>,
    dim: usize,
    servers: Servers,
    routing: RwLock<Arc<Routing>>,
    counters: Counters,
    request_limit: Duration,
}

/// One answered request.
#[derive(Debug, Clone, Copy)]
struct Rec {
    window: u32,
    start_ns: u64,
    end_ns: u64,
    latency_ns: u64,
    fanout: u16,
    lag: u32,
}

impl Router {
    fn acquire(&self) -> Snapshot {
        let g = self.routing.read().unwrap_or_else(PoisonError::into_inner);
        g.in_flight.fetch_add(1, Ordering::SeqCst);
        Snapshot(g.clone())
    }

    fn current(&self) -> Arc<Routing> {
        self.routing.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Serves request `i`: one Lookup per server holding its rows, in parallel, every value checked; rows of
    /// a failed RPC (or missed) are asked again under the routing of the moment.
    async fn serve(&self, i: usize, lane: usize, window: usize, start: Instant, run_start: Instant) -> Rec {
        let mut pending: Vec<u32> = self.stream.request(i).to_vec();
        let mut fanout = 0;
        let mut lag = 0;
        let mut first = true;
        let deadline = start + self.request_limit;
        loop {
            let snap = self.acquire();
            let mut by_shard: Vec<(u16, u32)> = pending.iter().map(|&r| (snap.0.shard[r as usize], r)).collect();
            by_shard.sort_unstable();
            let mut groups: Vec<(u16, Vec<u32>)> = Vec::new();
            for (s, r) in by_shard {
                match groups.last_mut() {
                    Some((g, rows)) if *g == s => rows.push(r),
                    _ => groups.push((s, vec![r])),
                }
            }
            if first {
                fanout = groups.len() as u16;
                lag = (window as u64).saturating_sub(snap.0.epoch) as u32;
                first = false;
            }
            let epoch = snap.0.epoch;
            let calls = groups.iter().map(|(s, rows)| {
                let req = Request::Lookup { epoch, keys: rows.iter().map(|&r| self.keys[r as usize]).collect() };
                async move { self.servers.call(*s as usize, lane, &req, CALL_LIMIT).await }
            });
            let answers = join_all(calls).await;
            drop(snap);
            let mut again = Vec::new();
            for ((_, rows), answer) in groups.iter().zip(answers) {
                if let Ok(Response::Rows { values, missing }) = answer {
                    let mut m = missing.iter().peekable();
                    let mut at = 0;
                    for (j, &r) in rows.iter().enumerate() {
                        if m.peek().is_some_and(|&&x| x as usize == j) {
                            m.next();
                            self.counters.misses.fetch_add(1, Ordering::Relaxed);
                            again.push(r);
                            continue;
                        }
                        let got = values.get(at..at + self.dim);
                        at += self.dim;
                        if !got.is_some_and(|v| row_matches(self.keys[r as usize], v)) {
                            self.counters.wrong.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                } else {
                    // The server is down or restarting (or answered out of protocol): ask again.
                    self.counters.retries.fetch_add(1, Ordering::Relaxed);
                    again.extend_from_slice(rows);
                }
            }
            if again.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                break;
            }
            tokio::time::sleep(RETRY_PAUSE).await;
            pending = again;
        }
        let end = Instant::now();
        Rec {
            window: window as u32,
            start_ns: start.saturating_duration_since(run_start).as_nanos() as u64,
            end_ns: end.saturating_duration_since(run_start).as_nanos() as u64,
            latency_ns: end.saturating_duration_since(start).as_nanos() as u64,
            fanout,
            lag,
        }
    }

    /// A control call retried until it succeeds (the server may be restarting) or [`CONTROL_LIMIT`] passes;
    /// `make` builds the request afresh each time (a pull names its source's current address).
    async fn control(&self, shard: usize, make: impl Fn() -> Request) -> anyhow::Result<(Response, bool)> {
        let deadline = Instant::now() + CONTROL_LIMIT;
        let mut failed_once = false;
        loop {
            match self.servers.call(shard, self.servers.control(), &make(), CALL_LIMIT).await {
                Ok(r) => return Ok((r, failed_once)),
                Err(e) if Instant::now() >= deadline => {
                    bail!("server {shard}: control call still failing after {} s: {e}", CONTROL_LIMIT.as_secs())
                }
                Err(_) => {
                    failed_once = true;
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
        }
    }

    /// `keys` in calls of at most `call_rows` rows, one after the other, each a [`Router::control`] call;
    /// the answers in order, and whether any call failed before it succeeded.
    async fn control_chunks(
        &self,
        shard: usize,
        keys: &[Key],
        call_rows: usize,
        make: impl Fn(&[Key]) -> Request,
    ) -> anyhow::Result<(Vec<Response>, bool)> {
        let mut out = Vec::with_capacity(keys.len().div_ceil(call_rows));
        let mut failed = false;
        for chunk in keys.chunks(call_rows) {
            let (r, f) = self.control(shard, || make(chunk)).await?;
            out.push(r);
            failed |= f;
        }
        Ok((out, failed))
    }
}

/// A planned kill: the step of a migration at which it happens, the server, and the delay after the step
/// began.
#[derive(Debug, Clone, Copy)]
struct KillPlan {
    phase: usize,
    step: usize,
    victim: usize,
    delay: Duration,
}

#[derive(Default)]
struct ControllerOut {
    updates: usize,
    migrated: Vec<u64>,
    update_ms: Vec<f64>,
    migration_ms: Vec<f64>,
    kills: u64,
    kills_by_phase: [u64; 4],
    kills_interrupting: u64,
    source_missing: u64,
    checks: Check,
}

#[derive(Debug, Default, Clone, Copy)]
struct Check {
    runs: u64,
    lost: u64,
    wrong: u64,
    stray: u64,
}

impl Check {
    fn add(&mut self, o: Check) {
        self.runs += o.runs;
        self.lost += o.lost;
        self.wrong += o.wrong;
        self.stray += o.stray;
    }
}

/// Compares every server's inventory with the routing: rows missing where routed, held with other values,
/// held where not routed.
async fn check(router: &Router) -> anyhow::Result<Check> {
    let routing = router.current();
    let shards = router.servers.shards();
    let mut want: Vec<Vec<(Key, u64)>> = vec![Vec::new(); shards];
    let mut buf = Vec::with_capacity(router.dim);
    for (r, &s) in routing.shard.iter().enumerate() {
        let key = router.keys[r];
        buf.clear();
        fill_row(key, router.dim, &mut buf);
        want[s as usize].push((key, values_hash(&buf)));
    }
    let mut out = Check { runs: 1, ..Check::default() };
    for (s, want) in want.iter_mut().enumerate() {
        want.sort_unstable();
        let mut held: Vec<(Key, u64)> = Vec::with_capacity(want.len());
        let mut after = None;
        loop {
            let limit = (BATCH_ROWS * 4) as u32;
            let (resp, _) = router.control(s, || Request::Inventory { after, limit }).await?;
            let Response::Inventory { keys, hashes } = resp else {
                bail!("server {s} answered an inventory with {resp:?}")
            };
            let done = keys.len() < limit as usize;
            after = keys.last().copied();
            held.extend(keys.into_iter().zip(hashes));
            if done {
                break;
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < want.len() || j < held.len() {
            match (want.get(i), held.get(j)) {
                (Some(w), Some(h)) if w.0 == h.0 => {
                    out.wrong += u64::from(w.1 != h.1);
                    i += 1;
                    j += 1;
                }
                (Some(w), Some(h)) if w.0 < h.0 => {
                    out.lost += 1;
                    i += 1;
                }
                (Some(_), None) => {
                    out.lost += 1;
                    i += 1;
                }
                _ => {
                    out.stray += 1;
                    j += 1;
                }
            }
        }
    }
    Ok(out)
}

struct Controller {
    router: Arc<Router>,
    cluster: Arc<Cluster>,
    rt: tokio::runtime::Handle,
    shards: usize,
    kill_prob: f64,
    fault: Option<Fault>,
    call_rows: usize,
    rng: ChaCha8Rng,
    out: ControllerOut,
}

impl Controller {
    /// Moves the rows whose shard differs between the current routing and `next`, then publishes `next`.
    fn migrate(&mut self, next: Vec<u16>) -> anyhow::Result<()> {
        let old = self.router.current();
        let epoch = old.epoch + 1;
        let s_count = self.shards;
        // moves[dst][src] = rows.
        let mut moves: Vec<Vec<Vec<Key>>> = vec![vec![Vec::new(); s_count]; s_count];
        let mut moved = 0u64;
        for (r, (&a, &b)) in old.shard.iter().zip(&next).enumerate() {
            if a != b {
                moves[b as usize][a as usize].push(self.router.keys[r]);
                moved += 1;
            }
        }
        self.out.migrated.push(moved);
        let started = Instant::now();
        let skip_copy = self.fault == Some(Fault::SkipCopy);
        let call_rows = self.call_rows;
        let pairs: Vec<(usize, usize)> = (0..s_count)
            .flat_map(|d| (0..s_count).map(move |s| (d, s)))
            .filter(|&(d, s)| !moves[d][s].is_empty() && !skip_copy)
            .collect();
        let sources: Vec<usize> = (0..s_count).filter(|&s| (0..s_count).any(|d| !moves[d][s].is_empty())).collect();
        let kill = (moved > 0 && self.rng.random::<f64>() < self.kill_prob).then(|| {
            let phase =
                if pairs.is_empty() { self.rng.random_range(1..4usize) } else { self.rng.random_range(0..4usize) };
            let step = match phase {
                0 => self.rng.random_range(0..pairs.len()),
                3 => self.rng.random_range(0..sources.len()),
                _ => 0,
            };
            let victim_is_source = self.rng.random::<bool>();
            let victim = match phase {
                0 if victim_is_source => pairs[step].1,
                0 => pairs[step].0,
                3 => sources[step],
                _ => self.rng.random_range(0..s_count),
            };
            let delay = Duration::from_micros(self.rng.random_range(0..=KILL_DELAY_MAX_US));
            KillPlan { phase, step, victim, delay }
        });
        let router = self.router.clone();
        let cluster = self.cluster.clone();
        let killer = |plan: KillPlan| {
            let cluster = cluster.clone();
            async move {
                tokio::time::sleep(plan.delay).await;
                cluster.kill_and_restart(plan.victim).await
            }
        };

        // 1. Copy: each destination pulls from its sources one after the other, destinations in parallel. A
        // server answers one connection's calls in turn, so pulls sent to it together would queue there, and
        // a queued pull's time would count against its call limit.
        let copy = self.rt.block_on(async {
            let by_dest = pairs.chunk_by(|a, b| a.0 == b.0).scan(0, |first, group| {
                let ks = *first..*first + group.len();
                *first += group.len();
                Some(ks)
            });
            let calls = by_dest.map(|ks| {
                let (router, killer, moves) = (&router, &killer, &moves);
                let pairs = &pairs;
                async move {
                    let mut out = Vec::with_capacity(ks.len());
                    for k in ks {
                        let (d, s) = pairs[k];
                        let pull = router.control_chunks(d, &moves[d][s], call_rows, |chunk| Request::Pull {
                            epoch,
                            source: router.servers.addr(s).to_string(),
                            keys: chunk.to_vec(),
                        });
                        let r = match kill.filter(|p| p.phase == 0 && p.step == k) {
                            Some(p) => {
                                let (r, killed) = tokio::join!(pull, killer(p));
                                killed.and(r)
                            }
                            None => pull.await,
                        };
                        let failed = r.is_err();
                        out.push((k, r));
                        if failed {
                            break;
                        }
                    }
                    out
                }
            });
            join_all(calls).await.into_iter().flatten().collect::<Vec<_>>()
        });
        let mut interrupted = false;
        for (k, r) in copy {
            let (resps, failed) = r?;
            if kill.is_some_and(|p| p.phase == 0 && p.step == k) {
                interrupted |= failed;
            }
            for resp in resps {
                match resp {
                    Response::Done { .. } => {}
                    Response::SourceMissing { keys, .. } => self.out.source_missing += keys.len() as u64,
                    other => bail!("server {} answered a pull with {other:?}", pairs[k].0),
                }
            }
        }

        // 2. Switch.
        let new = Arc::new(Routing { epoch, shard: next, in_flight: AtomicUsize::new(0) });
        let switch_kill = kill.filter(|p| p.phase == 1).map(|p| self.rt.spawn(killer(p)));
        let old = {
            let mut w = self.router.routing.write().unwrap_or_else(PoisonError::into_inner);
            std::mem::replace(&mut *w, new)
        };
        if let Some(h) = switch_kill {
            self.rt.block_on(h).context("kill task")??;
        }

        // 3. Drain the readers of the old epoch.
        let drain_kill = kill.filter(|p| p.phase == 2).map(|p| self.rt.spawn(killer(p)));
        while old.in_flight.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
        if let Some(h) = drain_kill {
            self.rt.block_on(h).context("kill task")??;
        }

        // 4. Delete at the sources.
        let deletes = self.rt.block_on(async {
            let calls = sources.iter().enumerate().map(|(k, &s)| {
                let keys: Vec<Key> = (0..s_count).flat_map(|d| moves[d][s].iter().copied()).collect();
                let router = &router;
                let plan = kill.filter(|p| p.phase == 3 && p.step == k);
                let killer = &killer;
                async move {
                    let del = router
                        .control_chunks(s, &keys, call_rows, |chunk| Request::Delete { epoch, keys: chunk.to_vec() });
                    match plan {
                        Some(p) => {
                            let (r, k) = tokio::join!(del, killer(p));
                            k?;
                            r
                        }
                        None => del.await,
                    }
                }
            });
            join_all(calls).await
        });
        for (k, r) in deletes.into_iter().enumerate() {
            let (resps, failed) = r?;
            if kill.is_some_and(|p| p.phase == 3 && p.step == k) {
                interrupted |= failed;
            }
            if let Some(resp) = resps.iter().find(|r| !matches!(r, Response::Done { .. })) {
                bail!("server {} answered a delete with {resp:?}", sources[k]);
            }
        }
        if moved > 0 {
            self.out.migration_ms.push(started.elapsed().as_secs_f64() * 1e3);
        }
        if let Some(p) = kill {
            self.out.kills += 1;
            self.out.kills_by_phase[p.phase] += 1;
            self.out.kills_interrupting += u64::from(interrupted);
            let c = self.rt.block_on(check(&self.router))?;
            self.out.checks.add(c);
        }
        Ok(())
    }
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// Runs `strategy` over `stream` with `cfg.shards` servers. Every row of the stream is loaded first, at its
/// hash shard (where a row lives before any update places it, as in `shardplan dynamic`).
pub async fn run(
    stream: Arc<Stream>,
    strategy: &str,
    cfg: StrategyConfig,
    bench: &BenchConfig,
) -> anyhow::Result<CellReport> {
    let shards = cfg.shards;
    make_strategy(strategy, &cfg).with_context(|| format!("strategy {strategy:?}"))?;
    let windows = stream.windows(bench.window_requests)?;
    if windows.len() < 2 {
        bail!(
            "invalid --window-requests = {}: the stream of {} requests needs at least two windows",
            bench.window_requests,
            stream.n_requests()
        );
    }
    if !(1..=MIGRATION_CALL_ROWS).contains(&bench.migration_call_rows) {
        bail!("migration_call_rows = {} is invalid: use 1..={MIGRATION_CALL_ROWS}", bench.migration_call_rows);
    }
    if bench.data_dir.exists() {
        bail!("data directory {} exists already (choose another --data-dir or remove it)", bench.data_dir.display());
    }
    std::fs::create_dir_all(&bench.data_dir).with_context(|| format!("creating {}", bench.data_dir.display()))?;
    let cluster = Cluster::start(&bench.exe, &bench.data_dir, shards, bench.dim).await?;
    let result = run_on(stream, strategy, cfg, bench, &windows, &cluster).await;
    cluster.shutdown().await;
    result
}

async fn run_on(
    stream: Arc<Stream>,
    strategy: &str,
    cfg: StrategyConfig,
    bench: &BenchConfig,
    windows: &[std::ops::Range<usize>],
    cluster: &Arc<Cluster>,
) -> anyhow::Result<CellReport> {
    let shards = cfg.shards;
    let n_rows = stream.n_rows();
    let keys: Vec<Key> = (0..n_rows as u32).map(|r| (stream.row_table(r), stream.row_key(r))).collect();
    let hash: Vec<u16> = (0..n_rows as u32).map(|r| hash_shard(&stream, r, shards)).collect();
    let router = Arc::new(Router {
        stream: stream.clone(),
        keys,
        dim: bench.dim,
        servers: Servers::new(cluster.book.clone(), shards, bench.lanes),
        routing: RwLock::new(Arc::new(Routing { epoch: 0, shard: hash, in_flight: AtomicUsize::new(0) })),
        counters: Counters::default(),
        request_limit: bench.request_limit,
    });

    // Initial load: every row at its hash shard, batch by batch, servers in parallel.
    let loads = (0..shards).map(|s| {
        let router = &router;
        async move {
            let routing = router.current();
            let rows: Vec<Key> = routing
                .shard
                .iter()
                .enumerate()
                .filter(|&(_, &x)| x as usize == s)
                .map(|(r, _)| router.keys[r])
                .collect();
            for batch in rows.chunks(BATCH_ROWS) {
                let mut values = Vec::with_capacity(batch.len() * router.dim);
                for &k in batch {
                    fill_row(k, router.dim, &mut values);
                }
                let req = Request::Put { epoch: 0, keys: batch.to_vec(), values };
                let (resp, _) = router.control(s, || req.clone()).await?;
                if !matches!(resp, Response::Done { .. }) {
                    bail!("server {s} answered a load with {resp:?}");
                }
            }
            anyhow::Ok(())
        }
    });
    for r in join_all(loads).await {
        r?;
    }

    // The controller thread: one strategy update per completed window, in order, then its migration.
    let (done_tx, done_rx) = mpsc::channel::<usize>();
    let controller = {
        let router = router.clone();
        let cluster = cluster.clone();
        let rt = tokio::runtime::Handle::current();
        let strategy = strategy.to_string();
        let windows = windows.to_vec();
        let kill_prob = bench.kill_prob;
        let fault = bench.fault;
        let call_rows = bench.migration_call_rows;
        let priority = bench.controller_priority;
        std::thread::Builder::new()
            .name("controller".into())
            .spawn(move || -> anyhow::Result<ControllerOut> {
                priority.apply()?;
                let mut strat = make_strategy(&strategy, &cfg)?;
                let mut c = Controller {
                    router,
                    cluster,
                    rt,
                    shards,
                    kill_prob,
                    fault,
                    call_rows,
                    rng: ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x6B69_6C6C),
                    out: ControllerOut::default(),
                };
                let stream = c.router.stream.clone();
                let mut completed = BTreeSet::new();
                let mut next = 0;
                while let Ok(w) = done_rx.recv() {
                    completed.insert(w);
                    while completed.remove(&next) {
                        let t = Instant::now();
                        strat
                            .update(&stream, windows[next].clone())
                            .with_context(|| format!("strategy update after window {next}"))?;
                        c.out.update_ms.push(t.elapsed().as_secs_f64() * 1e3);
                        let placement = strat.placement();
                        let routing: Vec<u16> =
                            (0..stream.n_rows() as u32).map(|r| placement.shard_of(&stream, r)).collect();
                        c.migrate(routing).with_context(|| format!("migration after window {next}"))?;
                        c.out.updates += 1;
                        next += 1;
                    }
                }
                Ok(c.out)
            })
            .context("starting the controller thread")?
    };

    // The load.
    let n = stream.n_requests();
    let left: Arc<Vec<AtomicUsize>> = Arc::new(windows.iter().map(|w| AtomicUsize::new(w.len())).collect());
    let run_start = Instant::now();
    let deadline = run_start + bench.duration;
    let recs: Arc<Mutex<Vec<Rec>>> = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let win = bench.window_requests;
    let finish = {
        let left = left.clone();
        let done_tx = done_tx.clone();
        move |w: usize| {
            if left[w].fetch_sub(1, Ordering::AcqRel) == 1 {
                // The controller may have stopped on an error; run() reports that error after the load.
                let _ = done_tx.send(w);
            }
        }
    };
    match bench.load {
        Load::Closed { concurrency } => {
            let next = Arc::new(AtomicUsize::new(0));
            let workers = (0..concurrency).map(|k| {
                let (router, next, recs, finish) = (router.clone(), next.clone(), recs.clone(), finish.clone());
                let lanes = bench.lanes;
                tokio::spawn(async move {
                    let mut mine = Vec::new();
                    loop {
                        if Instant::now() >= deadline {
                            break;
                        }
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            break;
                        }
                        let w = i / win;
                        mine.push(router.serve(i, (k + i) % lanes, w, Instant::now(), run_start).await);
                        finish(w);
                    }
                    recs.lock().unwrap_or_else(PoisonError::into_inner).extend(mine);
                })
            });
            for r in join_all(workers).await {
                r.context("load worker")?;
            }
        }
        Load::Open { rate_per_s } => {
            // The schedule is kept by a thread of its own with the OS's sleep (tens of microseconds of slack)
            // rather than the runtime's timer, whose 1 ms ticks would release requests in bursts and add up
            // to a millisecond to every latency counted from its scheduled time.
            let rt = tokio::runtime::Handle::current();
            let lanes = bench.lanes;
            let (router, recs, finish) = (router.clone(), recs.clone(), finish.clone());
            let dispatcher = std::thread::Builder::new()
                .name("open-loop".into())
                .spawn(move || {
                    let mut tasks = Vec::new();
                    for i in 0..n {
                        let at = run_start + Duration::from_secs_f64(i as f64 / rate_per_s);
                        if at >= deadline {
                            break;
                        }
                        let now = Instant::now();
                        if at > now {
                            std::thread::sleep(at - now);
                        }
                        let (router, recs, finish) = (router.clone(), recs.clone(), finish.clone());
                        tasks.push(rt.spawn(async move {
                            let w = i / win;
                            let rec = router.serve(i, i % lanes, w, at, run_start).await;
                            recs.lock().unwrap_or_else(PoisonError::into_inner).push(rec);
                            finish(w);
                        }));
                    }
                    tasks
                })
                .context("starting the open-loop dispatcher")?;
            let tasks = tokio::task::spawn_blocking(move || dispatcher.join())
                .await
                .context("joining the open-loop dispatcher")?
                .map_err(|_| anyhow::anyhow!("the open-loop dispatcher panicked"))?;
            for r in join_all(tasks).await {
                r.context("load task")?;
            }
        }
    }
    drop(finish);
    drop(done_tx);
    let out = tokio::task::spawn_blocking(move || controller.join())
        .await
        .context("joining the controller")?
        .map_err(|_| anyhow::anyhow!("the controller thread panicked"))??;

    // Final check and the servers' counters.
    let mut checks = out.checks;
    checks.add(check(&router).await?);
    let (mut stale, mut stale_copies) = (0, 0);
    for s in 0..shards {
        if let (Response::Pong(st), _) = router.control(s, || Request::Ping).await? {
            stale += st.stale_lookups;
            stale_copies += st.stale_copies;
        }
    }

    let mut recs = std::mem::take(&mut *recs.lock().unwrap_or_else(PoisonError::into_inner));
    recs.sort_unstable_by_key(|r| r.start_ns);
    let windows_served = left.iter().filter(|l| l.load(Ordering::Acquire) == 0).count();
    let scored: Vec<&Rec> = recs.iter().filter(|r| r.window >= 1).collect();
    let mut lat: Vec<u64> = scored.iter().map(|r| r.latency_ns).collect();
    lat.sort_unstable();
    let first = scored.iter().map(|r| r.start_ns).min().unwrap_or(0);
    let last = scored.iter().map(|r| r.end_ns).max().unwrap_or(0);
    let wall_s = last.saturating_sub(first) as f64 / 1e9;
    let ns = scored.len().max(1) as f64;
    let us = |x: u64| x as f64 / 1e3;
    let mean = |v: &[f64]| if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 };
    Ok(CellReport {
        strategy: strategy.to_string(),
        shards,
        seed: cfg.seed,
        repeat: 0,
        load: bench.load,
        requests: recs.len() as u64,
        scored_requests: scored.len() as u64,
        windows_served,
        scored_wall_s: wall_s,
        throughput_rps: if wall_s > 0.0 { scored.len() as f64 / wall_s } else { 0.0 },
        p50_us: us(percentile(&lat, 0.50)),
        p95_us: us(percentile(&lat, 0.95)),
        p99_us: us(percentile(&lat, 0.99)),
        max_us: us(lat.last().copied().unwrap_or(0)),
        mean_us: lat.iter().map(|&x| us(x)).sum::<f64>() / ns,
        mean_fanout: scored.iter().map(|r| f64::from(r.fanout)).sum::<f64>() / ns,
        mean_epoch_lag: scored.iter().map(|r| f64::from(r.lag)).sum::<f64>() / ns,
        updates: out.updates,
        migrated_total: out.migrated.iter().sum(),
        migrated_rows: out.migrated,
        update_ms: mean(&out.update_ms),
        migration_ms: mean(&out.migration_ms),
        migration_max_ms: out.migration_ms.iter().copied().fold(0.0, f64::max),
        misses: router.counters.misses.load(Ordering::Relaxed),
        wrong_values: router.counters.wrong.load(Ordering::Relaxed),
        retries: router.counters.retries.load(Ordering::Relaxed),
        failed_requests: router.counters.failed.load(Ordering::Relaxed),
        stale_lookups: stale,
        stale_copies,
        kills: out.kills,
        kills_by_phase: out.kills_by_phase,
        kills_interrupting: out.kills_interrupting,
        torn_bytes: cluster.torn_bytes(),
        checks: checks.runs,
        lost_rows: checks.lost,
        wrong_at_rest: checks.wrong,
        stray_rows: checks.stray,
        source_missing: out.source_missing,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's nice value, from `/proc/thread-self/stat` (field 19; the command name in
    /// parentheses may hold spaces, so fields are counted after its closing parenthesis).
    #[cfg(target_os = "linux")]
    fn own_nice() -> i64 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_else(|e| panic!("{e}"));
        let after = &stat[stat.rfind(')').unwrap_or_else(|| panic!("no command name in {stat}")) + 2..];
        // After the name: state (field 3) … nice (field 19).
        after.split_whitespace().nth(16).and_then(|x| x.parse().ok()).unwrap_or_else(|| panic!("stat {stat}"))
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_low_priority_controller_runs_at_nice_19_and_normal_leaves_it() {
        let (normal, low) = std::thread::spawn(|| {
            let before = own_nice();
            ControllerPriority::Normal.apply().unwrap_or_else(|e| panic!("{e}"));
            let normal = own_nice();
            assert_eq!(normal, before);
            ControllerPriority::Low.apply().unwrap_or_else(|e| panic!("{e}"));
            (normal, own_nice())
        })
        .join()
        .unwrap_or_else(|_| panic!("the thread panicked"));
        assert_eq!(low, 19, "normal was {normal}");
        // Only that thread was lowered.
        assert_eq!(own_nice(), normal);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.50), 50);
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&v, 1.0), 100);
        assert_eq!(percentile(&[7], 0.99), 7);
        assert_eq!(percentile(&[], 0.5), 0);
        // With fewer than 100 requests the 99th percentile is the largest, not an interpolation.
        assert_eq!(percentile(&[1, 2, 3], 0.99), 3);
    }
}
