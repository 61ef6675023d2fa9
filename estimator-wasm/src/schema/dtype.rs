//! What a precision means: the element types of a network's tensors ([`DType`]) and the recipe
//! each `precision` of the cfg.toml gives ([`Recipe`]: weight and compute dtypes, autocast,
//! optimiser state, master copy, loss scaling). The one definition, for the trainer (its tch
//! dtypes, autocast and loss scaling) and the estimator alike.
use serde::Serialize;

use crate::schema::spec::Precision;

/// A tensor element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DType {
    Bool,
    F16,
    Bf16,
    F32,
    I64,
}

impl DType {
    /// Bytes per element.
    pub const fn bytes(self) -> u64 {
        match self {
            DType::Bool => 1,
            DType::F16 | DType::Bf16 => 2,
            DType::F32 => 4,
            DType::I64 => 8,
        }
    }

    /// PyTorch's type promotion for `a + b` between floating types: the common type when they
    /// agree, else fp32 (`bf16 + f16 = f32`, `f32 + bf16 = f32`).
    pub fn promote(a: DType, b: DType) -> DType {
        if a == b {
            a
        } else {
            DType::F32
        }
    }
}

/// The dtypes one precision recipe gives a network (`docs/memory-model.md` section 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Recipe {
    /// Dtype of the weights the forward reads (and of their gradients).
    pub weight: DType,
    /// Dtype matmuls and convolutions compute in (autocast's lower precision, or `weight`).
    pub compute: DType,
    /// Whether PyTorch autocast is on (casts inputs and weights of matmuls, keeps fp32 weights).
    pub autocast: bool,
    /// Dtype of optimiser moments (AdamW m and v, SGD momentum).
    pub optimizer_state: DType,
    /// An fp32 master copy of the weights lives inside the optimiser (Megatron/DeepSpeed).
    pub master_copy: bool,
    /// fp16 dynamic loss scaling state (scale, growth tracker, found-inf, inverse scale).
    pub loss_scaling: bool,
}

impl Recipe {
    /// The recipe of a student trained at `precision`.
    pub fn student(precision: Precision) -> Recipe {
        let mut r = Recipe {
            weight: DType::F32,
            compute: DType::F32,
            autocast: false,
            optimizer_state: DType::F32,
            master_copy: false,
            loss_scaling: false,
        };
        match precision {
            Precision::Fp32 => {}
            Precision::Fp16 => {
                r.compute = DType::F16;
                r.autocast = true;
                r.loss_scaling = true;
            }
            Precision::Bf16 => {
                r.compute = DType::Bf16;
                r.autocast = true;
            }
            Precision::PureBf16 => {
                r.weight = DType::Bf16;
                r.compute = DType::Bf16;
                r.optimizer_state = DType::Bf16;
            }
            Precision::Bf16Master => {
                r.weight = DType::Bf16;
                r.compute = DType::Bf16;
                r.master_copy = true;
            }
        }
        r
    }

    /// The dtype a frozen teacher at `precision` holds its weights and activations in: its
    /// weights are cast once at load, so no autocast copies exist.
    pub fn teacher_dtype(precision: Precision) -> DType {
        match precision {
            Precision::Fp32 => DType::F32,
            Precision::Fp16 => DType::F16,
            Precision::Bf16 | Precision::PureBf16 | Precision::Bf16Master => DType::Bf16,
        }
    }
}
