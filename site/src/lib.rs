//! The distill explorer: a static Yew page over the memory estimator (`estimator-wasm`).
//!
//! The estimator is the only model: `estimator_wasm::explorer::sweep` prices the form and the components
//! only display its bytes. The form ([`estimator_wasm::explorer::ExplorerForm`]) lives in the URL
//! query, so a link reproduces a view.
pub mod components;
pub mod dom;
pub mod field;
pub mod format;
pub mod hooks;
pub mod panic;
pub mod placement;
pub mod query;
pub mod restart;
pub mod state;

/// Installs the in-page panic report and mounts the app.
pub fn run() {
    panic::install();
    yew::Renderer::<components::app::App>::new().render();
}
