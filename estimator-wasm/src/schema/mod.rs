//! The cfg.toml schema: the types of a run's configuration ([`spec`]), reading and writing
//! them as TOML ([`toml_text`]), their validation ([`validate`]) against the bounds of
//! [`limits`], the one rule for matching names ([`names`]), and the tables validation needs:
//! the teacher presets ([`teacher_presets`]), the GPU catalogue ([`mod@catalogue`], its peak FLOP/s in [`peaks`]), the layers a
//! student expands into ([`arch`], their operations in [`layer_ops`]) and what each precision
//! means ([`dtype`]: [`Recipe`], the one definition the trainer and the estimator share), and
//! what the trainer can train of a cfg ([`trainable`]).
//! [`student_spec`] holds the `[student]` types, [`kd_spec`] the `[kd]` ones, [`errors`] the errors; `tables` reads its
//! structs from TOML tables only, `number_or_name` the values that are a number or a name,
//! `reader` deserialises them all through one deserializer.
//!
//! A leaf: nothing here imports the memory model or the explorer, so the trainer can depend on
//! the schema alone.
pub mod arch;
pub mod catalogue;
mod defaults;
pub mod dtype;
pub mod errors;
pub mod hidden_spec;
pub mod kd_spec;
pub mod layer_ops;
pub mod limits;
pub mod names;
mod number_or_name;
pub mod peaks;
mod reader;
pub mod spec;
pub mod student_spec;
mod tables;
pub mod teacher_presets;
pub mod toml_text;
pub mod trainable;
pub mod validate;
mod validate_teacher;

pub use catalogue::{catalogue, gpu, Gpu};
pub use dtype::{DType, Recipe};
pub use errors::{SpecError, UnknownGpu};
pub use spec::*;
pub use student_spec::*;
pub use trainable::{untrainable, HF_MODEL_TYPES};
pub use validate::check_safety_margin;
pub use validate_teacher::check_teacher_counts;
