//! JavaScript bindings of the estimator (wasm-bindgen, built with `--target web`); compiled
//! only for wasm32. Thin by design: it converts arguments, results and errors and holds no
//! formula. Whole plans and sweeps cross as JSON (every figure in bytes); single figures as
//! JavaScript numbers, exact up to 2^53 bytes (8 PiB). Errors are thrown as `Error`s carrying
//! the estimator's one-line message (the cfg.toml key, or line and column).
use wasm_bindgen::prelude::*;

use crate::explorer::form::ExplorerForm;
use crate::explorer::scenarios::{scenario, SCENARIOS};
use crate::explorer::sweep;
use crate::memory::batch;
use crate::schema::catalogue;
use crate::schema::limits::MAX_BATCH;
use crate::{Config, Inputs, MemoryModel};

fn js(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

fn json(value: &impl serde::Serialize) -> Result<String, JsError> {
    serde_json::to_string(value).map_err(js)
}

fn parse(cfg_toml: &str) -> Result<Config, JsError> {
    Config::from_toml_str(cfg_toml).map_err(js)
}

fn form(form_json: &str) -> Result<ExplorerForm, JsError> {
    serde_json::from_str(form_json).map_err(|e| js(format!("form JSON: {e}")))
}

/// A micro-batch from JavaScript: a whole number under `train.batch_size`'s rule (1 to 2^40).
fn micro_batch(b: f64) -> Result<u64, JsError> {
    if b.fract() == 0.0 && b >= 0.0 && crate::memory::estimate::check_batch(b as u64).is_ok() {
        Ok(b as u64)
    } else {
        Err(js(format!("micro-batch {b}: must be a whole number between 1 and {MAX_BATCH}")))
    }
}

/// The estimator's plan for a cfg.toml as JSON (`Plan`: phases, categories, layers, totals,
/// fit; bytes). `batch` (samples) overrides `train.batch_size`.
#[wasm_bindgen]
pub fn estimate(cfg_toml: &str, batch: Option<f64>) -> Result<String, JsError> {
    let inputs = Inputs { batch: batch.map(micro_batch).transpose()?, ..Inputs::default() };
    json(&crate::estimate(&parse(cfg_toml)?, &inputs).map_err(js)?)
}

/// The device total in bytes of a cfg.toml at micro-batch `batch`.
#[wasm_bindgen(js_name = totalBytes)]
pub fn total_bytes(cfg_toml: &str, batch: f64) -> Result<f64, JsError> {
    Estimator::new(cfg_toml)?.total_bytes(batch)
}

/// The largest micro-batch of a cfg.toml on `gpu` (a catalogue name) keeping the cfg's
/// `estimate.safety_margin` free; `undefined` when not even 1 fits.
#[wasm_bindgen(js_name = maxBatch)]
pub fn max_batch(cfg_toml: &str, gpu: &str) -> Result<Option<f64>, JsError> {
    let config = parse(cfg_toml)?;
    Estimator::new(cfg_toml)?.max_batch(gpu, config.estimate.safety_margin)
}

/// Checks a cfg.toml; throws its first error.
#[wasm_bindgen]
pub fn validate(cfg_toml: &str) -> Result<(), JsError> {
    parse(cfg_toml).map(|_| ())
}

/// The GPU catalogue as JSON: `[{name, memory (bytes), cuda_context, cublas_workspace, bf16, mig_of?}]`.
#[wasm_bindgen]
pub fn gpus() -> String {
    serde_json::to_string(catalogue::catalogue()).unwrap_or_default()
}

/// The explorer's teacher scenarios as JSON: `[{key, name, description, input, families, batch, precision}]`.
#[wasm_bindgen]
pub fn scenarios() -> String {
    serde_json::to_string(&SCENARIOS[..]).unwrap_or_default()
}

/// The explorer form for teacher scenario `teacher` with its defaults on `gpu`, as JSON. A
/// catalogue GPU takes its exact name (`h200` -> `H200`); an unknown one is kept as given, for
/// `explore` to refuse with the catalogue's names.
#[wasm_bindgen(js_name = defaultForm)]
pub fn default_form(teacher: &str, gpu: &str) -> Result<String, JsError> {
    let s = scenario(teacher).ok_or_else(|| js(ExplorerForm::default().with_teacher(teacher).unwrap_err()))?;
    json(&ExplorerForm::for_scenario(s, catalogue::gpu(gpu).map_or(gpu, |g| g.name)))
}

/// The form filled from a pasted cfg.toml (on `gpu` unless the file names one), as JSON.
#[wasm_bindgen(js_name = formFromCfg)]
pub fn form_from_cfg(cfg_toml: &str, gpu: &str) -> Result<String, JsError> {
    json(&ExplorerForm::from_cfg(cfg_toml, gpu).map_err(js)?)
}

/// Everything the explorer shows for a form (JSON in, `Sweep` JSON out): a breakdown per
/// student size, memory against micro-batch, the largest batch per GPU, the levers.
#[wasm_bindgen]
pub fn explore(form_json: &str) -> Result<String, JsError> {
    json(&sweep::sweep(&form(form_json)?).map_err(js)?)
}

/// The chosen student's cfg.toml for a form (JSON), as `distill plan --student` reads it.
#[wasm_bindgen(js_name = exploreCfg)]
pub fn explore_cfg(form_json: &str) -> Result<String, JsError> {
    form(form_json)?.cfg_toml().map_err(js)
}

/// The crate version.
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// One cfg.toml compiled once, for many estimates (sweeps over the micro-batch).
#[wasm_bindgen]
pub struct Estimator {
    model: MemoryModel,
}

#[wasm_bindgen]
impl Estimator {
    /// Compiles a cfg.toml; throws when it is invalid.
    #[wasm_bindgen(constructor)]
    pub fn new(cfg_toml: &str) -> Result<Estimator, JsError> {
        Ok(Estimator { model: MemoryModel::new(&parse(cfg_toml)?, &Inputs::default()).map_err(js)? })
    }

    /// The plan at micro-batch `batch` as JSON.
    pub fn plan(&self, batch: f64) -> Result<String, JsError> {
        json(&self.model.plan(micro_batch(batch)?).map_err(js)?)
    }

    /// The device total in bytes at micro-batch `batch`.
    #[wasm_bindgen(js_name = totalBytes)]
    pub fn total_bytes(&self, batch: f64) -> Result<f64, JsError> {
        Ok(self.model.totals(micro_batch(batch)?).map_err(js)?.total as f64)
    }

    /// The largest micro-batch on `gpu` keeping `safety_margin` (a fraction) free;
    /// `undefined` when not even 1 fits.
    #[wasm_bindgen(js_name = maxBatch)]
    pub fn max_batch(&self, gpu: &str, safety_margin: f64) -> Result<Option<f64>, JsError> {
        let gpu = catalogue::gpu(gpu).map_err(js)?;
        Ok(batch::search(&self.model, gpu, safety_margin).map_err(js)?.batch.map(|b| b as f64))
    }
}
