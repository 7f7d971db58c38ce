//! `shardplan-train calibrate`: the plan → measure → learn loop that steers a cost model by measurements.
//!
//! A search exploits its cost model's errors: the device sets planners pick (one big table alone, many
//! pieces, row-wise pieces, sets near the memory cap) are where random training sets are thinnest. So
//! the loop measures what the planners actually produce:
//!
//! 1. **Start** (round 0): random sets from the collector's mixed sampler (`compute --sampler mixed`) and
//!    comm samples for every device count of the cells.
//! 2. **Every round r**: train a profile (an ensemble, so every prediction has an interval) on all data
//!    so far → plan held-out tasks with every planner and measure those plans (`measure-plan`, the
//!    planners' plans of one task interleaved) → report MAPE of plan and device costs, Kendall's tau,
//!    each planner's measured mean and the interval coverage → plan *training* tasks (a fresh suite
//!    each round) with every planner, add neighbours of the best plans (a piece moved, two swapped, a
//!    table made row-wise or halved), and measure the device sets the model is least sure about and that
//!    decide a plan's cost (`sets`), most uncertain × most decisive first.
//! 3. The last round's profile is the calibrated one.
//!
//! Everything lands under `--out`: `state.json` (stages done), `data/` (datasets, versioned as the
//! collector writes them), `profiles/round-<r>/`, `holdout/round-<r>/` (plans, measurements, report),
//! `requests/round-<r>.jsonl`. Every stage is resumable: the collector resumes its files (a kill loses
//! the sample in flight), a profile is written to a temporary directory and renamed when done, a task's
//! measurement is kept once written. Rerunning the same command continues where it stopped.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use planner_core::cost::{CostDefinition, CostModel, NeuralModel, PieceRef, evaluate, members_mean_sd};
use planner_core::dataset::{Measurement, PieceRequest, SET_REQUEST_SCHEMA, SetRequest, TableRecord};
use planner_core::document::{MeasuredPlans, PlanDocument};
use planner_core::eval::{JudgeSummary, JudgedTask, judge_summary};
use planner_core::plan::{Piece, Plan, RowRange};
use planner_core::planners::PlanContext;
use planner_core::table::TableInput;
use planner_core::task::{SuiteSpec, Task, task_seed};
use rand::{RngExt, SeedableRng, rngs::ChaCha8Rng};
use serde::{Deserialize, Serialize};

use shardplan_files::write_atomic;

use crate::models::Loss;
use crate::train::TrainConfig;
use crate::{ProfileOptions, onnx_files, train_profile};

/// What the loop does.
#[derive(Debug, Clone)]
pub struct CalibrateOptions {
    /// The `shardplan-collect` binary.
    pub collector: PathBuf,
    /// Its backend (`cpu` or `cuda`).
    pub backend: String,
    /// Loop directory.
    pub out: PathBuf,
    /// Name of the profiles written.
    pub name: String,
    /// Rounds of plan → measure → retrain after the start.
    pub rounds: usize,
    /// Bags per table of every measurement.
    pub batch: u32,
    /// Cells `(devices, max dim)` of the NeuroShard protocol the tasks come from.
    pub cells: Vec<(usize, u32)>,
    /// Training tasks per cell and round.
    pub train_tasks: usize,
    /// Held-out tasks per cell (the same every round).
    pub holdout_tasks: usize,
    /// Planners whose plans are measured.
    pub planners: Vec<String>,
    /// Device sets measured per round.
    pub sets_per_round: usize,
    /// Random sets measured at the start.
    pub initial_samples: u64,
    /// Comm samples per device count.
    pub comm_samples: u64,
    /// Largest start delay of the comm samples, ms.
    pub comm_max_delay_ms: f64,
    /// Largest probability of a row-wise dim in a comm sample (`shardplan-collect comm --row-wise-max`).
    pub comm_row_wise_max: f64,
    /// Measure no comm (a machine with one device): price comm with this analytical preset and time the
    /// held-out plans' compute only, taking their comm from the plan (`measure-plan --comm-from-plan`).
    pub comm_preset: Option<String>,
    /// Round 0's profile: a profile directory `shardplan-train` wrote (an embedded one's, say), judged and
    /// planned with as it is instead of one trained on the initial sets.
    pub start_profile: Option<PathBuf>,
    /// Datasets every round's profile is trained on besides the loop's own (earlier collections of the
    /// same machine).
    pub extra_data: Vec<PathBuf>,
    /// Run only one kind of stage and stop before the first stage of the other kind still to do: measure
    /// on a machine with the hardware, train on another, resume on the first. Not part of the loop's
    /// identity (planning and proposing run under either).
    pub only: Option<Only>,
    /// Memory cap of a device (tasks and sampled sets).
    pub mem_cap: String,
    /// The memory rule every task is planned under (every planner alike).
    pub memory: planner_core::MemoryRule,
    /// Seed of everything (suites, sampler, training).
    pub seed: u64,
    /// Training settings of each profile.
    pub train: TrainConfig,
    /// Ensemble members.
    pub members: usize,
    /// Loss of the compute model.
    pub loss: Loss,
    /// What every round's compute networks learn (`ProfileOptions::target`).
    pub target: crate::models::ComputeTarget,
    /// Measuring rounds of `measure-plan` on held-out tasks.
    pub measure_rounds: u32,
    /// Neighbour plans generated around each task's best plan.
    pub neighbours: usize,
    /// How every set is timed.
    pub timing: CollectorTiming,
    /// The command line, recorded in the profiles' cards.
    pub command: String,
}

/// The kinds of stage `--only` separates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Only {
    /// Stages that time sets on the hardware (initial sets, comm, held-out plans, proposals).
    Measure,
    /// Stages that train a profile.
    Train,
}

/// How the collector times every set of the loop (compute, requested sets, held-out plans).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CollectorTiming {
    /// Untimed runs before the timed ones.
    pub warmup: u32,
    /// Timed runs (their median is the sample); per round with `set_rounds`.
    pub reps: u32,
    /// Rounds every compute set (initial and proposed) is timed in (`shardplan-collect --rounds`); the
    /// held-out plans have their own (`measure_rounds`).
    pub set_rounds: u32,
    /// Flush the last-level cache before every run (what the protocol prescribes).
    pub flush: bool,
    /// The contention guard (off only where measurements run beside each other, as in the tests).
    pub guard: bool,
    /// The machine's reference-kernel time when quiet, ms: the guard then refuses samples taken more than
    /// 1.15× slower (`shardplan-collect --guard-quiet-reference-ms`).
    pub quiet_reference_ms: Option<f64>,
}

impl Default for CollectorTiming {
    fn default() -> Self {
        Self { warmup: 2, reps: 10, set_rounds: 1, flush: true, guard: true, quiet_reference_ms: None }
    }
}

impl CollectorTiming {
    fn args(self) -> Vec<String> {
        let mut a = vec!["--warmup".to_string(), self.warmup.to_string(), "--reps".into(), self.reps.to_string()];
        if !self.flush {
            a.push("--no-flush".into());
        }
        a
    }

    /// [`CollectorTiming::args`] of the runs that time compute sets: with their rounds.
    fn set_args(self) -> Vec<String> {
        let mut a = self.args();
        if self.set_rounds > 1 {
            a.extend(["--rounds".to_string(), self.set_rounds.to_string()]);
        }
        a
    }
}

/// What is done, kept in `state.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct State {
    /// The options that started the loop (a resumed run must match).
    fingerprint: String,
    /// Stages finished, by name.
    done: BTreeSet<String>,
}

/// One round's report (`holdout/round-<r>/report.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RoundReport {
    /// Round.
    pub round: usize,
    /// Compute samples the profile was trained on.
    pub samples: usize,
    /// Per cell `DxMAXDIM`: the measured judge on the held-out tasks.
    pub cells: BTreeMap<String, JudgeSummary>,
}

impl CalibrateOptions {
    fn fingerprint(&self) -> String {
        format!(
            "{}|{}|{:?}|{}|{}|{:?}|{}|{}|{}|{}|{}|{}|{}|{}{}{}{}",
            self.backend,
            self.batch,
            self.cells,
            self.train_tasks,
            self.holdout_tasks,
            self.planners,
            self.sets_per_round,
            self.initial_samples,
            self.comm_samples,
            self.mem_cap,
            self.memory.describe(),
            self.seed,
            self.members,
            self.neighbours,
            self.comm_preset.as_ref().map_or_else(String::new, |p| format!("|comm-from-preset {p}")),
            self.start_profile.as_ref().map_or_else(String::new, |p| format!("|start-profile {}", p.display())),
            if self.extra_data.is_empty() { String::new() } else { format!("|extra-data {:?}", self.extra_data) }
        )
    }

    fn validate(&self) -> Result<()> {
        if let Some(q) = self.timing.quiet_reference_ms
            && !(q.is_finite() && q > 0.0)
        {
            bail!("--quiet-reference-ms = {q} is invalid: a positive time in ms");
        }
        // `set_args` passes `--rounds` only above one: 0 would be timed as one round without a word.
        if self.timing.set_rounds == 0 || self.timing.set_rounds > 100 {
            bail!("--set-rounds = {} is invalid: use 1..=100 (shardplan-collect --rounds)", self.timing.set_rounds);
        }
        if self.cells.is_empty() || self.planners.is_empty() {
            bail!("`--cells` and `--planners` must each name at least one");
        }
        for name in &self.planners {
            planner_core::planners::planner(name)?;
        }
        if self.batch == 0 || self.holdout_tasks == 0 || self.initial_samples < 10 {
            bail!(
                "`--batch` = {}, `--holdout-tasks` = {} and `--initial-samples` = {} are invalid: batch and held-out tasks at least 1, initial samples at least 10",
                self.batch,
                self.holdout_tasks,
                self.initial_samples
            );
        }
        if self.comm_samples == 0 && self.comm_preset.is_none() {
            bail!("`--comm-samples` = 0 is invalid: comm is measured (no `--comm-from-preset`), so at least 1");
        }
        let most = planner_core::dataset::MAX_RUN_SAMPLES;
        if self.initial_samples > most || self.comm_samples > most {
            bail!(
                "`--initial-samples` = {} and `--comm-samples` = {} are invalid: each at most {most} (shardplan-collect --samples)",
                self.initial_samples,
                self.comm_samples
            );
        }
        if let Some(p) = &self.comm_preset {
            planner_core::cost::HardwareProfile::builtin(p).context("`--comm-from-preset`")?;
        }
        if let Some(p) = &self.start_profile {
            load_profile(p).context("`--start-profile`")?;
        }
        if let Some(f) = self.extra_data.iter().find(|f| !f.is_file()) {
            bail!("`--extra-data` {}: no such file", f.display());
        }
        if !self.collector.is_file() {
            bail!(
                "`--collector` {}: no such file (build it with `cargo build --release -p collector-native`)",
                self.collector.display()
            );
        }
        Ok(())
    }

    fn devices(&self) -> BTreeSet<usize> {
        self.cells.iter().map(|c| c.0).collect()
    }

    fn data_dir(&self) -> PathBuf {
        self.out.join("data")
    }

    fn profile_dir(&self, round: usize) -> PathBuf {
        self.out.join("profiles").join(format!("round-{round}"))
    }

    /// Every dataset measured before `round`'s profile is trained.
    fn datasets(&self, round: usize) -> Vec<PathBuf> {
        let d = self.data_dir();
        let mut v = self.extra_data.clone();
        v.push(d.join("compute_initial.jsonl"));
        if self.comm_preset.is_none() {
            v.extend(self.devices().iter().map(|n| d.join(format!("comm_d{n}.jsonl"))));
        }
        v.extend((0..round).map(|r| d.join(format!("sets_round_{r}.jsonl"))).filter(|p| p.is_file()));
        v
    }

    /// The round's profile as the loop plans with it: comm from the analytical preset where no comm is
    /// measured (at the batch the profile was measured at).
    fn with_comm(&self, model: NeuralModel) -> Result<NeuralModel> {
        let Some(p) = &self.comm_preset else { return Ok(model) };
        let batch = model.global_batch().unwrap_or(u64::from(self.batch));
        Ok(planner_core::cost::profiles::with_preset_comm(model, p, batch)?)
    }

    fn collector(&self) -> Command {
        let mut c = Command::new(&self.collector);
        c.args(["--backend", &self.backend, "--quiet"]);
        if !self.timing.guard {
            c.arg("--no-guard");
        } else if let Some(q) = self.timing.quiet_reference_ms {
            c.args(["--guard-quiet-reference-ms", &q.to_string()]);
        }
        c
    }
}

/// Runs a collector command, failing with its error output.
fn run(mut cmd: Command, what: &str) -> Result<()> {
    let status = cmd.status().with_context(|| format!("{what}: starting the collector"))?;
    if !status.success() {
        bail!("{what}: the collector exited with {status}; rerun the same command to resume");
    }
    Ok(())
}

fn load_state(opts: &CalibrateOptions) -> Result<State> {
    let path = opts.out.join("state.json");
    let fingerprint = opts.fingerprint();
    if !path.is_file() {
        return Ok(State { fingerprint, done: BTreeSet::new() });
    }
    let s: State = serde_json::from_str(&std::fs::read_to_string(&path)?)
        .with_context(|| format!("reading {}", path.display()))?;
    if s.fingerprint != fingerprint {
        bail!(
            "{} was started with other options ({}); use the same options to resume, or another --out",
            path.display(),
            s.fingerprint
        );
    }
    Ok(s)
}

fn save_state(opts: &CalibrateOptions, s: &State) -> Result<()> {
    Ok(write_atomic(&opts.out.join("state.json"), serde_json::to_string_pretty(s)?.as_bytes())?)
}

/// Runs the loop (resuming what `--out` already holds).
pub fn calibrate(opts: &CalibrateOptions) -> Result<Vec<RoundReport>> {
    opts.validate()?;
    std::fs::create_dir_all(opts.data_dir()).with_context(|| format!("creating {}", opts.data_dir().display()))?;
    let mut state = load_state(opts)?;
    save_state(opts, &state)?;
    // A stage of `kind` (`None`: planning only) runs unless done; `Ok(false)` halts the loop before a stage
    // `--only` leaves to another machine.
    let stage =
        |state: &mut State, name: &str, kind: Option<Only>, f: &mut dyn FnMut() -> Result<()>| -> Result<bool> {
            if state.done.contains(name) {
                return Ok(true);
            }
            if let (Some(only), Some(kind)) = (opts.only, kind)
                && only != kind
            {
                eprintln!(
                    "calibrate: stopping before `{name}` (--only {}); rerun without `--only` where it can run",
                    if only == Only::Measure { "measure" } else { "train" }
                );
                return Ok(false);
            }
            eprintln!("calibrate: {name}");
            f()?;
            state.done.insert(name.to_string());
            save_state(opts, state)?;
            Ok(true)
        };
    let mut reports = Vec::new();
    if !stage(&mut state, "initial sets", Some(Only::Measure), &mut || {
        let mut c = opts.collector();
        c.args(["compute", "--sampler", "mixed", "--resume", "--samples", &opts.initial_samples.to_string()])
            .args(opts.timing.set_args())
            .args(["--seed", &task_seed(opts.seed, 1).to_string(), "--batch-size", &opts.batch.to_string()])
            .args(["--mem-cap", &opts.mem_cap, "--out"])
            .arg(opts.data_dir().join("compute_initial.jsonl"));
        run(c, "initial sets")
    })? {
        return Ok(reports);
    }
    for d in opts.devices().into_iter().filter(|_| opts.comm_preset.is_none()) {
        if !stage(&mut state, &format!("comm D={d}"), Some(Only::Measure), &mut || {
            let mut c = opts.collector();
            c.args(["comm", "--resume", "--devices", &d.to_string(), "--samples", &opts.comm_samples.to_string()])
                .args(["--seed", &task_seed(opts.seed, 2 + d).to_string(), "--batch-size", &opts.batch.to_string()])
                .args(["--max-delay-ms", &opts.comm_max_delay_ms.to_string()])
                .args(["--row-wise-max", &opts.comm_row_wise_max.to_string(), "--log-delays", "--out"])
                .arg(opts.data_dir().join(format!("comm_d{d}.jsonl")));
            run(c, &format!("comm D={d}"))
        })? {
            return Ok(reports);
        }
    }
    for round in 0..=opts.rounds {
        // Round 0 from a given profile only copies it.
        let kind = if round == 0 && opts.start_profile.is_some() { None } else { Some(Only::Train) };
        if !stage(&mut state, &format!("round {round}: train"), kind, &mut || train_round(opts, round))? {
            break;
        }
        let model = opts.with_comm(load_profile(&opts.profile_dir(round))?)?;
        let holdout_dir = opts.out.join("holdout").join(format!("round-{round}"));
        if !stage(&mut state, &format!("round {round}: held-out"), Some(Only::Measure), &mut || {
            let report = holdout(opts, round, &model, &holdout_dir)?;
            print_report(&report);
            Ok(write_atomic(&holdout_dir.join("report.json"), serde_json::to_string_pretty(&report)?.as_bytes())?)
        })? {
            break;
        }
        let report: RoundReport = serde_json::from_str(&std::fs::read_to_string(holdout_dir.join("report.json"))?)?;
        reports.push(report);
        if round == opts.rounds {
            break;
        }
        let requests = opts.out.join("requests").join(format!("round-{round}.jsonl"));
        stage(&mut state, &format!("round {round}: propose"), None, &mut || {
            let sets = propose(opts, round, &model)?;
            std::fs::create_dir_all(opts.out.join("requests"))?;
            let text: String =
                sets.iter().map(|s| serde_json::to_string(s).map(|l| l + "\n")).collect::<Result<_, _>>()?;
            Ok(write_atomic(&requests, text.as_bytes())?)
        })?;
        if !stage(&mut state, &format!("round {round}: measure"), Some(Only::Measure), &mut || {
            if std::fs::read_to_string(&requests)?.trim().is_empty() {
                eprintln!("calibrate: round {round} has no new set to measure");
                return Ok(());
            }
            let mut c = opts.collector();
            c.args(["sets", "--resume", "--batch-size", &opts.batch.to_string()])
                .args(opts.timing.set_args())
                .arg("--requests")
                .arg(&requests)
                .arg("--out")
                .arg(opts.data_dir().join(format!("sets_round_{round}.jsonl")));
            run(c, &format!("round {round}: measure"))
        })? {
            break;
        }
    }
    Ok(reports)
}

fn train_round(opts: &CalibrateOptions, round: usize) -> Result<()> {
    let dir = opts.profile_dir(round);
    let tmp = dir.with_extension("partial");
    if let (0, Some(start)) = (round, &opts.start_profile) {
        // Round 0 is the given profile, copied as it is (its card and graphs).
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp)?;
        }
        std::fs::create_dir_all(&tmp)?;
        let card = start.join("card.json");
        std::fs::copy(&card, tmp.join("card.json")).with_context(|| format!("copying {}", card.display()))?;
        for (name, bytes) in onnx_files(start)? {
            std::fs::write(tmp.join(&name), bytes).with_context(|| format!("writing {}", tmp.join(&name).display()))?;
        }
        eprintln!("calibrate: round 0 is the profile {}", start.display());
    } else {
        let p = ProfileOptions {
            name: opts.name.clone(),
            datasets: opts.datasets(round),
            unseen: Vec::new(),
            out: tmp.clone(),
            train: opts.train.clone(),
            members: opts.members,
            loss: opts.loss,
            coverage: 0.9,
            log_features: true,
            speed_normalise: true,
            resume: true,
            target: opts.target,
            command: format!("{} (round {round})", opts.command),
        };
        let outcome = train_profile(&p)?;
        eprintln!(
            "calibrate: round {round} profile on {} samples, test MAPE {:.1}%",
            outcome.card.compute.dataset.samples,
            outcome.card.compute.metrics.get("neural/random/test").map_or(f64::NAN, |m| m.mape_pct)
        );
    }
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing the stale {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir.parent().unwrap_or(&opts.out))?;
    std::fs::rename(&tmp, &dir).with_context(|| format!("renaming {} to {}", tmp.display(), dir.display()))
}

/// Loads a profile directory written by the trainer.
pub fn load_profile(dir: &Path) -> Result<NeuralModel> {
    let card = std::fs::read_to_string(dir.join("card.json"))
        .with_context(|| format!("reading {}/card.json", dir.display()))?;
    let files = onnx_files(dir)?;
    NeuralModel::from_profile(&card, |f| files.get(f).map(Vec::as_slice))
        .with_context(|| format!("loading {}", dir.display()))
}

/// The tasks of a cell: the NeuroShard protocol at `devices` × `max_dim`, caps `mem_cap`, under `memory`.
fn cell_tasks(
    devices: usize,
    max_dim: u32,
    count: usize,
    seed: u64,
    mem_cap: u64,
    memory: planner_core::MemoryRule,
) -> Result<Vec<Task>> {
    let suite = SuiteSpec::neuroshard(devices, max_dim, count, seed);
    suite
        .tasks()?
        .into_iter()
        .map(|st| Ok(Task::new(st.task.tables, planner_core::Devices::uniform(devices, mem_cap)?)?.with_memory(memory)))
        .collect()
}

/// Plans `task` with `planner`; `None` when it fails or overfills a device.
fn plan_with(
    task: &Task,
    planner: &str,
    model: &dyn CostModel,
    seed: u64,
) -> Result<Option<(Plan, planner_core::PlanReport)>> {
    let entry = planner_core::planners::planner(planner)?;
    let Ok(plan) = entry.build().plan(task, &PlanContext::new(model, seed)) else { return Ok(None) };
    let report = evaluate(task, &plan, model, CostDefinition::NeuroShard)?;
    Ok(report.feasible.then_some((plan, report)))
}

fn cell_label(d: usize, m: u32) -> String {
    format!("{d}x{m}")
}

fn holdout_seed(opts: &CalibrateOptions) -> u64 {
    task_seed(opts.seed, 0x401D)
}

fn holdout(opts: &CalibrateOptions, round: usize, model: &NeuralModel, dir: &Path) -> Result<RoundReport> {
    let cap = planner_core::units::parse_bytes("--mem-cap", &opts.mem_cap)?;
    let mut cells = BTreeMap::new();
    for &(d, m) in &opts.cells {
        let label = cell_label(d, m);
        let mut judged = Vec::new();
        for (k, task) in cell_tasks(d, m, opts.holdout_tasks, holdout_seed(opts), cap, opts.memory)?.iter().enumerate()
        {
            let task_dir = dir.join(&label).join(format!("task-{k}"));
            std::fs::create_dir_all(&task_dir)?;
            let mut paths = Vec::new();
            for name in &opts.planners {
                if let Some((plan, report)) = plan_with(task, name, model, 0)? {
                    let path = task_dir.join(format!("{}.plan.json", name.replace('+', "_")));
                    let doc = PlanDocument::new(name, 0, task.clone(), &plan, report);
                    write_atomic(&path, serde_json::to_string(&doc)?.as_bytes())?;
                    paths.push(path);
                }
            }
            if paths.is_empty() {
                continue;
            }
            let out = task_dir.join("measured.json");
            if !out.is_file() {
                let mut c = opts.collector();
                c.arg("measure-plan").args(&paths).args(["--batch-size", &opts.batch.to_string()]);
                c.args(opts.timing.args());
                if opts.comm_preset.is_some() {
                    c.arg("--comm-from-plan");
                }
                c.args([
                    "--rounds",
                    &opts.measure_rounds.to_string(),
                    "--seed",
                    &task_seed(opts.seed, k).to_string(),
                    "--out",
                ])
                .arg(&out);
                run(c, &format!("round {round}: held-out {label} task {k}"))?;
            }
            let measured = MeasuredPlans::from_json(&std::fs::read_to_string(&out)?)?;
            judged.push(JudgedTask::from_measured(format!("{label}/{k}"), measured, model));
        }
        cells.insert(label, judge_summary(&judged, &opts.planners));
    }
    let samples = load_profile(&opts.profile_dir(round)).map_or(0, |m| m.card().compute.dataset.samples);
    Ok(RoundReport { round, samples, cells })
}

fn print_report(r: &RoundReport) {
    // A figure that could not be computed (no task, one round, ties only) prints as "-".
    let show = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.filter(|x| x.is_finite()).map_or_else(|| "-".into(), f);
    for (cell, s) in &r.cells {
        let a = s.accuracy_at_reference_speed.as_ref().unwrap_or(&s.accuracy);
        eprintln!(
            "round {} {cell}: {} tasks, plan MAPE {} as measured, {} at the reference speed (bias {}), device MAPE {}, tau {} (the judge against itself {}), interval coverage {}, judge cv {}",
            r.round,
            s.tasks,
            show(s.accuracy.plan_mape_pct, &|v| format!("{v:.1}%")),
            show(s.accuracy_at_reference_speed.as_ref().and_then(|x| x.plan_mape_pct), &|v| format!("{v:.1}%")),
            show(a.plan_bias_pct, &|v| format!("{v:+.1}%")),
            show(a.device_mape_pct, &|v| format!("{v:.1}%")),
            show(s.kendall_tau_mean, &|v| format!("{v:.2}")),
            show(s.self_tau_mean, &|v| format!("{v:.2}")),
            show(a.interval_coverage, &|c| format!("{:.0}%", 100.0 * c)),
            show(s.measurement_cv_pct, &|v| format!("{v:.1}%")),
        );
        for p in &s.planners {
            eprintln!(
                "    {:<20} solved {:>2}  predicted {:>8}  measured {:>8}",
                p.planner,
                p.solved,
                show(p.predicted_mean_ms, &|v| format!("{v:.2}")),
                show(p.measured_mean_ms, &|v| format!("{v:.2}"))
            );
        }
    }
}

/// A candidate set: its request and its score (uncertainty × decisiveness).
struct Candidate {
    key: String,
    request: SetRequest,
    score: f64,
}

/// The identity of a measured or requested set: its pieces as (table, rows), sorted.
fn set_key(pieces: &[(TableInput, Option<RowRange>)]) -> Result<String> {
    let mut keys = pieces.iter().map(serde_json::to_string).collect::<Result<Vec<_>, _>>()?;
    keys.sort();
    Ok(keys.join("|"))
}

/// Keys of every set measured so far.
fn measured_keys(opts: &CalibrateOptions, round: usize) -> Result<BTreeSet<String>> {
    let mut keys = BTreeSet::new();
    for path in opts.datasets(round + 1) {
        if !path.is_file() {
            continue;
        }
        for r in read_records(&path)? {
            if let Measurement::Compute { tables, .. } = &r.measurement {
                let pieces: Vec<(TableInput, Option<RowRange>)> =
                    tables.iter().map(|t: &TableRecord| (t.table.clone(), t.rows)).collect();
                keys.insert(set_key(&pieces)?);
            }
        }
    }
    Ok(keys)
}

/// Neighbours of `plan`: one piece moved to another device, two pieces of different devices swapped, a
/// whole table made row-wise over every device (TorchRec's equal split), or a whole table halved
/// column-wise with the new half on another device. Only plans that fit memory are kept.
fn neighbours(task: &Task, plan: &Plan, count: usize, rng: &mut ChaCha8Rng) -> Vec<Plan> {
    let devices = task.devices.count();
    let mut out = Vec::new();
    for _ in 0..count * 4 {
        if out.len() >= count || devices < 2 {
            break;
        }
        let mut pieces: Vec<Piece> = plan.pieces().to_vec();
        let pick = rng.random_range(0..pieces.len());
        match rng.random_range(0..4u32) {
            0 => pieces[pick].device = (pieces[pick].device + rng.random_range(1..devices)) % devices,
            1 => {
                let other = rng.random_range(0..pieces.len());
                let (first, second) = (pieces[pick].device, pieces[other].device);
                pieces[pick].device = second;
                pieces[other].device = first;
            }
            2 => {
                let table_id = pieces[pick].table_id;
                let table = &task.tables[table_id];
                if pieces.iter().filter(|p| p.table_id == table_id).count() != 1 || table.rows < devices as u64 {
                    continue;
                }
                pieces.retain(|p| p.table_id != table_id);
                let mut offset = 0u64;
                let split = planner_core::planners::torchrec::row_split(table.rows, task.devices.mem_cap_bytes());
                for (d, count) in split.into_iter().enumerate() {
                    if count > 0 {
                        pieces.push(Piece::row_range(table_id, table.dim, d, offset, count));
                    }
                    offset += count;
                }
            }
            _ => {
                let p = pieces[pick];
                if p.rows.is_some()
                    || p.dim < 8
                    || !(p.dim / 2).is_multiple_of(4)
                    || p.dim != task.tables[p.table_id].dim
                {
                    continue;
                }
                let half = p.dim / 2;
                pieces[pick].dim = half;
                pieces.push(Piece::cols(p.table_id, half, half, (p.device + rng.random_range(1..devices)) % devices));
            }
        }
        if let Ok(candidate) = Plan::new(task, pieces) {
            let bytes = candidate
                .pieces_by_device(devices)
                .iter()
                .map(|idx| {
                    idx.iter()
                        .map(|&k| {
                            let p = candidate.pieces()[k];
                            task.tables[p.table_id].block_bytes(p.row_count(task.tables[p.table_id].rows), p.dim)
                        })
                        .sum::<u64>()
                })
                .collect::<Vec<_>>();
            if bytes.iter().zip(task.devices.mem_cap_bytes()).all(|(b, c)| b <= c) {
                out.push(candidate);
            }
        }
    }
    out
}

/// The device sets of a plan as set requests, with each set's share of the plan's predicted cost.
fn plan_sets(
    task: &Task,
    plan: &Plan,
    model: &NeuralModel,
    task_key: u64,
    tag: &str,
    out: &mut Vec<Candidate>,
) -> Result<()> {
    let report = evaluate(task, plan, model, CostDefinition::NeuroShard)?;
    let pieces = plan.pieces();
    for (d, idx) in plan.pieces_by_device(task.devices.count()).iter().enumerate() {
        if idx.is_empty() {
            continue;
        }
        let refs: Vec<PieceRef<'_>> =
            idx.iter().map(|&i| PieceRef::of(&task.tables[pieces[i].table_id], &pieces[i])).collect();
        let members = model.compute_members_ms(&refs)?;
        let (mean, sd) = members_mean_sd(&members);
        // One member gives no spread: every set counts as equally uncertain.
        let sd = if members.len() > 1 { sd } else { 1.0 };
        // Decisive: the device's total against the plan's cost (the bottleneck decides it).
        let share = report.devices[d].total_ms / report.cost_ms.max(1e-9);
        let decisive = if share >= 0.9 { 1.0 } else { 0.25 + 0.5 * share };
        let uncertainty = sd / mean.max(1e-3);
        let request_pieces: Vec<PieceRequest> = idx
            .iter()
            .map(|&i| {
                let p = pieces[i];
                let mut t = task.tables[p.table_id].clone();
                t.dim = p.dim;
                PieceRequest {
                    table: TableInput::from(&t),
                    rows: p.rows.filter(|r| r.count < t.rows),
                    lookup_seed: task_seed(task_key, p.table_id),
                }
            })
            .collect();
        let key = set_key(&request_pieces.iter().map(|p| (p.table.clone(), p.rows)).collect::<Vec<_>>())?;
        out.push(Candidate {
            key,
            request: SetRequest {
                schema: SET_REQUEST_SCHEMA.into(),
                key: format!("{tag}/device-{d}"),
                pieces: request_pieces,
            },
            score: uncertainty * decisive,
        });
    }
    Ok(())
}

fn propose(opts: &CalibrateOptions, round: usize, model: &NeuralModel) -> Result<Vec<SetRequest>> {
    let cap = planner_core::units::parse_bytes("--mem-cap", &opts.mem_cap)?;
    let mut candidates = Vec::new();
    let mut rng = ChaCha8Rng::seed_from_u64(task_seed(opts.seed, 0x5E75 + round));
    for &(d, m) in &opts.cells {
        let seed = task_seed(opts.seed, 0x7A41 + 100 * round + d * 1000 + m as usize);
        for (k, task) in cell_tasks(d, m, opts.train_tasks, seed, cap, opts.memory)?.iter().enumerate() {
            let task_key = task_seed(seed, k);
            let mut best: Option<(Plan, f64)> = None;
            for name in &opts.planners {
                if let Some((plan, report)) = plan_with(task, name, model, 0)? {
                    plan_sets(
                        task,
                        &plan,
                        model,
                        task_key,
                        &format!("round-{round}/{d}x{m}/task-{k}/{name}"),
                        &mut candidates,
                    )?;
                    if best.as_ref().is_none_or(|b| report.cost_ms < b.1) {
                        best = Some((plan, report.cost_ms));
                    }
                }
            }
            if let Some((plan, _)) = best {
                for (j, nb) in neighbours(task, &plan, opts.neighbours, &mut rng).iter().enumerate() {
                    plan_sets(
                        task,
                        nb,
                        model,
                        task_key,
                        &format!("round-{round}/{d}x{m}/task-{k}/neighbour-{j}"),
                        &mut candidates,
                    )?;
                }
            }
        }
    }
    let seen = measured_keys(opts, round)?;
    candidates.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.key.cmp(&b.key)));
    let mut chosen = Vec::new();
    let mut keys = BTreeSet::new();
    for c in candidates {
        if chosen.len() >= opts.sets_per_round {
            break;
        }
        if seen.contains(&c.key) || !keys.insert(c.key.clone()) {
            continue;
        }
        chosen.push(c.request);
    }
    eprintln!("calibrate: round {round} proposes {} sets to measure", chosen.len());
    Ok(chosen)
}

/// The records of one dataset the loop wrote (one machine).
fn read_records(path: &Path) -> Result<Vec<planner_core::dataset::CostRecord>> {
    let text = crate::data::read_text(path)?;
    let mut reader = planner_core::dataset::DatasetReader::new(planner_core::dataset::HardwarePolicy::Single);
    reader.add(&path.display().to_string(), &text)?;
    Ok(reader.into_records())
}

/// Prices every set of a request file with the profile at `dir`: CSV `line,key,pieces,predicted_ms,low_ms,
/// high_ms,members_ms[,measured_ms,measured_at_reference_ms]` (members separated by `;`). With `measured`,
/// the compute dataset `shardplan-collect sets` wrote for the same file is joined by sample index, its
/// times also given at the profile's reference speed when both have one.
pub fn predict(dir: &Path, requests: &Path, measured: Option<&Path>) -> Result<String> {
    let model = load_profile(dir)?;
    let text = std::fs::read_to_string(requests).with_context(|| format!("reading {}", requests.display()))?;
    let mut by_index: BTreeMap<u64, (f64, Option<f64>)> = BTreeMap::new();
    if let Some(path) = measured {
        for r in read_records(path)? {
            if let Measurement::Compute { total, .. } = &r.measurement {
                by_index.insert(r.sample_index, (total.median_ms, r.conditions.and_then(|c| c.reference_ms)));
            }
        }
    }
    let reference = model.card().compute.reference_ms;
    let z = model.interval_z();
    let mut out = String::from("line,key,pieces,predicted_ms,low_ms,high_ms,members_ms");
    if measured.is_some() {
        out.push_str(",measured_ms,measured_at_reference_ms");
    }
    out.push('\n');
    for (i, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let context = format!("{} line {}", requests.display(), i + 1);
        let req: SetRequest = serde_json::from_str(line).with_context(|| context.clone())?;
        let pieces = req.validate(&context)?;
        let refs: Vec<PieceRef<'_>> = pieces
            .iter()
            .map(|(t, rows, _)| PieceRef { table: t, dim: t.dim, rows: rows.map_or(t.rows, |r| r.count) })
            .collect();
        let members = model.compute_members_ms(&refs)?;
        let mean = model.compute_ms(&refs)?;
        let (_, sd) = members_mean_sd(&members);
        let half = z.map_or(0.0, |z| z * sd);
        let _ = write!(
            out,
            "{i},{},{},{mean:.4},{:.4},{:.4},{}",
            req.key.replace(',', ";"),
            pieces.len(),
            (mean - half).max(0.0),
            mean + half,
            members.iter().map(|m| format!("{m:.4}")).collect::<Vec<_>>().join(";")
        );
        if measured.is_some() {
            match by_index.get(&(i as u64)) {
                Some((ms, r)) => {
                    let at = match (reference, r) {
                        (Some(nominal), Some(r)) => format!("{:.4}", ms * nominal / r),
                        _ => String::new(),
                    };
                    let _ = write!(out, ",{ms:.4},{at}");
                }
                None => out.push_str(",,"),
            }
        }
        out.push('\n');
    }
    Ok(out)
}
