//! The browser explorer (feature `explorer`): the form the page edits ([`form`]), the
//! scenarios it starts from, the sweep that prices it at every size and GPU ([`sweep`]), and
//! the JavaScript bindings (`wasm`, feature `js`, wasm32 only).
pub mod form;
pub mod sweep;
#[cfg(all(target_arch = "wasm32", feature = "js"))]
pub mod wasm;
