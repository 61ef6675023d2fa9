//! `report.html`: a run a person can look at, written beside `report.json` by every run. One
//! self-contained file (inline style and SVG, no script, nothing fetched: it opens from disk)
//! with plots drawn by plotters' SVG backend from the run's own data: the loss and its KD and CE
//! parts per logged step, the held-out figures per epoch, the learning rate (and fp16's loss
//! scale), throughput, sparsity per layer for pruning runs, with a `--baseline` student's curves
//! on the same plots; and the teacher/student table, the memory plan beside the measured peaks,
//! and the wall time by phase. Every plotted point and bar carries its exact value (`data-y`,
//! `data-value` and a `<title>`), so a reader can hover it and a test can read it back.
//!
//! One job per file: `curves` (reading `metrics.jsonl`), `markup` (escaping, the values put on
//! the shapes), `chart` (line charts), `bars` (bar charts), `tables`, `page` (the page). `distill
//! compare`'s page (`crate::report::compare`) draws with the same bars, markup and style.
pub(crate) mod bars;
mod chart;
mod curves;
pub(crate) mod markup;
pub(crate) mod page;
mod tables;

use std::io::Write;
use std::path::{Path, PathBuf};

pub use curves::Curves;
pub use page::render;

use crate::host::durable::write_atomic;
use crate::host::error::Result;
use crate::report::Report;

/// Writes `dir/report.html` (atomically, [`crate::host::durable`]) for `report`, whose students'
/// `metrics.jsonl` are in `dir` and, with a baseline, `dir/baseline/`. Returns its path.
///
/// # Errors
/// [`crate::DistillError::Io`] naming the file when it cannot be written.
pub fn write(report: &Report, dir: &Path) -> Result<PathBuf> {
    let student = Curves::read(&dir.join("metrics.jsonl"));
    let baseline = report.baseline.as_ref().map(|_| Curves::read(&dir.join("baseline").join("metrics.jsonl")));
    let html = render(report, &student, baseline.as_ref());
    let path = dir.join("report.html");
    write_atomic(&path, |f| f.write_all(html.as_bytes()))?;
    Ok(path)
}
