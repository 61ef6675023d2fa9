//! Reading a run's `metrics.jsonl` in tests: the one parser that the workspace tests
//! (`tests/lib.rs`) and the `distill` CLI tests (`distill/tests/cli/common.rs`, through a
//! `#[path]` module) share.
use std::path::Path;

/// The lines of the metrics log at `path`, each parsed as JSON (step and epoch lines alike).
///
/// # Panics
/// When the file cannot be read or a line is not JSON (naming the line).
pub fn metrics_lines(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

/// The lines of the metrics log at `path` without their timing fields (`samples_per_s`,
/// `elapsed_s`), which differ between runs: what two runs of the same steps must share.
pub fn metrics_without_timing(path: &Path) -> Vec<serde_json::Value> {
    let mut lines = metrics_lines(path);
    for line in &mut lines {
        let fields = line.as_object_mut().expect("a metrics line is a JSON object");
        fields.remove("samples_per_s");
        fields.remove("elapsed_s");
    }
    lines
}
