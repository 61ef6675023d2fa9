//! The page `distill compare` writes: one self-contained HTML file (inline style and SVG, no
//! script, nothing fetched) with the runs' table and a bar chart per column, a bar per run, each
//! carrying its exact figure (`data-value`, `<title>`) as `report.html`'s bars do.
use super::columns::{cell, present};
use super::rows::Row;
use crate::report::html::bars::{Bar, BarChart};
use crate::report::html::markup::{escape, exact};
use crate::report::html::page::{STUDENT, STYLE};

/// The chart id of a column: its header in lower case, spaces and slashes as dashes.
fn id(header: &str) -> String {
    header.to_lowercase().replace([' ', '/'], "-")
}

/// The whole page for `rows`, in the order given.
pub fn render(rows: &[Row]) -> String {
    let columns = present(rows);
    let mut head = "<tr><th>run</th>".to_string();
    for c in &columns {
        head.push_str(&format!("<th>{}</th>", escape(c.header)));
    }
    let mut body_rows = String::new();
    for r in rows {
        body_rows.push_str(&format!("<tr><th>{}</th>", escape(&r.run)));
        for c in &columns {
            let value = (c.value)(r).map_or_else(String::new, |v| format!(" data-value=\"{}\"", exact(v)));
            body_rows.push_str(&format!("<td data-column=\"{}\"{value}>{}</td>", id(c.header), escape(&cell(c, r))));
        }
        body_rows.push_str("</tr>");
    }
    let mut body = format!(
        "<h1>distill compare: {} runs</h1><table id=\"runs\"><thead>{head}</tr></thead><tbody>{body_rows}</tbody></table>",
        rows.len()
    );
    if rows.iter().any(|r| r.measured_is_resident && r.measured_bytes.is_some()) {
        body.push_str("<p class=\"note\">measured on a CPU: the process's peak resident set, libtorch included; the plan prices the run's tensors</p>");
    }
    for c in &columns {
        let bars = rows
            .iter()
            .filter_map(|r| {
                let v = (c.value)(r)?;
                // percentages are drawn in percent, bytes in MiB: the axis's unit
                let length = match c.unit {
                    "%" => 100.0 * v,
                    "MiB" => v / (1u64 << 20) as f64,
                    _ => v,
                };
                Some(Bar { label: r.run.clone(), value: v, length, text: (c.text)(v), colour: STUDENT[0] })
            })
            .collect();
        let chart = BarChart { id: id(c.header), axis: format!("{} ({})", c.header, c.unit), bars }.html();
        body.push_str(&format!("<h2>{}</h2>{chart}", escape(c.header)));
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>distill compare</title><style>{STYLE}</style></head><body>{body}</body></html>\n"
    )
}
