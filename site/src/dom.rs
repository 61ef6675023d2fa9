//! The few browser calls the explorer makes: URL query, clock, clipboard and file download.
//! Each fails quietly (returns `None` or `false`) outside a browser.
use wasm_bindgen::JsCast;

fn window() -> Option<web_sys::Window> {
    web_sys::window()
}

/// `location.search` (with its `?`), or empty.
pub fn location_search() -> String {
    window().and_then(|w| w.location().search().ok()).unwrap_or_default()
}

/// Replaces the URL's query without a navigation or a history entry (relative, so the page
/// works from any folder).
pub fn replace_query(query: &str) {
    if let Some(history) = window().and_then(|w| w.history().ok()) {
        let _ = history.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&format!("?{query}")));
    }
}

/// Milliseconds since navigation start (`performance.now()`), 0 outside a browser.
pub fn now() -> f64 {
    window().and_then(|w| w.performance()).map_or(0.0, |p| p.now())
}

/// Copies `text` to the clipboard (asynchronously; the promise is left to the browser).
pub fn copy(text: &str) -> bool {
    match window() {
        Some(w) => {
            let _ = w.navigator().clipboard().write_text(text);
            true
        }
        None => false,
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
