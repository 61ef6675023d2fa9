//! A panic hook that reports in the page (an element `#panic`) as well as on the console, and
//! starts the app again from the link's settings ([`crate::restart`]), so a bug never leaves a
//! frozen or dead page; the end-to-end test asserts it never fires on its own.
use wasm_bindgen::JsCast;

use crate::restart::{self, Restart};

/// Id of the element the report is written into.
pub const PANIC_ID: &str = "panic";

/// Installs the hook (before the app is mounted, so Yew keeps it), and the same answer for an
/// exception thrown through the app.
pub fn install() {
    yew::set_custom_panic_hook(Box::new(|info| {
        console_error_panic_hook::hook(info);
        failed(&info.to_string());
    }));
    restart::on_uncaught(failed);
}

/// The app cannot go on: start it again and say so, or ask for a reload.
fn failed(message: &str) {
    match restart::restart() {
        Restart::Scheduled => report(message, true),
        Restart::SameFailure => {}
        Restart::Refused => report(message, false),
    }
}

/// Writes `message` into `#panic` at the top of `<body>`, creating it if needed; `restarted`:
/// whether the app is starting again on its own.
pub fn report(message: &str, restarted: bool) {
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
        let what = if restarted {
            "The explorer hit an internal error and started again from the settings in the link (the last change may \
             be lost)."
        } else {
            "The explorer stopped on an internal error; reload the page (the link keeps your settings)."
        };
        e.set_inner_text(&format!("{what} {message}"));
    }
}
