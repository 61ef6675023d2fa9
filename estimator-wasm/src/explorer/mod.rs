//! The browser explorer (feature `explorer`): the teachers it starts from ([`scenarios`]), the
//! form the page edits ([`form`], its fields and errors in [`form_field`], its size levers in
//! [`student_scaling`]), the Hugging Face folder a scenario's cfg.toml names as its teacher
//! ([`teacher_folder`]), the sweep that prices the form at every size, lever and GPU
//! ([`sweep`]), and the JavaScript bindings (`wasm`, feature `js`, wasm32 only).
pub mod form;
pub mod form_field;
pub mod scenarios;
pub mod student_scaling;
pub mod sweep;
pub mod teacher_folder;
#[cfg(all(target_arch = "wasm32", feature = "js"))]
pub mod wasm;

pub use form::ExplorerForm;
pub use form_field::{FormError, FormField};
pub use scenarios::{scenario, InputKind, Scenario, CUSTOM, SCENARIOS};
pub use student_scaling::scale_student;
pub use teacher_folder::TeacherFolder;
