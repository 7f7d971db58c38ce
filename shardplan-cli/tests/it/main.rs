//! End-to-end tests of the `shardplan` binary: the happy paths write valid documents, and every bad
//! input ends with a message naming the field and value, a non-zero exit, no panic, and no lost file.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail loudly on purpose

mod bench_report;

use std::path::PathBuf;
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shardplan"))
}

/// A fresh scratch directory per test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("shardplan-it-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(cmd: &mut Command) -> (Output, String) {
    let out = cmd.output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!text.contains("panicked"), "{text}");
    (out, text)
}

/// Runs a command that must fail; returns its output text after checking every `needle` appears.
fn check_fails(cmd: &mut Command, needles: &[&str]) {
    let (out, text) = run(cmd);
    assert!(!out.status.success(), "expected failure: {text}");
    for n in needles {
        assert!(text.contains(n), "missing {n:?} in: {text}");
    }
}

#[test]
fn plan_writes_a_valid_document() {
    let dir = scratch("plan");
    let out = dir.join("plan.json");
    let (o, text) = run(bin().args(["plan", "--devices", "4", "--max-dim", "64", "--seed", "3", "--out"]).arg(&out));
    assert!(o.status.success(), "{text}");
    assert!(text.contains("bottleneck"), "{text}");
    // The default cost model is the embedded H100 profile, with analytical comm (it says so).
    assert!(text.contains("neural:h100+analytical-comm"), "{text}");
    let (doc, plan) = planner_core::PlanDocument::from_json(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(doc.schema, planner_core::PLAN_SCHEMA);
    // The default planner (size-lookup, neuroshard-fast and torchrec+refine, the cheapest): every table placed, some
    // possibly split.
    assert_eq!(doc.planner, planner_core::planners::DEFAULT_PLANNER);
    assert_eq!(doc.planner, "auto");
    assert!(plan.pieces().len() >= doc.task.tables.len());
    assert!(doc.report.feasible);
}

#[test]
fn expected_max_prices_the_plan_above_its_largest_device_and_says_so() {
    let dir = scratch("emax");
    let (plain, emax) = (dir.join("plain.json"), dir.join("emax.json"));
    let args = ["plan", "--devices", "4", "--max-dim", "32", "--seed", "3", "--cost-model", "cpu-epyc-2t", "--algo"];
    let (o, text) = run(bin().args(args).arg("size").arg("--out").arg(&plain));
    assert!(o.status.success(), "{text}");
    let (o, text) = run(bin().args(args).arg("size").arg("--expected-max").arg("--out").arg(&emax));
    assert!(o.status.success(), "{text}");
    assert!(text.contains("neural:cpu-epyc-2t+expected-max"), "{text}");
    let read =
        |p: &std::path::Path| planner_core::PlanDocument::from_json(&std::fs::read_to_string(p).unwrap()).unwrap();
    let ((a, pa), (b, pb)) = (read(&plain), read(&emax));
    // The same plan (`size` does not search), priced above its largest device total.
    assert_eq!(pa.pieces(), pb.pieces());
    let largest = b.report.devices.iter().map(|d| d.total_ms).fold(f64::NEG_INFINITY, f64::max);
    assert!((a.report.cost_ms - largest).abs() < 1e-9);
    assert!(b.report.cost_ms > largest, "{} vs {largest}", b.report.cost_ms);
}

#[test]
fn plans_the_shared_csv_format_and_json_tables() {
    let dir = scratch("formats");
    let csv = dir.join("t.csv");
    let pool: Vec<&str> = planner_core::pool::DLRM_T856_CSV.lines().take(9).collect();
    std::fs::write(&csv, pool.join("\n")).unwrap();
    let (o, text) = run(bin()
        .args(["plan", "--dim", "16", "--algo", "size", "--tables"])
        .arg(&csv)
        .arg("--out")
        .arg(dir.join("a.json")));
    assert!(o.status.success(), "{text}");
    let json = dir.join("t.json");
    std::fs::write(&json, r#"[{"name":"u","rows":1000,"dim":8,"pooling_factor":3},{"name":"v","rows":20,"dim":4,"pooling_factor":1,"dtype":"fp16"}]"#).unwrap();
    let (o, text) = run(bin()
        .args(["plan", "--devices", "2", "--mem", "1MiB", "--tables"])
        .arg(&json)
        .arg("--out")
        .arg(dir.join("b.json")));
    assert!(o.status.success(), "{text}");
}

#[test]
fn bad_inputs_name_field_and_value_and_lose_nothing() {
    let dir = scratch("bad");
    let out = dir.join("plan.json");
    std::fs::write(&out, "precious").unwrap();
    let csv = |name: &str, body: &str| {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        p
    };
    let unknown_col = csv("a.csv", "rows,dim,pooling_factor,colour\n10,4,1,red\n");
    let neg_rows = csv("b.csv", "rows,dim,pooling_factor\n-3,4,1\n");
    let bad_dim = csv("c.csv", "rows,dim,pooling_factor\n10,6,1\n");
    let huge = csv("d.csv", "rows,dim,pooling_factor\n100000000,128,1\n");
    let cases: Vec<(Vec<String>, Vec<&str>)> = vec![
        (vec!["--tables".into(), unknown_col.display().to_string()], vec!["\"colour\""]),
        (vec!["--tables".into(), neg_rows.display().to_string()], vec!["`rows`", "-3"]),
        (vec!["--tables".into(), bad_dim.display().to_string()], vec!["`dim` = 6", "multiple of 4"]),
        (
            vec![
                "--tables".into(),
                huge.display().to_string(),
                "--algo".into(),
                "size".into(),
                "--tiers".into(),
                "hbm".into(),
            ],
            vec!["the 1 table needs at least 47.68 GiB (51,200,000,000 bytes)", "usable in total"],
        ),
        (vec!["--algo".into(), "magic".into()], vec!["unknown planner `magic`", "size-lookup"]),
        (vec!["--mem".into(), "4XB".into()], vec!["--mem", "4XB"]),
        (vec!["--mem".into(), "1GiB,2GiB".into()], vec!["--mem lists 2 caps"]),
        (vec!["--devices".into(), "0".into()], vec!["devices"]),
        (vec!["--max-dim".into(), "48".into()], vec!["max_dim", "48"]),
        (vec!["--cost-model".into(), "oracle".into()], vec!["unknown cost model `oracle`"]),
        (vec!["--hw".into(), "tpu".into()], vec!["\"tpu\""]),
        (
            vec!["--cost-model".into(), "analytical".into(), "--expected-max".into()],
            vec!["`expected_max` = true", "no measured error"],
        ),
        (vec!["--tables".into(), dir.join("missing.csv").display().to_string()], vec!["missing.csv"]),
    ];
    for (args, needles) in cases {
        check_fails(bin().arg("plan").args(&args).arg("--out").arg(&out), &needles);
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "precious", "{args:?} clobbered the output");
    }
}

#[test]
fn tasks_then_eval_round_trip() {
    let dir = scratch("eval");
    let tasks = dir.join("tasks.jsonl");
    let (o, text) = run(bin()
        .args(["tasks", "--devices", "4", "--max-dim", "32", "--count", "5", "--seed", "1", "--out"])
        .arg(&tasks));
    assert!(o.status.success(), "{text}");
    assert_eq!(std::fs::read_to_string(&tasks).unwrap().lines().count(), 5);
    let json = dir.join("eval.json");
    let (o, text) =
        run(bin().args(["eval", "--algos", "dim,size-lookup", "--tasks"]).arg(&tasks).arg("--out").arg(&json));
    assert!(o.status.success(), "{text}");
    assert!(text.contains("| size-lookup |") && text.contains("5/5"), "{text}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["summary"].as_array().unwrap().len(), 2);
    // A corrupted suite names the line.
    std::fs::write(&tasks, "{\"schema\": 1}\n").unwrap();
    check_fails(bin().args(["eval", "--tasks"]).arg(&tasks), &["line 1"]);
    check_fails(bin().args(["eval", "--algos", "dim,nope"]), &["unknown planner `nope`"]);
    check_fails(bin().args(["tasks", "--table-range", "5-9"]), &["--table-range", "MIN..MAX"]);
}

#[test]
fn torchrec_tables_in_torchrec_plan_out_and_export() {
    // TorchRec-style definitions in, the `torchrec` planner, its plan out as a TorchRec sharding plan;
    // then the same export from the plan document. `big` (12 GB) fits no single 8 GiB device, so
    // TorchRec shards it row-wise.
    let dir = scratch("torchrec");
    let tables = dir.join("tables.json");
    std::fs::write(
        &tables,
        r#"[{"name": "big", "num_embeddings": 24000000, "embedding_dim": 128, "feature_names": ["uid"], "pooling_factor": 1},
            {"name": "wide", "num_embeddings": 100000, "embedding_dim": 384, "feature_names": ["a", "b"], "pooling_factor": 8},
            {"name": "small", "num_embeddings": 1000, "embedding_dim": 16, "feature_names": ["s"], "pooling_factor": 3}]"#,
    )
    .unwrap();
    let (plan_out, tr_out, tr_again) =
        (dir.join("plan.json"), dir.join("a.torchrec.json"), dir.join("b.torchrec.json"));
    let (o, text) = run(bin()
        .args(["plan", "--algo", "torchrec", "--devices", "4", "--mem", "8GiB", "--verbose", "--tables"])
        .arg(&tables)
        .arg("--out")
        .arg(&plan_out)
        .arg("--torchrec-out")
        .arg(&tr_out));
    assert!(o.status.success(), "{text}");
    assert!(text.contains("big[rows 0..6000000]"), "{text}");
    let doc: planner_core::torchrec_plan::TorchRecPlanDocument =
        serde_json::from_str(&std::fs::read_to_string(&tr_out).unwrap()).unwrap();
    assert_eq!(doc.plan["big"].sharding_type, "row_wise");
    assert_eq!(doc.plan["big"].ranks, vec![0, 1, 2, 3]);
    assert_eq!(doc.plan.len(), 3);
    let (o, text) = run(bin().arg("export-torchrec").arg(&plan_out).arg("--out").arg(&tr_again));
    assert!(o.status.success(), "{text}");
    assert_eq!(std::fs::read_to_string(&tr_out).unwrap(), std::fs::read_to_string(&tr_again).unwrap());
    // On 2 GiB devices the tables (12.5 GB) overflow HBM: TorchRec's default planner keeps `big` in host
    // memory, and the export says with which kernel and cache share; priced back through `evaluate`, the
    // TorchRec file gives the tables those tiers.
    let (o, text) = run(bin()
        .args(["plan", "--algo", "torchrec", "--devices", "4", "--mem", "2GiB", "--tables"])
        .arg(&tables)
        .arg("--out")
        .arg(&plan_out)
        .arg("--torchrec-out")
        .arg(&tr_out));
    assert!(o.status.success(), "{text}");
    assert!(text.contains("Tiers: ") && text.contains("big "), "{text}");
    let doc: planner_core::torchrec_plan::TorchRecPlanDocument =
        serde_json::from_str(&std::fs::read_to_string(&tr_out).unwrap()).unwrap();
    let big = &doc.plan["big"];
    assert!(big.compute_kernel.starts_with("fused_uvm"), "{big:?}");
    assert_eq!(big.cache_load_factor.is_some(), big.compute_kernel == "fused_uvm_caching");
    let (o, text) = run(bin()
        .arg("evaluate")
        .arg(&tr_out)
        .args(["--tables"])
        .arg(&tables)
        .args(["--mem", "2GiB", "--out"])
        .arg(dir.join("priced.json")));
    assert!(o.status.success(), "{text}");
    let priced: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("priced.json")).unwrap()).unwrap();
    assert!(priced[0]["report"]["feasible"].as_bool().unwrap(), "{priced}");
    assert!(
        priced[0]["report"]["devices"].as_array().unwrap().iter().any(|d| d["memory"]["host_bytes"].as_u64() > Some(0))
    );
    check_fails(
        bin().arg("export-torchrec").arg(&plan_out).arg("--local-world-size").arg("9").arg("--out").arg(&tr_again),
        &["local_world_size", "9"],
    );
    std::fs::write(
        &tables,
        r#"[{"name": "x", "num_embeddings": 0, "embedding_dim": 8, "feature_names": ["f"], "pooling_factor": 1}]"#,
    )
    .unwrap();
    check_fails(bin().args(["plan", "--tables"]).arg(&tables).arg("--out").arg(&plan_out), &["`num_embeddings` = 0"]);
}

/// A plan document with `wide` (dim 64) split as NeuroShard's halvings [32, 16, 16].
fn halvings_plan(path: &std::path::Path) {
    let t = |name: &str, rows, dim| {
        planner_core::TableSpec::new(
            "t",
            name.into(),
            rows,
            dim,
            4.0,
            [0.0; planner_core::table::NUM_BINS],
            planner_core::ElementType::Fp32,
            planner_core::OptimizerState::None,
        )
        .unwrap()
    };
    let task = planner_core::Task::new(
        vec![t("wide", 100_000, 64), t("small", 1000, 16)],
        planner_core::Devices::uniform(3, 1 << 30).unwrap(),
    )
    .unwrap();
    let pieces = vec![
        planner_core::Piece::cols(0, 0, 32, 0),
        planner_core::Piece::cols(0, 32, 16, 1),
        planner_core::Piece::cols(0, 48, 16, 2),
        planner_core::Piece::cols(1, 0, 16, 1),
    ];
    let plan = planner_core::Plan::new(&task, pieces).unwrap();
    let model = planner_core::AnalyticalModel::default();
    let report = planner_core::evaluate(&task, &plan, &model, planner_core::CostDefinition::NeuroShard).unwrap();
    let doc = planner_core::PlanDocument::new("hand", 0, task, &plan, report);
    std::fs::write(path, serde_json::to_string(&doc).unwrap()).unwrap();
}

#[test]
fn plans_torchrec_can_build_and_evaluate_prices_any_plan_file() {
    let dir = scratch("buildable");
    let (plan_out, tr_out) = (dir.join("plan.json"), dir.join("plan.torchrec.json"));
    // The torchrec planner says what it searched, on success too; every plan gets TorchRec's estimate,
    // each cost labelled with its batch.
    let (o, text) = run(bin()
        .args(["plan", "--algo", "torchrec", "--devices", "4", "--seed", "2", "--out"])
        .arg(&plan_out)
        .arg("--torchrec-out")
        .arg(&tr_out));
    assert!(o.status.success(), "{text}");
    for needle in [
        "TorchRec's planner partitioned",
        "proposals",
        "at a global batch of 65,536",
        "TorchRec's estimate of this plan",
        "512 samples per rank",
        "splits: torchrec",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in {text}");
    }
    // `evaluate` prices our document and the TorchRec file (with the tables) alike.
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&plan_out).unwrap()).unwrap();
    let tables = dir.join("tables.json");
    std::fs::write(&tables, serde_json::to_string(&doc["task"]["tables"]).unwrap()).unwrap();
    let json = dir.join("priced.json");
    let (o, text) = run(bin()
        .arg("evaluate")
        .arg(&plan_out)
        .arg(&tr_out)
        .arg("--tables")
        .arg(&tables)
        .args(["--cost-model", "analytical", "--out"])
        .arg(&json));
    assert!(o.status.success(), "{text}");
    let priced: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let (a, b) = (&priced[0], &priced[1]);
    assert_eq!(a["report"]["cost_ms"], b["report"]["cost_ms"], "{text}");
    assert_eq!(a["torchrec"]["objective_ms"], b["torchrec"]["objective_ms"], "{text}");
    assert_eq!(a["report"]["global_batch"], 65536);
    check_fails(bin().arg("evaluate").arg(&tr_out), &["TorchRec plan", "--tables"]);
    // A plan TorchRec cannot build is priced (and says so) but never exported.
    let uneven = dir.join("uneven.json");
    halvings_plan(&uneven);
    let (o, text) = run(bin().arg("evaluate").arg(&uneven).args(["--memory-rule", "weights"]));
    assert!(o.status.success(), "{text}");
    assert!(text.contains("TorchRec can build it: no") && text.contains("[32, 16, 16]"), "{text}");
    let before = std::fs::read_to_string(&tr_out).unwrap();
    check_fails(
        bin().arg("export-torchrec").arg(&uneven).arg("--out").arg(&tr_out),
        &["table `wide`", "[32, 16, 16]", "--splits torchrec"],
    );
    assert_eq!(std::fs::read_to_string(&tr_out).unwrap(), before, "the earlier export was kept");
    // A plan document naming a table twice is refused on read, by every command.
    let mut dup: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&plan_out).unwrap()).unwrap();
    let first = dup["task"]["tables"][0]["name"].clone();
    dup["task"]["tables"][1]["name"] = first;
    let dup_path = dir.join("dup.json");
    std::fs::write(&dup_path, dup.to_string()).unwrap();
    check_fails(
        bin().arg("export-torchrec").arg(&dup_path).arg("--out").arg(&tr_out),
        &["name", "not used by table 0"],
    );
    check_fails(bin().arg("evaluate").arg(&dup_path), &["name", "not used by table 0"]);
    // A trained profile predicts the batch it was measured at, and says so instead of ignoring --batch.
    check_fails(
        bin().args(["plan", "--batch", "4096", "--out"]).arg(dir.join("x.json")),
        &["--batch", "`global_batch` = 4096", "65536"],
    );
}

#[test]
fn eval_reports_torchrec_no_plan_as_an_unsolved_task() {
    // On the seed-0 four-device suite TorchRec's reservations leave tasks 9, 12 and 15 without a plan:
    // eval must report them, not stop.
    let (o, text) = run(bin().args([
        "eval",
        "--devices",
        "4",
        "--max-dim",
        "128",
        "--count",
        "16",
        "--seed",
        "0",
        "--algos",
        "torchrec,size",
        "--format",
        "json",
    ]));
    assert!(o.status.success(), "{text}");
    let start = text.find('{').unwrap();
    let v: serde_json::Value = serde_json::from_str(&text[start..]).unwrap();
    let runs = &v["per_task"][0];
    assert_eq!(runs["planner"], "torchrec");
    let failed: Vec<usize> =
        (0..16).filter(|&i| runs["failures"][i].as_str().is_some_and(|f| f.contains("found no plan"))).collect();
    assert_eq!(failed, vec![9, 12, 15], "{text}");
}

#[test]
fn memory_rule_flags_decide_what_fits_and_are_printed() {
    // One 3.5 GiB table (fp32, 7,340,032 x 128) on one 4 GiB device: it fits the seed papers' weights
    // rule, not TorchRec's (15% of the cap reserved, plus buffers).
    let dir = scratch("memory");
    let tables = dir.join("t.json");
    std::fs::write(&tables, r#"[{"name": "u", "rows": 7340032, "dim": 128, "pooling_factor": 2}]"#).unwrap();
    let plan = |extra: &[&str], out: &PathBuf| {
        run(bin()
            .args(["plan", "--algo", "size", "--devices", "1", "--mem", "4GiB", "--tables"])
            .arg(&tables)
            .args(extra)
            .arg("--out")
            .arg(out))
    };
    let weights = dir.join("w.json");
    let (o, text) = plan(&["--memory-rule", "weights"], &weights);
    assert!(o.status.success(), "{text}");
    assert!(text.contains("Memory rule: weights") && text.contains("fits memory (usable bytes): yes"), "{text}");
    for column in ["weights", "optimizer", "buffers", "usable"] {
        assert!(text.contains(column), "no {column} column: {text}");
    }
    let (doc, _) = planner_core::PlanDocument::from_json(&std::fs::read_to_string(&weights).unwrap()).unwrap();
    assert_eq!(doc.task.memory, planner_core::MemoryRule::Weights);
    assert_eq!(doc.report.memory_rule, planner_core::MemoryRule::Weights);
    let d = &doc.report.devices[0];
    assert_eq!((d.bytes, d.memory.usable_bytes, d.memory.buffer_bytes), (7_340_032 * 128 * 4, 4 << 30, 0));
    // The default rule is TorchRec's: its reservation leaves too little HBM for the same table, and the
    // refusal says so with both totals (HBM only; with tiers the table moves to host memory).
    check_fails(
        bin()
            .args(["plan", "--algo", "size", "--devices", "1", "--mem", "4GiB", "--tiers", "hbm", "--tables"])
            .arg(&tables)
            .arg("--out")
            .arg(dir.join("t.json.out")),
        &["the 1 table needs at least 3.50 GiB", "reserved by the torchrec memory rule", "usable in total"],
    );
    // Exporting the weights-rule plan for TorchRec is refused under TorchRec's rule, allowed under the seeds'.
    let tr = dir.join("p.torchrec.json");
    check_fails(
        bin().arg("export-torchrec").arg(&weights).arg("--out").arg(&tr),
        &["does not fit under the torchrec memory rule", "device 0"],
    );
    assert!(!tr.exists());
    let (o, text) =
        run(bin().arg("export-torchrec").arg(&weights).args(["--memory-rule", "weights", "--out"]).arg(&tr));
    assert!(o.status.success() && tr.exists(), "{text}");
    // A smaller reservation and batch let it fit TorchRec's rule; the report says which rule and what it kept.
    let small = dir.join("s.json");
    let (o, text) = plan(&["--reserved-fraction", "0.05", "--batch-per-rank", "64", "--dense-bytes", "1MiB"], &small);
    assert!(o.status.success(), "{text}");
    assert!(text.contains("Memory rule: torchrec (5% of every cap reserved, 1.0 MiB of dense parameters"), "{text}");
    let (doc, _) = planner_core::PlanDocument::from_json(&std::fs::read_to_string(&small).unwrap()).unwrap();
    let m = doc.report.devices[0].memory;
    assert!(doc.report.feasible && m.buffer_bytes > 0 && m.reserved_bytes + m.usable_bytes == 4 << 30, "{m:?}");
    // Bad parameters are refused by name.
    for (args, needles) in [
        (vec!["--reserved-fraction", "1.5"], vec!["`reserved_fraction` = 1.5", "[0, 1)"]),
        (vec!["--batch-per-rank", "0"], vec!["`batch_per_rank` = 0"]),
        (vec!["--memory-rule", "weights", "--reserved-fraction", "0.2"], vec!["`reserved_fraction` = 0.2"]),
        (vec!["--dense-bytes", "lots"], vec!["--dense-bytes", "lots"]),
        (vec!["--memory-rule", "hbm"], vec!["hbm"]),
    ] {
        check_fails(bin().arg("plan").args(&args).arg("--out").arg(dir.join("x.json")), &needles);
    }
}

/// A stand-in for `shardplan-collect` that "measures" plans as `factor · predicted + offset` read from
/// the plan documents (every device and the cost), so the measured judge's plumbing and its Kendall tau
/// can be checked without hardware: `1 · p` ranks like the prediction (tau = 1), `-1 · p + 1000` the
/// reverse. It writes a `shardplan.measured-plans/v1` document with three rounds of equal cost.
fn fake_collector(dir: &std::path::Path, factor: i32) -> PathBuf {
    let path = dir.join(format!("fake-collect-{factor}.py"));
    let offset = if factor < 0 { 1000 } else { 0 };
    let script = format!(
        r#"#!/usr/bin/env python3
# args: --backend B --quiet measure-plan PLAN... [--flag value]... --out OUT
import json, sys
args = sys.argv[sys.argv.index("measure-plan") + 1:]
plans, out, i = [], None, 0
while i < len(args):
    if args[i].startswith("--"):
        if args[i] == "--out":
            out = args[i + 1]
        i += 2
    else:
        plans.append(args[i]); i += 1
f = lambda x: {factor} * x + {offset}
# Rounds that agree (factor > 0), or whose middle round ranks the plans the other way round.
rounds = lambda c: [c] * 3 if {factor} > 0 else [c, 1000.0 - c, c]
entries = []
for path in plans:
    doc = json.load(open(path))
    rep = doc["report"]
    meas = json.loads(json.dumps(rep))
    meas["cost_model"] = "measured:fake"
    meas.pop("cost_interval_ms", None)
    for d in meas["devices"]:
        d["total_ms"] = f(d["total_ms"])
        d.pop("compute_interval_ms", None)
    meas["cost_ms"] = f(rep["cost_ms"])
    entries.append({{"plan": path, "planner": doc["planner"], "predicted": rep, "measured": meas,
                    "round_costs_ms": rounds(meas["cost_ms"]), "cost_cv": 0.0}})
json.dump({{"schema": "shardplan.measured-plans/v1",
           "hardware": {{"backend": "cpu", "fingerprint": "fake", "devices": ["fake"], "software": "test"}},
           "batch_size": 4096, "seed": 0, "protocol": {{"warmup": 0, "reps": 1, "cache_flush": False}},
           "rounds": 3, "comm": "measured", "plans": entries}}, open(out, "w"))
"#
    );
    std::fs::write(&path, script).unwrap();
    let mut perm = std::fs::metadata(&path).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&path, perm).unwrap();
    path
}

#[test]
fn bench_quick_with_a_measured_judge_reports_rank_agreement() {
    let dir = scratch("bench");
    for (factor, tau) in [(1, 1.0), (-1, -1.0)] {
        let out = dir.join(format!("f{factor}/bench.json"));
        let (o, text) = run(bin()
            // The seed papers' memory rule, under which every planner fits all four tasks of the cell.
            .args(["bench", "--quick", "--algos", "size,lookup,dim,neuroshard", "--exact-tasks", "2"])
            .args(["--memory-rule", "weights"])
            .args([
                "--scale-tasks",
                "0",
                "--measure-tasks",
                "2",
                "--measure-cells",
                "4x128",
                "--measure-planners",
                "size,lookup,dim,neuroshard",
                "--cost-model",
                "analytical",
                "--measure-with",
                fake_collector(&dir, factor).to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ]));
        assert!(o.status.success(), "{text}");
        assert!(text.contains("Measured judge") && text.contains("Optimality"), "{text}");
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        assert_eq!(v["schema"], "shardplan.bench/v1");
        let cells = v["cells"].as_array().unwrap();
        assert_eq!(cells.len(), 2);
        assert!(cells[0]["measured"].is_null(), "only 4x128 is measured");
        let m = &cells[1]["measured"];
        assert_eq!(m["tasks"], 2);
        assert_eq!(m["hardware"], "fake", "the measuring machine is recorded: {m}");
        assert!(m["model_hardware"].is_null(), "the analytical model names no machine: {m}");
        assert!(text.contains("Measured on `fake`"), "{text}");
        let s = &m["summary"];
        assert_eq!(s["plans"], 8, "{m}");
        assert!((s["kendall_tau_mean"].as_f64().unwrap() - tau).abs() < 1e-9, "{m}");
        assert_eq!(s["same_winner"], if factor > 0 { 2 } else { 0 }, "{m}");
        // The judge against itself: the even rounds against the odd one.
        assert!((s["self_tau_mean"].as_f64().unwrap() - tau).abs() < 1e-9, "{m}");
        if factor > 0 {
            assert!(s["measurement_cv_pct"].as_f64().unwrap().abs() < 1e-9, "{m}");
            // Measured = predicted: no error, and neuroshard is compared with each baseline.
            assert!(s["accuracy"]["plan_mape_pct"].as_f64().unwrap() < 1e-9, "{m}");
            assert!(s["accuracy_at_reference_speed"].is_null(), "the analytical model has no reference speed");
            assert_eq!(m["paired"].as_array().unwrap().len(), 3, "{m}");
        }
        for p in cells[1]["planners"].as_array().unwrap() {
            assert_eq!(p["valid"], 4, "{p}");
            assert!(p["gap_to_bound_pct"].as_f64().unwrap() >= -1e-6, "analytical bound is proven: {p}");
        }
        // The plan documents and measurements are kept beside the result.
        assert!(dir.join(format!("f{factor}/bench-plans/d4_dim128")).read_dir().unwrap().count() >= 10);
    }
}

#[test]
fn bench_plans_only_writes_the_documents_the_judge_would_measure() {
    let dir = scratch("bench-plans-only");
    let args = |judge: &[&str], plans: &str| {
        let mut c = bin();
        c.args(["bench", "--quick", "--algos", "size,lookup,neuroshard", "--memory-rule", "weights"])
            .args(["--exact-tasks", "0", "--scale-tasks", "0", "--protocol-tasks", "0", "--cost-model", "analytical"])
            .args(["--measure-tasks", "3", "--measure-cells", "4x128", "--measure-planners", "size,neuroshard"])
            .args(judge)
            .args(["--plans-dir", dir.join(plans).to_str().unwrap()]);
        c
    };
    let (o, text) = run(&mut args(&["--plans-only"], "only"));
    assert!(o.status.success(), "{text}");
    assert!(text.contains("wrote the plans of 3 tasks (size, neuroshard)"), "{text}");
    assert!(!text.contains("Measured judge"), "nothing is measured: {text}");
    let names = |d: &str| {
        let mut v: Vec<String> = std::fs::read_dir(dir.join(d).join("d4_dim128"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    let only = names("only");
    assert_eq!(only.len(), 6, "{only:?}");
    assert!(dir.join("only/d4_dim16").read_dir().is_err(), "only the named cell is written");
    // The same documents, byte for byte, as the measured judge writes and measures.
    let (o, text) = run(&mut args(&["--measure-with", fake_collector(&dir, 1).to_str().unwrap()], "measured"));
    assert!(o.status.success(), "{text}");
    let measured: Vec<String> = names("measured").into_iter().filter(|n| n.ends_with(".plan.json")).collect();
    assert_eq!(measured, only);
    for n in &only {
        let read = |d: &str| std::fs::read(dir.join(d).join("d4_dim128").join(n)).unwrap();
        assert_eq!(read("only"), read("measured"), "{n}");
    }
    let (o, text) = run(&mut args(&["--plans-only", "--measure-with", "/bin/true"], "both"));
    assert!(!o.status.success() && text.contains("--plans-only") && text.contains("--measure-with"), "{text}");
}

#[test]
fn bench_refuses_bad_cells_and_a_missing_collector() {
    check_fails(bin().args(["bench", "--quick", "--measure-cells", "4by128"]), &["--measure-cells", "4by128"]);
    check_fails(bin().args(["bench", "--devices", "4,x", "--tasks", "1"]), &["--devices", "\"x\""]);
    check_fails(bin().args(["bench", "--quick", "--scale-points", "500/0"]), &["--scale-points", "500/0"]);
    check_fails(bin().args(["bench", "--quick", "--scale-points", "500x64"]), &["--scale-points", "500x64"]);
    check_fails(bin().args(["bench", "--quick", "--scale-cutoff-ms", "NaN"]), &["--scale-cutoff-ms", "NaN"]);
    check_fails(
        bin().args(["bench", "--quick", "--measure-with", "/nonexistent/collect"]),
        &["--measure-with", "/nonexistent/collect"],
    );
}

/// A small request stream: two groups of rows, each requested together, with a few mixed requests.
fn write_stream(path: &std::path::Path, requests: usize) {
    use std::fmt::Write as _;
    let mut text = String::new();
    for i in 0..requests {
        let rows: Vec<String> = match i % 5 {
            4 => vec![(i % 8).to_string(), (8 + i % 8).to_string()],
            k if k % 2 == 0 => (0..6).map(|r| ((r + i) % 8).to_string()).collect(),
            _ => (0..6).map(|r| (8 + (r + i) % 8).to_string()).collect(),
        };
        writeln!(text, "{{\"request_id\": {i}, \"time\": {i}.0, \"row_ids\": [{}]}}", rows.join(", ")).unwrap();
    }
    std::fs::write(path, text).unwrap();
}

#[test]
fn dynamic_replays_a_stream_through_every_strategy() {
    let dir = scratch("dynamic");
    let input = dir.join("stream.jsonl");
    write_stream(&input, 60);
    let out = dir.join("report.json");
    let (o, text) = run(bin()
        .args(["dynamic", "--input"])
        .arg(&input)
        .args(["--window-requests", "10", "--shards", "2,4", "--seeds", "2", "--out"])
        .arg(&out));
    assert!(o.status.success(), "{text}");
    assert!(text.contains("ALIS vs full"), "{text}");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(report["requests"], 60);
    let cells = report["cells"].as_array().unwrap();
    // Every registered strategy at both shard counts, each with one run per seed.
    assert_eq!(cells.len(), 2 * alis::STRATEGY_NAMES.len());
    assert!(cells.iter().all(|c| c["runs"].as_array().unwrap().len() == 2));
    assert_eq!(report["config"]["polish"], false);
    // `--polish` reaches ALIS's settings and is recorded with the report.
    let (o, text) = run(bin()
        .args(["dynamic", "--input"])
        .arg(&input)
        .args(["--window-requests", "10", "--shards", "4", "--strategies", "alis", "--polish", "--out"])
        .arg(&out));
    assert!(o.status.success(), "{text}");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(report["config"]["polish"], true);
}

#[test]
fn dynamic_refuses_a_stream_file_of_an_unknown_format_naming_its_extension() {
    let dir = scratch("dynamic-ext");
    let input = dir.join("stream.txt");
    write_stream(&input, 10);
    let (o, text) = run(bin().args(["dynamic", "--input"]).arg(&input).args(["--window-requests", "5"]));
    assert!(!o.status.success(), "{text}");
    assert!(text.contains("invalid stream file extension = \"txt\" (allowed: .jsonl, .json, .ndjson, .csv)"), "{text}");
}

#[test]
fn dynamic_dumps_the_hypergraphs_direct_and_full_partition() {
    let dir = scratch("dynamic-dump");
    let input = dir.join("stream.jsonl");
    write_stream(&input, 30);
    let dump = dir.join("dump");
    let (o, text) = run(bin()
        .args(["dynamic", "--input"])
        .arg(&input)
        .args(["--window-requests", "10", "--shards", "2,4", "--seeds", "1", "--strategies", "direct,full"])
        .args(["--dump-reps", "1", "--dump-dir"])
        .arg(&dump));
    assert!(o.status.success(), "{text}");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dump.join("manifest.json")).unwrap()).unwrap();
    // Three windows: updates 0 and 1 are scored (update 2 is not), for two scopes.
    let instances = manifest["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 4);
    for inst in instances {
        let hgr = std::fs::read_to_string(dump.join(inst["file"].as_str().unwrap())).unwrap();
        let head: Vec<usize> = hgr.lines().next().unwrap().split_whitespace().map(|x| x.parse().unwrap()).collect();
        assert_eq!(head[1], inst["n_vertices"].as_u64().unwrap() as usize, "{hgr}");
        for ours in inst["ours"].as_array().unwrap() {
            let part = std::fs::read_to_string(dump.join(ours["part"].as_str().unwrap())).unwrap();
            assert_eq!(part.lines().count(), head[1]);
            assert!(ours["max_load"].as_u64().unwrap() <= ours["cap"].as_u64().unwrap());
        }
    }
    assert_eq!(manifest["streams"][0]["windows"].as_array().unwrap().len(), 3);
    // Only the from-scratch partitions can be dumped; the partitioner is named.
    check_fails(
        bin().args(["dynamic", "--input"]).arg(&input).args(["--strategies", "alis", "--dump-dir"]).arg(&dump),
        &["alis", "--dump-dir", "direct, full"],
    );
    check_fails(
        bin().args(["dynamic", "--input"]).arg(&input).args(["--partitioner", "kahypar"]),
        &["partitioner", "kahypar", "multilevel, deep, flat"],
    );
    // A decayed `full` is dumped as it partitions: every request weighted by its window's age (the second
    // scored update reads two windows, the older at 0.5 of the newer's 65,536).
    let decayed = dir.join("decayed");
    let (o, text) = run(bin()
        .args(["dynamic", "--input"])
        .arg(&input)
        .args(["--window-requests", "10", "--shards", "2", "--seeds", "1", "--strategies", "full"])
        .args(["--full-decay", "0.5", "--dump-reps", "1", "--dump-dir"])
        .arg(&decayed));
    assert!(o.status.success(), "{text}");
    let hgr = std::fs::read_to_string(decayed.join("full-0-001.hgr")).unwrap();
    let head: Vec<&str> = hgr.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(head.get(2), Some(&"1"), "weighted nets: {hgr}");
    let weights: std::collections::BTreeSet<&str> =
        hgr.lines().skip(1).filter_map(|l| l.split_whitespace().next()).collect();
    assert!(weights.contains("65536") && weights.contains("32768"), "{weights:?}");
    // The flat partitioner still runs every strategy.
    let (o, text) = run(bin().args(["dynamic", "--input"]).arg(&input).args([
        "--window-requests",
        "10",
        "--shards",
        "2",
        "--seeds",
        "1",
        "--partitioner",
        "flat",
    ]));
    assert!(o.status.success() && text.contains("ALIS vs full"), "{text}");
}

#[test]
fn dynamic_refuses_bad_streams_and_parameters_by_name() {
    let dir = scratch("dynamic-bad");
    let input = dir.join("stream.jsonl");
    write_stream(&input, 20);
    let out = dir.join("report.json");
    std::fs::write(&out, "keep me").unwrap();
    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, "{\"request_id\": 1, \"time\": 0.0, \"row_ids\": [1, 2]}\n{\"request_id\": 2, \"time\": 1.0, \"row_ids\": [\"x\"]}\n").unwrap();
    check_fails(bin().args(["dynamic", "--input"]).arg(&bad).arg("--out").arg(&out), &["line 2", "row_ids"]);
    check_fails(
        bin().args(["dynamic", "--input"]).arg(&input).args(["--decay", "0"]).arg("--out").arg(&out),
        &["decay = 0", "(0, 1]"],
    );
    check_fails(
        bin().args(["dynamic", "--input"]).arg(&input).args(["--full-decay", "1.5"]).arg("--out").arg(&out),
        &["full_decay = 1.5", "(0, 1]"],
    );
    check_fails(
        bin().args(["dynamic", "--input"]).arg(&input).args(["--strategies", "alis,nope"]),
        &["strategy", "nope"],
    );
    // `--policies`, the flag's earlier name, still selects strategies (clap would refuse an unknown flag
    // without naming the value).
    check_fails(bin().args(["dynamic", "--input"]).arg(&input).args(["--policies", "alis,nope"]), &["nope"]);
    // One window of 1000 requests would score nothing: the replay needs two.
    check_fails(
        bin().args(["dynamic", "--input"]).arg(&input).args(["--window-requests", "1000"]),
        &["window_requests", "1000", "1..=19"],
    );
    check_fails(bin().args(["dynamic", "--input"]).arg(dir.join("missing.jsonl")), &["missing.jsonl"]);
    // Per-window metrics go only into the JSON report: without one there is nowhere to put them.
    check_fails(bin().args(["dynamic", "--input"]).arg(&input).arg("--per-window"), &["--per-window", "--out"]);
    // A time of `nan` is echoed as written.
    let csv = dir.join("nan.csv");
    std::fs::write(&csv, "request_id,time,row_ids\n1,0.5,3;4\n2,nan,5\n").unwrap();
    check_fails(bin().args(["dynamic", "--input"]).arg(&csv), &["line 3", "time", "\"nan\"", "finite"]);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep me", "a failed run must not overwrite the report");
}

#[test]
fn dynamic_with_one_scored_window_says_so_instead_of_a_perfect_stability() {
    let dir = scratch("dynamic-one-window");
    let input = dir.join("stream.jsonl");
    write_stream(&input, 20);
    // Windows of 10: window 0 is served by hash, window 1 is the only one scored.
    let (o, text) =
        run(bin().args(["dynamic", "--input"]).arg(&input).args(["--window-requests", "10", "--shards", "2"]));
    assert!(o.status.success(), "{text}");
    assert!(text.contains("Only 1 scored window") && text.contains("not judged"), "{text}");
    assert!(text.contains("warning: windows of 10 requests leave 1 scored window"), "{text}");
    assert!(!text.contains("0.000 ± 0.000") && !text.contains("NOT met") && !text.contains("ALIS vs full"), "{text}");
    // Three windows (two scored) are judged.
    let (o, text) =
        run(bin().args(["dynamic", "--input"]).arg(&input).args(["--window-requests", "7", "--shards", "2"]));
    assert!(o.status.success(), "{text}");
    assert!(text.contains("ALIS vs full") && !text.contains("scored window"), "{text}");
}

/// Inputs that once gave wrong answers, aborts or minutes of work: each is refused at once, by name.
#[test]
fn hostile_sizes_and_counts_are_refused_before_any_work() {
    let dir = scratch("hostile");
    let out = dir.join("plan.json");
    std::fs::write(&out, "keep me").unwrap();
    // Device counts are checked before any allocation (4294967295 once aborted allocating 32 GiB).
    for n in ["4294967295", "1000000000", "4097"] {
        check_fails(bin().args(["plan", "--devices", n, "--out"]).arg(&out), &["count", n, "1..=4096"]);
    }
    // Sizes past 64 bits are errors naming the value, not u64::MAX or "at least 1 byte".
    for mem in ["18446744073709551616", "99999999999TiB"] {
        check_fails(bin().args(["plan", "--mem", mem, "--out"]).arg(&out), &[mem, "at most 18446744073709551615"]);
    }
    // Pooling factors have a documented range, checked where the table is read.
    let tables = dir.join("t.csv");
    std::fs::write(&tables, "name,rows,dim,pooling_factor\na,100,8,1e20\n").unwrap();
    check_fails(bin().args(["plan", "--tables"]).arg(&tables).arg("--out").arg(&out), &["pooling_factor", "0..=10000"]);
    // A duplicated CSV column is refused, not read as its first copy.
    std::fs::write(&tables, "name,rows,rows,dim,pooling_factor\na,100,7,8,1\n").unwrap();
    check_fails(bin().args(["plan", "--tables"]).arg(&tables).arg("--out").arg(&out), &["\"rows\"", "twice"]);
    // Suites and synthetic streams past their limits.
    check_fails(
        bin().args(["tasks", "--table-range", "1..100000000", "--out"]).arg(dir.join("s.jsonl")),
        &["tables", "100001"],
    );
    check_fails(
        bin().args(["tasks", "--count", "100000000", "--out"]).arg(dir.join("s.jsonl")),
        &["count", "100000000"],
    );
    for (c, i) in [("100000000", "100000000"), ("4294967297", "4294967297")] {
        check_fails(
            bin().args(["dynamic", "--synthetic", "--communities", c, "--items-per-community", i]),
            &["communities x items_per_community", "at most 50000000 items"],
        );
    }
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep me");
}

#[test]
fn a_task_larger_than_all_memory_says_so_first_in_readable_units() {
    // The pool at dim 64 is about 838 GiB: four 4 GiB devices cannot hold it under any plan, and the
    // message says so with both totals rather than naming one table.
    let dir = scratch("too-large");
    let pool = dir.join("pool.csv");
    let (o, text) = run(bin().args(["pool", "--out"]).arg(&pool));
    assert!(o.status.success(), "{text}");
    check_fails(
        bin()
            .args(["plan", "--dim", "64", "--devices", "4", "--mem", "4GiB", "--tables"])
            .arg(&pool)
            .arg("--out")
            .arg(dir.join("p.json")),
        &[
            "the 856 tables need at least",
            "GiB (",
            "bytes) of weights and optimizer state",
            "usable in total",
            "at least",
            "kept in host memory, they would need",
            "of host DRAM, more than the 512.00 GiB of the 1 host (--host-dram)",
        ],
    );
    assert!(!dir.join("p.json").exists());
}

#[test]
fn plan_names_the_cost_definition_as_it_is_written() {
    let dir = scratch("definition");
    let (o, text) = run(bin()
        .args(["plan", "--algo", "size", "--devices", "2", "--max-dim", "16", "--definition", "four-phase"])
        .args(["--cost-model", "analytical", "--out"])
        .arg(dir.join("p.json")));
    assert!(o.status.success(), "{text}");
    assert!(text.contains("definition four-phase"), "{text}");
    assert!(!text.contains("FourPhase"), "{text}");
}

#[test]
fn list_aligns_every_description() {
    let (o, text) = run(bin().arg("list"));
    assert!(o.status.success(), "{text}");
    // Every entry line is two spaces, a name, padding, two spaces and its description: the descriptions
    // start in one column whatever the longest name.
    let starts: Vec<usize> = text
        .lines()
        .filter(|l| l.starts_with("  "))
        .map(|l| {
            let name_end = 2 + l[2..].find(' ').unwrap();
            name_end + l[name_end..].find(|c: char| c != ' ').unwrap()
        })
        .collect();
    assert!(starts.len() >= 15, "{text}");
    assert!(starts.iter().all(|&s| s == starts[0]), "{starts:?}\n{text}");
    assert!(text.contains("size-lookup+refine  "), "{text}");
}

#[test]
fn the_readme_pool_example_plans() {
    // The README's quick start plans the whole pool file; run its own lines, so the example cannot rot.
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let line = |prefix: &str| -> Vec<String> {
        let l =
            readme.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("README has no `{prefix}` line"));
        let command = l.split('#').next().unwrap();
        command.split_whitespace().skip(1).map(str::to_string).collect()
    };
    let dir = scratch("readme-pool");
    let (o, text) = run(bin().args(line("shardplan pool --out pool.csv")).current_dir(&dir));
    assert!(o.status.success(), "{text}");
    let (o, text) = run(bin().args(line("shardplan plan --tables pool.csv")).current_dir(&dir));
    assert!(o.status.success(), "{text}");
    assert!(
        text.contains("Plan by `auto` for 856 tables") && text.contains("fits memory (usable bytes): yes"),
        "{text}"
    );
}

/// `--cost-model cpu` picks the embedded CPU profile measured on this machine's CPU model and last-level
/// cache, or refuses naming the CPU, its cache and the profiles there are; `list` says which. The
/// expectation follows the machine the test runs on.
#[test]
fn the_cpu_cost_model_is_the_profile_of_this_machines_cpu() {
    let (model, llc) = (shardplan_files::cpu_model(), shardplan_files::llc_bytes());
    let here = format!("{model}, {}", planner_core::cost::card::last_level_cache_clause(llc));
    let out = scratch("cpu-alias").join("plan.json");
    let args = ["plan", "--sample", "8", "--max-dim", "32", "--devices", "4", "--seed", "1", "--cost-model", "cpu"];
    let (o, text) = run(bin().args(args).args(["--algo", "size-lookup", "--batch", "4096", "--out"]).arg(&out));
    let (_, listed) = run(bin().arg("list"));
    if let Ok(p) = planner_core::cost::profiles::cpu_profile_for(&model, llc) {
        assert!(o.status.success(), "{text}");
        assert!(text.contains(&format!("neural:{}", p.name)), "{text}");
        assert!(listed.contains(&format!("({here}): {}", p.name)), "{listed}");
    } else {
        assert!(!o.status.success(), "{text}");
        assert!(text.contains("no embedded CPU profile") && text.contains(&here), "{text}");
        assert!(listed.contains("none is embedded"), "{listed}");
    }
}

#[test]
fn hosts_are_planned_priced_exported_and_refused_by_name() {
    let dir = scratch("topology");
    let (aware, blind, trec) = (dir.join("aware.json"), dir.join("blind.json"), dir.join("trec.json"));
    let common =
        ["plan", "--algo", "neuroshard-fast", "--sample", "40", "--devices", "16", "--max-dim", "64", "--seed", "2"];
    let (o, text) = run(bin()
        .args(common)
        .args(["--topology", "h100-sxm", "--network-gbps", "4", "--splits", "torchrec", "--out"])
        .arg(&aware)
        .arg("--torchrec-out")
        .arg(&trec));
    assert!(o.status.success(), "{text}");
    assert!(text.contains("Topology: 2 hosts × 8 devices, network 4.000 GB/s + 25 µs per device (h100-sxm)"), "{text}");
    assert!(text.contains("bottleneck link: ") && text.contains("of which network ms"), "{text}");
    let (doc, _) = planner_core::PlanDocument::from_json(&std::fs::read_to_string(&aware).unwrap()).unwrap();
    assert_eq!(doc.task.topology.as_ref().map(|t| t.hosts), Some(2));
    assert!(doc.report.bottleneck_link.is_some());
    // The TorchRec plan places ranks by host.
    let t: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&trec).unwrap()).unwrap();
    assert_eq!(t["local_world_size"], 8);
    // A plan made blind to the hosts, priced on them by `evaluate`, costs more.
    let (o, text) = run(bin().args(common).arg("--out").arg(&blind));
    assert!(o.status.success(), "{text}");
    let (o, text) = run(bin()
        .args(["evaluate", "--topology", "h100-sxm", "--network-gbps", "4", "--out"])
        .arg(dir.join("priced.json"))
        .arg(&blind)
        .arg(&aware));
    assert!(o.status.success(), "{text}");
    let priced: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("priced.json")).unwrap()).unwrap();
    let cost = |i: usize| priced[i]["report"]["cost_ms"].as_f64().unwrap();
    assert!(cost(1) < cost(0), "aware {} vs blind {}", cost(1), cost(0));
    // Bad topologies: not dividing, no network, an unknown preset, a file and flags at once.
    check_fails(
        bin().args(["plan", "--devices", "12", "--topology", "h100-sxm", "--out"]).arg(dir.join("x.json")),
        &["devices_per_host", "12 devices"],
    );
    check_fails(bin().args(["plan", "--devices", "8", "--hosts", "2", "--out"]).arg(dir.join("x.json")), &["network"]);
    check_fails(bin().args(["plan", "--topology", "dgx", "--out"]).arg(dir.join("x.json")), &["\"dgx\"", "h100-sxm"]);
    check_fails(
        bin()
            .args(["plan", "--devices", "8", "--topology", "h100-sxm", "--network-gbps", "0", "--out"])
            .arg(dir.join("x.json")),
        &["network_gbps", "0"],
    );
    let file = dir.join("topo.json");
    std::fs::write(&file, r#"{"hosts": 2, "devices_per_host": 4, "network": {"bw_bytes_per_s": 1e10}}"#).unwrap();
    check_fails(
        bin().args(["plan", "--devices", "16", "--topology"]).arg(&file).arg("--out").arg(dir.join("x.json")),
        &["2 × 4 = 8", "16 devices"],
    );
    check_fails(
        bin()
            .args(["plan", "--devices", "8", "--hosts", "2", "--topology"])
            .arg(&file)
            .arg("--out")
            .arg(dir.join("x.json")),
        &["is a file"],
    );
    let (o, text) = run(bin()
        .args(["plan", "--devices", "8", "--sample", "10", "--topology"])
        .arg(&file)
        .arg("--out")
        .arg(dir.join("x.json")));
    assert!(o.status.success() && text.contains("2 hosts × 4 devices, network 10.000 GB/s"), "{text}");
}

#[test]
fn tables_too_big_for_hbm_go_to_host_memory_behind_caches() {
    let dir = scratch("tiers");
    let out = dir.join("p.json");
    let big = ["plan", "--sample", "48", "--max-dim", "128", "--devices", "4", "--mem", "2GiB", "--seed", "11"];
    let (o, text) = run(bin().args(big).arg("--out").arg(&out));
    assert!(o.status.success(), "{text}");
    assert!(text.contains("Tiers: ") && text.contains("in host memory (HBM cache share of rows: "), "{text}");
    assert!(text.contains("host DRAM") && text.contains("cache state"), "{text}");
    assert!(text.contains("Host DRAM per host: host 0 ") && text.contains(" of 512.00 GiB"), "{text}");
    let (doc, _) = planner_core::PlanDocument::from_json(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert!(doc.report.feasible);
    assert!(doc.task.tables.iter().any(planner_core::TableSpec::in_host_memory));
    // The document prices the same again (the tiers travel with its task).
    let (o, text) = run(bin().args(["evaluate", "--out"]).arg(dir.join("e.json")).arg(&out));
    assert!(o.status.success(), "{text}");
    let e: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("e.json")).unwrap()).unwrap();
    assert_eq!(e[0]["report"]["cost_ms"].as_f64().unwrap(), doc.report.cost_ms);
    // HBM only: refused with the capacity message; too little host memory: refused naming it.
    check_fails(bin().args(big).args(["--tiers", "hbm", "--out"]).arg(dir.join("x.json")), &["usable in total"]);
    check_fails(
        bin().args(big).args(["--host-dram", "8GiB", "--out"]).arg(dir.join("x.json")),
        &["host DRAM", "more than the 8.00 GiB of the 1 host"],
    );
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"[{"name": "a", "rows": 1000, "dim": 8, "pooling_factor": 1, "cache_load_factor": 1.5}]"#)
        .unwrap();
    check_fails(
        bin().args(["plan", "--tables"]).arg(&bad).arg("--out").arg(dir.join("x.json")),
        &["cache_load_factor", "1.5"],
    );
    assert!(!dir.join("x.json").exists());
}
