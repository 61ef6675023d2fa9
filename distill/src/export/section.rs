//! The student's section of `report.json` ([`StudentReport`]), which the export fills: the
//! trained student's figures, what pruning did ([`PruneReport`], [`ShrunkReport`]) and its
//! Hugging Face folder ([`HfExport`]); [`crate::report::Report`] holds one per student.
use serde::{Deserialize, Serialize};

use crate::export::latency::Latency;
use crate::prune::{LayerSparsity, PruneSchedule};
use crate::train::objective::{Agreement, LossValues};

/// One trained student (the KD run or its alpha = 0 baseline).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StudentReport {
    pub alpha: f64,
    /// `[kd] temperature` of a logit objective; `null` for embeddings, whose losses have none.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// `[kd] divergence` of a logit objective (`forward_kl`, `reverse_kl`, `jsd`, `tvd`);
    /// `null` for embeddings.
    #[serde(default)]
    pub divergence: Option<String>,
    /// `[kd] beta` of `divergence = "jsd"` (0.5 when not written); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta: Option<f64>,
    pub params: u64,
    /// Top-1 accuracy on the test labels (`null` for unlabelled data or embeddings).
    pub test_accuracy: Option<f64>,
    /// Agreement with the teacher on the test set, as `agreement_metric` says: the fraction of
    /// samples whose top-1 equals the teacher's, or the mean cosine similarity of embeddings.
    pub agreement: Option<f64>,
    /// The last epoch's mean loss parts, in report.json as `final_loss`, `final_kd`, `final_ce`
    /// and, with `[[kd.hidden]]` pairs, `final_hidden`.
    #[serde(flatten, with = "FinalLossParts")]
    pub final_losses: LossValues,
    pub steps: u64,
    pub batch_size: u64,
    /// Training throughput, samples/s (optimiser steps only).
    pub samples_per_s: f64,
    pub train_seconds: f64,
    pub safetensors_bytes: u64,
    pub torchscript_bytes: u64,
    /// `[kd] objective`: `logits`, `embedding_mse` or `embedding_cosine`.
    #[serde(default = "logits")]
    pub objective: String,
    /// What `agreement` measures: `top1` or `cosine`.
    #[serde(default)]
    pub agreement_metric: Agreement,
    /// Embeddings: Spearman's rho between the student's and the teacher's cosine similarities
    /// over 5,000 seeded random test pairs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spearman: Option<f64>,
    /// Language models: the test perplexity (`exp` of the mean next-token cross-entropy, nats,
    /// over the test windows' predicting positions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_perplexity: Option<f64>,
    /// Student precision (fp32, fp16 with loss scaling, bf16) and the teacher's.
    pub precision: String,
    pub teacher_precision: String,
    /// Gradient-checkpointing segments (1 = none).
    pub checkpointing_segments: usize,
    /// fp16: optimiser steps skipped for inf/NaN gradients, and the final loss scale.
    pub skipped_steps: u64,
    pub final_loss_scale: Option<f64>,
    /// Training samples left out of every epoch: 1 when the last batch would hold a single
    /// sample that BatchNorm cannot train on (`distill::train::batches`), else 0.
    #[serde(default)]
    pub samples_dropped_per_epoch: u64,
    /// Measured CPU inference latency of the exported student, when the run asked for it
    /// (`--latency`); `null` otherwise.
    #[serde(default)]
    pub latency: Option<Latency>,
    /// Why `latency` is null: [`crate::export::latency::NOT_MEASURED`], which says how to ask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_not_measured: Option<String>,
    pub prune: Option<PruneReport>,
    /// The student as a Hugging Face model folder (`crate::export::student_folder`): where it was
    /// written, or why it was not.
    #[serde(default)]
    pub hf: HfExport,
}

/// `hf` of a [`StudentReport`]: the Hugging Face model folder of the student (`folder`,
/// relative to the student's folder, and its `architecture`), or, for a student with no
/// Hugging Face equivalent, `not_written`: why (today's exports are its only ones).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HfExport {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folder: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_written: Option<String>,
}

fn logits() -> String {
    "logits".into()
}

/// The names [`LossValues`] takes in a [`StudentReport`] (serde's remote derive: the same
/// struct, other field names).
#[derive(Serialize, Deserialize)]
#[serde(remote = "LossValues")]
struct FinalLossParts {
    #[serde(rename = "final_loss")]
    loss: f64,
    #[serde(rename = "final_kd")]
    kd: f64,
    #[serde(rename = "final_ce")]
    ce: f64,
    #[serde(rename = "final_hidden", default, skip_serializing_if = "Option::is_none")]
    hidden: Option<f64>,
}

/// What pruning did, measured on the exported tensors.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PruneReport {
    pub method: String,
    /// The ranking that ran: `global` or `layer` (structured pruning is always `layer`).
    pub scope: String,
    /// Configured final sparsity: of conv/linear weights (magnitude) or of units (structured).
    pub target_sparsity: f64,
    /// The events that ran, in optimiser steps: first `t0`, every `every`, last `t_end` (where
    /// the masks reach `target_sparsity`).
    #[serde(default)]
    pub schedule: PruneSchedule,
    /// Measured: zero conv/linear weights / all conv/linear weights, after the last step.
    pub weight_sparsity: f64,
    /// Per conv/linear weight: dense count, non-zeros, sparsity.
    pub layers: Vec<LayerSparsity>,
    /// All trainable parameters, and those that are non-zero.
    pub dense_params: u64,
    pub nonzero_params: u64,
    /// The dense safetensors file (zeros stored), gzip of it, and a CSR encoding (fp32 values,
    /// int32 column indices and row pointers for conv/linear weights; other tensors dense).
    /// A dense file does not shrink with unstructured sparsity: only an encoding that skips
    /// zeros (or structured pruning) does.
    pub dense_file_bytes: u64,
    pub gzip_file_bytes: u64,
    pub csr_bytes: u64,
    /// Structured pruning: the physically smaller student.
    pub shrunk: Option<ShrunkReport>,
    /// CPU latency of the dense-shaped (masked) student (`--latency`; `null` otherwise).
    #[serde(default)]
    pub dense_latency: Option<Latency>,
}

/// The student after removing pruned units.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShrunkReport {
    pub channels: Vec<u64>,
    pub hidden: Vec<u64>,
    /// A transformer's feed-forward width after pruning (`student.transformer.mlp_width`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mlp_width: Option<u64>,
    pub params: u64,
    pub safetensors_bytes: u64,
    pub torchscript_bytes: u64,
    /// max |logits(shrunk) - logits(masked)| over the test set.
    pub max_abs_diff: f64,
}
