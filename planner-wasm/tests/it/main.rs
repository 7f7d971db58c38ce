//! The native side of the binding's parity check. `web-demo/tests/binding.mjs` runs the built browser
//! module under Node and compares what it returns with `web-demo/tests/fixtures/native-parity.json`;
//! this test computes the same requests with native code and checks that the file still says what
//! native code computes, so the two builds are compared through it. After a deliberate change of the
//! sampler or of a planner, rewrite the file with `SHARDPLAN_BLESS=1 cargo test -p planner-wasm`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use planner_wasm::api::{self, ModelOptions, PlanRequest, SampleRequest};
use serde_json::{Value, json};

fn fixture_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../web-demo/tests/fixtures/native-parity.json")
}

/// The requests the Node test sends, and what native code answers.
fn native() -> Value {
    let sample: Value = json!({"devices": 4, "max_dim": 64, "seed": 7});
    let req: SampleRequest = serde_json::from_value(sample.clone()).unwrap();
    let task = api::sample_task(&req).unwrap();
    // The suite's own task, so the page and `shardplan tasks` agree.
    assert_eq!(task, planner_core::SuiteSpec::neuroshard(4, 64, 1, 7).task(0).unwrap().task);
    // The greedy baselines do not depend on the model, so their pieces must match exactly under the
    // default (learned, run by tract) model, whose costs may differ in the last bits between native code
    // and wasm's SIMD kernels; NeuroShard's search follows its model, so it is compared under the
    // analytical model, whose f64 arithmetic is the same on both.
    let mut plans = Vec::new();
    for (planner, model) in [("size-lookup", None), ("dim", None), ("neuroshard", Some("analytical"))] {
        let model_json = model.map_or_else(|| json!({}), |m| json!({"cost_model": m}));
        let req = PlanRequest {
            task: task.clone(),
            planner: planner.into(),
            seed: 3,
            model: serde_json::from_value::<ModelOptions>(model_json.clone()).unwrap(),
            repeat: 1,
            memory: planner_core::MemoryRule::torchrec(),
            budget_ms: None,
            topology: None,
            tiers: "auto".into(),
        };
        let out = api::plan(&req, || 0.0).unwrap();
        plans.push(json!({
            "planner": planner,
            "model": model_json,
            "pieces": out.document.pieces,
            "cost_ms": out.document.report.cost_ms,
        }));
    }
    json!({
        "sample_request": sample,
        "task": task,
        "plan_seed": 3,
        "plans": plans,
    })
}

#[test]
fn the_node_parity_fixture_says_what_native_code_computes() {
    let want = native();
    let path = fixture_path();
    if std::env::var_os("SHARDPLAN_BLESS").is_some() {
        std::fs::write(&path, format!("{}\n", serde_json::to_string_pretty(&want).unwrap())).unwrap();
    }
    let have: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let (want_plans, have_plans) = (want["plans"].as_array().unwrap(), have["plans"].as_array().unwrap());
    assert_eq!(want_plans.len(), have_plans.len());
    for (w, h) in want_plans.iter().zip(have_plans) {
        let planner = &w["planner"];
        assert_eq!((planner, &w["model"]), (&h["planner"], &h["model"]));
        let (a, b) = (w["cost_ms"].as_f64().unwrap(), h["cost_ms"].as_f64().unwrap());
        assert!((a - b).abs() <= 1e-9 * a.abs(), "{planner}: native {a}, fixture {b}");
        assert_eq!(w["pieces"], h["pieces"], "{planner}: pieces");
    }
    assert_eq!(want["task"], have["task"], "the sampled task");
    assert_eq!(want["sample_request"], have["sample_request"]);
}

#[test]
fn a_plan_request_budget_holds_and_a_bad_one_is_refused_by_name() {
    let task = api::sample_task(
        &serde_json::from_value(
            json!({"devices": 8, "mem_cap_bytes": 17_179_869_184_u64, "max_dim": 128, "seed": 3, "tables": 100}),
        )
        .unwrap(),
    )
    .unwrap();
    let request = |budget: Value| -> PlanRequest {
        serde_json::from_value(json!({"task": task, "planner": "neuroshard", "seed": 3, "budget_ms": budget})).unwrap()
    };
    // A clock that advances 1 ms per reading: a 20 ms budget stops the search after 20 readings, and the
    // plan still comes back within memory.
    let tick = std::cell::Cell::new(0.0);
    let clock = || {
        tick.set(tick.get() + 1.0);
        tick.get()
    };
    let out = api::plan(&request(json!(20.0)), clock).unwrap();
    assert!(out.document.report.feasible);
    for bad in [json!(0.0), json!(-5.0)] {
        let e = api::plan(&request(bad.clone()), || 0.0).unwrap_err().to_string();
        assert!(e.contains("budget_ms"), "{bad}: {e}");
    }
}
