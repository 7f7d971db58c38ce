//! End-to-end runs of the serving loop: real server processes (this crate's binary) on loopback.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use alis::{LatencyModel, ReplayConfig, StrategyConfig, Stream, SyntheticParams};
use alis_serve::bench::{self, BenchConfig, CellReport, ControllerPriority, Fault, Load};

const EXE: &str = env!("CARGO_BIN_EXE_shardplan-serve");

/// A short drifting stream: 6 windows of 300 requests over about 1 700 rows, with the abrupt shift at
/// window 3 (so the strategies move many rows at once there).
fn stream() -> (Stream, usize) {
    let p = SyntheticParams {
        seed: 3,
        communities: 16,
        items_per_community: 100,
        windows: 6,
        requests_per_window: 300,
        shift_window: 3,
        ..SyntheticParams::default()
    };
    (alis::synthetic::generate(&p).unwrap_or_else(|e| panic!("{e}")), 300)
}

fn data_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("alis-serve-it-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn config(kill_prob: f64, load: Load, name: &str) -> BenchConfig {
    BenchConfig {
        exe: PathBuf::from(EXE),
        data_dir: data_dir(name),
        dim: 16,
        window_requests: stream().1,
        load,
        lanes: 2,
        duration: Duration::from_mins(2),
        kill_prob,
        request_limit: Duration::from_mins(1),
        fault: None,
        migration_call_rows: alis_serve::wire::MIGRATION_CALL_ROWS,
        controller_priority: ControllerPriority::Normal,
    }
}

fn run(strategy: &str, shards: usize, kill_prob: f64, load: Load, name: &str) -> CellReport {
    run_with(strategy, shards, &config(kill_prob, load, name))
}

fn run_with(strategy: &str, shards: usize, bc: &BenchConfig) -> CellReport {
    let (s, _) = stream();
    let dir = bc.data_dir.clone();
    let cfg = StrategyConfig { shards, seed: 1, max_iters: 4, ..StrategyConfig::default() };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let r = rt.block_on(bench::run(Arc::new(s), strategy, cfg, bc)).unwrap_or_else(|e| panic!("{strategy}: {e:#}"));
    let _ = std::fs::remove_dir_all(&dir);
    r
}

/// The migrated rows per update that `alis::replay` counts for the same strategy and stream.
fn replay_migrations(strategy: &str, shards: usize) -> Vec<u64> {
    let (s, window_requests) = stream();
    let cfg = StrategyConfig { shards, seed: 1, max_iters: 4, ..StrategyConfig::default() };
    let rc = ReplayConfig { window_requests, latency: LatencyModel::default() };
    let r = alis::replay(&s, strategy, &cfg, &rc, &mut || 0.0).unwrap_or_else(|e| panic!("{e}"));
    r.windows.iter().map(|w| w.migrated_rows).collect()
}

fn assert_clean(r: &CellReport) {
    let name = &r.strategy;
    assert_eq!(r.misses, 0, "{name}: lookups missed");
    assert_eq!(r.wrong_values, 0, "{name}: values read wrong");
    assert_eq!(r.failed_requests, 0, "{name}: requests failed");
    assert_eq!(r.stale_lookups, 0, "{name}: lookups arrived after their epoch's rows were deleted");
    assert_eq!(r.lost_rows, 0, "{name}: rows lost");
    assert_eq!(r.wrong_at_rest, 0, "{name}: rows held with wrong values");
    assert_eq!(r.stray_rows, 0, "{name}: rows held where not routed");
    assert_eq!(r.source_missing, 0, "{name}: a migration's source lacked rows");
}

#[test]
fn four_servers_serve_every_request_while_rows_migrate() {
    // Every request of every window is answered with the right values while the strategy moves rows after
    // each window, and the rows moved are exactly the ones `alis::replay` counts for the same strategy: the
    // harness serves the crate's own placements, not a re-implementation.
    for strategy in ["hash", "full", "alis"] {
        let r = run(strategy, 4, 0.0, Load::Closed { concurrency: 8 }, strategy);
        assert_clean(&r);
        assert_eq!(r.requests, 1800, "{strategy}");
        assert_eq!(r.windows_served, 6, "{strategy}");
        assert_eq!(r.updates, 6, "{strategy}");
        assert_eq!(r.migrated_rows, replay_migrations(strategy, 4), "{strategy}");
        assert!(r.checks >= 1 && r.p50_us > 0.0 && r.mean_fanout >= 1.0, "{r:?}");
        if strategy == "hash" {
            assert_eq!(r.migrated_total, 0);
        } else {
            // Otherwise the zero counts above would prove nothing about live migration.
            assert!(r.migrated_total > 100, "{strategy} moved only {} rows", r.migrated_total);
        }
    }
}

#[test]
fn a_low_priority_controller_makes_the_same_migrations() {
    // The controller at the lowest priority still applies every update, and moves exactly the rows the
    // replay counts, with every lookup answered right.
    let bc = BenchConfig {
        controller_priority: ControllerPriority::Low,
        ..config(0.0, Load::Closed { concurrency: 8 }, "low-priority")
    };
    let r = run_with("alis", 4, &bc);
    assert_clean(&r);
    assert_eq!(r.updates, 6);
    assert_eq!(r.migrated_rows, replay_migrations("alis", 4));
}

#[test]
fn open_loop_load_is_served_too() {
    let r = run("alis", 4, 0.0, Load::Open { rate_per_s: 2000.0 }, "open");
    assert_clean(&r);
    assert_eq!(r.requests, 1800);
    assert!(r.migrated_total > 100);
}

#[test]
fn a_server_killed_mid_migration_loses_no_row() {
    // Every migration that moves rows gets a server SIGKILLed at a random step (copy, switch, drain or
    // delete) and restarted on its log; requests to it are retried while it is down. After each such
    // migration and at the end, every server's inventory must match the routing exactly.
    // Migration calls of 32 rows, so that a migration of hundreds of rows is a sequence of calls per
    // server (as a migration of millions is at the binary's call size) and kills land between and inside them.
    let bc = BenchConfig { migration_call_rows: 32, ..config(1.0, Load::Closed { concurrency: 8 }, "kill") };
    let r = run_with("alis", 4, &bc);
    assert_clean(&r);
    assert_eq!(r.migrated_rows, replay_migrations("alis", 4), "every moved row moved, call by call");
    assert_eq!(r.requests, 1800);
    let moving = r.migrated_rows.iter().filter(|&&m| m > 0).count() as u64;
    assert_eq!(r.kills, moving, "one kill per migration that moved rows");
    assert!(r.kills >= 4, "only {} kills", r.kills);
    assert_eq!(r.kills_by_phase.iter().sum::<u64>(), r.kills);
    assert_eq!(r.checks, r.kills + 1, "a check after every kill and one at the end");
    eprintln!("{r:?}");
}

#[test]
fn a_migration_call_size_out_of_range_is_refused() {
    for rows in [0, alis_serve::wire::MIGRATION_CALL_ROWS + 1] {
        let bc = BenchConfig { migration_call_rows: rows, ..config(0.0, Load::Closed { concurrency: 1 }, "call-rows") };
        let (s, _) = stream();
        let cfg = StrategyConfig { shards: 2, seed: 1, ..StrategyConfig::default() };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| panic!("{e}"));
        let e = rt.block_on(bench::run(Arc::new(s), "hash", cfg, &bc)).expect_err("refused");
        assert!(e.to_string().contains(&format!("migration_call_rows = {rows}")), "{e}");
        assert!(!bc.data_dir.exists(), "refused before any server started");
    }
}

#[test]
fn the_checks_catch_a_broken_protocol() {
    // The negative control of the tests above: with the routing switched to rows that were never copied,
    // lookups of moved rows miss (and their requests fail once the limit passes), and the inventory check
    // finds the moved rows lost. Without it, zero counts could come from counters that never count.
    let bc = BenchConfig {
        duration: Duration::from_secs(3),
        request_limit: Duration::from_millis(200),
        fault: Some(Fault::SkipCopy),
        ..config(0.0, Load::Closed { concurrency: 8 }, "fault")
    };
    let r = run_with("alis", 4, &bc);
    eprintln!("{r:?}");
    assert!(r.migrated_total > 0);
    assert!(r.misses > 0, "no miss counted: {r:?}");
    assert!(r.failed_requests > 0, "no failed request counted: {r:?}");
    assert!(r.lost_rows > 0, "no lost row found: {r:?}");
    assert_eq!(r.wrong_values, 0, "a missing row is a miss, not a wrong value");
}

#[test]
fn bad_flags_are_refused_by_name() {
    let check = |args: &[&str], want: &str| {
        let out = Command::new(EXE).args(args).output().unwrap_or_else(|e| panic!("{e}"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    };
    check(&["bench", "--synthetic", "--shards", "0"], "--shards entry 0");
    check(&["bench", "--synthetic", "--kill-prob", "1.5"], "--kill-prob = 1.5");
    check(&["bench", "--synthetic", "--dim", "0"], "--dim = 0");
    // A dimension whose load batch cannot fit one frame is refused up front (it used to be accepted, and
    // the load's call was then retried for two minutes and failed as "connection ... lost").
    let small = ["--shards", "1", "--strategies", "hash", "--windows", "2", "--requests-per-window", "50"];
    let small = [&small[..], &["--communities", "4", "--items-per-community", "100", "--synthetic"]].concat();
    check(&[&["bench", "--dim", "65536"], &small[..]].concat(), "--dim = 65536");
    check(&["bench", "--synthetic", "--repeats", "0"], "--repeats = 0");
    check(&["bench", "--synthetic", "--rate=-3"], "--rate = -3");
    check(&["bench", "--synthetic", "--strategies", "nope"], "nope");
    check(&["bench", "--synthetic", "--epsilon=-1"], "epsilon");
    check(&["bench", "--input", "/nonexistent/stream.jsonl"], "/nonexistent/stream.jsonl");
    check(&["bench"], "--input FILE or --synthetic");
    check(&["report", "/nonexistent/report.json"], "/nonexistent/report.json");
    // A server refuses a log written for another dimension, naming both.
    let dir = data_dir("dim");
    let first = Command::new(EXE)
        .args(["server", "--shard", "0", "--dim", "8", "--dir"])
        .arg(&dir)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    assert!(String::from_utf8_lossy(&first.stdout).starts_with("ready 127.0.0.1:"));
    let out = Command::new(EXE)
        .args(["server", "--shard", "0", "--dim", "4", "--dir"])
        .arg(&dir)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--dim 4") && err.contains("dimension 8"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_binary_runs_a_benchmark_and_reads_its_report_back() {
    // The command line end to end: `bench` starts its servers by re-executing itself, runs each strategy
    // twice (interleaved), writes the JSON report, and `report` renders the same tables from it.
    let dir = data_dir("cli");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let json = dir.join("r.json");
    let out = Command::new(EXE)
        .args(["bench", "--synthetic", "--shards", "2", "--strategies", "hash,alis", "--windows", "3"])
        .args(["--requests-per-window", "100", "--communities", "4", "--items-per-community", "30", "--dim", "8"])
        .args(["--repeats", "2"])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--out")
        .arg(&json)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(table.contains("### S = 2") && table.contains("| hash |") && table.contains("| alis |"), "{table}");
    assert!(table.contains("### S = 2: spread over runs, and paired with hash"), "{table}");
    assert!(table.lines().any(|l| l.starts_with("| alis | 2 |") && l.contains("/2 |")), "{table}");
    assert!(!dir.join("data").join("S2-alis-seed0-run1").exists(), "a run's logs are removed without --keep-data");
    // The second repeat starts with the second strategy: the JSON holds the runs in the order they ran.
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
    let order: Vec<(String, u64)> = report["cells"]
        .as_array()
        .unwrap_or_else(|| panic!("no cells"))
        .iter()
        .map(|c| (c["strategy"].as_str().unwrap_or("?").to_string(), c["repeat"].as_u64().unwrap_or(9)))
        .collect();
    let want = [("hash", 0), ("alis", 0), ("alis", 1), ("hash", 1)].map(|(s, r)| (s.to_string(), r));
    assert_eq!(order, want);
    let again = Command::new(EXE).arg("report").arg(&json).output().unwrap_or_else(|e| panic!("{e}"));
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    let rows = |t: &str| {
        t.lines()
            .filter(|l| l.starts_with("| hash ") || l.starts_with("| alis "))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(rows(&String::from_utf8_lossy(&again.stdout)), rows(&table));
    let _ = std::fs::remove_dir_all(&dir);
}
