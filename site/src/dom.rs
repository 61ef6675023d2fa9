//! The few browser calls the explorer makes: URL query, clock, clipboard and file download.
//! Each fails quietly (returns `None` or `false`) outside a browser.
use std::cell::Cell;
use std::rc::Rc;

use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};

fn window() -> Option<web_sys::Window> {
    web_sys::window()
}

/// `location.search` (with its `?`), or empty.
pub fn location_search() -> String {
    window().and_then(|w| w.location().search().ok()).unwrap_or_default()
}

/// `location.hash` (with its `#`), or empty.
pub fn location_hash() -> String {
    window().and_then(|w| w.location().hash().ok()).unwrap_or_default()
}

/// Replaces the URL's query and fragment (none when `fragment` is empty) without a navigation
/// or a history entry (relative, so the page works from any folder).
pub fn replace_url(query: &str, fragment: &str) {
    if let Some(history) = window().and_then(|w| w.history().ok()) {
        let url = if fragment.is_empty() { format!("?{query}") } else { format!("?{query}#{fragment}") };
        let _ = history.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&url));
    }
}

/// Milliseconds since navigation start (`performance.now()`), 0 outside a browser.
pub fn now() -> f64 {
    window().and_then(|w| w.performance()).map_or(0.0, |p| p.now())
}

/// Copies `text` to the clipboard, then calls `done(true)` once the browser has written it, or
/// `done(false)` when it refused (no permission, no focus) or has no clipboard at all (a page
/// not served over https or from localhost, an old browser).
pub fn copy(text: &str, done: impl FnOnce(bool) + 'static) {
    let Some(navigator) = window().map(|w| w.navigator()) else {
        return done(false);
    };
    let present = js_sys::Reflect::get(&navigator, &JsValue::from_str("clipboard")).is_ok_and(|c| c.is_object());
    if !present {
        return done(false);
    }
    // one of the two callbacks runs, once
    let done = Rc::new(Cell::new(Some(Box::new(done) as Box<dyn FnOnce(bool)>)));
    let settle = |ok: bool| {
        let done = done.clone();
        Closure::once_into_js(move |_: JsValue| {
            if let Some(f) = done.take() {
                f(ok);
            }
        })
    };
    let promise = navigator.clipboard().write_text(text);
    // `then` called as a plain function: the two one-shot closures free themselves once called
    // (the one never called stays, a few bytes per click)
    let then =
        js_sys::Reflect::get(&promise, &JsValue::from_str("then")).map(JsCast::unchecked_into::<js_sys::Function>);
    if let Ok(then) = then {
        let _ = then.call2(&promise, &settle(true), &settle(false));
    }
}

/// Offers `text` as a file download called `name`.
pub fn download(name: &str, text: &str) -> bool {
    let done = (|| {
        let document = window()?.document()?;
        let parts = js_sys::Array::of1(&wasm_bindgen::JsValue::from_str(text));
        let options = web_sys::BlobPropertyBag::new();
        options.set_type("application/toml");
        let blob = web_sys::Blob::new_with_str_sequence_and_options(&parts, &options).ok()?;
        let url = web_sys::Url::create_object_url_with_blob(&blob).ok()?;
        let a: web_sys::HtmlAnchorElement = document.create_element("a").ok()?.dyn_into().ok()?;
        a.set_href(&url);
        a.set_download(name);
        a.click();
        web_sys::Url::revoke_object_url(&url).ok()?;
        Some(())
    })();
    done.is_some()
}
