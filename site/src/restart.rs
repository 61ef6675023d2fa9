//! Recovery from an internal error without a reload. Two kinds of failure leave the app unable
//! to go on: a panic (the wasm instance aborts), and a JavaScript exception thrown through the
//! app (a browser call failing mid-render), which unwinds past the app's state and leaves it
//! borrowed, so that every later action is silently ignored. Both are caught (the panic hook,
//! and a `window` `error` listener: every script of the page is the app's), and the app is
//! started again in a fresh WebAssembly instance on a fresh `<body>` (which drops the broken
//! instance's event listeners), from the form the URL holds: the last one priced, since the URL
//! is written 150 ms after a sweep. At most one restart per [`RESTART_QUIET_MS`], so a form
//! that fails at once cannot loop: the next failure asks for a reload instead.
use wasm_bindgen::prelude::*;

/// Least time between two restarts, in milliseconds.
pub const RESTART_QUIET_MS: f64 = 10_000.0;

#[wasm_bindgen(inline_js = r#"
// 1: a restart is scheduled; 2: one was scheduled under 2 s ago (the same failure: a panic's
// abort reaches the error listener too); 0: none (too soon after the last, or no app module).
export function restart_app(quietMs) {
  const js = document.querySelector('link[rel="modulepreload"][href$=".js"]');
  const wasm = document.querySelector('link[rel="preload"][href$=".wasm"]');
  if (!js || !wasm) return 0;
  const now = Date.now();
  let last = window.explorerRestartedAt || 0;
  try { last = Math.max(last, Number(sessionStorage.getItem('explorer-restarted-at') || 0)); } catch (e) {}
  if (now - last < 2000) return 2;
  if (now - last < quietMs) return 0;
  window.explorerRestartedAt = now;
  try { sessionStorage.setItem('explorer-restarted-at', String(now)); } catch (e) {}
  setTimeout(async () => {
    // a new <body> drops the broken instance's event listeners with the old one
    const body = document.createElement('body');
    const report = document.getElementById('panic');
    if (report) body.append(report);
    document.body.replaceWith(body);
    const url = new URL(js.href);
    url.searchParams.set('restart', String(now));
    const app = await import(url.href);
    await app.default({ module_or_path: wasm.href });
    // mounting clears <body>: the report goes back on top
    if (report) document.body.prepend(report);
  }, 0);
  return 1;
}

// one listener for the page; the latest app instance's callback answers it
export function on_uncaught_error(callback) {
  if (!window.explorerOnError) {
    window.addEventListener('error', (e) => window.explorerOnError(String(e.message || e.error || 'error')));
  }
  window.explorerOnError = callback;
}
"#)]
extern "C" {
    fn restart_app(quiet_ms: f64) -> u32;
    fn on_uncaught_error(callback: JsValue);
}

/// What [`restart`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    /// The app starts again shortly.
    Scheduled,
    /// A restart was scheduled under 2 s ago: this is the same failure.
    SameFailure,
    /// None: one happened under [`RESTART_QUIET_MS`] ago, or the page has no app module to start.
    Refused,
}

/// Starts the app again in a fresh instance (see the module docs).
pub fn restart() -> Restart {
    match restart_app(RESTART_QUIET_MS) {
        1 => Restart::Scheduled,
        2 => Restart::SameFailure,
        _ => Restart::Refused,
    }
}

/// Calls `failed` with the message of every exception no code of the page caught.
pub fn on_uncaught(failed: fn(&str)) {
    let callback = Closure::<dyn FnMut(String)>::new(move |message: String| failed(&message));
    on_uncaught_error(callback.into_js_value());
}
