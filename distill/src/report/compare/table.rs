//! The text table `distill compare` prints: one line per run, the columns any run has, aligned.
use super::columns::{cell, present};
use super::rows::Row;

/// `rows` as an aligned table with a header line, and a note under it naming what the
/// measured memory is on a CPU (the whole process, which the plan does not price whole).
pub fn render(rows: &[Row]) -> String {
    let columns = present(rows);
    let mut lines: Vec<Vec<String>> =
        vec![std::iter::once("run".to_string()).chain(columns.iter().map(|c| c.header.to_string())).collect()];
    for row in rows {
        lines.push(std::iter::once(row.run.clone()).chain(columns.iter().map(|c| cell(c, row))).collect());
    }
    let widths: Vec<usize> =
        (0..lines[0].len()).map(|i| lines.iter().map(|l| l[i].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for line in &lines {
        let cells: Vec<String> = line
            .iter()
            .enumerate()
            .map(|(i, c)| if i == 0 { format!("{c:<w$}", w = widths[i]) } else { format!("{c:>w$}", w = widths[i]) })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    if rows.iter().any(|r| r.measured_is_resident && r.measured_bytes.is_some()) {
        out.push_str("measured on a CPU: the process's peak resident set, libtorch included; the plan prices the run's tensors\n");
    }
    out
}
