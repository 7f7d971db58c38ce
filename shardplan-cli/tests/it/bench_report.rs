//! The bench's Markdown report and JSON result keep their shape: a small run with every section
//! (two prediction cells, the measured judge through the fake collector, optimality, scale, the seed
//! protocols) under the analytical model and the seed papers' memory rule, compared with the files in
//! `tests/fixtures/bench/`. Planning times are the one thing that differs between runs, so they are
//! masked on both sides (in tables also the padding they cause); everything else must match byte for
//! byte. Rewrite the fixtures with `SHARDPLAN_BLESS=1 cargo test -p shardplan-cli --test it bench_report`.

use super::{bin, fake_collector, run, scratch};

/// JSON keys holding planning times.
const TIME_KEYS: [&str; 10] = [
    "plan_time_p50_ms",
    "plan_time_p95_ms",
    "plan_time_max_ms",
    "peak_heap_max_bytes",
    "time_exponent",
    "heap_exponent",
    "time_exponent_tables",
    "time_exponent_devices",
    "heap_exponent_tables",
    "heap_exponent_devices",
];

/// Markdown table columns holding planning times and heap peaks (by header), which vary run to run.
const TIME_COLUMNS: [&str; 11] = [
    "plan p50 ms",
    "plan p95 ms",
    "p50 ms",
    "max ms",
    "peak heap MiB",
    "time exponent",
    "peak heap exponent",
    "time: tables",
    "time: devices",
    "heap: tables",
    "heap: devices",
];

/// `v` with every planning time and heap peak replaced by `null`.
fn mask_json(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if TIME_KEYS.contains(&k.as_str()) {
                    *x = serde_json::Value::Null;
                } else {
                    mask_json(x);
                }
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(mask_json),
        _ => {}
    }
}

/// `md` with the cells of planning-time columns replaced by `~` and table cells trimmed (a time's
/// width pads its whole column); every line outside tables is kept as it is.
fn mask_markdown(md: &str) -> String {
    let mut out = Vec::new();
    let mut time_columns: Vec<usize> = Vec::new();
    let mut in_table = false;
    for line in md.lines() {
        if !line.starts_with('|') {
            in_table = false;
            out.push(line.to_string());
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if !in_table {
            in_table = true;
            time_columns = (0..cells.len()).filter(|&c| TIME_COLUMNS.contains(&cells[c])).collect();
            out.push(format!("| {} |", cells.join(" | ")));
        } else if cells.iter().all(|c| !c.is_empty() && c.chars().all(|ch| ch == '-')) {
            out.push(format!("|{}|", vec!["-"; cells.len()].join("|")));
        } else {
            let masked: Vec<&str> =
                cells.iter().enumerate().map(|(c, s)| if time_columns.contains(&c) { "~" } else { s }).collect();
            out.push(format!("| {} |", masked.join(" | ")));
        }
    }
    out.join("\n") + "\n"
}

#[test]
fn bench_report_keeps_its_shape() {
    let dir = scratch("bench-report");
    let collector = fake_collector(&dir, 1);
    let (o, text) = run(bin()
        .current_dir(&dir)
        .args(["bench", "--quick", "--algos", "size,lookup,neuroshard", "--cost-model", "analytical"])
        .args(["--memory-rule", "weights", "--exact-tasks", "3", "--scale-tasks", "1", "--protocol-tasks", "1"])
        .args(["--measure-tasks", "1", "--measure-cells", "4x128", "--measure-planners", "size,lookup,neuroshard"])
        .arg("--measure-with")
        .arg(&collector)
        .args(["--out", "bench.json", "--md", "bench.md"]));
    assert!(o.status.success(), "{text}");
    let md = mask_markdown(&std::fs::read_to_string(dir.join("bench.md")).unwrap());
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("bench.json")).unwrap()).unwrap();
    mask_json(&mut json);
    let json = serde_json::to_string_pretty(&json).unwrap() + "\n";
    let fixtures = format!("{}/tests/fixtures/bench", env!("CARGO_MANIFEST_DIR"));
    let (md_path, json_path) = (format!("{fixtures}/quick.md"), format!("{fixtures}/quick.json"));
    if std::env::var("SHARDPLAN_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&md_path, &md).unwrap();
        std::fs::write(&json_path, &json).unwrap();
        println!("wrote {md_path} and {json_path}");
        return;
    }
    // The sections are all there (a fixture rewritten from a broken run would not pass this).
    for section in [
        "## 4 devices, max dim 128",
        "Measured judge",
        "## Optimality",
        "## Planning time at scale",
        "AutoShard protocol",
    ] {
        assert!(md.contains(section), "missing {section:?} in:\n{md}");
    }
    let expected_md = std::fs::read_to_string(&md_path).unwrap_or_else(|e| panic!("{md_path}: {e}"));
    assert_eq!(md, expected_md, "the Markdown report changed");
    let expected_json = std::fs::read_to_string(&json_path).unwrap_or_else(|e| panic!("{json_path}: {e}"));
    assert_eq!(json, expected_json, "the JSON result changed");
}
