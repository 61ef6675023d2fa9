//! The estimator's answer for the form, recomputed only when the form changes.
use std::rc::Rc;

use estimator_wasm::explorer::sweep::{sweep, Sweep};
use estimator_wasm::explorer::{ExplorerForm, FormError};
use yew::prelude::*;

use crate::dom;

/// One pricing of the form.
#[derive(Debug, PartialEq)]
pub struct FormPricing {
    /// Every view's figures, or why the chosen student cannot be priced.
    pub sweep: Result<Rc<Sweep>, FormError>,
    /// The chosen student's cfg.toml.
    pub cfg_toml: Option<AttrValue>,
    /// Milliseconds the sweep and the cfg.toml took (`performance.now()`).
    pub millis: f64,
}

/// Prices `form` with `estimator_wasm::explorer::sweep` (memoised on the form).
#[hook]
pub fn use_sweep(form: &ExplorerForm) -> Rc<FormPricing> {
    use_memo(form.clone(), |form| {
        let start = dom::now();
        let sweep = sweep(form).map(Rc::new);
        let cfg_toml = sweep.as_ref().ok().and_then(|_| form.cfg_toml().ok()).map(AttrValue::from);
        FormPricing { sweep, cfg_toml, millis: dom::now() - start }
    })
}
