//! `distill compare RUN_DIR...`: finished runs side by side, so a sweep over student sizes
//! (or objectives, precisions, sparsities) reads at a glance: one table on stdout and one page.
//!
//! One job per file: `rows` (a run's figures from its `report.json`), `columns` (what is
//! shown and how it reads), `table` (the text), `page` (the HTML).
mod columns;
mod page;
pub mod rows;
mod table;

use std::io::Write;
use std::path::{Path, PathBuf};

pub use rows::Row;

use crate::host::durable::write_atomic;
use crate::host::error::Result;

/// Reads every run of `runs` (folders or their `report.json`), writes the page to `html`
/// (atomically: an earlier page survives a failure) and returns the table, with a last line
/// naming the page.
///
/// # Errors
/// The first run whose report cannot be read ([`rows::read`]: one line naming the file), or
/// [`crate::DistillError::Io`] naming `html` when it cannot be written. Nothing is written
/// when a report is bad.
pub fn compare(runs: &[PathBuf], html: &Path) -> Result<String> {
    let rows = runs.iter().map(|r| rows::read(r)).collect::<Result<Vec<Row>>>()?;
    let page = page::render(&rows);
    write_atomic(html, |f| f.write_all(page.as_bytes()))?;
    Ok(format!("{}page: {}\n", table::render(&rows), html.display()))
}

#[cfg(test)]
mod tests;
