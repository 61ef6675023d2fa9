//! What a precision means to the trainer, derived in one place from the estimator's recipe
//! (`estimator_wasm::schema::Recipe`), so that the memory the estimator prices and the dtypes
//! the trainer runs cannot drift apart.
//!
//! * The student at `train.precision`: fp32 weights; fp16 and bf16 autocast matmuls and
//!   convolutions to that dtype (`Recipe::student(p).autocast`, `.compute`), and fp16 adds
//!   dynamic loss scaling (`.loss_scaling`).
//! * The frozen teacher at `teacher.precision`: its weights cast once to
//!   `Recipe::teacher_dtype(p)`.
//! * Which precisions `distill` trains ([`TRAINED`]: fp32, fp16, bf16; the others are recipes
//!   for `distill plan`); each one's cfg.toml name is the schema's `Precision::name`.
//! * The shim (`csrc/shim.cpp`) takes autocast's dtype as a c10 scalar-type code
//!   ([`scalar_type_code`]; tch keeps its own `Kind::c_int` private).
use std::path::Path;

use estimator_wasm::schema::Precision;
use estimator_wasm::schema::{Config, DType, Recipe};
use tch::Kind;

use crate::host::error::{DistillError, Result};

/// The precisions `distill` trains; the estimator's other recipes (`pure_bf16`, `bf16_master`,
/// bf16 weights) are for `distill plan`.
pub const TRAINED: [Precision; 3] = [Precision::Fp32, Precision::Fp16, Precision::Bf16];

/// Refuses a cfg whose `train.precision` or `teacher.precision` the estimator can plan but
/// `distill` cannot train (not in [`TRAINED`]), before any work.
///
/// # Errors
/// [`DistillError::Config`] naming `path` and the key.
pub fn check_trainable(spec: &Config, path: &Path) -> Result<()> {
    for (key, precision) in [("train.precision", spec.train.precision), ("teacher.precision", spec.teacher.precision)] {
        if !TRAINED.contains(&precision) {
            let [a, b, c] = TRAINED.map(Precision::name);
            return Err(DistillError::config(
                path,
                format!("{key}: distill runs \"{a}\", \"{b}\" or \"{c}\" (the other recipes are for `distill plan`)"),
            ));
        }
    }
    Ok(())
}

/// The libtorch element type of an estimator dtype.
pub fn kind(dtype: DType) -> Kind {
    match dtype {
        DType::Bool => Kind::Bool,
        DType::F16 => Kind::Half,
        DType::Bf16 => Kind::BFloat16,
        DType::F32 => Kind::Float,
        DType::I64 => Kind::Int64,
    }
}

/// The dtype the student's forward autocasts to at `precision`, or `None` without autocast
/// (fp32; and the estimator-only `pure_bf16`/`bf16_master`, whose recipes hold bf16 weights
/// instead: [`check_trainable`] refuses them before training).
pub fn autocast_kind(precision: Precision) -> Option<Kind> {
    let recipe = Recipe::student(precision);
    recipe.autocast.then(|| kind(recipe.compute))
}

/// Whether the student at `precision` trains with dynamic loss scaling (fp16).
pub fn loss_scaling(precision: Precision) -> bool {
    Recipe::student(precision).loss_scaling
}

/// The element type of a frozen teacher's weights (hence of its inputs) at `precision`.
pub fn teacher_kind(precision: Precision) -> Kind {
    kind(Recipe::teacher_dtype(precision))
}

/// The c10 scalar-type code of a floating `kind`, as the shim's C functions take it
/// (`c10/core/ScalarType.h`: Half = 5, Float = 6, Double = 7, BFloat16 = 15); `None` for the
/// other kinds, which autocast never targets.
pub fn scalar_type_code(kind: Kind) -> Option<std::ffi::c_int> {
    match kind {
        Kind::Half => Some(5),
        Kind::Float => Some(6),
        Kind::Double => Some(7),
        Kind::BFloat16 => Some(15),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_trained_precision_maps_to_its_dtypes() {
        assert_eq!(autocast_kind(Precision::Fp32), None);
        assert_eq!(autocast_kind(Precision::Fp16), Some(Kind::Half));
        assert_eq!(autocast_kind(Precision::Bf16), Some(Kind::BFloat16));
        assert_eq!(
            [Precision::Fp32, Precision::Fp16, Precision::Bf16].map(loss_scaling),
            [false, true, false],
            "only fp16 scales the loss"
        );
        assert_eq!(teacher_kind(Precision::Fp32), Kind::Float);
        assert_eq!(teacher_kind(Precision::Fp16), Kind::Half);
        assert_eq!(teacher_kind(Precision::Bf16), Kind::BFloat16);
        assert_eq!(teacher_kind(Precision::PureBf16), Kind::BFloat16);
    }

    #[test]
    fn names_are_the_cfg_toml_names() {
        assert_eq!(TRAINED.map(Precision::name), ["fp32", "fp16", "bf16"]);
        for p in [Precision::Fp32, Precision::Fp16, Precision::Bf16, Precision::PureBf16, Precision::Bf16Master] {
            // the schema's serde spelling, which report.json and the TOML writer use
            assert_eq!(serde_json::to_value(p).unwrap(), p.name(), "{p:?}");
        }
    }

    #[test]
    fn shim_codes_are_c10_scalar_types() {
        // c10/core/ScalarType.h: Half = 5, Float = 6, BFloat16 = 15.
        assert_eq!(scalar_type_code(Kind::Half), Some(5));
        assert_eq!(scalar_type_code(Kind::Float), Some(6));
        assert_eq!(scalar_type_code(Kind::BFloat16), Some(15));
        assert_eq!(scalar_type_code(Kind::Int64), None);
        // The codes libtorch itself reports for tensors of those kinds.
        for kind in [Kind::Half, Kind::Float, Kind::Double, Kind::BFloat16] {
            let mut t = tch::Tensor::zeros([1], (kind, tch::Device::Cpu));
            // SAFETY: a valid tensor pointer, only read.
            let code = unsafe { torch_sys::at_scalar_type(t.as_mut_ptr()) };
            assert_eq!(scalar_type_code(kind), Some(code), "{kind:?}");
        }
    }
}
