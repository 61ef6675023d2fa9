//! The columns of `distill compare`, shared by its text table and its page: each a header,
//! its unit, and a run's figure (`None`: the run has none). A column no run has is left out.
use super::rows::Row;

/// One column: `header`, `unit` (for the page's axes) and how a row's figure reads.
pub struct Column {
    pub header: &'static str,
    pub unit: &'static str,
    /// The figure as a number, for bars (`None`: not measured in this run).
    pub value: fn(&Row) -> Option<f64>,
    /// The figure as the table prints it.
    pub text: fn(f64) -> String,
}

fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / (1u64 << 20) as f64)
}

fn pct(v: f64) -> String {
    format!("{:.2}%", 100.0 * v)
}

/// Every column in reading order: size, quality, speed, memory, time.
pub const ALL: [Column; 13] = [
    Column { header: "params", unit: "parameters", value: |r| Some(r.params as f64), text: |v| format!("{v:.0}") },
    Column { header: "compression", unit: "x", value: |r| Some(r.compression), text: |v| format!("{v:.1}x") },
    Column { header: "accuracy", unit: "%", value: |r| r.accuracy, text: pct },
    Column { header: "agreement", unit: "fraction", value: |r| r.agreement, text: |v| format!("{v:.4}") },
    Column { header: "Spearman", unit: "rho", value: |r| r.spearman, text: |v| format!("{v:.4}") },
    Column { header: "perplexity", unit: "perplexity", value: |r| r.perplexity, text: |v| format!("{v:.2}") },
    Column { header: "KD gain", unit: "points", value: |r| r.kd_gain_points, text: |v| format!("{v:+.2}") },
    Column { header: "samples/s", unit: "samples/s", value: |r| Some(r.samples_per_s), text: |v| format!("{v:.0}") },
    Column { header: "latency b1", unit: "ms", value: |r| r.latency_ms, text: |v| format!("{v:.3} ms") },
    Column { header: "sparsity", unit: "%", value: |r| r.sparsity, text: pct },
    Column { header: "plan", unit: "MiB", value: |r| r.planned_bytes.map(|b| b as f64), text: mib },
    Column { header: "measured", unit: "MiB", value: |r| r.measured_bytes.map(|b| b as f64), text: mib },
    Column { header: "wall", unit: "s", value: |r| Some(r.wall_seconds), text: |v| format!("{v:.1} s") },
];

/// The columns at least one of `rows` has a figure in.
pub fn present(rows: &[Row]) -> Vec<&'static Column> {
    ALL.iter().filter(|c| rows.iter().any(|r| (c.value)(r).is_some())).collect()
}

/// A row's cell in `column`: its figure as text, or `-`.
pub fn cell(column: &Column, row: &Row) -> String {
    (column.value)(row).map_or_else(|| "-".to_string(), column.text)
}
