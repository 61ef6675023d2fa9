//! Records when the first numbers reached the page, for the budget in BENCHMARKS.md.
use yew::prelude::*;

use crate::dom;

/// After the first render, sets `data-first-numbers-ms` on the element `id` to
/// `performance.now()`: milliseconds from navigation start to the first figures in the DOM.
#[hook]
pub fn use_first_numbers(id: &'static str) {
    use_effect_with((), move |_| {
        let element = web_sys::window().and_then(|w| w.document()).and_then(|d| d.get_element_by_id(id));
        if let Some(element) = element {
            let _ = element.set_attribute("data-first-numbers-ms", &format!("{:.1}", dom::now()));
        }
    });
}
