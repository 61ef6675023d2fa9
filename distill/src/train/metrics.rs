//! `metrics.jsonl`: one JSON object per line, for every logged step and every epoch end.
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::host::error::{DistillError, Result};
use crate::train::objective::LossValues;

/// A logged optimiser step: running means since the previous step line.
#[derive(Debug, Clone, Serialize)]
pub struct StepLine {
    pub kind: &'static str,
    pub step: u64,
    pub epoch: u64,
    pub lr: f64,
    /// Mean total loss, KD term (T^2 KL, before alpha) and CE term over the logged window;
    /// with `[[kd.hidden]]` pairs also `hidden`, their weighted distances (inside the total).
    #[serde(flatten)]
    pub losses: LossValues,
    /// Train-batch top-1 accuracy over the window (absent for unlabelled data or embeddings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<f64>,
    /// Training throughput over the window, samples/s.
    pub samples_per_s: f64,
    /// fp16: the dynamic loss scale after this step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<f64>,
}

/// An epoch end: held-out figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EpochLine {
    pub kind: String,
    pub epoch: u64,
    pub step: u64,
    /// Mean total loss, KD term and CE term over the epoch's applied steps (and `hidden` with
    /// pairs).
    #[serde(flatten)]
    pub losses: LossValues,
    /// Top-1 accuracies against the labels (`null` for unlabelled data or embeddings).
    pub train_accuracy: Option<f64>,
    pub test_accuracy: Option<f64>,
    /// Agreement with the teacher on the test set: the fraction of equal top-1 classes, or for
    /// embedding objectives the mean cosine similarity (report.json's `agreement_metric`).
    pub agreement: Option<f64>,
    /// Embeddings only: Spearman's rho between the student's and the teacher's cosine
    /// similarities over 5,000 seeded random test pairs (`crate::train::similarity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spearman: Option<f64>,
    /// Language models only: the student's test perplexity (`exp` of the mean next-token
    /// cross-entropy over the test windows' predicting positions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perplexity: Option<f64>,
    /// Sparsity the pruning masks hold at this point: the target of the latest pruning event (0
    /// before the first), not the curve between events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sparsity: Option<f64>,
    pub samples_per_s: f64,
    /// Training time so far (evaluations excluded), seconds.
    pub elapsed_s: f64,
}

pub struct MetricsLog {
    path: PathBuf,
    file: std::io::BufWriter<std::fs::File>,
}

impl MetricsLog {
    pub fn create(path: &Path) -> Result<MetricsLog> {
        let file = std::fs::File::create(path).map_err(|e| DistillError::io(path, e))?;
        Ok(MetricsLog { path: path.to_path_buf(), file: std::io::BufWriter::new(file) })
    }

    /// Reopens the log of an interrupted run, keeping its first `lines` lines (those up to the
    /// checkpoint being resumed; later ones are replayed). Returns the log and the lines kept:
    /// fewer than `lines` when the file was cut or removed since (a cut line, one without its
    /// newline or not JSON, is dropped with all after it), so the caller can say so.
    ///
    /// # Errors
    /// [`DistillError::Io`] when the file exists but cannot be read, or cannot be rewritten.
    pub fn resume(path: &Path, lines: u64) -> Result<(MetricsLog, u64)> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(DistillError::io(path, e)),
        };
        let whole = text.split_inclusive('\n').take_while(|l| {
            l.ends_with('\n') && serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| v.is_object())
        });
        let kept: Vec<&str> = whole.take(lines as usize).collect();
        crate::host::durable::write_atomic(path, |f| f.write_all(kept.concat().as_bytes()))?;
        let file = std::fs::OpenOptions::new().append(true).open(path).map_err(|e| DistillError::io(path, e))?;
        Ok((MetricsLog { path: path.to_path_buf(), file: std::io::BufWriter::new(file) }, kept.len() as u64))
    }

    /// Flushes the lines written so far to the disk (before a checkpoint that counts them, so a
    /// power loss cannot keep the checkpoint but lose lines it expects).
    pub fn sync(&mut self) -> Result<()> {
        self.file.flush().and_then(|_| self.file.get_ref().sync_data()).map_err(|e| DistillError::io(&self.path, e))
    }

    /// Appends one line and flushes it, so a crash loses at most the line being written.
    pub fn write(&mut self, line: &impl Serialize) -> Result<()> {
        let json = serde_json::to_string(line).expect("metrics serialise");
        writeln!(self.file, "{json}").and_then(|_| self.file.flush()).map_err(|e| DistillError::io(&self.path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loss_parts_sit_in_their_place_in_each_line() {
        let losses = LossValues { loss: 1.5, kd: 2.5, ce: 0.5, hidden: None };
        let step = StepLine {
            kind: "step",
            step: 10,
            epoch: 1,
            lr: 0.25,
            losses,
            accuracy: Some(0.75),
            samples_per_s: 8.0,
            loss_scale: None,
        };
        assert_eq!(
            serde_json::to_string(&step).unwrap(),
            r#"{"kind":"step","step":10,"epoch":1,"lr":0.25,"loss":1.5,"kd":2.5,"ce":0.5,"accuracy":0.75,"samples_per_s":8.0}"#
        );
        let epoch = EpochLine {
            kind: "epoch".into(),
            epoch: 1,
            step: 10,
            losses,
            train_accuracy: Some(0.75),
            test_accuracy: Some(0.5),
            agreement: Some(0.25),
            spearman: None,
            perplexity: None,
            sparsity: None,
            samples_per_s: 8.0,
            elapsed_s: 2.0,
        };
        let json = serde_json::to_string(&epoch).unwrap();
        assert_eq!(
            json,
            r#"{"kind":"epoch","epoch":1,"step":10,"loss":1.5,"kd":2.5,"ce":0.5,"train_accuracy":0.75,"test_accuracy":0.5,"agreement":0.25,"samples_per_s":8.0,"elapsed_s":2.0}"#
        );
        let back: EpochLine = serde_json::from_str(&json).unwrap();
        assert_eq!(back.losses, losses);
        // with hidden pairs, their term follows the CE
        let paired = EpochLine { losses: LossValues { hidden: Some(0.25), ..losses }, ..epoch };
        let json = serde_json::to_string(&paired).unwrap();
        assert!(json.contains(r#""kd":2.5,"ce":0.5,"hidden":0.25,"train_accuracy""#), "{json}");
        assert_eq!(serde_json::from_str::<EpochLine>(&json).unwrap().losses.hidden, Some(0.25));
    }

    #[test]
    fn the_hidden_part_is_summed_and_averaged_only_where_pairs_ran() {
        let mut sums = LossValues { loss: 1.0, kd: 0.5, ce: 0.25, hidden: Some(0.5) };
        sums += LossValues { loss: 3.0, kd: 1.5, ce: 0.75, hidden: Some(1.5) };
        assert_eq!(sums.mean(2.0), LossValues { loss: 2.0, kd: 1.0, ce: 0.5, hidden: Some(1.0) });
        assert_eq!(sums.mean(2.0).to_string(), "loss 2.0000 (kd 1.0000 ce 0.5000 hidden 1.0000)");
        let plain = LossValues { loss: 2.0, kd: 1.0, ce: 0.5, hidden: None };
        assert_eq!(plain.to_string(), "loss 2.0000 (kd 1.0000 ce 0.5000)");
        assert!(!serde_json::to_string(&plain).unwrap().contains("hidden"));
    }

    #[test]
    fn resume_drops_a_cut_line_and_counts_what_survives() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics.jsonl");
        std::fs::write(&path, "{\"step\":10}\n{\"step\":20}\n{\"step\":30}\n{\"st").unwrap();
        let (mut log, kept) = MetricsLog::resume(&path, 6).unwrap();
        assert_eq!(kept, 3);
        log.write(&serde_json::json!({"step": 40})).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "{\"step\":10}\n{\"step\":20}\n{\"step\":30}\n{\"step\":40}\n");
        // a line cut inside (no longer JSON) ends what is kept; so does a missing file
        std::fs::write(&path, "{\"step\":10}\n{\"step\":2\n{\"step\":30}\n").unwrap();
        assert_eq!(MetricsLog::resume(&path, 3).unwrap().1, 1);
        assert_eq!(MetricsLog::resume(&path, 0).unwrap().1, 0);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(MetricsLog::resume(&path, 3).unwrap().1, 0);
        // a log the checkpoint counted in full is kept to the checkpoint's count
        std::fs::write(&path, "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n").unwrap();
        assert_eq!(MetricsLog::resume(&path, 2).unwrap().1, 2);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"a\":1}\n{\"a\":2}\n");
    }
}
