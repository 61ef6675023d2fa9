//! A panic hook that reports in the page (an element `#panic`) as well as on the console, so
//! a bug never leaves a silently frozen page; the end-to-end test asserts it never fires.
use wasm_bindgen::JsCast;

/// Id of the element the report is written into.
pub const PANIC_ID: &str = "panic";

/// Installs the hook (before the app is mounted, so Yew keeps it).
pub fn install() {
    yew::set_custom_panic_hook(Box::new(|info| {
        console_error_panic_hook::hook(info);
        report(&info.to_string());
    }));
}

/// Writes `message` into `#panic` at the top of `<body>`, creating it if needed.
pub fn report(message: &str) {
    let Some(document) = web_sys::window().and_then(|w| w.document()) else {
        return;
    };
    let element = document.get_element_by_id(PANIC_ID).or_else(|| {
        let e = document.create_element("div").ok()?;
        e.set_id(PANIC_ID);
        e.set_attribute("role", "alert").ok()?;
        let body = document.body()?;
        body.insert_before(&e, body.first_child().as_ref()).ok()?;
        Some(e)
    });
    if let Some(e) = element.and_then(|e| e.dyn_into::<web_sys::HtmlElement>().ok()) {
        e.set_inner_text(&format!(
            "The explorer stopped on an internal error; reload the page (the link keeps your settings). {message}"
        ));
    }
}
