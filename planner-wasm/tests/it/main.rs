//! The binding as JavaScript sees it, run under Node by wasm-bindgen-test:
//! `CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner cargo test --target wasm32-unknown-unknown -p planner-wasm`.
//! Inputs are built with `JSON.parse` (plain JS objects, as a page would send them) and outputs are
//! read back with `JSON.stringify`, then parsed by the same code the CLI uses for its files.
#![cfg(target_arch = "wasm32")]
// clippy's allow-unwrap-in-tests does not recognise `#[wasm_bindgen_test]` functions as tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use planner_core::{PlanDocument, SuiteSpec};
use planner_wasm as pw;
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::wasm_bindgen_test;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = JSON, js_name = parse)]
    fn json_parse(text: &str) -> JsValue;
    #[wasm_bindgen(js_namespace = JSON, js_name = stringify)]
    fn json_stringify(value: &JsValue) -> String;
    #[wasm_bindgen(js_name = String)]
    fn js_string(value: &JsValue) -> String;
}

fn js(text: &str) -> JsValue {
    json_parse(text)
}

fn json(value: &JsValue) -> serde_json::Value {
    serde_json::from_str(&json_stringify(value)).unwrap()
}

/// The message of a thrown error, as `String(error)` shows it in JavaScript.
fn message(r: Result<JsValue, JsError>) -> String {
    js_string(&JsValue::from(r.unwrap_err()))
}

fn sample() -> JsValue {
    pw::sample_task(&js(r#"{"devices": 4, "max_dim": 64, "seed": 7}"#)).unwrap()
}

fn plan_request(task: &JsValue, planner: &str) -> JsValue {
    js(&format!(r#"{{"task": {}, "planner": "{planner}", "seed": 3}}"#, json_stringify(task)))
}

#[wasm_bindgen_test]
fn lists_planners_and_models() {
    let planners = json(&pw::list_planners().unwrap());
    let names: Vec<&str> = planners.as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"size-lookup") && names.contains(&"random"), "{names:?}");
    let models = json(&pw::list_cost_models().unwrap());
    assert_eq!(models[0]["name"], "analytical");
    assert!(models.as_array().unwrap().iter().any(|m| m["name"] == "h100" && m["is_default"] == true), "{models}");
    assert!(models[0]["hardware"].as_array().unwrap().iter().any(|h| h == "h100"));
}

#[wasm_bindgen_test]
fn samples_the_same_task_as_native_code() {
    let task: planner_core::Task = serde_json::from_value(json(&sample())).unwrap();
    assert_eq!(task, SuiteSpec::neuroshard(4, 64, 1, 7).task(0).unwrap().task);
}

#[wasm_bindgen_test]
fn plans_in_the_cli_schema_with_a_planning_time() {
    let out = json(&pw::plan(&plan_request(&sample(), "size-lookup")).unwrap());
    let ms = out["planning_ms"].as_f64().unwrap();
    assert!((0.0..60_000.0).contains(&ms), "{ms}");
    // The document is readable by the CLI's own parser, and matches the native planner's result.
    let (doc, plan) = PlanDocument::from_json(&out["document"].to_string()).unwrap();
    assert_eq!(doc.planner, "size-lookup");
    assert!(doc.report.feasible && doc.report.cost_ms > 0.0);
    let model = planner_core::AnalyticalModel::default();
    let native = planner_core::planners::planner("size-lookup")
        .unwrap()
        .build()
        .plan(&doc.task, &planner_core::PlanContext::new(&model, 3))
        .unwrap();
    assert_eq!(plan, native);
    // The default profile predicts forward + backward as one figure, so `compute_split` is `null`.
    assert!(out["document"]["report"]["devices"][0]["compute_split"].is_null());
}

#[wasm_bindgen_test]
fn evaluates_and_edits_plans() {
    let out = pw::plan(&plan_request(&sample(), "dim")).unwrap();
    let doc = json(&out)["document"].clone();
    let doc_js = js(&doc.to_string());
    let same = json(&pw::evaluate_plan(&doc_js, &JsValue::UNDEFINED).unwrap());
    assert_eq!(same["report"], doc["report"]);
    let h100 = json(&pw::evaluate_plan(&doc_js, &js(r#"{"cost_model": "analytical", "hw": "h100"}"#)).unwrap());
    assert_eq!(h100["report"]["cost_model"], "analytical:h100");
    // The analytical model knows the forward/backward parts; they sum to the compute time.
    let d0 = &h100["report"]["devices"][0];
    let split = d0["compute_split"]["fwd_ms"].as_f64().unwrap() + d0["compute_split"]["bwd_ms"].as_f64().unwrap();
    assert!((split - d0["compute_ms"].as_f64().unwrap()).abs() < 1e-9, "{d0}");
    // The default is the embedded H100 profile (learned compute, analytical comm), run by tract in wasm.
    assert!(same["report"]["cost_model"].as_str().unwrap().starts_with("neural:h100"), "{}", same["report"]);

    // Move a piece of the bottleneck device elsewhere: the cost changes.
    let bottleneck = doc["report"]["bottleneck_device"].as_u64().unwrap();
    let piece = doc["pieces"].as_array().unwrap().iter().find(|p| p["device"] == bottleneck).unwrap();
    let edit = format!(
        r#"{{"op": "move", "table_id": {}, "col_offset": {}, "to_device": {}}}"#,
        piece["table_id"],
        piece["col_offset"],
        (bottleneck + 1) % 4
    );
    let moved = json(&pw::what_if(&doc_js, &js(&edit), &JsValue::UNDEFINED).unwrap());
    assert_ne!(moved["report"]["cost_ms"], doc["report"]["cost_ms"]);
    assert_eq!(moved["planner"], "dim+what-if");

    // Split, then grow to 6 devices: the task and the per-device breakdown follow.
    let split =
        format!(r#"{{"op": "split", "table_id": {}, "col_offset": {}}}"#, piece["table_id"], piece["col_offset"]);
    let split = pw::what_if(&doc_js, &js(&split), &JsValue::UNDEFINED).unwrap();
    let n = json(&split)["pieces"].as_array().unwrap().len();
    assert_eq!(n, doc["pieces"].as_array().unwrap().len() + 1);
    let grown =
        json(&pw::what_if(&split, &js(r#"{"op": "set_device_count", "count": 6}"#), &JsValue::UNDEFINED).unwrap());
    assert_eq!(grown["report"]["devices"].as_array().unwrap().len(), 6);
    assert_eq!(grown["task"]["devices"]["mem_cap_bytes"].as_array().unwrap().len(), 6);
}

#[wasm_bindgen_test]
fn errors_are_exceptions_with_the_core_message() {
    let e = message(pw::plan(&plan_request(&sample(), "magic")));
    assert!(e.contains("unknown planner `magic`"), "{e}");
    let e = message(pw::parse_tables("rows,dim,pooling_factor\n10,6,1\n", "csv", None));
    assert!(e.contains("line 2") && e.contains("`dim` = 6"), "{e}");
    let e = message(pw::parse_tables("{not json", "json", None));
    assert!(e.contains("tables JSON"), "{e}");
    let e = message(pw::sample_task(&js(r#"{"devices": 4, "max_dim": 48}"#)));
    assert!(e.contains("`max_dim` = 48"), "{e}");
    let e = message(pw::sample_task(&js(r#"{"devices": 4, "colour": 1}"#)));
    assert!(e.contains("sample request") && e.contains("colour"), "{e}");
    let doc = json(&pw::plan(&plan_request(&sample(), "size")).unwrap())["document"].to_string();
    let e = message(pw::what_if(
        &js(&doc),
        &js(r#"{"op": "move", "table_id": 0, "col_offset": 0, "to_device": 9}"#),
        &JsValue::UNDEFINED,
    ));
    assert!(e.contains("`to_device` = 9"), "{e}");
    let e = message(pw::what_if(&js(&doc), &js(r#"{"op": "teleport"}"#), &JsValue::UNDEFINED));
    assert!(e.contains("what-if edit") && e.contains("teleport"), "{e}");
}

#[wasm_bindgen_test]
fn parses_uploaded_tables() {
    let csv = pw::parse_tables("name,rows,dim,pooling_factor\nuser,1000,16,2\nitem,50,8,1\n", "csv", None).unwrap();
    let tables = json(&csv);
    assert_eq!(tables[0]["name"], "user");
    assert_eq!(tables[1]["dim"], 8);
    let pool_like = pw::parse_tables("table_id,row,pooling_factor\n0,10,1\n", "CSV", Some(32)).unwrap();
    assert_eq!(json(&pool_like)[0]["dim"], 32);
    let j = pw::parse_tables(r#"{"tables": [{"rows": 5, "dim": 4, "pooling_factor": 1}]}"#, "json", None).unwrap();
    assert_eq!(json(&j)[0]["name"], "t0");
}
