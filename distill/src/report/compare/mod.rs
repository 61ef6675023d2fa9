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
mod tests {
    use std::path::Path;

    use super::*;

    /// A report.json of the fields `distill compare` reads, in the layout a run writes.
    fn report(
        params: u64,
        accuracy: f64,
        samples_per_s: f64,
        resident: u64,
        sparsity: Option<f64>,
    ) -> serde_json::Value {
        let mut student = serde_json::json!({
            "alpha": 0.9, "params": params, "test_accuracy": accuracy, "agreement": 0.95,
            "final_loss": 0.5, "final_kd": 0.4, "final_ce": 0.6, "steps": 100, "batch_size": 64,
            "samples_per_s": samples_per_s, "train_seconds": 3.0, "safetensors_bytes": 1000,
            "torchscript_bytes": 2000, "precision": "fp32", "teacher_precision": "fp32",
            "checkpointing_segments": 1, "skipped_steps": 0, "final_loss_scale": null,
            "latency": {"batch_1_ms": 0.25, "large_batch": 256, "large_batch_ms": 9.0, "threads": 2},
            "prune": null
        });
        if let Some(s) = sparsity {
            student["prune"] = serde_json::json!({"method": "magnitude", "scope": "global", "target_sparsity": s, "weight_sparsity": s, "layers": []});
        }
        serde_json::json!({
            "distill_version": "0.1.0", "config": "student.toml", "device": "cpu",
            "student": student, "compression_ratio": 10000.0 / params as f64, "kd_gain_points": 1.5,
            "memory": {"device": "cpu", "capacity_bytes": 1u64 << 34, "batch": 64,
                       "predicted_total_bytes": 3u64 << 20, "predicted_allocated_bytes": 3u64 << 20,
                       "measured_peak_allocated_bytes": null, "measured_peak_resident_bytes": resident},
            "wall_seconds": 12.25
        })
    }

    fn write_run(root: &Path, name: &str, report: &serde_json::Value) -> std::path::PathBuf {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("report.json"), report.to_string()).unwrap();
        dir
    }

    #[test]
    fn runs_are_set_side_by_side_with_the_columns_any_has() {
        let root = tempfile::tempdir().unwrap();
        let small = write_run(root.path(), "small", &report(1000, 0.8125, 5000.0, 300 << 20, None));
        let pruned = write_run(root.path(), "pruned", &report(2500, 0.84, 4000.0, 310 << 20, Some(0.5)));
        let html = root.path().join("compare.html");
        let text = compare(&[small, pruned.join("report.json")], &html).unwrap();
        // no run has Spearman, perplexity or a measured allocator peak: those columns are left out
        let expected = "\
run     params  compression  accuracy  agreement  KD gain  samples/s  latency b1  sparsity     plan   measured    wall
small     1000        10.0x    81.25%     0.9500    +1.50       5000    0.250 ms         -  3.0 MiB  300.0 MiB  12.2 s
pruned    2500         4.0x    84.00%     0.9500    +1.50       4000    0.250 ms    50.00%  3.0 MiB  310.0 MiB  12.2 s
measured on a CPU: the process's peak resident set, libtorch included; the plan prices the run's tensors
";
        assert_eq!(text, format!("{expected}page: {}\n", html.display()));
        let page = std::fs::read_to_string(&html).unwrap();
        // each figure is on its cell and on its bar, exactly
        assert!(page.contains("<td data-column=\"accuracy\" data-value=\"0.8125\">81.25%</td>"), "{page}");
        assert!(page.contains("data-label=\"pruned\" data-value=\"0.84\""), "{page}");
        assert!(page.contains("<title>small: 5000</title>"), "{page}");
        for banned in ["<script", "src=", "href=", "<link", "@import", "url("] {
            assert!(!page.contains(banned), "{banned} in a page that should fetch nothing: {page}");
        }
        // a bar per run in the sparsity chart: only the pruned run has one
        let sparsity = &page[page.find("id=\"sparsity\"").unwrap()..];
        let sparsity = &sparsity[..sparsity.find("</figure>").unwrap()];
        assert_eq!(sparsity.matches("data-label=").count(), 1, "{sparsity}");
    }

    #[test]
    fn a_folder_without_a_report_is_one_line_and_nothing_is_written() {
        let root = tempfile::tempdir().unwrap();
        let good = write_run(root.path(), "good", &report(1000, 0.8, 100.0, 1 << 20, None));
        let unfinished = root.path().join("run.partial");
        std::fs::create_dir_all(&unfinished).unwrap();
        let html = root.path().join("compare.html");
        let err = compare(&[good.clone(), unfinished.clone()], &html).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}: ", unfinished.join("report.json").display())), "{err}");
        assert!(err.contains("an unfinished one has no report.json") && !err.contains('\n'), "{err}");
        assert!(!html.exists());
        // a JSON file that is not a report names the file and says so
        std::fs::write(unfinished.join("report.json"), "{\"loss\": 1}").unwrap();
        let err = compare(&[good, unfinished.clone()], &html).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "{}: not a distill report.json (missing field",
                unfinished.join("report.json").display()
            )),
            "{err}"
        );
    }

    #[test]
    fn a_report_of_an_older_run_without_latency_or_plan_still_compares() {
        let mut old = report(1000, 0.5, 10.0, 0, None);
        let object = old.as_object_mut().unwrap();
        object.remove("memory");
        object.remove("kd_gain_points");
        old["student"].as_object_mut().unwrap().remove("latency");
        let root = tempfile::tempdir().unwrap();
        let row = rows::read(&write_run(root.path(), "old", &old)).unwrap();
        assert_eq!(
            (row.latency_ms, row.planned_bytes, row.measured_bytes, row.kd_gain_points),
            (None, None, None, None)
        );
        assert_eq!((row.run.as_str(), row.params, row.accuracy), ("old", 1000, Some(0.5)));
        let text = table::render(&[row]);
        assert_eq!(text.lines().next().unwrap(), "run  params  compression  accuracy  agreement  samples/s    wall");
    }
}
