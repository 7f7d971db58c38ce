//! End-to-end tests of the `shardplan-collect` binary on tiny inputs: collections, resume after a
//! kill or a cut line, shards, Ctrl-C, measure-plan and bad inputs. Batches are tiny (16–32 bags) and
//! tables capped at a few MiB so the whole file runs in seconds on two cores.

// Helpers outside `#[test]` functions are test code too; clippy.toml only exempts the test functions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use planner_core::dataset::{CostRecord, HardwarePolicy, Measurement, parse_dataset};

const BIN: &str = env!("CARGO_BIN_EXE_shardplan-collect");

/// Small compute runs: tiny batch, ≤ 3 tables of ≤ 4 MiB, one warm-up and two timed runs, no flush.
const TINY: &[&str] =
    &["--batch-size", "16", "--max-tables", "3", "--mem-cap", "4MiB", "--warmup", "1", "--reps", "2", "--no-flush"];

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("shardplan-collect-it-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    let _ = std::fs::remove_file(&p);
    p
}

/// Runs the collector with the contention guard off: these tests run beside each other and beside a
/// build, and check what is recorded, not how fast (`the_guard_refuses_a_busy_machine` checks the guard).
fn collect(args: &[&str]) -> Output {
    Command::new(BIN).args(["--quiet", "--no-guard"]).args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn compute(out: &Path, samples: u64, extra: &[&str]) -> Output {
    let samples = samples.to_string();
    let mut args = vec!["compute", "--samples", &samples, "--out", out.to_str().unwrap()];
    args.extend_from_slice(TINY);
    args.extend_from_slice(extra);
    collect(&args)
}

fn records(path: &Path) -> Vec<CostRecord> {
    parse_dataset("test", &std::fs::read_to_string(path).unwrap(), HardwarePolicy::Single).unwrap()
}

fn indices(records: &[CostRecord]) -> Vec<u64> {
    records.iter().map(|r| r.sample_index).collect()
}

/// The table set of a compute record, as comparable text.
fn tables_of(r: &CostRecord) -> String {
    match &r.measurement {
        Measurement::Compute { tables, .. } => serde_json::to_string(tables).unwrap(),
        Measurement::Comm { .. } => panic!("compute record expected"),
    }
}

#[test]
fn compute_collection_writes_valid_self_contained_records() {
    let out = tmp("compute.jsonl");
    let o = compute(&out, 5, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let recs = records(&out);
    assert_eq!(indices(&recs), vec![0, 1, 2, 3, 4]);
    for r in &recs {
        assert_eq!(r.hardware.backend.name(), "cpu");
        assert_eq!(r.batch_size, 16);
        let Measurement::Compute { tables, fwd, total, .. } = &r.measurement else { panic!("compute") };
        // The default (mixed) sampler draws up to 30 pieces; SPEC sets up to --max-tables.
        assert!((1..=30).contains(&tables.len()));
        assert!(tables.iter().all(|t| t.features.len() == 20));
        assert_eq!(fwd.reps_ms.len(), 2);
        assert!(total.median_ms >= fwd.median_ms);
    }
    let check = collect(&["check", out.to_str().unwrap()]);
    assert!(check.status.success(), "{}", stderr(&check));
    assert!(String::from_utf8_lossy(&check.stdout).contains("5 records: 5 compute"));
    // The SPEC sampler keeps to --max-tables whole tables.
    let spec = tmp("compute-spec.jsonl");
    assert!(compute(&spec, 5, &["--sampler", "spec"]).status.success());
    for r in &records(&spec) {
        let Measurement::Compute { tables, .. } = &r.measurement else { panic!("compute") };
        assert!((1..=3).contains(&tables.len()) && tables.iter().all(|t| t.rows.is_none()));
    }
}

/// Two runs on one `--out` (both with `--resume`) used to measure the same samples and append them twice.
/// While another process holds the output's lock, a run fails at once, naming the file, and leaves it
/// as it was; once the lock is released the same command resumes.
#[test]
fn a_second_run_on_a_locked_output_fails_at_once_and_leaves_it_untouched() {
    let out = tmp("locked.jsonl");
    assert!(compute(&out, 3, &[]).status.success());
    let before = std::fs::read(&out).unwrap();
    let holder = std::fs::OpenOptions::new().append(true).open(&out).unwrap();
    holder.try_lock().unwrap();
    let second = compute(&out, 6, &["--resume"]);
    let e = stderr(&second);
    assert_eq!(second.status.code(), Some(1), "{e}");
    assert!(e.contains(out.to_str().unwrap()) && e.contains("another run holds it"), "{e}");
    assert_eq!(std::fs::read(&out).unwrap(), before);
    drop(holder);
    let resumed = compute(&out, 6, &["--resume"]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    assert_eq!(indices(&records(&out)), vec![0, 1, 2, 3, 4, 5]);
}

#[test]
fn resume_repairs_a_cut_line_and_neither_duplicates_nor_loses_samples() {
    let out = tmp("resume.jsonl");
    assert!(compute(&out, 4, &[]).status.success());
    let full = records(&out);
    // Cut the file in the middle of its last line, as a kill during a write would.
    let text = std::fs::read_to_string(&out).unwrap();
    let cut = text.len() - text.lines().last().unwrap().len() / 2 - 1;
    std::fs::write(&out, &text[..cut]).unwrap();
    let e = collect(&["check", out.to_str().unwrap()]);
    assert!(!e.status.success() && stderr(&e).contains("truncated"), "{}", stderr(&e));
    // Without --resume an existing file is refused; with it, the cut sample is measured again.
    let refused = compute(&out, 6, &[]);
    assert!(!refused.status.success() && stderr(&refused).contains("--resume"), "{}", stderr(&refused));
    let o = compute(&out, 6, &["--resume"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("repaired"), "{}", stderr(&o));
    let recs = records(&out);
    assert_eq!(indices(&recs), vec![0, 1, 2, 3, 4, 5]);
    // Sample 3 was re-measured on the same table set: workloads are a function of (seed, index).
    assert_eq!(tables_of(&recs[3]), tables_of(&full[3]));
}

#[test]
fn resume_after_a_kill_completes_the_run_exactly() {
    let out = tmp("killed.jsonl");
    let mut args: Vec<&str> =
        vec!["--quiet", "--no-guard", "compute", "--samples", "300", "--out", out.to_str().unwrap()];
    args.extend_from_slice(TINY);
    let mut child = Command::new(BIN).args(&args).stderr(Stdio::null()).spawn().unwrap();
    let start = Instant::now();
    while std::fs::read_to_string(&out).map_or(0, |t| t.lines().count()) < 3
        && start.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before = std::fs::read_to_string(&out).unwrap().lines().count();
    let o = compute(&out, 300, &["--resume"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = indices(&records(&out));
    assert_eq!(got.iter().copied().collect::<BTreeSet<_>>().len(), got.len(), "duplicates after resume");
    assert_eq!(
        got.iter().copied().collect::<BTreeSet<_>>(),
        (0..300).collect(),
        "lost samples (killed after {before} lines)"
    );
}

#[test]
fn ctrl_c_stops_after_the_sample_in_flight_and_resume_finishes() {
    let out = tmp("sigint.jsonl");
    let mut args: Vec<&str> =
        vec!["--quiet", "--no-guard", "compute", "--samples", "100000", "--out", out.to_str().unwrap()];
    args.extend_from_slice(TINY);
    let child = Command::new(BIN).args(&args).stderr(Stdio::piped()).spawn().unwrap();
    let start = Instant::now();
    while std::fs::read_to_string(&out).map_or(0, |t| t.lines().count()) < 2
        && start.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    let kill = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert!(stderr(&o).contains("--resume"), "{}", stderr(&o));
    // Only whole lines: the sample in flight was finished and written, nothing was cut.
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.ends_with('\n'));
    let n = records(&out).len() as u64;
    assert!((2..100_000).contains(&n));
    let o = compute(&out, n + 3, &["--resume"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(indices(&records(&out)), (0..n + 3).collect::<Vec<_>>());
}

#[test]
fn shards_partition_a_run_and_match_the_unsharded_workloads() {
    let whole = tmp("whole.jsonl");
    assert!(compute(&whole, 7, &[]).status.success());
    let parts: Vec<PathBuf> = (0..3).map(|i| tmp(&format!("shard{i}.jsonl"))).collect();
    for (i, p) in parts.iter().enumerate() {
        let shard = format!("{i}/3");
        let o = compute(p, 7, &["--shard", &shard]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(records(p).iter().all(|r| r.sample_index % 3 == i as u64));
    }
    let mut merged: Vec<CostRecord> = parts.iter().flat_map(|p| records(p)).collect();
    merged.sort_by_key(|r| r.sample_index);
    let reference = records(&whole);
    assert_eq!(indices(&merged), indices(&reference));
    for (a, b) in merged.iter().zip(&reference) {
        assert_eq!(tables_of(a), tables_of(b), "sample {}", a.sample_index);
    }
    // Resuming a shard file under another shard is refused, naming the field.
    let o = compute(&parts[0], 7, &["--shard", "1/3", "--resume"]);
    assert!(!o.status.success() && stderr(&o).contains("`run`"), "{}", stderr(&o));
}

#[test]
fn comm_collection_times_every_device() {
    let out = tmp("comm.jsonl");
    let o = collect(&[
        "comm",
        "--samples",
        "2",
        "--devices",
        "3",
        "--batch-size",
        "24",
        "--warmup",
        "0",
        "--reps",
        "2",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    for r in records(&out) {
        let Measurement::Comm { device_dims, delays_ms, fw, bw, .. } = &r.measurement else { panic!("comm") };
        assert_eq!((device_dims.len(), fw.len(), bw.len()), (3, 3, 3));
        assert!(delays_ms.contains(&0.0));
        // The earliest rank must wait for the latest one's block.
        let max_delay = delays_ms.iter().copied().fold(0.0, f64::max);
        let first = delays_ms.iter().position(|&d| d == 0.0).unwrap();
        assert!(fw[first].median_ms >= max_delay - 1e-3, "{} vs delay {max_delay}", fw[first].median_ms);
    }
}

/// A small 2-device plan document of pool tables (rows capped at 1,000).
fn small_plan(path: &Path, devices: &[usize], planner: &str) {
    use planner_core::cost::{AnalyticalModel, CostDefinition, HardwareProfile, evaluate};
    use planner_core::{Devices, Plan, PlanDocument, Task};
    let pool = planner_core::pool::dlrm_pool().unwrap();
    let tables = (0..4)
        .map(|i| {
            let mut t = pool[i * 10 + 1].at_dim(format!("t{i}"), 16, planner_core::ElementType::Fp32).unwrap();
            t.rows = t.rows.min(1000);
            t
        })
        .collect();
    let task = Task::new(tables, Devices::uniform(2, 1 << 30).unwrap()).unwrap();
    let plan = Plan::unsplit(&task, devices).unwrap();
    let model = AnalyticalModel::new(HardwareProfile::torchrec_default(), 65_536).unwrap();
    let report = evaluate(&task, &plan, &model, CostDefinition::NeuroShard).unwrap();
    let doc = PlanDocument::new(planner, 0, task, &plan, report);
    std::fs::write(path, serde_json::to_string(&doc).unwrap()).unwrap();
}

/// A measurement whose rounds ran at different speeds takes the odd round again, as many times as there
/// are rounds, before refusing it (here under a drift limit no two rounds' readings meet); nothing is
/// written. Under an ordinary limit the same run is recorded with no round taken again.
#[test]
fn measure_plan_takes_a_drifted_round_again_before_refusing_it() {
    let plan = tmp("drift-plan.json");
    small_plan(&plan, &[0, 1, 0, 1], "first");
    let out = tmp("drift-measured.json");
    let _ = std::fs::remove_file(&out);
    let run = |drift: &str| {
        // The guard on, but blind to the tests and builds running beside this one: only the drift counts.
        Command::new(BIN)
            .args(["--guard-max-busy-pct", "100", "--guard-max-reference-ratio", "1000", "--guard-max-drift", drift])
            .args(["measure-plan", plan.to_str().unwrap(), "--batch-size", "32", "--warmup", "0", "--reps", "2"])
            .args(["--rounds", "2", "--no-flush", "--out", out.to_str().unwrap()])
            .output()
            .unwrap()
    };
    let o = run("1");
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains("0 outlier timings and 2 rounds taken again") && e.contains("drifted between rounds"), "{e}");
    assert!(e.contains("is taken again (re-take 1 of 2 at most)") && e.contains("(re-take 2 of 2 at most)"), "{e}");
    assert!(!out.exists());
    let o = run("1000");
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    assert!(e.contains("and 0 rounds taken again"), "{e}");
    assert!(out.exists());
}

/// Two plans of one task measured together in three rounds: every plan gets its breakdown, a cost
/// per round, and a device set the two plans share is timed once per round (4 distinct sets × 3).
#[test]
fn measure_plan_reports_the_planners_breakdown() {
    use planner_core::document::MeasuredPlans;
    let (first, second) = (tmp("plan-a.json"), tmp("plan-b.json"));
    small_plan(&first, &[0, 1, 0, 1], "first");
    small_plan(&second, &[0, 1, 1, 0], "second");
    let out = tmp("measured.json");
    let o = collect(&[
        "measure-plan",
        first.to_str().unwrap(),
        second.to_str().unwrap(),
        "--batch-size",
        "32",
        "--warmup",
        "0",
        "--reps",
        "2",
        "--rounds",
        "3",
        "--no-flush",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = MeasuredPlans::from_json(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!((v.rounds, v.plans.len()), (3, 2));
    assert_eq!(v.plans[0].planner, "first");
    for p in &v.plans {
        let m = &p.measured;
        assert_eq!(m.devices.len(), 2);
        assert_eq!(p.round_costs_ms.len(), 3);
        assert!(p.round_costs_ms.iter().all(|&c| c > 0.0) && p.cost_cv >= 0.0);
        // Without a guard no reference kernel is timed, and no reading is recorded.
        assert!(p.round_device_reference_ms.is_empty());
        for d in &m.devices {
            assert_eq!(d.pieces.len(), 2);
            assert!(d.compute_ms > 0.0);
            assert!((d.total_ms - (d.compute_ms + d.fw_comm_ms + d.bw_comm_ms)).abs() < 1e-9);
        }
        let max = m.devices.iter().map(|d| d.total_ms).fold(0.0, f64::max);
        assert!((m.cost_ms - max).abs() < 1e-9);
    }
    assert!(stderr(&o).contains("predicted"));
}

/// One GPU timing a 2-device plan's devices in turn: compute measured, comm copied from the plan; a
/// row-wise piece is measured as its own rows serving the table's lookups in its range.
#[test]
fn measure_plan_can_take_comm_from_the_plan_and_measures_row_pieces() {
    use planner_core::cost::{AnalyticalModel, CostDefinition, HardwareProfile, evaluate};
    use planner_core::document::MeasuredPlans;
    use planner_core::plan::Piece;
    use planner_core::{Devices, Plan, PlanDocument, Task};
    let pool = planner_core::pool::dlrm_pool().unwrap();
    let mut t = pool[11].at_dim("t0".into(), 16, planner_core::ElementType::Fp32).unwrap();
    t.rows = t.rows.clamp(100, 1000);
    let rows = t.rows;
    let task = Task::new(vec![t], Devices::uniform(2, 1 << 30).unwrap()).unwrap();
    let half = rows / 2;
    let pieces = vec![Piece::row_range(0, 16, 0, 0, half), Piece::row_range(0, 16, 1, half, rows - half)];
    let plan = Plan::new(&task, pieces).unwrap();
    let model = AnalyticalModel::new(HardwareProfile::torchrec_default(), 65_536).unwrap();
    let report = evaluate(&task, &plan, &model, CostDefinition::NeuroShard).unwrap();
    let doc = PlanDocument::new("test", 0, task, &plan, report.clone());
    let plan_path = tmp("rowplan.json");
    std::fs::write(&plan_path, serde_json::to_string(&doc).unwrap()).unwrap();
    let out = tmp("rowmeasured.json");
    let args = [
        "--batch-size",
        "32",
        "--warmup",
        "0",
        "--reps",
        "2",
        "--rounds",
        "1",
        "--no-flush",
        "--comm-from-plan",
        "--out",
    ];
    let o = collect(&[&["measure-plan", plan_path.to_str().unwrap()][..], &args, &[out.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let v = MeasuredPlans::from_json(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert!(v.comm.starts_with("modelled"), "{}", v.comm);
    let m = &v.plans[0].measured;
    for (d, p) in m.devices.iter().zip(&report.devices) {
        assert_eq!((d.fw_comm_ms, d.bw_comm_ms, d.delay_ms), (p.fw_comm_ms, p.bw_comm_ms, p.delay_ms));
        assert!(d.compute_ms > 0.0);
        assert!(d.pieces[0].contains("rows"), "{:?}", d.pieces);
    }
}

/// `--rounds` times every sample in several rounds: a record keeps `reps` runs of every round and their
/// median, says how many rounds (`protocol.rounds`), and is the same sample as a one-round run's; a run cut
/// inside a group of rounds resumes with the samples it lost, and a resume with other rounds is refused.
#[test]
fn rounds_keep_every_rounds_runs_and_resume() {
    let out = tmp("rounds.jsonl");
    // 26 samples: a full group of rounds (24) and a short one.
    let o = compute(&out, 26, &["--rounds", "3", "--seed", "5"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let recs = records(&out);
    assert_eq!(indices(&recs), (0..26).collect::<Vec<_>>());
    for r in &recs {
        assert_eq!((r.protocol.rounds, r.protocol.reps), (3, 2));
        let Measurement::Compute { fwd, bwd, total, .. } = &r.measurement else { panic!("compute") };
        assert!([fwd, bwd, total].iter().all(|t| t.reps_ms.len() == 6));
        assert_eq!(total.median_ms, planner_core::dataset::median(&total.reps_ms));
    }
    let one_path = tmp("rounds-one.jsonl");
    assert!(compute(&one_path, 3, &["--seed", "5"]).status.success());
    let one = records(&one_path);
    // One round is the protocol as before `--rounds`: the field is not written.
    assert!(one.iter().all(|r| r.protocol.rounds == 1));
    assert!(!std::fs::read_to_string(&one_path).unwrap().contains("\"rounds\""));
    for (a, b) in one.iter().zip(&recs) {
        assert_eq!(tables_of(a), tables_of(b), "sample {}", a.sample_index);
    }
    // Cut inside the second group (and mid-line): the resume repairs the file and measures what is missing.
    let text = std::fs::read_to_string(&out).unwrap();
    let keep: usize = text.split_inclusive('\n').take(25).map(str::len).sum::<usize>() + 40;
    std::fs::write(&out, &text[..keep]).unwrap();
    let o = compute(&out, 26, &["--rounds", "3", "--seed", "5", "--resume"]);
    assert!(o.status.success() && stderr(&o).contains("1 written now"), "{}", stderr(&o));
    assert_eq!(indices(&records(&out)), (0..26).collect::<Vec<_>>());
    let o = compute(&out, 27, &["--rounds", "2", "--seed", "5", "--resume"]);
    assert!(!o.status.success() && stderr(&o).contains("protocol"), "{}", stderr(&o));
    // Rounds out of range, and rounds of comm samples, are refused by name.
    let o = compute(&tmp("rounds0.jsonl"), 1, &["--rounds", "0"]);
    assert!(!o.status.success() && stderr(&o).contains("--rounds = 0"), "{}", stderr(&o));
    let comm = tmp("rounds-comm.jsonl");
    let o = collect(&["comm", "--devices", "2", "--samples", "1", "--rounds", "2", "--out", comm.to_str().unwrap()]);
    assert!(!o.status.success() && stderr(&o).contains("--rounds = 2"), "{}", stderr(&o));
}

/// `sets` measures exactly the sets a request file asks for, row-wise pieces with the lookups that
/// fall in their rows, and resumes without measuring a set twice.
#[test]
fn sets_measures_requested_pieces_and_resumes() {
    use planner_core::dataset::{PieceRequest, SET_REQUEST_SCHEMA, SetRequest};
    use planner_core::plan::RowRange;
    let pool = planner_core::pool::dlrm_pool().unwrap();
    let mut t = pool
        .iter()
        .find(|p| p.rows >= 1000 && p.pooling_factor > 1.0)
        .unwrap()
        .at_dim("big".into(), 8, planner_core::ElementType::Fp32)
        .unwrap();
    t.rows = 1000;
    let input = planner_core::TableInput::from(&t);
    let whole = PieceRequest { table: input.clone(), rows: None, lookup_seed: 7 };
    let quarter = |k: u64| PieceRequest {
        table: input.clone(),
        rows: Some(RowRange { offset: 250 * k, count: 250 }),
        lookup_seed: 7,
    };
    let requests = [
        SetRequest { schema: SET_REQUEST_SCHEMA.into(), key: "whole".into(), pieces: vec![whole] },
        SetRequest { schema: SET_REQUEST_SCHEMA.into(), key: "rows".into(), pieces: vec![quarter(0), quarter(3)] },
        SetRequest { schema: SET_REQUEST_SCHEMA.into(), key: "one".into(), pieces: vec![quarter(1)] },
    ];
    let req = tmp("requests.jsonl");
    std::fs::write(&req, requests.iter().map(|r| serde_json::to_string(r).unwrap() + "\n").collect::<String>())
        .unwrap();
    let out = tmp("sets.jsonl");
    let args = |n: &'static str| {
        let mut a = vec!["sets", "--requests", req.to_str().unwrap(), "--out", out.to_str().unwrap()];
        a.extend(["--batch-size", "64", "--warmup", "0", "--reps", "2", "--no-flush", n]);
        a
    };
    assert!(collect(&args("--resume")).status.success());
    let recs = records(&out);
    assert_eq!(indices(&recs), vec![0, 1, 2]);
    let Measurement::Compute { tables, .. } = &recs[1].measurement else { panic!("compute") };
    assert_eq!(tables.len(), 2);
    assert_eq!(tables[0].rows, Some(RowRange { offset: 0, count: 250 }));
    // The features are the cost model's view of the piece: its rows, its share of the pooling factor.
    assert_eq!(tables[0].features[2], 250.0);
    assert!((tables[0].features[1] - t.pooling_factor / 4.0).abs() < 1e-12);
    // The whole batch's lookups are split among the quarters: together they serve at most all of them.
    let whole_lookups = (64.0 * t.pooling_factor).round() as u64;
    let served: u64 = tables.iter().map(|x| x.lookups.unwrap()).sum();
    assert!(served <= whole_lookups, "{served} > {whole_lookups}");
    assert_eq!(recs[1].run.sampler.as_deref().map(|s| s.starts_with("requests:requests.jsonl#")), Some(true));
    // A resumed run has nothing left to do.
    let o = collect(&args("--resume"));
    assert!(o.status.success() && stderr(&o).contains("0 written now"), "{}", stderr(&o));
    assert_eq!(records(&out).len(), 3);
    // A malformed request names the line and the field.
    std::fs::write(&req, r#"{"schema":"shardplan.set-request/v1","key":"x","pieces":[]}"#).unwrap();
    let o = collect(&args("--resume"));
    assert!(!o.status.success() && stderr(&o).contains("line 1") && stderr(&o).contains("pieces"), "{}", stderr(&o));
}

/// While another process keeps a core busy, the guard refuses to record a sample (with no retries the
/// run stops at once, naming the reading); with the guard off the same run records it.
#[test]
fn the_guard_refuses_a_busy_machine() {
    let mut burner = Command::new("sh").args(["-c", "while :; do :; done"]).stdout(Stdio::null()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let out = tmp("guarded.jsonl");
    let mut args = vec!["--quiet", "--guard-retries", "0", "--guard-max-busy-pct", "5", "compute", "--samples", "1"];
    args.extend(["--out", out.to_str().unwrap(), "--batch-size", "256", "--max-tables", "3", "--mem-cap", "4MiB"]);
    // The sample must run long enough for the CPU accounting to see the burner (ticks are 10 ms).
    args.extend(["--warmup", "1", "--reps", "300", "--no-flush"]);
    let o = Command::new(BIN).args(&args).output().unwrap();
    let e = stderr(&o);
    let _ = burner.kill();
    let _ = burner.wait();
    assert!(!o.status.success(), "recorded a sample on a busy machine");
    assert!(e.contains("other processes") && e.contains("limit 5%"), "{e}");
    let kept = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(kept.is_empty(), "nothing polluted may be recorded: {kept}");
}

/// A machine slower than its quiet reference time allows is not measured at all: the run stops before
/// its first sample and records nothing.
#[test]
fn the_guard_refuses_a_machine_slower_than_when_quiet() {
    let out = tmp("slow.jsonl");
    // No machine reads the reference kernel in a microsecond: every reading is too slow.
    let mut args = vec!["--quiet", "--guard-retries", "0", "--guard-quiet-reference-ms", "0.001", "compute"];
    args.extend(["--samples", "1", "--out", out.to_str().unwrap(), "--batch-size", "256", "--max-tables", "3"]);
    args.extend(["--mem-cap", "4MiB", "--warmup", "1", "--reps", "2", "--no-flush"]);
    let o = Command::new(BIN).args(&args).output().unwrap();
    let e = stderr(&o);
    assert!(!o.status.success(), "measured on a machine slower than its quiet reference");
    assert!(e.contains("slower than when quiet") && e.contains("--guard-quiet-reference-ms = 0.001"), "{e}");
    let kept = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(kept.is_empty(), "nothing may be recorded: {kept}");
}

/// Every refusal names the field and the value; none panics.
#[test]
fn bad_inputs_are_refused_with_the_field_and_value() {
    let out = tmp("bad.jsonl");
    let o = out.to_str().unwrap();
    let check = |args: &[&str], want: &[&str]| {
        let r = collect(args);
        let e = stderr(&r);
        assert!(!r.status.success(), "{args:?} succeeded");
        assert!(!e.contains("panicked"), "{args:?} panicked: {e}");
        for w in want {
            assert!(e.contains(w), "{args:?}: {e:?} lacks {w:?}");
        }
    };
    check(&["--backend", "gpu", "probe"], &["gpu", "--backend", "cpu, cuda"]);
    check(&["compute", "--samples", "1", "--out", o, "--shard", "2/2"], &["--shard", "\"2/2\""]);
    check(&["compute", "--samples", "0", "--out", o], &["--samples = 0"]);
    check(&["compute", "--samples", "10000001", "--out", o], &["--samples = 10000001", "1..=10000000"]);
    // `bench` allocates its lookups by the batch and the devices too: the same limits as a collection.
    check(&["bench", "--batch-size", "4000000000"], &["--batch-size = 4000000000", "1..=4194304"]);
    check(&["bench", "--devices", "5000", "--batch-size", "65536"], &["--devices = 5000", "1..=1024"]);
    check(&["bench", "--max-tables", "0"], &["--max-tables = 0"]);
    check(&["bench", "--reps", "0"], &["--reps = 0"]);
    check(
        &["--guard-quiet-reference-ms=-3", "compute", "--samples", "1", "--out", o],
        &["--guard-quiet-reference-ms = -3"],
    );
    check(&["--guard-max-slowdown", "0.5", "compute", "--samples", "1", "--out", o], &["--guard-max-slowdown = 0.5"]);
    check(&["compute", "--samples", "1", "--out", o, "--mem-cap", "16"], &["--mem-cap = 16", "smallest table"]);
    check(&["compute", "--samples", "1", "--out", o, "--mem-cap", "64TiB"], &["--mem-cap", "bytes available"]);
    let empty = tmp("empty.csv");
    std::fs::write(&empty, "rows,pooling_factor\n").unwrap();
    check(
        &["compute", "--samples", "1", "--out", o, "--tables", empty.to_str().unwrap()],
        &["tables", "count", "at least one"],
    );
    let half = tmp("fp16.json");
    std::fs::write(&half, r#"[{"name":"h","rows":10,"dim":8,"pooling_factor":1,"dtype":"fp16"}]"#).unwrap();
    check(&["compute", "--samples", "1", "--out", o, "--tables", half.to_str().unwrap()], &["`dtype`", "fp32 only"]);
    check(
        &["comm", "--samples", "1", "--out", o, "--devices", "4", "--batch-size", "2"],
        &["--batch-size = 2", "--devices = 4"],
    );
    // The CUDA backend on a machine without a driver: a clear error, not a panic.
    let r = collect(&["--backend", "cuda", "probe"]);
    if !r.status.success() {
        let e = stderr(&r);
        assert!(!e.contains("panicked") && (e.contains("CUDA") || e.contains("GPU") || e.contains("NVRTC")), "{e}");
    }
    // A resumed file measured with other options is refused, naming the field.
    let a = tmp("mismatch.jsonl");
    assert!(compute(&a, 1, &[]).status.success());
    let r = collect(&[
        "compute",
        "--samples",
        "2",
        "--out",
        a.to_str().unwrap(),
        "--resume",
        "--batch-size",
        "32",
        "--max-tables",
        "3",
        "--mem-cap",
        "4MiB",
        "--warmup",
        "1",
        "--reps",
        "2",
        "--no-flush",
    ]);
    assert!(!r.status.success() && stderr(&r).contains("batch_size"), "{}", stderr(&r));
}

/// The calibration loop end to end on a tiny CPU run: it measures initial sets and comm, trains,
/// measures the held-out plans, proposes the sets of the planners' plans, measures them, retrains on
/// more data and judges again. Then a run killed while measuring a round's sets (its dataset cut short
/// and the stage not recorded, as a kill leaves them) resumes where it stopped: the samples already
/// written are kept byte for byte and only the rest is measured.
#[test]
fn the_calibration_loop_measures_retrains_and_resumes() {
    use trainer::calibrate::{CalibrateOptions, CollectorTiming, Only, calibrate};
    let out = std::env::temp_dir().join(format!("shardplan-calibrate-it-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let opts = CalibrateOptions {
        collector: BIN.into(),
        backend: "cpu".into(),
        out: out.clone(),
        name: "tiny".into(),
        rounds: 1,
        batch: 64,
        cells: vec![(2, 4)],
        train_tasks: 1,
        holdout_tasks: 1,
        planners: vec!["size".into(), "lookup".into()],
        sets_per_round: 6,
        initial_samples: 12,
        comm_samples: 12,
        comm_max_delay_ms: 5.0,
        comm_row_wise_max: 0.5,
        comm_preset: None,
        start_profile: None,
        extra_data: Vec::new(),
        only: None,
        mem_cap: "1GiB".into(),
        memory: planner_core::MemoryRule::from_parts("torchrec", None, None, None, None).unwrap(),
        seed: 3,
        train: trainer::train::TrainConfig { epochs: 3, batch: 8, lr: 1e-3, seed: 3, progress: false },
        members: 2,
        loss: trainer::models::Loss::Relative,
        target: trainer::models::ComputeTarget::Time,
        measure_rounds: 1,
        neighbours: 2,
        timing: CollectorTiming {
            warmup: 0,
            reps: 1,
            set_rounds: 2,
            flush: false,
            guard: false,
            quiet_reference_ms: None,
        },
        command: "test".into(),
    };
    // A bad quiet reference is refused by name before anything runs.
    let bad = CalibrateOptions {
        timing: CollectorTiming { quiet_reference_ms: Some(-1.0), ..opts.timing },
        out: out.with_extension("bad"),
        ..opts.clone()
    };
    let e = calibrate(&bad).unwrap_err().to_string();
    assert!(e.contains("--quiet-reference-ms = -1"), "{e}");
    assert!(!out.with_extension("bad").exists(), "a refused loop writes nothing");
    // So are zero set rounds (which would have been timed as one round without a word).
    let bad = CalibrateOptions {
        timing: CollectorTiming { set_rounds: 0, ..opts.timing },
        out: out.with_extension("bad"),
        ..opts.clone()
    };
    let e = calibrate(&bad).unwrap_err().to_string();
    assert!(e.contains("--set-rounds = 0"), "{e}");
    assert!(!out.with_extension("bad").exists(), "a refused loop writes nothing");
    // And a sample count the collector would refuse only after the loop's directory exists.
    let bad = CalibrateOptions { initial_samples: 10_000_001, out: out.with_extension("bad"), ..opts.clone() };
    let e = calibrate(&bad).unwrap_err().to_string();
    assert!(e.contains("`--initial-samples` = 10000001"), "{e}");
    assert!(!out.with_extension("bad").exists(), "a refused loop writes nothing");
    let bad = CalibrateOptions { comm_samples: 0, comm_preset: None, out: out.with_extension("bad"), ..opts.clone() };
    let e = calibrate(&bad).unwrap_err().to_string();
    assert!(e.contains("`--comm-samples` = 0"), "{e}");
    assert!(!out.with_extension("bad").exists(), "a refused loop writes nothing");
    let reports = calibrate(&opts).unwrap();
    assert_eq!(reports.len(), 2);
    assert_eq!(reports[0].samples, 12);
    assert!(reports[1].samples > reports[0].samples, "round 1 trained on {} samples", reports[1].samples);
    for r in &reports {
        let cell = &r.cells["2x4"];
        assert_eq!(cell.tasks, 1, "round {}: {cell:?}", r.round);
        // The held-out plans were measured and priced: a plan MAPE exists.
        assert!(cell.plans >= 1 && cell.accuracy.plan_mape_pct.is_some_and(f64::is_finite), "{cell:?}");
        assert!(out.join(format!("holdout/round-{}/report.json", r.round)).is_file());
    }
    let profile = trainer::calibrate::load_profile(&out.join("profiles/round-1")).unwrap();
    assert!(planner_core::cost::CostModel::name(&profile).contains("tiny"));
    let sets = out.join("data/sets_round_0.jsonl");
    let full = std::fs::read_to_string(&sets).unwrap();
    assert_eq!(full.lines().count(), 6);
    // Every compute set of the loop was timed in the two rounds asked for.
    for file in [sets.clone(), out.join("data/compute_initial.jsonl")] {
        assert!(records(&file).iter().all(|r| r.protocol.rounds == 2), "{}", file.display());
    }

    // Killed during round 0's measurement after three sets.
    let kept: String = full.lines().take(3).flat_map(|l| [l, "\n"]).collect();
    std::fs::write(&sets, &kept).unwrap();
    let state_path = out.join("state.json");
    let mut state: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&state_path).unwrap()).unwrap();
    let done = state["done"].as_array_mut().unwrap();
    done.retain(|s| !matches!(s.as_str(), Some("round 0: measure" | "round 1: train" | "round 1: held-out")));
    std::fs::write(&state_path, state.to_string()).unwrap();
    let initial_before = std::fs::read(out.join("data/compute_initial.jsonl")).unwrap();
    let again = calibrate(&opts).unwrap();
    let resumed = std::fs::read_to_string(&sets).unwrap();
    assert_eq!(resumed.lines().count(), 6);
    assert!(resumed.starts_with(&kept), "the samples written before the kill are kept");
    assert_eq!(std::fs::read(out.join("data/compute_initial.jsonl")).unwrap(), initial_before);
    assert_eq!(again[1].samples, reports[1].samples);

    // The loop split across machines, as on a GPU server: round 0 is a given profile, comm is priced by an
    // analytical preset (one device: none is measured), `--only measure` stops before training, `--only
    // train` before measuring, and the plain command finishes.
    let split_out = out.with_extension("split");
    let _ = std::fs::remove_dir_all(&split_out);
    let split = |only| CalibrateOptions {
        out: split_out.clone(),
        start_profile: Some(out.join("profiles/round-1")),
        comm_preset: Some("h100".into()),
        extra_data: vec![out.join("data/compute_initial.jsonl")],
        only,
        seed: 4,
        mem_cap: "8GiB".into(),
        ..opts.clone()
    };
    let done = |stage: &str| std::fs::read_to_string(split_out.join("state.json")).unwrap().contains(stage);
    let measured = calibrate(&split(Some(Only::Measure))).unwrap();
    assert_eq!(measured.len(), 1, "round 0 judged, round 1 not trained");
    assert!(done("round 0: measure") && !done("round 1: train"));
    assert!(
        std::fs::read_dir(split_out.join("data")).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("comm"))
    );
    let card = std::fs::read_to_string(split_out.join("profiles/round-0/card.json")).unwrap();
    assert_eq!(card, std::fs::read_to_string(out.join("profiles/round-1/card.json")).unwrap());
    calibrate(&split(Some(Only::Train))).unwrap();
    assert!(done("round 1: train") && !done("round 1: held-out"));
    // Trained on the extra data and the loop's own: both initial sets and round 0's proposals.
    let trained = trainer::calibrate::load_profile(&split_out.join("profiles/round-1")).unwrap();
    assert_eq!(trained.card().compute.dataset.samples, 12 + 12 + 6);
    let all = calibrate(&split(None)).unwrap();
    assert_eq!(all.len(), 2);
    assert!(done("round 1: held-out"));
    let _ = std::fs::remove_dir_all(&split_out);
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn steady_reads_the_reference_kernel_and_judges_the_machine() {
    let run = |extra: &[&str]| {
        Command::new(BIN)
            .args(["--quiet"])
            .args(extra)
            .args(["steady", "--readings", "2", "--batch-size", "64"])
            .output()
            .unwrap()
    };
    // Limits no machine can miss: steady, exit 0, both readings printed.
    let o = run(&["--guard-quiet-reference-ms", "1000000", "--guard-max-drift", "1000"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    assert!(out.starts_with("reference kernel, 2 readings, ms: ") && out.contains("\nsteady: "), "{out}");
    // What else used the machine while it read (Linux's /proc), and no cause for a steady machine.
    assert!(out.contains("\nwhile reading: other processes ") && !out.contains("\ncause: "), "{out}");
    // A quiet time no machine can reach: too slow, exit 3.
    let o = run(&["--guard-quiet-reference-ms", "0.000001"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(3), "{out}{}", stderr(&o));
    assert!(out.contains("0 of 2 readings within") && out.contains("too slow: the median reads"), "{out}");
    assert!(out.contains("\ncause: "), "{out}");
    // Bad input is refused before anything is timed, naming the flag and the value.
    let o = collect(&["steady", "--readings", "1"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--readings = 1 is invalid"), "{}", stderr(&o));
}
