//! The contention guard: a measurement taken while something else runs on the machine is thrown away
//! and taken again, or refused, never recorded.
//!
//! Two independent signals, read around every timed sample:
//! * **CPU accounting** (`/proc/stat` against `/proc/self/stat`): the share of the machine's CPU time
//!   spent by *other* processes (a build, another benchmark) and stolen by the hypervisor while the
//!   sample ran. On a two-core machine a build beside a measurement makes it up to 6× slower.
//! * **A reference kernel**: a fixed fused set (about 1 GB of weights, DRAM-bound like the sets that
//!   matter) timed right after the sample and compared with the *machine's* reference time. It catches
//!   what accounting cannot see: a neighbour on the same host competing for the last-level cache and
//!   memory bandwidth, or a slower clock. Its baseline is the median of the latest nine readings (five
//!   taken when the guard starts), so it catches a change lasting a few samples and follows the host's
//!   slow drift instead of stalling on it. Every reading is also kept with the sample
//!   (`Conditions::reference_ms`): on a shared cloud host the whole machine drifts by up to 1.6× over
//!   minutes, and the trainer and the bench can express times at one reference speed
//!   (`docs/COST_MODELS.md`, "Speed").
//!
//! Both follow the host: a host slow for minutes passes them, and its samples are kept with their
//! readings. Scaling by the reading does not undo it. Measured on the 2-vCPU EPYC host, the same 320
//! plans in two sittings: where the second sitting's reference read within 8% of the first's, a plan's
//! cost relative to its task's other plans moved by 5.1% (s.d.), the run's own noise; where it read 20–60%
//! slower, by 10–12%, cheap plans slowing more than dear ones (`docs/BENCHMARKS.md`, "A second sitting of
//! the fresh suite"). With the machine's quiet reference time (`GuardLimits::quiet_reference_ms`, a
//! profile card's `compute.reference_ms`), a reading above `max_slowdown` times it is contention too, and
//! a run does not start until the machine reads within it.
//!
//! A measurement of several rounds is also refused when its rounds ran at different speeds
//! ([`Guard::check_rounds`]: the slowest round's median reading over the fastest's, `max_drift`).
//! Before it is refused, the round farthest from the speed most rounds ran at ([`odd_round`]) is taken
//! again, as many times as there are rounds at most (`measure-plan`): a host that changes speed for
//! minutes at a time still gives a measurement whose rounds ran at one speed.
//!
//! A disturbed sample is measured again after a pause that doubles each time (1 s, 2 s, 4 s, … 30 s at
//! most, about five minutes over the default twelve tries); after `retries` the run stops with an
//! error naming the readings (a collection resumes with `--resume`). On a machine without `/proc` the accounting signal is absent and only the reference
//! kernel judges.

use std::collections::VecDeque;
use std::time::Duration;

use anyhow::{Result, bail};
use planner_core::dataset::{Conditions, median};
use planner_core::pool::dlrm_pool;
use planner_core::table::{ElementType, TableSpec};

use crate::backend::{Backend, Timing};
use crate::workload::{Bags, generate_bags};

/// CPU time counters of the whole machine and of this process, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTicks {
    /// All ticks of every CPU (user, nice, system, idle, iowait, irq, softirq, steal).
    pub total: u64,
    /// Ticks doing work (user, nice, system, irq, softirq).
    pub busy: u64,
    /// Ticks stolen by the hypervisor.
    pub steal: u64,
    /// Ticks of this process (user + system, all threads).
    pub own: u64,
}

/// Parses the aggregate `cpu` line of `/proc/stat`: (total, busy, steal).
#[must_use]
pub fn parse_proc_stat(text: &str) -> Option<(u64, u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line.split_whitespace().skip(1).take(8).map(str::parse).collect::<Result<_, _>>().ok()?;
    if v.len() < 8 {
        return None;
    }
    let total = v.iter().sum();
    let busy = v[0] + v[1] + v[2] + v[5] + v[6];
    Some((total, busy, v[7]))
}

/// Parses `/proc/self/stat`: utime + stime (fields 14 and 15), after the parenthesised command name.
#[must_use]
pub fn parse_self_stat(text: &str) -> Option<u64> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, stime field 15.
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// Reads the counters now (`None` where `/proc` is not available).
#[must_use]
pub fn cpu_ticks() -> Option<CpuTicks> {
    let (total, busy, steal) = parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?)?;
    let own = parse_self_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
    Some(CpuTicks { total, busy, steal, own })
}

/// [`usage_pct`] from `before` to now (`None` where either reading is not available).
#[must_use]
pub fn usage_since(before: Option<CpuTicks>) -> Option<(f64, f64)> {
    before.zip(cpu_ticks()).map(|(b, a)| usage_pct(b, a))
}

/// (other processes' busy share, steal share) between two readings, percent of the machine.
#[must_use]
pub fn usage_pct(before: CpuTicks, after: CpuTicks) -> (f64, f64) {
    let total = after.total.saturating_sub(before.total);
    if total == 0 {
        return (0.0, 0.0);
    }
    let busy = after.busy.saturating_sub(before.busy);
    let own = after.own.saturating_sub(before.own);
    let other = busy.saturating_sub(own);
    (100.0 * other as f64 / total as f64, 100.0 * after.steal.saturating_sub(before.steal) as f64 / total as f64)
}

/// Limits of the guard.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GuardLimits {
    /// Largest share of the machine other processes may use during a sample, percent.
    pub other_busy_pct: f64,
    /// Largest share the hypervisor may steal, percent.
    pub steal_pct: f64,
    /// Largest reference time after a sample over the baseline.
    pub reference_ratio: f64,
    /// The reference time of the machine when quiet, ms, if known.
    pub quiet_reference_ms: Option<f64>,
    /// Largest reference time over `quiet_reference_ms`.
    pub max_slowdown: f64,
    /// Measurements of one sample thrown away before the run stops.
    pub retries: u32,
    /// Largest ratio of the median reference reading of a measurement's slowest round over its fastest
    /// round's ([`Guard::check_rounds`]).
    pub max_drift: f64,
}

impl GuardLimits {
    /// Whether the CPU time other processes used (`other_pct`) and the hypervisor stole (`steal_pct`)
    /// are both within their limits.
    #[must_use]
    pub fn counters_within(&self, other_pct: f64, steal_pct: f64) -> bool {
        other_pct <= self.other_busy_pct && steal_pct <= self.steal_pct
    }

    /// Whether a reference reading shows the machine slower than `max_slowdown` times its quiet speed.
    #[must_use]
    pub fn too_slow(&self, reference_ms: f64) -> bool {
        self.quiet_reference_ms.is_some_and(|q| reference_ms > q * self.max_slowdown)
    }
}

impl Default for GuardLimits {
    fn default() -> Self {
        Self {
            other_busy_pct: 10.0,
            steal_pct: 10.0,
            reference_ratio: 1.35,
            quiet_reference_ms: None,
            max_slowdown: 1.15,
            retries: 12,
            max_drift: 1.2,
        }
    }
}

/// The reference kernel: four pool tables (fixed ids, dims 32–128, rows capped at 4 million), about
/// 1 GB of weights, and their lookups for the run's batch.
struct Reference {
    tables: Vec<TableSpec>,
    bags: Vec<Bags>,
    /// The latest readings, kept or not (at most `RECENT_READINGS`); the baseline is their median.
    recent: VecDeque<f64>,
}

impl Reference {
    fn baseline_ms(&self) -> f64 {
        median(&self.recent.iter().copied().collect::<Vec<_>>())
    }

    fn record(&mut self, ms: f64) {
        if self.recent.len() == RECENT_READINGS {
            self.recent.pop_front();
        }
        self.recent.push_back(ms);
    }
}

/// Timed runs of one reference reading (after one untimed run).
const REFERENCE_REPS: u32 = 3;
/// Readings taken when the guard starts.
const BASELINE_READINGS: usize = 5;
/// Readings the baseline is the median of: the latest ones, whether their sample was kept or not. A
/// slowdown lasting a few samples is refused; a host that drifts for minutes (seen here: 1.6× and more)
/// moves the baseline within about five readings, and every sample keeps its own reading for the
/// trainer and the judge to scale by.
const RECENT_READINGS: usize = 9;

fn reference_set(batch: u32) -> Result<(Vec<TableSpec>, Vec<Bags>)> {
    let pool = dlrm_pool()?;
    let picks = [(17usize, 128u32), (101, 64), (233, 32), (412, 64)];
    let mut tables = Vec::new();
    for (k, &(id, dim)) in picks.iter().enumerate() {
        let p = &pool[id % pool.len()];
        let mut t = p.at_dim(format!("reference{k}"), dim, ElementType::Fp32)?;
        t.rows = t.rows.min(4_000_000);
        tables.push(t);
    }
    let bags =
        tables.iter().enumerate().map(|(k, t)| generate_bags(t, batch, 0x5EF0 + k as u64)).collect::<Result<_>>()?;
    Ok((tables, bags))
}

/// Watches the machine around every measurement.
pub struct Guard {
    limits: GuardLimits,
    reference: Option<Reference>,
    /// Pause before the first re-measurement (doubles each time).
    pause: Duration,
}

/// What the guard saw around one measurement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdict {
    /// The readings.
    pub conditions: Conditions,
    /// Whether the measurement may be kept.
    pub quiet: bool,
}

impl Guard {
    /// A guard that accepts everything and records nothing (`--no-guard`).
    #[must_use]
    pub fn off() -> Self {
        Self { limits: GuardLimits { retries: 0, ..GuardLimits::default() }, reference: None, pause: Duration::ZERO }
    }

    /// Starts a guard: times the reference kernel `BASELINE_READINGS` times on `backend` at `batch`; the
    /// baseline is the median of the latest `RECENT_READINGS` readings from then on.
    pub fn start(backend: &mut dyn Backend, batch: u32, limits: GuardLimits) -> Result<Self> {
        let (tables, bags) = reference_set(batch)?;
        let mut g = Self { limits, reference: None, pause: Duration::from_secs(1) };
        let mut pause = g.pause;
        for attempt in 0..=limits.retries {
            let mut readings = Vec::with_capacity(BASELINE_READINGS);
            let before = cpu_ticks();
            for _ in 0..BASELINE_READINGS {
                readings.push(time_reference(backend, &tables, &bags)?);
            }
            let usage = usage_since(before);
            let baseline = median(&readings);
            if !limits.too_slow(baseline) {
                g.reference = Some(Reference { tables, bags, recent: readings.into() });
                return Ok(g);
            }
            if attempt == limits.retries {
                let q = limits.quiet_reference_ms.unwrap_or(baseline);
                bail!(
                    "the machine is {:.2}× slower than when quiet: the reference kernel reads {baseline:.2} ms against \
                     --guard-quiet-reference-ms = {q} (limit {:.2}×) over {} tries; a contended host changes plans' \
                     relative costs, so measure when it is quiet (or raise --guard-max-slowdown)",
                    baseline / q,
                    limits.max_slowdown,
                    attempt + 1
                );
            }
            // What else used the machine while the baseline was read (no sample has run yet: no ratio).
            let seen = usage.map(|(other_busy_pct, steal_pct)| Conditions {
                other_busy_pct,
                steal_pct,
                reference_ratio: 1.0,
                reference_ms: Some(baseline),
                retries: attempt,
            });
            if let Some(line) = waiting_notice("the run's start", &limits, seen.as_ref(), baseline, attempt, pause) {
                eprintln!("{line}");
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_secs(30));
        }
        bail!("the contention guard took no baseline")
    }

    /// The reference kernel's baseline, ms (`None` for a guard that is off).
    #[must_use]
    pub fn baseline_ms(&self) -> Option<f64> {
        self.reference.as_ref().map(Reference::baseline_ms)
    }

    /// Runs `measure` until the guard finds the machine was quiet while it ran, pausing between tries;
    /// returns its result and the conditions of the kept try. `what` names the sample in the error.
    /// `with_reference` also times the reference kernel after each try (compute samples; comm samples,
    /// which take a few milliseconds, are judged by CPU accounting alone).
    pub fn measure<T>(
        &mut self,
        backend: &mut dyn Backend,
        what: &str,
        with_reference: bool,
        mut measure: impl FnMut(&mut dyn Backend) -> Result<T>,
    ) -> Result<(T, Conditions)> {
        let mut pause = self.pause;
        for attempt in 0..=self.limits.retries {
            let before = cpu_ticks();
            let value = measure(backend)?;
            let after = cpu_ticks();
            let verdict = self.judge(backend, before, after, with_reference, attempt)?;
            if verdict.quiet || self.reference.is_none() {
                return Ok((value, verdict.conditions));
            }
            if attempt == self.limits.retries {
                let c = verdict.conditions;
                let quiet_speed = match (self.limits.quiet_reference_ms, c.reference_ms) {
                    (Some(q), Some(ms)) => {
                        format!("; {:.2}× its quiet time {q} ms, limit {:.2}×", ms / q, self.limits.max_slowdown)
                    }
                    _ => String::new(),
                };
                bail!(
                    "{what}: the machine stayed busy over {} tries (last: other processes {:.1}% of CPU time, limit {:.0}%; \
                     steal {:.1}%, limit {:.0}%; reference kernel {:.2}× its baseline, limit {:.2}×{quiet_speed}); stop what \
                     runs beside the measurement and resume",
                    attempt + 1,
                    c.other_busy_pct,
                    self.limits.other_busy_pct,
                    c.steal_pct,
                    self.limits.steal_pct,
                    c.reference_ratio,
                    self.limits.reference_ratio
                );
            }
            let c = verdict.conditions;
            let reading = c.reference_ms.unwrap_or(f64::NAN);
            if let Some(line) = waiting_notice(what, &self.limits, Some(&c), reading, attempt, pause) {
                eprintln!("{line}");
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_secs(30));
        }
        bail!("{what}: no measurement was taken")
    }

    /// Refuses a measurement of several rounds whose rounds ran at different speeds of the machine: the
    /// median reference reading of its slowest round more than `max_drift` times its fastest round's.
    /// Each sample passed the guard, whose baseline follows the host, so a host that slows down for
    /// minutes halfway through passes every sample; the rounds' medians then mix two machines, and the
    /// plans timed more often in the slow rounds' order lose. `round_readings[r]` are round `r`'s readings;
    /// a guard that is off, or fewer than two rounds with readings, passes. `what` names the measurement.
    pub fn check_rounds(&self, what: &str, round_readings: &[Vec<f64>]) -> Result<()> {
        if let Some(d) = self.drifted(round_readings) {
            bail!(
                "{what}: the machine's speed drifted between rounds: the reference kernel's median read {:.2} ms in \
                 round {} and {:.2} ms in round {} ({:.2}×, limit --guard-max-drift {:.2}×); rounds taken at two \
                 speeds do not compare plans fairly, so nothing was recorded: measure again when the host is steady",
                d.fast_ms,
                d.fast_round + 1,
                d.slow_ms,
                d.slow_round + 1,
                d.ratio,
                self.limits.max_drift
            );
        }
        Ok(())
    }

    /// The drift of a measurement's rounds ([`round_drift`]) where it is over `max_drift`, for a guard that
    /// is on; `None` where the rounds may be kept. The one rule of [`Guard::check_rounds`] and of the
    /// rounds `measure-plan` takes again.
    #[must_use]
    pub fn drifted(&self, round_readings: &[Vec<f64>]) -> Option<RoundDrift> {
        self.reference.as_ref()?;
        round_drift(round_readings).filter(|d| d.ratio > self.limits.max_drift)
    }

    fn judge(
        &mut self,
        backend: &mut dyn Backend,
        before: Option<CpuTicks>,
        after: Option<CpuTicks>,
        with_reference: bool,
        retries: u32,
    ) -> Result<Verdict> {
        let (other_busy_pct, steal_pct) = match (before, after) {
            (Some(b), Some(a)) => usage_pct(b, a),
            _ => (0.0, 0.0),
        };
        let (reference_ms, reference_ratio) = match (&mut self.reference, with_reference) {
            (Some(r), true) => {
                let ms = time_reference(backend, &r.tables, &r.bags)?;
                let ratio = ms / r.baseline_ms();
                r.record(ms);
                (Some(ms), ratio)
            }
            _ => (None, 1.0),
        };
        let conditions = Conditions { other_busy_pct, steal_pct, reference_ratio, reference_ms, retries };
        let l = self.limits;
        let quiet = l.counters_within(other_busy_pct, steal_pct)
            && reference_ratio <= l.reference_ratio
            && !reference_ms.is_some_and(|ms| l.too_slow(ms));
        Ok(Verdict { conditions, quiet })
    }
}

/// Pauses shorter than this pass without a word: a host that is busy for a second or two is the
/// guard's everyday work, and a line per retry would drown the run's output.
const NOTICE_PAUSE: Duration = Duration::from_secs(4);

/// The line the guard prints before pausing `pause` after try `attempt` (0-based) of `what` was
/// refused, or `None` for a pause under [`NOTICE_PAUSE`]. Printed under `--quiet` too (it is not
/// progress): a run the guard holds for minutes otherwise looks hung. `conditions` are the refused
/// sample's readings, or at the run's start the CPU counters around the baseline's readings (`None`
/// where `/proc` is not available); when they show neither other processes nor steal over their limits,
/// the line says that the slowdown comes from outside the machine;
/// `reference_ms` is the reading that was judged (NaN where none was taken).
fn waiting_notice(
    what: &str,
    limits: &GuardLimits,
    conditions: Option<&Conditions>,
    reference_ms: f64,
    attempt: u32,
    pause: Duration,
) -> Option<String> {
    if pause < NOTICE_PAUSE {
        return None;
    }
    let mut why = Vec::new();
    if let Some(c) = conditions {
        if c.other_busy_pct > limits.other_busy_pct {
            why.push(format!(
                "other processes {:.1}% of CPU time (limit {:.0}%)",
                c.other_busy_pct, limits.other_busy_pct
            ));
        }
        if c.steal_pct > limits.steal_pct {
            why.push(format!("steal {:.1}% (limit {:.0}%)", c.steal_pct, limits.steal_pct));
        }
        if c.reference_ratio > limits.reference_ratio {
            why.push(format!(
                "reference kernel {:.2}× its baseline (limit {:.2}×)",
                c.reference_ratio, limits.reference_ratio
            ));
        }
    }
    if let Some(q) = limits.quiet_reference_ms
        && limits.too_slow(reference_ms)
    {
        why.push(format!(
            "reference kernel {reference_ms:.2} ms, {:.2}× the quiet {q} ms (limit {:.2}×)",
            reference_ms / q,
            limits.max_slowdown
        ));
    }
    if why.is_empty() {
        why.push("disturbed".into());
    } else if let Some(c) = conditions
        && limits.counters_within(c.other_busy_pct, c.steal_pct)
    {
        // Only the reference kernel is slow: say that nothing here can be stopped to cure it.
        why.push(format!("the slowdown is from {FROM_OUTSIDE}"));
    }
    Some(format!(
        "contention guard: {what}: {}; waiting {} s (try {} of {})",
        why.join("; "),
        pause.as_secs(),
        attempt + 1,
        limits.retries + 1
    ))
}

/// `n` readings of the reference kernel on `backend` at `batch`, one after another: how the machine
/// reads before a long measurement is started on it (`shardplan-collect steady`).
pub fn reference_readings(backend: &mut dyn Backend, batch: u32, n: usize) -> Result<Vec<f64>> {
    let (tables, bags) = reference_set(batch)?;
    (0..n).map(|_| time_reference(backend, &tables, &bags)).collect()
}

/// Whether `readings` of the reference kernel, taken one after another, show a machine steady enough to
/// measure on under `limits`: the lines to print and the verdict. Unsteady when the slowest reading is
/// more than `max_drift` times the fastest (rounds of a measurement taken at such speeds would be refused
/// by [`Guard::check_rounds`]), or, with a quiet time, when the median reads over `max_slowdown` times it
/// (the guard would not start). Fewer than two readings are refused by the caller. `usage` is the share
/// of the machine's CPU time other processes used and the hypervisor stole while the readings were
/// taken ([`usage_pct`]; `None` where `/proc` is not available): a machine found unsteady or slow is told
/// whether something on it ran beside the readings or the slowdown came from outside it.
#[must_use]
pub fn steadiness(readings: &[f64], limits: &GuardLimits, usage: Option<(f64, f64)>) -> (Vec<String>, bool) {
    let fast = readings.iter().copied().fold(f64::INFINITY, f64::min);
    let slow = readings.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let med = median(readings);
    let spread = slow / fast;
    let mut lines = vec![
        format!(
            "reference kernel, {} readings, ms: {}",
            readings.len(),
            readings.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(" ")
        ),
        format!("median {med:.2} ms, fastest {fast:.2}, slowest {slow:.2} ({spread:.2}×)"),
    ];
    let mut steady = true;
    if spread > limits.max_drift {
        steady = false;
        lines.push(format!(
            "unsteady: the slowest reading is {spread:.2}× the fastest (limit --guard-max-drift {:.2}×); rounds \
             taken across such moments are refused by the drift check",
            limits.max_drift
        ));
    }
    if let Some(q) = limits.quiet_reference_ms {
        let within = readings.iter().filter(|&&r| !limits.too_slow(r)).count();
        lines.push(format!(
            "{within} of {} readings within {:.2}× the quiet {q} ms (median {:.2}×)",
            readings.len(),
            limits.max_slowdown,
            med / q
        ));
        if limits.too_slow(med) {
            steady = false;
            lines.push(format!(
                "too slow: the median reads {:.2}× the quiet time (limit --guard-max-slowdown {:.2}×); the guard \
                 waits before every task",
                med / q,
                limits.max_slowdown
            ));
        }
    }
    if let Some((other, steal)) = usage {
        lines.push(format!("while reading: other processes {other:.1}% of the CPU time, steal {steal:.1}%"));
        if !steady {
            lines.push(slowdown_cause(other, steal, limits));
        }
    }
    if steady {
        lines.push("steady: a measurement started now passes the guard's speed checks".into());
    }
    (lines, steady)
}

/// Where the change of speed of an unsteady or slow machine came from, from the CPU time other processes used
/// (`other`, percent) and the hypervisor stole (`steal`) while the reference kernel was read.
fn slowdown_cause(other: f64, steal: f64, limits: &GuardLimits) -> String {
    if other > limits.other_busy_pct {
        format!(
            "cause: other processes used {other:.1}% of the CPU time (limit {:.0}%): stop what runs beside the \
             measurement",
            limits.other_busy_pct
        )
    } else if steal > limits.steal_pct {
        format!(
            "cause: the hypervisor stole {steal:.1}% of the CPU time (limit {:.0}%): the host is oversubscribed; \
             wait, or measure on another machine",
            limits.steal_pct
        )
    } else {
        format!(
            "cause: {FROM_OUTSIDE} (other machines on the host share its memory and caches, out of this one's \
             sight); stopping nothing here helps: wait until `steady` passes, or measure on another machine"
        )
    }
}

/// What a slow or unsteady reference kernel means when neither other processes nor steal explain it.
const FROM_OUTSIDE: &str = "outside this machine: nothing else ran here and nothing was stolen";

/// How far a measurement's rounds drifted ([`round_drift`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoundDrift {
    /// The slowest round's median reading over the fastest round's.
    pub ratio: f64,
    /// The fastest round (0-based).
    pub fast_round: usize,
    /// The fastest round's median reading, ms.
    pub fast_ms: f64,
    /// The slowest round (0-based).
    pub slow_round: usize,
    /// The slowest round's median reading, ms.
    pub slow_ms: f64,
}

/// Every round's median reading, by round (rounds without readings are left out); `None` with fewer than
/// two rounds to compare or a reading that is not a positive time. What [`round_drift`] and
/// [`odd_round`] compare.
fn round_medians(round_readings: &[Vec<f64>]) -> Option<Vec<(usize, f64)>> {
    let medians: Vec<(usize, f64)> =
        round_readings.iter().enumerate().filter(|(_, r)| !r.is_empty()).map(|(i, r)| (i, median(r))).collect();
    (medians.len() >= 2 && medians.iter().all(|&(_, m)| m.is_finite() && m > 0.0)).then_some(medians)
}

/// The drift between the rounds of one measurement, from each round's reference readings (rounds
/// without readings are left out); `None` with fewer than two rounds to compare or a reading that is not
/// a positive time.
#[must_use]
pub fn round_drift(round_readings: &[Vec<f64>]) -> Option<RoundDrift> {
    let medians = round_medians(round_readings)?;
    let (fast_round, fast_ms) = *medians.iter().min_by(|a, b| a.1.total_cmp(&b.1))?;
    let (slow_round, slow_ms) = *medians.iter().max_by(|a, b| a.1.total_cmp(&b.1))?;
    Some(RoundDrift { ratio: slow_ms / fast_ms, fast_round, fast_ms, slow_round, slow_ms })
}

/// The round of a drifted measurement to take again: the one whose median reading is farthest, by ratio,
/// from the median of the rounds' medians (the speed most rounds ran at); ties to the earlier round.
/// `None` where [`round_drift`] has nothing to compare.
#[must_use]
pub fn odd_round(round_readings: &[Vec<f64>]) -> Option<usize> {
    let medians = round_medians(round_readings)?;
    let centre = median(&medians.iter().map(|m| m.1).collect::<Vec<_>>());
    let mut odd: Option<(usize, f64)> = None;
    for &(round, m) in &medians {
        let far = (m / centre).ln().abs();
        if odd.is_none_or(|(_, f)| far > f) {
            odd = Some((round, far));
        }
    }
    odd.map(|(round, _)| round)
}

/// One reading of the reference kernel: the median of `REFERENCE_REPS` timed runs, ms.
fn time_reference(backend: &mut dyn Backend, tables: &[TableSpec], bags: &[Bags]) -> Result<f64> {
    let times = backend.compute(0, tables, bags.to_vec(), 0, Timing { warmup: 1, reps: REFERENCE_REPS })?;
    let total: Vec<f64> = times.fwd_ms.iter().zip(&times.bwd_ms).map(|(f, b)| f + b).collect();
    Ok(median(&total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_and_self_stat_parse() {
        let stat = "cpu  100 5 50 800 10 3 2 7 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        assert_eq!(parse_proc_stat(stat), Some((977, 160, 7)));
        assert_eq!(parse_proc_stat("intr 1 2 3\n"), None);
        // The command name may hold spaces and parentheses; fields are counted after the last ')'.
        let me = "4242 (a (weird) name) R 1 2 3 4 5 6 7 8 9 10 31 12 0 0 20 0 1 0";
        assert_eq!(parse_self_stat(me), Some(43));
        assert_eq!(parse_self_stat("garbage"), None);
    }

    #[test]
    fn usage_counts_only_other_processes() {
        let a = CpuTicks { total: 1000, busy: 300, steal: 10, own: 200 };
        let b = CpuTicks { total: 1200, busy: 450, steal: 20, own: 300 };
        // 150 busy ticks of 200, 100 of them ours: other processes 25%, steal 5%.
        let (other, steal) = usage_pct(a, b);
        assert!((other - 25.0).abs() < 1e-9 && (steal - 5.0).abs() < 1e-9, "{other} {steal}");
        assert_eq!(usage_pct(a, a), (0.0, 0.0));
    }

    #[test]
    fn round_drift_compares_the_rounds_medians() {
        // Round 2 reads a fifth slower than round 0 at the median; its one fast reading does not hide it.
        let rounds = vec![vec![10.0, 10.2, 9.9], vec![], vec![12.0, 12.3, 9.0], vec![10.5, 10.4, 10.6]];
        let d = round_drift(&rounds).unwrap();
        assert_eq!((d.fast_round, d.slow_round), (0, 2));
        assert!((d.ratio - 1.2).abs() < 1e-12, "{d:?}");
        assert_eq!(round_drift(&rounds[..2]), None, "one round with readings has nothing to compare");
        assert_eq!(round_drift(&[vec![1.0], vec![f64::NAN]]), None);
        // A guard that is off passes anything; the limit is the ratio.
        let off = Guard::off();
        assert!(off.check_rounds("t", &rounds).is_ok());
        let mut on = Guard::off();
        on.reference = Some(Reference { tables: Vec::new(), bags: Vec::new(), recent: VecDeque::from([10.0]) });
        on.limits.max_drift = 1.25;
        assert!(on.check_rounds("t", &rounds).is_ok());
        on.limits.max_drift = 1.15;
        let e = on.check_rounds("task 3", &rounds).unwrap_err().to_string();
        assert!(e.contains("task 3") && e.contains("round 1") && e.contains("round 3") && e.contains("1.20×"), "{e}");
        assert_eq!(on.drifted(&rounds).map(|d| d.slow_round), Some(2));
        assert_eq!(off.drifted(&rounds), None, "a guard that is off keeps every round");
    }

    #[test]
    fn the_odd_round_is_the_one_farthest_from_most_rounds_speed() {
        // Most rounds read about 30 ms; round 3 ran in a fast spell, 17 ms: it is taken again, not the slow
        // ones, although it is the fastest.
        let rounds = vec![vec![30.1, 29.8], vec![31.0], vec![], vec![17.1, 17.3], vec![29.5, 30.4]];
        assert_eq!(odd_round(&rounds), Some(3));
        // Once it reads like the others, the farthest is a slow one by a little.
        let rounds = vec![vec![30.1, 29.8], vec![31.9], vec![], vec![29.9], vec![29.5, 30.4]];
        assert_eq!(odd_round(&rounds), Some(1));
        // Two rounds equally far from the others: the earlier one.
        assert_eq!(odd_round(&[vec![20.0], vec![10.0], vec![20.0], vec![10.0]]), Some(1));
        assert_eq!(odd_round(&[vec![10.0], vec![]]), None, "one round with readings has nothing to compare");
        assert_eq!(odd_round(&[vec![10.0], vec![f64::NAN]]), None);
    }

    #[test]
    fn steadiness_names_a_flickering_or_slow_machine() {
        let limits = GuardLimits { quiet_reference_ms: Some(18.57), ..GuardLimits::default() };
        let (lines, steady) = steadiness(&[18.2, 18.9, 18.4, 19.0, 18.6], &limits, None);
        assert!(steady && lines.last().unwrap().starts_with("steady"), "{lines:?}");
        assert!(lines.iter().any(|l| l.starts_with("5 of 5 readings within 1.15×")), "{lines:?}");
        // The day's flicker: fast and slow moments seconds apart.
        let (lines, steady) = steadiness(&[24.5, 15.6, 25.8, 23.7, 17.4, 26.5], &limits, Some((0.4, 0.0)));
        assert!(!steady, "{lines:?}");
        assert!(lines.iter().any(|l| l.starts_with("unsteady: the slowest reading is 1.70×")), "{lines:?}");
        assert!(lines.iter().any(|l| l.starts_with("too slow: the median reads 1.30×")), "{lines:?}");
        assert!(lines.iter().any(|l| l.starts_with("2 of 6 readings within")), "{lines:?}");
        // Nothing ran beside the readings and nothing was stolen: the cause is outside the machine.
        assert!(
            lines.iter().any(|l| l == "while reading: other processes 0.4% of the CPU time, steal 0.0%"),
            "{lines:?}"
        );
        assert!(lines.last().unwrap().starts_with("cause: outside this machine"), "{lines:?}");
        // A process beside the readings, or a hypervisor that steals, is named instead.
        let slow = [24.5, 25.0, 24.8];
        let (lines, _) = steadiness(&slow, &limits, Some((48.0, 12.0)));
        assert!(lines.last().unwrap().starts_with("cause: other processes used 48.0%"), "{lines:?}");
        let (lines, _) = steadiness(&slow, &limits, Some((3.0, 12.0)));
        assert!(lines.last().unwrap().starts_with("cause: the hypervisor stole 12.0%"), "{lines:?}");
        // A steady machine gets its counters and no cause.
        let (lines, steady) = steadiness(&[18.2, 18.9, 18.4], &limits, Some((48.0, 0.0)));
        assert!(steady && !lines.iter().any(|l| l.starts_with("cause")), "{lines:?}");
        // Slow but steady, without a quiet time: nothing to compare the speed with.
        let (lines, steady) = steadiness(&slow, &GuardLimits::default(), None);
        assert!(steady && !lines.iter().any(|l| l.contains("quiet")), "{lines:?}");
    }

    #[test]
    fn a_long_wait_is_announced_with_its_reason() {
        let limits = GuardLimits { quiet_reference_ms: Some(15.7), retries: 100, ..GuardLimits::default() };
        // Short pauses pass without a word.
        assert_eq!(waiting_notice("set 3", &limits, None, 24.0, 1, Duration::from_secs(2)), None);
        let start = waiting_notice("the run's start", &limits, None, 24.11, 2, Duration::from_secs(4)).unwrap();
        assert!(start.contains("24.11 ms, 1.54× the quiet 15.7 ms (limit 1.15×)"), "{start}");
        assert!(start.contains("waiting 4 s (try 3 of 101)"), "{start}");
        let busy = Conditions {
            other_busy_pct: 48.0,
            steal_pct: 0.5,
            reference_ratio: 1.6,
            reference_ms: Some(16.0),
            retries: 0,
        };
        let line = waiting_notice("set 3", &limits, Some(&busy), 16.0, 5, Duration::from_secs(30)).unwrap();
        assert!(line.starts_with("contention guard: set 3: other processes 48.0% of CPU time (limit 10%)"), "{line}");
        assert!(line.contains("reference kernel 1.60× its baseline") && !line.contains("steal"), "{line}");
        assert!(!line.contains("the quiet"), "16.0 ms is within 1.15 × 15.7: {line}");
        assert!(!line.contains("outside this machine"), "other processes were busy: {line}");
        // Only the reference kernel slow, nothing else running, nothing stolen: the host's own slowdown.
        let quiet = Conditions { other_busy_pct: 0.3, steal_pct: 0.2, reference_ratio: 1.0, ..busy };
        let line = waiting_notice("the run's start", &limits, Some(&quiet), 24.0, 3, Duration::from_secs(8)).unwrap();
        assert!(line.contains("1.53× the quiet 15.7 ms (limit 1.15×); the slowdown is from outside this machine: nothing else ran here and nothing was stolen; waiting 8 s"), "{line}");
        assert!(!start.contains("outside"), "no counters, no claim: {start}");
    }

    #[test]
    fn a_quiet_reference_bounds_the_slowdown() {
        let mut l = GuardLimits::default();
        assert!(!l.too_slow(1e9), "no quiet reference: only the baseline ratio judges");
        l.quiet_reference_ms = Some(20.0);
        assert!(!l.too_slow(22.9));
        assert!(l.too_slow(23.1), "1.15 × 20 ms is the limit");
        l.max_slowdown = 1.5;
        assert!(!l.too_slow(29.9) && l.too_slow(30.1));
    }

    #[test]
    fn this_machine_reports_counters() {
        // Linux always has /proc; elsewhere the guard runs on the reference kernel alone.
        if std::path::Path::new("/proc/stat").exists() {
            let t = cpu_ticks().expect("counters on Linux");
            assert!(t.total >= t.busy && t.total > 0);
        }
    }
}
