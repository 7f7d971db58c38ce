//! ALIS: light incremental sharding plus aggregate based sharding; without history (β = 0) the light
//! incremental step alone (`alis-base`).

use std::collections::VecDeque;
use std::ops::Range;

use rand::SeedableRng;
use rand::rngs::ChaCha8Rng;

use super::baselines::{Scope, relabel, requests_partition_input, scope_partition_input};
use super::{Scored, Strategy, StrategyConfig};
use crate::AlisError;
use crate::partition::{Hypergraph, UNASSIGNED, partition, polish, vcycle};
use crate::placement::{Placement, hash_shard};
use crate::stream::Stream;
use crate::weights::SparseWeights;

/// ALIS: light incremental sharding (iterative partition of the newest `incr_ratio` of the window, warm-
/// started from the deployed placement, accumulated into the sparse W) plus aggregate based sharding (a soft
/// vote of the current and the last `history_sets` interim shard sets, weighted by `decay^age / C` where C is
/// the set's fanout on the held-out part of the latest window, mixed in with weight β). With β = 0 or no
/// history it is plain light incremental (`alis-base`).
pub(super) struct AlisStrategy {
    name: &'static str,
    cfg: StrategyConfig,
    placement: Placement,
    weights: SparseWeights,
    rng: ChaCha8Rng,
    /// Interim shard set: argmax W per row (the light-incremental result before aggregation).
    interim: Vec<u16>,
    /// Undo logs of `interim`, newest first: the rows each update changed with their previous interim
    /// shard, and the number of rows known before that update.
    undo: VecDeque<(usize, Vec<(u32, u16)>)>,
    /// Which rows the latest window touched, and when each row was last touched.
    index: WindowIndex,
    /// The previous windows (request ranges), newest first, at most `history_windows`.
    past: VecDeque<Range<usize>>,
    /// The first request of each of the last `global_windows` windows, the latest included, oldest first
    /// (empty when the global step is off or reads all history).
    starts: VecDeque<usize>,
}

/// The voting shard sets on the `D_new` rows, one column per set, youngest first: set `i` votes
/// `sets[i].0` for shard `shards[i · n + l]` of local row `l` if the row was known to it (global row
/// `< sets[i].1`).
struct Votes {
    n: usize,
    shards: Vec<u16>,
    sets: Vec<(f64, usize)>,
}

impl Votes {
    fn with_capacity(n: usize, sets: usize) -> Self {
        Votes { n, shards: Vec::with_capacity(n * sets), sets: Vec::with_capacity(sets) }
    }

    /// Adds a set: its shards for the `D_new` rows, its vote weight, and the rows it knew.
    fn push(&mut self, shards: &[u16], weight: f64, known: usize) {
        self.shards.extend_from_slice(&shards[..self.n]);
        self.sets.push((weight, known));
    }

    /// The votes of local row `l` (global `row`) per shard, summed over the sets in order, into `out`.
    fn of(&self, l: usize, row: u32, out: &mut Vec<(u16, f64)>) {
        out.clear();
        for (i, &(weight, known)) in self.sets.iter().enumerate() {
            if (row as usize) < known {
                let shard = self.shards[i * self.n + l];
                match out.iter_mut().find(|x| x.0 == shard) {
                    Some(x) => x.1 += weight,
                    None => out.push((shard, weight)),
                }
            }
        }
    }
}

/// The latest window in local ids: rows of `D_new` first (`0..n_new_rows`), then the window's other rows.
struct LocalWindow {
    rows: Vec<u32>,
    n_new_rows: usize,
    /// Requests of `D_new` (local ids), flat: request `q` is `new_pins[new_offsets[q]..new_offsets[q + 1]]`.
    new_offsets: Vec<usize>,
    new_pins: Vec<u32>,
    /// Requests used to score shard sets: the window minus `D_new` (all of it when `D_new` is the whole window).
    holdout_offsets: Vec<usize>,
    holdout_pins: Vec<u32>,
}

/// Per-row window bookkeeping of ALIS, dense over all known rows (8 bytes per row): the last update whose
/// window touched the row (`0` = none yet), and the row's local id in that window. A row is in the current
/// window exactly when its stamp is the current update's, so nothing is reset between updates.
#[derive(Debug, Default)]
struct WindowIndex {
    seen: Vec<u32>,
    local: Vec<u32>,
    /// The current update, counted from 1.
    now: u32,
}

impl WindowIndex {
    /// Starts a new update over `rows` known rows.
    fn next_update(&mut self, rows: usize) {
        self.now += 1;
        if self.seen.len() < rows {
            self.seen.resize(rows, 0);
            self.local.resize(rows, 0);
        }
    }

    /// Local id of `row` in the current window; a row met for the first time in this window gets the next id
    /// and is appended to `rows` (the window's rows in local-id order).
    fn intern(&mut self, row: u32, rows: &mut Vec<u32>) -> u32 {
        let i = row as usize;
        if self.seen[i] != self.now {
            self.seen[i] = self.now;
            self.local[i] = rows.len() as u32;
            rows.push(row);
        }
        self.local[i]
    }

    /// Local id of `row` in the current window, if the window touches it.
    fn local_of(&self, row: u32) -> Option<u32> {
        (self.seen.get(row as usize) == Some(&self.now)).then(|| self.local[row as usize])
    }

    fn heap_bytes(&self) -> usize {
        (self.seen.capacity() + self.local.capacity()) * 4
    }
}

impl LocalWindow {
    /// Reads the requests `d_new` (ranges of request indices) and the held-out requests `holdout`, and stamps
    /// their rows in `index` (which must cover every row they touch).
    fn new(stream: &Stream, d_new: &[Range<usize>], holdout: Range<usize>, index: &mut WindowIndex) -> Self {
        let pins = |r: &Range<usize>| r.clone().map(|i| stream.request(i).len()).sum::<usize>();
        let new_pins: usize = d_new.iter().map(pins).sum();
        let new_requests: usize = d_new.iter().map(Range::len).sum();
        let holdout_pins = pins(&holdout);
        let mut lw = LocalWindow {
            rows: Vec::with_capacity(new_pins + holdout_pins),
            n_new_rows: 0,
            new_offsets: Vec::with_capacity(new_requests + 1),
            new_pins: Vec::with_capacity(new_pins),
            holdout_offsets: Vec::with_capacity(holdout.len() + 1),
            holdout_pins: Vec::with_capacity(holdout_pins),
        };
        lw.new_offsets.push(0);
        lw.holdout_offsets.push(0);
        for i in d_new.iter().flat_map(Clone::clone) {
            for &r in stream.request(i) {
                let l = index.intern(r, &mut lw.rows);
                lw.new_pins.push(l);
            }
            lw.new_offsets.push(lw.new_pins.len());
        }
        lw.n_new_rows = lw.rows.len();
        for i in holdout {
            for &r in stream.request(i) {
                let l = index.intern(r, &mut lw.rows);
                lw.holdout_pins.push(l);
            }
            lw.holdout_offsets.push(lw.holdout_pins.len());
        }
        lw
    }

    /// Mean fanout of the held-out requests when local row `l` is on `shard[l]`.
    /// `stamp` is scratch of one entry per shard; a shard counts once per request when its stamp is not yet the
    /// request's, so the cost is O(pins) whatever S.
    fn holdout_fanout(&self, shard: &[u16], stamp: &mut [u32]) -> f64 {
        stamp.fill(0);
        let mut total = 0usize;
        let n = self.holdout_offsets.len() - 1;
        for q in 0..n {
            let mark = q as u32 + 1;
            for &l in &self.holdout_pins[self.holdout_offsets[q]..self.holdout_offsets[q + 1]] {
                let s = &mut stamp[usize::from(shard[l as usize])];
                if *s != mark {
                    *s = mark;
                    total += 1;
                }
            }
        }
        (total as f64 / n.max(1) as f64).max(1.0)
    }
}

impl AlisStrategy {
    pub(super) fn new(cfg: StrategyConfig, name: &'static str) -> Result<Self, AlisError> {
        cfg.validate()?;
        Ok(AlisStrategy {
            name,
            cfg,
            placement: Placement::new(cfg.shards, cfg.epsilon),
            weights: SparseWeights::new(cfg.top_k, cfg.decay)?,
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            interim: Vec::new(),
            undo: VecDeque::new(),
            index: WindowIndex::default(),
            past: VecDeque::new(),
            starts: VecDeque::new(),
        })
    }

    /// The first update, before which nothing is placed: a fresh partition of the whole window, as `direct`
    /// deploys it (its shards renamed to keep most rows at their hash shard), becomes the placement, the first
    /// interim set and the first evidence in W (weight 1 per row on its shard). The light incremental step alone
    /// would start from the hash placement and partition only `D_new`, leaving the rest of the window where hash
    /// put it.
    fn first_update(&mut self, stream: &Stream, window: Range<usize>) -> Result<(), AlisError> {
        let rows = self.begin_whole_window(stream, &window);
        let (hg, params) = scope_partition_input(stream, Scope::Latest, window, &self.cfg)?;
        let (part, _) = partition(&hg, &vec![UNASSIGNED; rows], &params, &mut self.rng)?;
        let part = relabel(&part, self.placement.as_slice(), self.cfg.shards);
        self.start_history(part);
        Ok(())
    }

    /// The global step (every `global_every` updates, in place of the light step): a V-cycle across shards
    /// of the deployed placement on the requests of the last `global_windows` windows (all so far with 0).
    /// The light step's warm start clusters rows within a shard; the V-cycle also moves as one a group the
    /// placement splits, which is what a fresh partition of all history gains over it.
    /// Its placement is deployed as is (shards keep their names) and starts a new history, as the first
    /// update's partition does: the earlier interim sets stop voting.
    fn global_update(&mut self, stream: &Stream, window: Range<usize>) -> Result<(), AlisError> {
        self.begin_whole_window(stream, &window);
        let first = if self.cfg.global_windows == 0 { 0 } else { self.starts.front().copied().unwrap_or(0) };
        let (hg, params) = requests_partition_input(stream, first..window.end, window.end, &self.cfg)?;
        let (part, _) = vcycle(&hg, self.placement.as_slice(), &params, &mut self.rng)?;
        self.start_history(part);
        Ok(())
    }

    /// Starts an update that reads the whole `window` (the first one, or a global step): every row known after
    /// it placed (new rows at their hash shard) and weighted, the window's rows stamped as touched by this
    /// update (the recency cold rows are evicted by), the window remembered. Returns the rows known.
    fn begin_whole_window(&mut self, stream: &Stream, window: &Range<usize>) -> usize {
        let rows = stream.rows_known_after(window.end);
        self.placement.grow_hash(stream, rows);
        self.weights.ensure_rows(rows);
        self.index.next_update(rows);
        LocalWindow::new(stream, std::slice::from_ref(window), window.clone(), &mut self.index);
        self.remember(window.clone());
        rows
    }

    /// Deploys `part` (a shard for every known row) as a fresh start: the first interim set, with weight 1
    /// per row on its shard in W (older evidence aged), and no older set to vote.
    fn start_history(&mut self, part: Vec<u16>) {
        self.placement.set_all(part);
        self.weights.age();
        for (r, &s) in self.placement.as_slice().iter().enumerate() {
            self.weights.add(r as u32, s, 1.0);
        }
        if self.cfg.history_sets > 0 {
            self.interim = self.placement.as_slice().to_vec();
            self.undo.push_front((0, Vec::new()));
            self.undo.truncate(self.cfg.history_sets.saturating_sub(1));
        }
    }

    /// Keeps `window` as the newest of the previous windows the light step reads (at most `history_windows`)
    /// and, with the global step on, its start among the windows the global step reads.
    fn remember(&mut self, window: Range<usize>) {
        if self.cfg.global_every > 0 && self.cfg.global_windows > 0 {
            self.starts.push_back(window.start);
            if self.starts.len() > self.cfg.global_windows {
                self.starts.pop_front();
            }
        }
        if self.cfg.history_windows > 0 {
            self.past.push_front(window);
            self.past.truncate(self.cfg.history_windows);
        }
    }

    /// Argmax of W for `row` (ties to the lower shard), if the row has weight.
    fn w_argmax(&self, row: u32) -> Option<u16> {
        let mut best: Option<(u16, f64)> = None;
        for (s, w) in self.weights.row(row) {
            if best.is_none_or(|(bs, bw)| w > bw || (w == bw && s < bs)) {
                best = Some((s, w));
            }
        }
        best.map(|b| b.0)
    }

    /// Moves `excess[s]` cold rows (rows the latest window did not touch) off every overflowing shard `s`: the
    /// least recently touched first (ties by row), each to the least loaded shard. The rows were set aside
    /// and not taken back, so they are counted nowhere until re-inserted. One sequential pass over the
    /// placement, only when some shard overflows.
    fn evict(&mut self, excess: &[usize]) {
        if excess.iter().all(|&e| e == 0) {
            return;
        }
        let mut candidates: Vec<Vec<(u32, u32)>> = vec![Vec::new(); excess.len()];
        let now = self.index.now;
        for (r, (&s, &seen)) in self.placement.as_slice().iter().zip(&self.index.seen).enumerate() {
            if seen != now && excess[s as usize] > 0 {
                candidates[s as usize].push((seen, r as u32));
            }
        }
        let mut out: Vec<(u32, u32)> = Vec::new();
        for (c, &e) in candidates.iter_mut().zip(excess) {
            if e > 0 && e < c.len() {
                c.select_nth_unstable(e);
            }
            out.extend_from_slice(&c[..e.min(c.len())]);
        }
        out.sort_unstable();
        for (_, r) in out {
            self.placement.relocate(r);
        }
    }

    /// Rows per shard, not counting `rows` (distinct, all placed).
    fn loads_without(&self, rows: &[u32]) -> Vec<usize> {
        let mut loads = self.placement.loads().to_vec();
        for &r in rows {
            loads[self.placement.as_slice()[r as usize] as usize] -= 1;
        }
        loads
    }

    /// `polish`: label propagation from the placement the vote made, over the requests the update read
    /// (`D_new` and the previous windows, as the light step) and the window's held-out part (the vote has
    /// scored its sets on it by now); every row of those requests may move, each shard's room the cap minus
    /// the rows outside them on it.
    fn polish(&mut self, lw: &LocalWindow, holdout_separate: bool, cap: usize) -> Result<(), AlisError> {
        let held_out = holdout_separate.then_some((&lw.holdout_offsets, &lw.holdout_pins));
        let nets = lw.new_offsets.windows(2).map(|w| &lw.new_pins[w[0]..w[1]]);
        let nets = nets.chain(held_out.into_iter().flat_map(|(off, pins)| off.windows(2).map(|w| &pins[w[0]..w[1]])));
        let hg = Hypergraph::new(lw.rows.len(), nets)?;
        let at = self.placement.as_slice();
        let init: Vec<u16> = lw.rows.iter().map(|&r| at[r as usize]).collect();
        let others = self.loads_without(&lw.rows);
        let params = self.cfg.partition_params(others.iter().map(|&o| cap.saturating_sub(o)).collect());
        let (polished, _) = polish(&hg, &init, &params, &mut self.rng)?;
        self.placement.reassign(&lw.rows, &polished);
        Ok(())
    }

    /// Soft votes for the `D_new` rows (local ids `0..n_new_rows`) from the current interim set (age 0) and the
    /// previous `history_sets` interim sets (age `a` as it was `a` updates ago); each set votes
    /// `decay^age / C`. Rows unknown to an old set (discovered later) get no vote from it.
    /// `interim_new[l]` is argmax W of `D_new` row `l` after this update's ΔW.
    fn votes(&self, stream: &Stream, lw: &LocalWindow, interim_new: &[u16]) -> Votes {
        let s_count = self.cfg.shards;
        let known_now = self.interim.len();
        let stride = self.cfg.history_sets + 1;
        let mut votes = Votes::with_capacity(lw.n_new_rows, stride);
        // Age 1: the interim before this update (rows unknown then are served by hash).
        let mut cur: Vec<u16> = lw
            .rows
            .iter()
            .map(|&r| self.interim.get(r as usize).copied().unwrap_or_else(|| hash_shard(stream, r, s_count)))
            .collect();
        // Age 0: this update's interim (argmax W for `D_new` rows, unchanged elsewhere).
        let mut now = cur.clone();
        now[..lw.n_new_rows].copy_from_slice(interim_new);
        let mut stamp = vec![0u32; s_count];
        votes.push(&now, 1.0 / lw.holdout_fanout(&now, &mut stamp), usize::MAX);
        // The window's rows that some older set did not know yet, newest first, with their hash shard: an
        // older set serves them by hash. Computed once rather than per set.
        let oldest_known = self.undo.iter().map(|u| u.0).min();
        let mut fresh: Vec<(u32, u32, u16)> = match oldest_known {
            Some(k) => lw
                .rows
                .iter()
                .enumerate()
                .filter(|&(_, &r)| r as usize >= k)
                .map(|(l, &r)| (r, l as u32, hash_shard(stream, r, s_count)))
                .collect(),
            None => Vec::new(),
        };
        fresh.sort_unstable_by_key(|x| std::cmp::Reverse(x.0));
        let mut known = known_now;
        let mut decay = 1.0;
        for age in 1..=self.cfg.history_sets {
            if age > 1 {
                let Some((known_before, log)) = self.undo.get(age - 2) else {
                    break;
                };
                for &(row, old) in log {
                    if let Some(l) = self.index.local_of(row) {
                        cur[l as usize] = old;
                    }
                }
                known = *known_before;
                for &(_, l, h) in fresh.iter().take_while(|x| x.0 as usize >= known) {
                    cur[l as usize] = h;
                }
            }
            if known == 0 {
                break;
            }
            decay *= self.cfg.decay;
            votes.push(&cur, decay / lw.holdout_fanout(&cur, &mut stamp), known);
        }
        votes
    }
}

impl Strategy for AlisStrategy {
    fn name(&self) -> &'static str {
        self.name
    }

    fn update(&mut self, stream: &Stream, window: Range<usize>) -> Result<(), AlisError> {
        let known_before = self.placement.len();
        if known_before == 0 {
            return self.first_update(stream, window);
        }
        // `index.now` counts the updates before this one.
        if self.cfg.global_every > 0 && (self.index.now as usize + 1).is_multiple_of(self.cfg.global_every) {
            return self.global_update(stream, window);
        }
        let rows = stream.rows_known_after(window.end);
        self.placement.grow_hash(stream, rows);
        self.weights.ensure_rows(rows);
        let n_new = ((window.len() as f64 * self.cfg.incr_ratio).ceil() as usize).clamp(1, window.len().max(1));
        let d_new = window.end.saturating_sub(n_new).max(window.start)..window.end;
        self.index.next_update(rows);
        // The held-out part of the window scores the voting sets; with `incr_ratio` 1 it is the whole window.
        let holdout_separate = d_new.start > window.start;
        let holdout = if holdout_separate { window.start..d_new.start } else { window.clone() };
        // The light step partitions `D_new` and, with `history_windows`, the previous windows' requests.
        let mut parts: Vec<Range<usize>> = vec![d_new];
        parts.extend(self.past.iter().cloned());
        self.remember(window.clone());
        let lw = LocalWindow::new(stream, &parts, holdout, &mut self.index);
        let n_local = lw.n_new_rows;
        // Warm start from the deployed placement; rows first seen in this update start unassigned.
        let init: Vec<u16> = lw.rows[..n_local]
            .iter()
            .map(|&r| if (r as usize) < known_before { self.placement.as_slice()[r as usize] } else { UNASSIGNED })
            .collect();
        let hg = Hypergraph::new(n_local, lw.new_offsets.windows(2).map(|w| &lw.new_pins[w[0]..w[1]]))?;
        // The local partition may use what the global cap leaves each shard once the rows it does not move are
        // counted where they are: the real constraint, rather than balancing the window on its own. With
        // `evict_cold`, only the window's other rows count; rows the window does not touch (cold rows) give
        // way and are moved out afterwards where their shard overflows.
        let cap = self.placement.cap();
        let mut fixed = self.loads_without(&lw.rows[..n_local]);
        let mut cold = vec![0usize; self.cfg.shards];
        if self.cfg.evict_cold {
            cold.clone_from(&fixed);
            for &r in &lw.rows[n_local..] {
                cold[self.placement.as_slice()[r as usize] as usize] -= 1;
            }
            for (f, c) in fixed.iter_mut().zip(&cold) {
                *f -= c;
            }
        }
        let params = self.cfg.partition_params(fixed.iter().map(|&f| cap.saturating_sub(f)).collect());
        let (local, _) = partition(&hg, &init, &params, &mut self.rng)?;
        // ΔW = 1 on the local result; older evidence decays by `decay` per window.
        self.weights.age();
        for (l, &r) in lw.rows[..n_local].iter().enumerate() {
            self.weights.add(r, local[l], 1.0);
        }
        // This update's interim set on `D_new` (every row of it just got weight, so W has an argmax), and the
        // votes of the history sets.
        let (interim_new, votes) = if self.cfg.history_sets > 0 {
            let interim: Vec<u16> =
                lw.rows[..n_local].iter().zip(&local).map(|(&r, &s)| self.w_argmax(r).unwrap_or(s)).collect();
            let votes = self.votes(stream, &lw, &interim);
            (interim, Some(votes))
        } else {
            (Vec::new(), None)
        };
        let beta = self.cfg.beta;
        let per_row = self.cfg.top_k + self.cfg.history_sets + 1;
        let mut scored = Scored::with_capacity(n_local, per_row);
        let mut sc: Vec<(u16, f64)> = Vec::with_capacity(per_row);
        let mut v: Vec<(u16, f64)> = Vec::with_capacity(self.cfg.history_sets + 1);
        for (l, &r) in lw.rows[..n_local].iter().enumerate() {
            sc.clear();
            sc.extend(self.weights.row(r));
            let w_sum: f64 = sc.iter().map(|x| x.1).sum();
            for x in &mut sc {
                x.1 = (1.0 - beta) * (x.1 / w_sum);
            }
            if let Some(votes) = votes.as_ref() {
                votes.of(l, r, &mut v);
            }
            if !v.is_empty() {
                let v_sum: f64 = v.iter().map(|x| x.1).sum();
                for &(s, w) in &v {
                    let add = beta * (w / v_sum);
                    match sc.iter_mut().find(|x| x.0 == s) {
                        Some(x) => x.1 += add,
                        None => sc.push((s, add)),
                    }
                }
            }
            scored.push(r, &mut sc);
        }
        self.placement.set_aside(&cold);
        scored.place(&mut self.placement);
        let excess = self.placement.take_back(&cold);
        self.evict(&excess);
        // Commit this update's interim set (argmax W of the rows just partitioned) and log what it replaced.
        // Rows first known in this update enter it where the vote placed them: before any polish, so that
        // the polish never changes what later votes see.
        if self.cfg.history_sets > 0 {
            let old_len = self.interim.len();
            self.interim.extend_from_slice(&self.placement.as_slice()[old_len..rows]);
            let mut log = Vec::new();
            for (&r, &s) in lw.rows[..n_local].iter().zip(&interim_new) {
                let old = self.interim[r as usize];
                if old != s {
                    self.interim[r as usize] = s;
                    log.push((r, old));
                }
            }
            self.undo.push_front((old_len, log));
            self.undo.truncate(self.cfg.history_sets.saturating_sub(1));
        }
        if self.cfg.polish && votes.is_some() && beta > 0.0 {
            self.polish(&lw, holdout_separate, cap)?;
        }
        Ok(())
    }

    fn placement(&self) -> &Placement {
        &self.placement
    }

    fn state_bytes(&self) -> usize {
        let undo: usize = self.undo.iter().map(|(_, m)| m.capacity() * 8).sum();
        self.placement.heap_bytes()
            + self.weights.heap_bytes()
            + self.interim.capacity() * 2
            + undo
            + self.index.heap_bytes()
    }
}
