//! Keeps the URL query equal to the form, so that a link reproduces the view.
use estimator_wasm::explorer::ExplorerForm;
use gloo_timers::callback::Timeout;
use yew::prelude::*;

use crate::{dom, query};

/// Quiet time before the URL is rewritten: `history.replaceState` costs about as much as a
/// whole sweep, and Chromium throttles frequent calls, so typing rewrites it once at the end.
pub const URL_DELAY_MS: u32 = 150;

/// Writes `form` into the URL (no history entry) once it has not changed for
/// [`URL_DELAY_MS`]: the query, and a pasted cfg.toml in the fragment unless it is longer
/// than [`query::MAX_FRAGMENT`]; `data-query` and `data-fragment` on `#explorer` hold what the
/// URL is about to get.
#[hook]
pub fn use_url_sync(form: &ExplorerForm) {
    use_effect_with(form.clone(), |form| {
        let query = query::to_query(form);
        let fragment = linked_fragment(form);
        let pending = Timeout::new(URL_DELAY_MS, move || dom::replace_url(&query, &fragment));
        // a newer form cancels the pending write (dropping a Timeout clears it)
        move || drop(pending)
    });
}

/// The fragment `form`'s link gets: [`query::to_fragment`], or none past [`query::MAX_FRAGMENT`].
pub fn linked_fragment(form: &ExplorerForm) -> String {
    Some(query::to_fragment(form)).filter(|f| f.len() <= query::MAX_FRAGMENT).unwrap_or_default()
}
