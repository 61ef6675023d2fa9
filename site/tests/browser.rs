//! Browser tests (wasm-bindgen-test, headless Chromium via chromedriver; `scripts/test-web`):
//! the estimator's JavaScript bindings (`estimator_wasm::explorer::wasm`), the page's panic report and
//! the app mounting with figures and no panic.
#![cfg(target_arch = "wasm32")]

use std::time::Duration;

use estimator_wasm::explorer::ExplorerForm;
use estimator_wasm::{explorer::wasm, Config, Inputs, MemoryModel};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

/// The canonical example (it names its teacher preset) with a GPU: the page needs both.
const CFG: &str = concat!(include_str!("../../examples/fashion-mnist/student.toml"), "\n[estimate]\ngpu = \"T4\"\n");

fn message(e: wasm_bindgen::JsError) -> String {
    JsValue::from(e).dyn_into::<js_sys::Error>().map(|e| String::from(e.message())).unwrap_or_default()
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).expect("the bindings return JSON")
}

fn native_plan(batch: u64) -> estimator_wasm::Plan {
    let config = Config::from_toml_str(CFG).unwrap();
    estimator_wasm::estimate(&config, &Inputs { batch: Some(batch), ..Inputs::default() }).unwrap()
}

#[wasm_bindgen_test]
fn estimate_returns_the_plan_as_json() {
    let plan = json(&wasm::estimate(CFG, None).unwrap());
    let native = native_plan(128);
    assert_eq!(plan["totals"]["total"].as_u64(), Some(native.totals.total));
    assert_eq!(plan["params"]["student"].as_u64(), Some(native.params.student));
    assert_eq!(plan["batch"], 128);
    assert_eq!(plan["fit"]["gpu"]["name"], "T4");
    let at_7 = json(&wasm::estimate(CFG, Some(7.0)).unwrap());
    assert_eq!(at_7["totals"]["total"].as_u64(), Some(native_plan(7).totals.total));
}

#[wasm_bindgen_test]
fn totals_and_the_largest_batch_are_numbers() {
    let config = Config::from_toml_str(CFG).unwrap();
    let model = MemoryModel::new(&config, &Inputs::default()).unwrap();
    assert_eq!(wasm::total_bytes(CFG, 64.0).unwrap(), model.totals(64).unwrap().total as f64);
    let t4 = estimator_wasm::gpu("T4").unwrap();
    let expected = estimator_wasm::max_batch(&config, &Inputs::default(), t4, 0.05).unwrap();
    assert_eq!(wasm::max_batch(CFG, "T4").unwrap(), expected.map(|b| b as f64));
    let e = wasm::Estimator::new(CFG).unwrap();
    assert_eq!(e.total_bytes(3.0).unwrap(), model.totals(3).unwrap().total as f64);
    assert_eq!(e.max_batch("T4", 0.05).unwrap(), expected.map(|b| b as f64));
    assert_eq!(json(&e.plan(5.0).unwrap())["batch"], 5);
}

#[wasm_bindgen_test]
fn errors_are_thrown_with_the_estimators_message() {
    assert!(message(wasm::estimate("[data]\nbad", None).unwrap_err()).contains("line 2"));
    let bad_alpha = CFG.replace("alpha = 0.5", "alpha = 1.5");
    assert_ne!(bad_alpha, CFG, "the example sets alpha = 0.5");
    assert!(message(wasm::validate(&bad_alpha).unwrap_err()).contains("kd.alpha"));
    for bad in [0.0, 1.5, -3.0, f64::NAN, f64::INFINITY, 1e300] {
        assert!(message(wasm::total_bytes(CFG, bad).unwrap_err()).contains("micro-batch"), "{bad}");
    }
    assert!(message(wasm::max_batch(CFG, "A100").unwrap_err()).contains("unknown GPU"));
    assert!(wasm::validate(CFG).is_ok());
}

#[wasm_bindgen_test]
fn catalogues_list_every_gpu_and_scenario() {
    let gpus = json(&wasm::gpus());
    assert_eq!(gpus.as_array().unwrap().len(), estimator_wasm::catalogue().len());
    assert_eq!(gpus[0]["name"], "T4");
    let scenarios = json(&wasm::scenarios());
    let keys: Vec<&str> = scenarios.as_array().unwrap().iter().map(|s| s["key"].as_str().unwrap()).collect();
    for key in ["fashion-mnist-cnn", "resnet50", "vit-b16", "all-minilm-l6-v2", "bert-base", "gpt2", "smollm2-135m"] {
        assert!(keys.contains(&key), "{key}");
    }
}

#[wasm_bindgen_test]
fn explore_prices_a_form_and_exports_its_cfg() {
    let form = json(&wasm::default_form("resnet50", "A100-80GB").unwrap());
    assert_eq!((form["family"].as_str(), form["input"].as_u64()), (Some("cnn"), Some(224)));
    let sweep = json(&wasm::explore(&form.to_string()).unwrap());
    let native =
        estimator_wasm::explorer::sweep::sweep(&serde_json::from_value::<ExplorerForm>(form.clone()).unwrap()).unwrap();
    assert_eq!(sweep["students"].as_array().unwrap().len(), 5);
    assert_eq!(sweep["plan"]["totals"]["total"].as_u64(), Some(native.plan.totals.total));
    assert_eq!(sweep["max_batch"].as_u64(), native.max_batch);
    let cfg = wasm::explore_cfg(&form.to_string()).unwrap();
    let config = Config::from_toml_str(&cfg).unwrap();
    assert_eq!(config.estimate.gpu.as_deref(), Some("A100-80GB"));
    let bad = message(wasm::explore(r#"{"teacher": "gpt2", "batch": 0}"#).unwrap_err());
    assert!(bad.contains("micro-batch"), "{bad}");
    assert!(message(wasm::default_form("gpt-5", "T4").unwrap_err()).contains("unknown teacher"));
    let pasted = json(&wasm::form_from_cfg(CFG, "H200").unwrap());
    assert_eq!((pasted["teacher"].as_str(), pasted["gpu"].as_str()), (Some("custom"), Some("T4")));
}

#[wasm_bindgen_test]
fn the_panic_report_is_written_into_the_page() {
    explorer::panic::report("test message", false);
    let document = web_sys::window().unwrap().document().unwrap();
    let element = document.get_element_by_id(explorer::panic::PANIC_ID).expect("#panic exists");
    assert!(element.text_content().unwrap().contains("test message"));
    assert!(element.text_content().unwrap().contains("reload the page"));
    explorer::panic::report("again", true);
    assert!(element.text_content().unwrap().contains("started again from the settings in the link"));
    // the test page has no app module to start again: nothing is scheduled
    assert_eq!(explorer::restart::restart(), explorer::restart::Restart::Refused);
    element.remove();
}

#[wasm_bindgen_test]
async fn the_app_mounts_with_figures_and_no_panic() {
    let document = web_sys::window().unwrap().document().unwrap();
    let root = document.create_element("div").unwrap();
    document.body().unwrap().append_child(&root).unwrap();
    explorer::panic::install();
    yew::Renderer::<explorer::components::app::App>::with_root(root.clone()).render();
    yew::platform::time::sleep(Duration::from_millis(50)).await;
    let figures = root.query_selector_all("[data-bytes]").unwrap().length();
    assert!(figures > 50, "{figures} figures");
    let total = root.query_selector("[data-k='plan.totals.total']").unwrap().expect("the summary's total");
    // with no settings in the link the page opens on its opening scenario (Fashion-MNIST)
    let native = estimator_wasm::explorer::sweep::sweep(&ExplorerForm::opening()).unwrap();
    assert_eq!(total.get_attribute("data-bytes"), Some(native.plan.totals.total.to_string()));
    assert!(document.get_element_by_id(explorer::panic::PANIC_ID).is_none());
}
