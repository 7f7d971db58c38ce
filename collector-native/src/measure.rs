//! `measure-plan`: the measured cost of plans, in the breakdown the planner predicts (per device
//! compute, forward and backward all-to-all, total; the bottleneck; the cost). This is the judge the
//! benchmarks and the calibration loop trust, so it is built to survive a noisy machine:
//!
//! * **Rounds, interleaved.** Every distinct device set of every plan given is timed once per round, in
//!   a new seeded random order each round, and every plan's all-to-alls once per round; a slow spell of
//!   the machine then falls on all competing plans alike instead of on whichever was measured last.
//!   Every round starts on fresh weight memory (`Backend::renew_memory`): where pages land changes a
//!   set's time by several percent, and rounds then average over layouts.
//!   Device sets shared by several plans (the same pieces with the same lookups) are timed once.
//! * **Medians.** A device's compute is the median over rounds of each round's median over the timed
//!   runs; the report's cost is the largest device total of those medians; every round's own plan cost
//!   is kept, with their coefficient of variation.
//! * **The contention guard** (`guard.rs`) re-measures a set timed while something else ran; and with
//!   three rounds or more, a round whose timing of a set is more than 25% over the set's median is taken
//!   again (twice at most): the set and its lookups are the same every round, so such a round was
//!   disturbed by something neither guard signal saw. A round the machine ran at another speed than most
//!   (its median reference reading; [`odd_round`]) is taken again, as many times as there are rounds at
//!   most, before the drift check refuses the measurement. All-to-alls are timed after the compute is
//!   final.
//!
//! Procedure per plan and round (NeuroShard definition, SPEC section 1): the devices' fused sets (from
//! the shared schedule); the backward all-to-all of the per-device dims (no delays); each device's
//! start delay from compute + backward comm ([`start_delays_ms`]); the forward all-to-all with those
//! delays. With `--definition four-phase` the forward all-to-all runs without delays. Pieces of a table
//! share its lookups (seed `task_seed(seed, table_id)`); a row-wise piece serves the table's lookups
//! that fall in its rows (`workload::piece_bags`).

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use planner_core::cost::{ComputeSplit, CostDefinition, DeviceReport, PlanReport, bottleneck, start_delays_ms};
use planner_core::dataset::{Protocol, median};
use planner_core::document::{MEASURED_SCHEMA, MeasuredPlan, MeasuredPlans, PlanDocument};
use planner_core::plan::Plan;
use planner_core::table::TableSpec;
use planner_core::task::task_seed;
use rand::{SeedableRng, rngs::ChaCha8Rng, seq::SliceRandom};

use crate::backend::{Backend, Timing, check_fits, check_fp32};
use crate::guard::{Guard, odd_round};
use crate::workload::{Bags, CommSample, WorkPiece};

/// A round's timing of a set more than this over the set's median over rounds is taken again.
const OUTLIER_RATIO: f64 = 1.25;
/// Re-timings of one outlier at most.
const OUTLIER_RETRIES: usize = 2;

/// Options of `measure-plan`.
#[derive(Args, Debug)]
pub struct MeasurePlanArgs {
    /// Plan files (`shardplan.plan/v1`), measured together in interleaved rounds.
    #[arg(required = true)]
    pub plans: Vec<PathBuf>,
    /// Bags per table.
    #[arg(long, default_value_t = 65_536)]
    pub batch_size: u32,
    /// Seed of the synthetic lookups and of the measuring order.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Untimed runs per set and round.
    #[arg(long, default_value_t = 2)]
    pub warmup: u32,
    /// Timed runs per set and round.
    #[arg(long, default_value_t = 10)]
    pub reps: u32,
    /// Rounds over all sets and plans.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Cost definition.
    #[arg(long, value_enum, default_value_t = DefinitionArg::NeuroShard)]
    pub definition: DefinitionArg,
    /// Do not flush caches before timed runs.
    #[arg(long)]
    pub no_flush: bool,
    /// Write the JSON report here (default: stdout).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Measure compute only and take every device's comm times (and start delays) from the plan's
    /// predicted report: for a machine with fewer devices than the plan (one GPU timing each device's
    /// tables in turn). The report's `comm` field says so.
    #[arg(long)]
    pub comm_from_plan: bool,
}

/// `--definition`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefinitionArg {
    /// Forward comm sees the start delays compute + backward comm create.
    NeuroShard,
    /// Max over devices of the four phases, no delays.
    FourPhase,
}

impl DefinitionArg {
    fn definition(self) -> CostDefinition {
        match self {
            Self::NeuroShard => CostDefinition::NeuroShard,
            Self::FourPhase => CostDefinition::FourPhase,
        }
    }
}

/// Forward, backward and total medians of one timing of a set, with the repetitions' spread.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SetTime {
    /// Median forward + backward, ms.
    pub total_ms: f64,
    /// Median forward, ms.
    pub fwd_ms: f64,
    /// Median backward, ms.
    pub bwd_ms: f64,
    /// Coefficient of variation of the repetitions' totals.
    pub reps_cv: f64,
    /// The guard's reference-kernel reading taken right after this timing, ms (none without a guard).
    pub reference_ms: Option<f64>,
}

/// Generates (and caches) the lookups of pieces: one table's batch is generated once per run.
#[derive(Default)]
pub struct BagCache {
    bags: HashMap<String, Bags>,
}

impl BagCache {
    /// The lookups of `piece` at `batch`.
    pub fn get(&mut self, piece: &WorkPiece, batch: u32) -> Result<Bags> {
        let key = piece.key()?;
        if let Some(b) = self.bags.get(&key) {
            return Ok(b.clone());
        }
        let b = piece.bags(batch)?;
        self.bags.insert(key, b.clone());
        Ok(b)
    }
}

/// Coefficient of variation (sd / mean) of `v`; 0 for fewer than two values or a zero mean.
#[must_use]
pub fn cv(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    if mean == 0.0 {
        return 0.0;
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (v.len() - 1) as f64;
    var.sqrt() / mean
}

/// Times one set under the guard (fused forward + backward of all its pieces on device 0).
pub fn time_set(
    backend: &mut dyn Backend,
    guard: &mut Guard,
    cache: &mut BagCache,
    pieces: &[WorkPiece],
    batch: u32,
    timing: Timing,
    what: &str,
) -> Result<SetTime> {
    let tables: Vec<TableSpec> = pieces.iter().map(WorkPiece::kernel_table).collect();
    check_fp32(&tables)?;
    check_fits(backend, 0, &tables).with_context(|| what.to_string())?;
    let bags = pieces.iter().map(|p| cache.get(p, batch)).collect::<Result<Vec<_>>>()?;
    let (times, conditions) = guard.measure(backend, what, true, |b| b.compute(0, &tables, bags.clone(), 0, timing))?;
    let total: Vec<f64> = times.fwd_ms.iter().zip(&times.bwd_ms).map(|(f, b)| f + b).collect();
    Ok(SetTime {
        total_ms: median(&total),
        fwd_ms: median(&times.fwd_ms),
        bwd_ms: median(&times.bwd_ms),
        reps_cv: cv(&total),
        reference_ms: conditions.reference_ms,
    })
}

/// One round: every set timed once under the guard, in a new seeded order; the timings by set.
/// `what(s)` names set `s` in the guard's messages; `progress` is called after each set.
#[allow(clippy::too_many_arguments)] // what `time_set` needs, the order's seed, and the caller's naming and progress
fn time_round(
    backend: &mut dyn Backend,
    guard: &mut Guard,
    cache: &mut BagCache,
    sets: &[Vec<WorkPiece>],
    batch: u32,
    timing: Timing,
    rng: &mut ChaCha8Rng,
    what: impl Fn(usize) -> String,
    mut progress: impl FnMut(),
) -> Result<Vec<SetTime>> {
    let mut order: Vec<usize> = (0..sets.len()).collect();
    order.shuffle(rng);
    let mut times: Vec<Option<SetTime>> = vec![None; sets.len()];
    for &s in &order {
        times[s] = Some(time_set(backend, guard, cache, &sets[s], batch, timing, &what(s))?);
        progress();
    }
    Ok(times.into_iter().flatten().collect())
}

/// The device sets of one plan: for every device, the pieces it holds (lookups seeded per table).
fn device_sets(doc: &PlanDocument, plan: &Plan, seed: u64) -> Vec<Vec<WorkPiece>> {
    let task = &doc.task;
    let pieces = plan.pieces();
    plan.pieces_by_device(task.devices.count())
        .iter()
        .map(|idx| {
            idx.iter()
                .map(|&i| {
                    let p = pieces[i];
                    let mut t = task.tables[p.table_id].clone();
                    t.name = format!("{}[{}..{}]", t.name, p.col_offset, p.col_offset + p.dim);
                    t.dim = p.dim;
                    WorkPiece {
                        table: t,
                        rows: p.rows.filter(|r| r.count < task.tables[p.table_id].rows),
                        lookup_seed: task_seed(seed, p.table_id),
                    }
                })
                .collect()
        })
        .collect()
}

/// Runs `measure-plan`.
/// One plan's all-to-all in one round: backward, forward start delays and forward, per device.
type Comm = (Vec<f64>, Vec<f64>, Vec<f64>);

/// `shardplan-collect measure-plan`: the backend and contention guard the global options choose, then
/// [`measure_plan`].
pub fn run(cli: &crate::Cli, args: &MeasurePlanArgs) -> Result<i32> {
    let mut backend = crate::common::make_backend(cli, !args.no_flush)?;
    let mut guard = crate::common::start_guard(cli, backend.as_mut(), args.batch_size)?;
    measure_plan(backend.as_mut(), &mut guard, args, cli.quiet)?;
    Ok(0)
}

pub fn measure_plan(backend: &mut dyn Backend, guard: &mut Guard, args: &MeasurePlanArgs, quiet: bool) -> Result<()> {
    if args.batch_size == 0 || args.reps == 0 || args.rounds == 0 || args.rounds > 1000 {
        anyhow::bail!(
            "--batch-size = {}, --reps = {} and --rounds = {} must be at least 1 (rounds at most 1000)",
            args.batch_size,
            args.reps,
            args.rounds
        );
    }
    let mut docs = Vec::with_capacity(args.plans.len());
    for path in &args.plans {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading plan {}", path.display()))?;
        let (doc, plan) = PlanDocument::from_json(&text).with_context(|| format!("parsing plan {}", path.display()))?;
        check_fp32(&doc.task.tables).with_context(|| format!("plan {}", path.display()))?;
        if let Some(t) = doc.task.topology.as_ref().filter(|t| t.is_multi_host()) {
            anyhow::bail!(
                "plan {}: its task is on {}, and this collector measures one host; price its network with \
                 `shardplan evaluate`, or plan the task without a topology to measure it here",
                path.display(),
                t.describe()
            );
        }
        let n = doc.task.devices.count();
        if let Some(max) = backend.max_comm_devices()
            && n > max
            && !args.comm_from_plan
        {
            anyhow::bail!(
                "plan {}: {n} devices but the {} backend sees {max}; pass --comm-from-plan to measure compute only",
                path.display(),
                backend.hardware().backend.name()
            );
        }
        if args.comm_from_plan && doc.report.devices.len() != n {
            anyhow::bail!(
                "plan {}: --comm-from-plan needs a report of {n} devices, it has {}",
                path.display(),
                doc.report.devices.len()
            );
        }
        if (args.batch_size as usize) < n {
            anyhow::bail!(
                "plan {}: --batch-size = {} is smaller than its {n} devices",
                path.display(),
                args.batch_size
            );
        }
        docs.push((path.display().to_string(), doc, plan));
    }
    // A plan priced by a profile of another machine judges that profile off its hardware: said once per
    // model, before anything is timed, because the measured document alone does not show it.
    let mut models_seen = std::collections::BTreeSet::new();
    for (path, doc, _) in &docs {
        if models_seen.insert(doc.report.cost_model.as_str())
            && let Some(why) = planner_core::cost::profiles::other_machine(&doc.report.cost_model, backend.hardware())
        {
            eprintln!(
                "warning: {path} was priced by {}: {why}; what is measured here judges that profile off its own hardware",
                doc.report.cost_model
            );
        }
    }
    let timing = Timing { warmup: args.warmup, reps: args.reps };

    // The distinct sets of all plans, and which set every device of every plan runs.
    let mut set_index: HashMap<String, usize> = HashMap::new();
    let mut sets: Vec<Vec<WorkPiece>> = Vec::new();
    let mut plan_sets: Vec<Vec<Option<usize>>> = Vec::new();
    for (_, doc, plan) in &docs {
        let mut devs = Vec::new();
        for set in device_sets(doc, plan, args.seed) {
            if set.is_empty() {
                devs.push(None);
                continue;
            }
            let mut keys = set.iter().map(WorkPiece::key).collect::<Result<Vec<_>>>()?;
            keys.sort();
            let key = keys.join("|");
            let next = sets.len();
            let i = *set_index.entry(key).or_insert(next);
            if i == next {
                sets.push(set);
            }
            devs.push(Some(i));
        }
        plan_sets.push(devs);
    }
    let definition = args.definition.definition();
    let rounds = args.rounds as usize;
    let mut set_times: Vec<Vec<SetTime>> = vec![Vec::with_capacity(rounds); sets.len()];
    // comm[plan][round] = (bw, delays, fw) per device
    let mut comm: Vec<Vec<Comm>> = vec![Vec::with_capacity(rounds); docs.len()];
    let mut cache = BagCache::default();
    let mut rng = ChaCha8Rng::seed_from_u64(task_seed(args.seed, 0x4A55));
    let total_sets = sets.len() * rounds;
    let mut done = 0usize;
    for round in 0..rounds {
        if round > 0 {
            backend.renew_memory();
        }
        let what = |s: usize| format!("round {} of {rounds}, set {s} ({} pieces)", round + 1, sets[s].len());
        let times = time_round(backend, guard, &mut cache, &sets, args.batch_size, timing, &mut rng, what, || {
            done += 1;
            if !quiet {
                eprint!("\rmeasured {done}/{total_sets} set timings");
            }
        })?;
        for (s, t) in times.into_iter().enumerate() {
            set_times[s].push(t);
        }
    }
    // A round the machine ran at another speed than most is taken again, as many times as there are
    // rounds at most: a host that changes speed for minutes at a time (seen on shared cloud hosts: 1.6×,
    // back and forth) then still gives rounds at one speed, which the drift check below passes.
    let round_readings = |set_times: &[Vec<SetTime>]| -> Vec<Vec<f64>> {
        (0..rounds).map(|r| set_times.iter().filter_map(|t| t[r].reference_ms).collect()).collect()
    };
    let mut retaken_rounds = 0usize;
    while retaken_rounds < rounds {
        let readings = round_readings(&set_times);
        let (Some(d), Some(r)) = (guard.drifted(&readings), odd_round(&readings)) else { break };
        // Said under --quiet too, as the guard's waits are: it is not progress, and it costs a round.
        eprintln!(
            "contention guard: the rounds drifted (the reference kernel's median read {:.2} ms in round {} and {:.2} ms \
             in round {}, {:.2}×, over --guard-max-drift): round {} of {rounds}, the farthest from most rounds' speed, \
             is taken again (re-take {} of {rounds} at most)",
            d.fast_ms,
            d.fast_round + 1,
            d.slow_ms,
            d.slow_round + 1,
            d.ratio,
            r + 1,
            retaken_rounds + 1
        );
        backend.renew_memory();
        let what = |s: usize| {
            format!(
                "round {} of {rounds} again (the machine's speed drifted), set {s} ({} pieces)",
                r + 1,
                sets[s].len()
            )
        };
        let times = time_round(backend, guard, &mut cache, &sets, args.batch_size, timing, &mut rng, what, || ())?;
        for (s, t) in times.into_iter().enumerate() {
            set_times[s][r] = t;
        }
        retaken_rounds += 1;
    }
    // A set's lookups are the same every round, so a round far above the set's median was disturbed
    // (a slow spell of a shared host lasts seconds, longer than the guard's reference reading may see):
    // it is timed again, at most `OUTLIER_RETRIES` times.
    let mut retimed = 0usize;
    if rounds >= 3 {
        for (s, times) in set_times.iter_mut().enumerate() {
            for r in 0..rounds {
                for _ in 0..OUTLIER_RETRIES {
                    let m = median(&times.iter().map(|t| t.total_ms).collect::<Vec<_>>());
                    if times[r].total_ms <= OUTLIER_RATIO * m {
                        break;
                    }
                    let what = format!("round {} of {rounds}, set {s} again (outlier)", r + 1);
                    times[r] = time_set(backend, guard, &mut cache, &sets[s], args.batch_size, timing, &what)?;
                    retimed += 1;
                }
            }
        }
    }
    if !quiet {
        eprintln!(
            "\rmeasured {done}/{total_sets} set timings, {retimed} outlier timings and {retaken_rounds} rounds taken again"
        );
    }
    // Rounds taken at two speeds of the machine are refused, not recorded.
    guard.check_rounds(&format!("measure-plan of {} plans", docs.len()), &round_readings(&set_times))?;
    // The readings of the timings kept: a round taken again leaves its first readings out.
    let references: Vec<f64> = set_times.iter().flatten().filter_map(|t| t.reference_ms).collect();
    // The all-to-alls of every round, once its compute is final (the forward's start delays come from it).
    let round_totals: Vec<Vec<f64>> =
        (0..rounds).map(|round| set_times.iter().map(|t| t[round].total_ms).collect()).collect();
    for totals in &round_totals {
        let mut plan_order: Vec<usize> = (0..docs.len()).collect();
        plan_order.shuffle(&mut rng);
        for &p in &plan_order {
            let (_, doc, _) = &docs[p];
            let compute: Vec<f64> = plan_sets[p].iter().map(|s| s.map_or(0.0, |s| totals[s])).collect();
            let c = if args.comm_from_plan {
                let d = &doc.report.devices;
                (
                    d.iter().map(|x| x.bw_comm_ms).collect(),
                    d.iter().map(|x| x.delay_ms).collect(),
                    d.iter().map(|x| x.fw_comm_ms).collect(),
                )
            } else {
                let dims: Vec<Vec<u32>> = device_sets(doc, &docs[p].2, args.seed)
                    .iter()
                    .map(|s| s.iter().map(|m| m.table.dim).collect())
                    .collect();
                measure_comm(backend, guard, dims, &compute, definition, args.batch_size as usize, timing)?
            };
            comm[p].push(c);
        }
    }

    let hardware = backend.hardware().clone();
    let mut out = Vec::with_capacity(docs.len());
    for (p, (path, doc, plan)) in docs.iter().enumerate() {
        let labels = doc.report.devices.iter().map(|d| d.pieces.clone()).collect::<Vec<_>>();
        let round_costs: Vec<f64> = (0..rounds)
            .map(|r| {
                let (bw, _, fw) = &comm[p][r];
                let totals: Vec<f64> = plan_sets[p]
                    .iter()
                    .enumerate()
                    .map(|(d, s)| s.map_or(0.0, |s| set_times[s][r].total_ms) + bw[d] + fw[d])
                    .collect();
                bottleneck(&totals).1
            })
            .collect();
        let round_devices: Vec<Vec<[f64; 3]>> = (0..rounds)
            .map(|r| {
                let (bw, _, fw) = &comm[p][r];
                plan_sets[p]
                    .iter()
                    .enumerate()
                    .map(|(d, s)| [s.map_or(0.0, |s| set_times[s][r].total_ms), bw[d], fw[d]])
                    .collect()
            })
            .collect();
        let round_device_reference: Vec<Vec<f64>> = if references.is_empty() {
            Vec::new()
        } else {
            (0..rounds)
                .map(|r| {
                    plan_sets[p].iter().map(|s| s.and_then(|s| set_times[s][r].reference_ms).unwrap_or(0.0)).collect()
                })
                .collect()
        };
        let n = doc.task.devices.count();
        let by_device = plan.pieces_by_device(n);
        let usage = planner_core::memory::plan_usage(&doc.task, plan)?;
        let mut devices = Vec::with_capacity(n);
        let mut violations = Vec::new();
        for d in 0..n {
            let med = |f: &dyn Fn(&SetTime) -> f64| {
                plan_sets[p][d].map_or(0.0, |s| median(&set_times[s].iter().map(f).collect::<Vec<_>>()))
            };
            let comm_med = |k: usize| median(&comm[p].iter().map(|c| [&c.0, &c.1, &c.2][k][d]).collect::<Vec<_>>());
            let (compute_ms, bw, delay, fw) = (med(&|t| t.total_ms), comm_med(0), comm_med(1), comm_med(2));
            // Memory is what the plan's report says under the task's rule (plan_usage for an old report).
            let (dm, mem) = usage.get(d).copied().unwrap_or_default();
            let bytes = mem.placed_bytes()?;
            let cap = doc.task.devices.mem_cap_bytes()[d];
            violations.extend(planner_core::memory::violation(d, &dm, bytes, doc.task.memory.name()));
            devices.push(DeviceReport {
                device: d,
                pieces: labels.get(d).cloned().unwrap_or_default(),
                bytes,
                mem_cap_bytes: cap,
                memory: mem,
                dim_sum: by_device[d].iter().map(|&i| u64::from(plan.pieces()[i].dim)).sum(),
                compute_ms,
                compute_interval_ms: None,
                compute_split: Some(ComputeSplit { fwd_ms: med(&|t| t.fwd_ms), bwd_ms: med(&|t| t.bwd_ms) }),
                fw_comm_ms: fw,
                bw_comm_ms: bw,
                network_ms: 0.0,
                delay_ms: delay,
                total_ms: compute_ms + bw + fw,
            });
        }
        let (bottleneck_device, cost_ms) = bottleneck(&devices.iter().map(|d| d.total_ms).collect::<Vec<_>>());
        let measured = PlanReport {
            cost_model: format!("measured:{}", hardware.fingerprint),
            definition,
            cost_ms,
            cost_interval_ms: None,
            expected_cost_ms: None,
            global_batch: Some(u64::from(args.batch_size)),
            bottleneck_device,
            memory_rule: doc.task.memory,
            feasible: violations.is_empty(),
            violations,
            devices,
            bottleneck_link: None,
        };
        // The result itself, not progress: printed under --quiet too.
        print_comparison(path, &doc.report, &measured, &round_costs);
        out.push(MeasuredPlan {
            plan: path.clone(),
            planner: doc.planner.clone(),
            predicted: doc.report.clone(),
            measured,
            cost_cv: cv(&round_costs),
            round_costs_ms: round_costs,
            round_devices_ms: round_devices,
            round_device_reference_ms: round_device_reference,
        });
    }
    let report = MeasuredPlans {
        schema: MEASURED_SCHEMA.into(),
        hardware,
        batch_size: args.batch_size,
        seed: args.seed,
        // How each round times a set; the document's own `rounds` counts the rounds.
        protocol: Protocol { warmup: args.warmup, reps: args.reps, cache_flush: backend.cache_flush(), rounds: 1 },
        rounds: args.rounds,
        comm: if args.comm_from_plan { "modelled: taken from each plan's report".into() } else { "measured".into() },
        reference_ms: (!references.is_empty()).then(|| median(&references)),
        plans: out,
    };
    let text = serde_json::to_string_pretty(&report)? + "\n";
    match &args.out {
        Some(p) => shardplan_files::write_atomic(p, text.as_bytes())?,
        None => print!("{text}"),
    }
    Ok(())
}

/// Measures one round of a plan's all-to-alls under the guard: backward without delays, then forward with
/// the start delays that this round's compute and backward comm create. Returns (bw, delays, fw).
fn measure_comm(
    backend: &mut dyn Backend,
    guard: &mut Guard,
    device_dims: Vec<Vec<u32>>,
    compute_ms: &[f64],
    definition: CostDefinition,
    batch: usize,
    timing: Timing,
) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let n = device_dims.len();
    let no_delay = CommSample { device_dims: device_dims.clone(), delays_ms: vec![0.0; n] };
    let (first, _) = guard.measure(backend, "backward all-to-all", false, |b| b.comm(&no_delay, batch, timing))?;
    let bw: Vec<f64> = first.bw_ms.iter().map(|v| median(v)).collect();
    let delays = start_delays_ms(compute_ms, &bw, definition);
    if definition == CostDefinition::FourPhase {
        return Ok((bw, delays, first.fw_ms.iter().map(|v| median(v)).collect()));
    }
    let sample = CommSample { device_dims, delays_ms: delays.clone() };
    let (second, _) = guard.measure(backend, "forward all-to-all", false, |b| b.comm(&sample, batch, timing))?;
    Ok((bw, delays, second.fw_ms.iter().map(|v| median(v)).collect()))
}

/// Predicted vs measured per device, on stderr.
fn print_comparison(path: &str, predicted: &PlanReport, measured: &PlanReport, rounds: &[f64]) {
    eprintln!("{path}");
    eprintln!("device  predicted compute/fw/bw/total ms   measured compute/fw/bw/total ms");
    for m in &measured.devices {
        let p = predicted.devices.iter().find(|p| p.device == m.device);
        let pred = p.map_or_else(
            || "-".to_string(),
            |p| format!("{:8.3} {:7.3} {:7.3} {:8.3}", p.compute_ms, p.fw_comm_ms, p.bw_comm_ms, p.total_ms),
        );
        eprintln!(
            "{:>6}  {pred:<36} {:8.3} {:7.3} {:7.3} {:8.3}",
            m.device, m.compute_ms, m.fw_comm_ms, m.bw_comm_ms, m.total_ms
        );
    }
    eprintln!(
        "cost: predicted {:.3} ms (device {}, {}), measured {:.3} ms (device {}; rounds {}; cv {:.1}%)",
        predicted.cost_ms,
        predicted.bottleneck_device,
        predicted.cost_model,
        measured.cost_ms,
        measured.bottleneck_device,
        rounds.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(", "),
        100.0 * cv(rounds)
    );
}
