//! Shared, pure-Rust half of the toolkit: the cfg.toml schema and the training-memory model.
//!
//! No tch, no I/O: the same code runs natively inside `distill` and as WebAssembly in the browser.
//!
//! ```
//! use estimator_wasm::{estimate, Config, Inputs};
//! let config = Config::from_toml_str(
//!     "[data]\ninput_shape = [784]\nclasses = 10\n[student]\nfamily = \"mlp\"\nhidden = [256]\n\
//!      [teacher]\nparams = 1000000\n[estimate]\ngpu = \"T4\"\n",
//! )
//! .unwrap();
//! let plan = estimate(&config, &Inputs::default()).unwrap();
//! assert!(plan.fit.unwrap().fits);
//! assert_eq!(plan.params.student, 784 * 256 + 256 + 256 * 10 + 10);
//! ```
//!
//! The formula sheet is `shared/docs/memory-model.md`; each module cites its sources.
pub mod arch;
pub mod batch;
pub mod catalogue;
pub mod dtype;
pub mod error;
mod estimate;
pub mod explore;
pub mod layer;
pub mod limits;
pub mod model;
pub mod names;
mod phases;
pub mod plan;
pub mod render;
pub mod runtime;
pub mod spec;
pub mod states;
pub mod sweep;
pub mod teacher;
mod toml_text;
#[cfg(all(target_arch = "wasm32", feature = "js"))]
pub mod wasm;

pub use batch::BatchSearch;
pub use catalogue::{catalogue, gpu, Gpu};
pub use error::{EstimateError, SpecError};
pub use model::{Dataset, Inputs, Model};
pub use plan::{Cat, Categories, Phase, Plan, Totals};
pub use spec::Config;
pub use teacher::TeacherModel;

/// Estimates the memory of one training step of `config`.
///
/// The micro-batch is `inputs.batch`, else `train.batch_size`; with `batch_size = "auto"` and
/// an `[estimate] gpu`, the largest batch that fits it (keeping `estimate.safety_margin` free).
///
/// # Errors
/// [`EstimateError`]: an invalid config, an unknown teacher size or GPU, a batch of 0 or
/// `"auto"` without a GPU, or sizes past 2^64 bytes. Never panics.
pub fn estimate(config: &Config, inputs: &Inputs) -> Result<Plan, EstimateError> {
    let model = Model::new(config, inputs)?;
    let b = match (model.default_batch(), model.gpu()) {
        (Some(b), _) => b,
        (None, Some(gpu)) => batch::search(&model, gpu, model.safety_margin)?.batch.ok_or_else(|| {
            EstimateError::invalid("train.batch_size", format!("\"auto\": not even a batch of 1 fits {}", gpu.name))
        })?,
        (None, None) => {
            return Err(EstimateError::invalid(
                "train.batch_size",
                "\"auto\" needs a batch from the caller or an [estimate] gpu to fit",
            ))
        }
    };
    model.plan(b)
}

/// The largest micro-batch of `config` that fits `gpu`, keeping `safety_margin` (a fraction in
/// [0, 1)) of its memory free; `None` when not even 1 fits. Closed form, then verified: the
/// result fits and one more does not. The step is priced for `estimate.target`: a
/// `target = "cpu"` config fits only a device without CUDA context (the CPU's memory).
///
/// # Errors
/// As [`estimate`]; a margin out of [0, 1) as `estimate.safety_margin` is refused; a
/// `target = "cpu"` config and a GPU, on `estimate.target` ([`batch::search`]).
pub fn max_batch(
    config: &Config,
    inputs: &Inputs,
    gpu: &Gpu,
    safety_margin: f64,
) -> Result<Option<u64>, EstimateError> {
    let model = Model::new(config, inputs)?;
    Ok(batch::search(&model, gpu, safety_margin)?.batch)
}

/// [`max_batch`] on every catalogue GPU (for `distill plan`), in catalogue order.
///
/// # Errors
/// As [`max_batch`].
pub fn max_batch_per_gpu(
    config: &Config,
    inputs: &Inputs,
    safety_margin: f64,
) -> Result<Vec<(&'static Gpu, Option<u64>)>, EstimateError> {
    let mut config = config.clone();
    config.estimate.target = spec::Target::Cuda;
    catalogue()
        .iter()
        .map(|g| {
            config.estimate.gpu = Some(g.name.to_string());
            let model = Model::new(&config, inputs)?;
            Ok((g, batch::search(&model, g, safety_margin)?.batch))
        })
        .collect()
}
