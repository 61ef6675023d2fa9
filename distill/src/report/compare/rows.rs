//! One row per run for `distill compare`: the figures of its `report.json` that a sweep over
//! students is read by. Read leniently (every figure optional), so reports of older runs and
//! of every objective compare side by side; a file that is not a report is one error line.
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::host::error::{DistillError, Result};

/// A run as the comparison shows it. Figures a run does not have (accuracy of an embedding
/// student, perplexity of a classifier, a plan on a device of unknown memory) are `None`.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The run folder's name (`runs/student-a` -> `student-a`).
    pub run: String,
    /// Trainable parameter elements of the student.
    pub params: u64,
    /// Teacher parameters / student parameters.
    pub compression: f64,
    /// Top-1 accuracy on the test labels, a fraction.
    pub accuracy: Option<f64>,
    /// Agreement with the teacher: top-1 agreement, or the mean cosine of embeddings.
    pub agreement: Option<f64>,
    /// Spearman's rho of the student's and teacher's cosine similarities (embeddings).
    pub spearman: Option<f64>,
    /// Test perplexity (language models).
    pub perplexity: Option<f64>,
    /// Accuracy points gained over the `--baseline` student trained on labels alone.
    pub kd_gain_points: Option<f64>,
    /// Training throughput, samples/s.
    pub samples_per_s: f64,
    /// Median CPU latency of the exported student at batch 1, ms.
    pub latency_ms: Option<f64>,
    /// Measured weight sparsity of a pruned student, a fraction.
    pub sparsity: Option<f64>,
    /// The plan's peak on the run's device, bytes: of the CUDA allocator's allocated bytes on a
    /// GPU, of everything the plan holds on a CPU.
    pub planned_bytes: Option<u64>,
    /// The measured peak, bytes: the CUDA allocator's allocated bytes on a GPU; on a CPU the
    /// process's resident set, libtorch's code and caches included (`measured_is_resident`).
    pub measured_bytes: Option<u64>,
    pub measured_is_resident: bool,
    /// The run's wall time from the process's start to the report, seconds.
    pub wall_seconds: f64,
}

#[derive(Deserialize)]
struct ReportFile {
    student: StudentFile,
    compression_ratio: f64,
    #[serde(default)]
    kd_gain_points: Option<f64>,
    #[serde(default)]
    memory: Option<MemoryFile>,
    wall_seconds: f64,
}

#[derive(Deserialize)]
struct StudentFile {
    params: u64,
    #[serde(default)]
    test_accuracy: Option<f64>,
    #[serde(default)]
    agreement: Option<f64>,
    #[serde(default)]
    spearman: Option<f64>,
    #[serde(default)]
    test_perplexity: Option<f64>,
    samples_per_s: f64,
    #[serde(default)]
    latency: Option<LatencyFile>,
    #[serde(default)]
    prune: Option<PruneFile>,
}

#[derive(Deserialize)]
struct LatencyFile {
    batch_1_ms: f64,
}

#[derive(Deserialize)]
struct PruneFile {
    weight_sparsity: f64,
}

#[derive(Deserialize)]
struct MemoryFile {
    predicted_total_bytes: u64,
    #[serde(default)]
    predicted_allocated_bytes: Option<u64>,
    #[serde(default)]
    measured_peak_allocated_bytes: Option<u64>,
    #[serde(default)]
    measured_peak_resident_bytes: Option<u64>,
}

/// The `report.json` of `run`: `run` itself when it is a file, else `run/report.json`.
pub fn report_path(run: &Path) -> PathBuf {
    if run.is_file() {
        run.to_path_buf()
    } else {
        run.join("report.json")
    }
}

/// The row of the run in folder (or report file) `run`.
///
/// # Errors
/// [`DistillError::Usage`] naming the file: no `report.json` there (an unfinished run keeps
/// its work in `RUN.partial`), or a file that is not a distill report.
pub fn read(run: &Path) -> Result<Row> {
    let path = report_path(run);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        DistillError::Usage(format!(
            "{}: {e}; give the output folder of a finished distill run (an unfinished one has no report.json)",
            path.display()
        ))
    })?;
    let report: ReportFile = serde_json::from_str(&text)
        .map_err(|e| DistillError::Usage(format!("{}: not a distill report.json ({e})", path.display())))?;
    let folder = if run.is_file() { run.parent().unwrap_or(run) } else { run };
    let run_name = folder
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| folder.display().to_string());
    let s = report.student;
    // like with like: the allocator's figure where it was measured, else the whole process's
    let (planned_bytes, measured_bytes, measured_is_resident) = match report.memory {
        Some(m) => match m.measured_peak_allocated_bytes {
            Some(peak) => (m.predicted_allocated_bytes.or(Some(m.predicted_total_bytes)), Some(peak), false),
            None => (Some(m.predicted_total_bytes), m.measured_peak_resident_bytes, true),
        },
        None => (None, None, false),
    };
    Ok(Row {
        run: run_name,
        params: s.params,
        compression: report.compression_ratio,
        accuracy: s.test_accuracy,
        agreement: s.agreement,
        spearman: s.spearman,
        perplexity: s.test_perplexity,
        kd_gain_points: report.kd_gain_points,
        samples_per_s: s.samples_per_s,
        latency_ms: s.latency.map(|l| l.batch_1_ms),
        sparsity: s.prune.map(|p| p.weight_sparsity),
        planned_bytes,
        measured_bytes,
        measured_is_resident,
        wall_seconds: report.wall_seconds,
    })
}
