//! `report.json`: its fields, built once when every fact is known ([`Report::new`]); the
//! printed summary of a run is `crate::report::summary`'s.

pub mod compare;
pub mod html;
pub mod summary;
#[cfg(test)]
pub(crate) mod test_memory;
pub mod utilisation;

use serde::{Deserialize, Serialize};

use estimator_wasm::schema::DataSpec;

use crate::export::section::StudentReport;
use crate::host::phase_times::PhaseSeconds;
use crate::inputs::data::{Dataset, TextStats};
use crate::report::utilisation::UtilisationReport;
use crate::train::memory_plan::MemoryPlan;

/// The teacher, as measured in this run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TeacherReport {
    pub path: String,
    /// Parameter elements of the TorchScript module.
    pub params: u64,
    /// What `params` counted: the module's `"parameters"`, the `"constants"` of a frozen or
    /// traced module, or the cfg's `teacher.params` (`"cfg"`; `null` in older reports).
    #[serde(default)]
    pub params_source: Option<crate::inputs::teacher::ParamsSource>,
    pub file_bytes: u64,
    /// Top-1 accuracy on the test labels (`null` for unlabelled data or embeddings).
    pub test_accuracy: Option<f64>,
    /// Share of the most frequent class in the test labels (the accuracy of a constant guess;
    /// `null` without test accuracy).
    #[serde(default)]
    pub chance_accuracy: Option<f64>,
    /// Set when the teacher's test accuracy is at chance level (with what to check).
    #[serde(default)]
    pub warning: Option<String>,
    /// Where the soft targets of the train set came from (`null` in reports of older runs).
    #[serde(default)]
    pub train_outputs: Option<TrainOutputs>,
    /// Seconds spent getting them before training (the pass, or reading the file); `null` for
    /// `"live"` and `"none"`.
    #[serde(default)]
    pub train_outputs_seconds: Option<f64>,
    /// Language models: the teacher's test perplexity, on the same windows as the student's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_perplexity: Option<f64>,
    /// A vocabulary padded past the tokenizer's (`teacher.vocab`): KD and the teacher's
    /// perplexity use its first `shared` logits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub padded_vocab: Option<PaddedVocab>,
}

/// The teacher's logit width and the vocabulary it shares with the tokenizer and the student.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaddedVocab {
    pub logits: u64,
    pub shared: u64,
}

/// How a run had the teacher's outputs on the train set (its soft targets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrainOutputs {
    /// One teacher pass over the train set before training.
    Computed,
    /// Read back: the run folder's copy (a resumed run) or `--teacher-cache`.
    Read,
    /// The teacher runs on every batch (`teacher.cache_logits = false`).
    Live,
    /// No teacher term (`kd.alpha = 0`).
    #[serde(rename = "none")]
    NoTeacher,
}

/// Predicted and measured memory of the run: the device's (CUDA) and the host's.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemoryReport {
    /// `cuda:N` or `cpu`.
    pub device: String,
    /// The device's memory (CUDA total, or RAM available at the start), bytes.
    pub capacity_bytes: u64,
    /// The micro-batch the plan was made for (the resolved `"auto"` one included).
    pub batch: u64,
    /// What the process needs of the device by the plan, bytes: on CUDA the CUDA context and
    /// NCCL's buffers plus the allocator's replayed peak reserved bytes
    /// (`estimator_wasm::Plan::fit_total`, what `train.batch_size = "auto"` fits and the fit
    /// warning compares with the device); on the CPU the plan's tensors at its peak moment plus
    /// the `estimate.fragmentation` reserve.
    pub predicted_total_bytes: u64,
    /// The plan's peak of the caching allocator's `allocated_bytes` over the whole run (teacher
    /// pass, training steps, evaluation; cuBLAS workspaces included): the quantity
    /// `measured_peak_allocated_bytes` measures, bytes.
    pub predicted_allocated_bytes: u64,
    /// The plan's peak of the allocator's `reserved_bytes` (its segments), bytes; compare with
    /// `measured_peak_reserved_bytes`. On CUDA the run's requests replayed on the caching
    /// allocator's model (`estimator_wasm::Plan::reserved_replay`); on the CPU the peak moment's
    /// tensors.
    #[serde(default)]
    pub predicted_reserved_bytes: u64,
    /// CUDA only: the allocator's peak `allocated_bytes` over the whole run.
    pub measured_peak_allocated_bytes: Option<u64>,
    /// CUDA only: the allocator's peak `reserved_bytes` (allocated plus its cached blocks).
    #[serde(default)]
    pub measured_peak_reserved_bytes: Option<u64>,
    /// The process's peak resident set in host RAM (Linux `VmHWM`) until the report, bytes, on
    /// any device (a data-parallel job's: rank 0's); see
    /// [`crate::host::allocator::peak_resident_bytes`] for what it counts beyond the plan.
    #[serde(default)]
    pub measured_peak_resident_bytes: Option<u64>,
    /// `predicted_total_bytes` part by part, `[name, bytes]` where non-zero: the tensors of the
    /// plan's peak moment by category, then `allocator_cache` (the allocator's segments beyond
    /// those tensors: on CUDA the replayed peak reserved bytes less them), `fragmentation` (the
    /// flat reserve, only where nothing is replayed), `cuda_context` and `nccl`; they sum to the
    /// total (`report.html` sets them beside the measured peaks).
    #[serde(default)]
    pub predicted_breakdown: Vec<(String, u64)>,
}

impl MemoryReport {
    /// The memory `plan`, with the allocator's measured peak on a CUDA `device` and the process's
    /// peak resident set.
    pub fn measured(plan: MemoryPlan, device: tch::Device) -> MemoryReport {
        let peak = match device {
            tch::Device::Cuda(i) => crate::torch::shim::cuda_memory(i).ok(),
            _ => None,
        };
        MemoryReport {
            device: plan.device,
            capacity_bytes: plan.capacity_bytes,
            batch: plan.batch,
            predicted_total_bytes: plan.predicted_total_bytes,
            predicted_allocated_bytes: plan.predicted_allocated_bytes,
            predicted_reserved_bytes: plan.predicted_reserved_bytes,
            measured_peak_allocated_bytes: peak.as_ref().map(|m| m.peak_allocated as u64),
            measured_peak_reserved_bytes: peak.as_ref().map(|m| m.peak_reserved as u64),
            measured_peak_resident_bytes: crate::host::allocator::peak_resident_bytes(),
            predicted_breakdown: plan.predicted_breakdown,
        }
    }
}

/// The datasets as trained on and their normalisation.
#[derive(Debug, Clone, Serialize)]
pub struct DataReport {
    pub train_samples: u64,
    pub test_samples: u64,
    pub input_shape: Vec<u64>,
    pub classes: u64,
    /// Inputs to both exported students are `((x * scale) - mean) / std`.
    pub scale: f64,
    pub mean: Vec<f64>,
    pub std: Vec<f64>,
    /// Text: the tokenised train and test files (sentences, blank lines skipped, sentences
    /// truncated to `input_shape[0]` tokens, tokens per sentence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train_text: Option<TextStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_text: Option<TextStats>,
}

impl DataReport {
    /// The data section of the `train` and `test` sets described by `spec`.
    pub fn new(train: &Dataset, test: &Dataset, spec: &DataSpec) -> DataReport {
        DataReport {
            train_samples: train.len() as u64,
            test_samples: test.len() as u64,
            input_shape: spec.input_shape.clone(),
            classes: spec.classes,
            scale: spec.scale,
            mean: spec.mean.clone(),
            std: spec.std.clone(),
            train_text: train.text_stats().cloned(),
            test_text: test.text_stats().cloned(),
        }
    }
}

/// What the students' runs found: the teacher as measured, and each student's report.
#[derive(Debug, Clone)]
pub struct Distilled {
    pub teacher: TeacherReport,
    pub student: StudentReport,
    /// The alpha = 0 student (`--baseline`).
    pub baseline: Option<StudentReport>,
}

/// The facts of a run besides its students, for [`Report::new`].
pub struct RunFacts {
    /// The cfg.toml as given on the command line.
    pub config: String,
    pub device: tch::Device,
    pub data: DataReport,
    /// The estimator's plan on the device (`None` where its memory is unknown).
    pub memory: Option<MemoryPlan>,
    /// From the process's start (or, for a later run in the same process, the run's) to the
    /// report.
    pub wall_seconds: f64,
    /// `wall_seconds` split by phase ([`crate::host::phase_times`]).
    pub phases: PhaseSeconds,
    pub output_dir: String,
    /// The data-parallel job this run was one rank of (`None`: one process).
    pub data_parallel: Option<DataParallelReport>,
    /// Achieved FLOP/s and MFU of the training steps (`None` without a memory plan).
    pub utilisation: Option<UtilisationReport>,
}

/// How a data-parallel job split the work (`report.json`'s `data_parallel`).
#[derive(Debug, Clone, Serialize)]
pub struct DataParallelReport {
    /// Processes (ranks) that trained together.
    pub world_size: usize,
    /// c10d backend of the gradients' all-reduce: "gloo", or "nccl" on CUDA.
    pub backend: &'static str,
    /// Samples per rank and step (`train.batch_size`), and per optimiser step in all.
    pub micro_batch: u64,
    pub global_batch: u64,
}

/// Everything `report.json` holds.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub distill_version: &'static str,
    pub config: String,
    pub device: String,
    pub data: DataReport,
    pub teacher: TeacherReport,
    pub student: StudentReport,
    /// Teacher parameters / student parameters.
    pub compression_ratio: f64,
    /// The same student trained on labels alone (`--baseline`), so the KD gain is visible.
    pub baseline: Option<StudentReport>,
    /// student.test_accuracy - baseline.test_accuracy, in accuracy points (x100).
    pub kd_gain_points: Option<f64>,
    /// The estimator's plan on this device (and, on CUDA, the measured allocator peak).
    pub memory: Option<MemoryReport>,
    /// Seconds from the process's start to the report (a later run in the same process: from its
    /// own start).
    pub wall_seconds: f64,
    /// Where `wall_seconds` went, per phase; the phases sum to it ([`crate::host::phase_times`]).
    pub phases: PhaseSeconds,
    pub output_dir: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_parallel: Option<DataParallelReport>,
    /// The training steps' achieved FLOP/s and MFU ([`crate::report::utilisation`]).
    pub utilisation: Option<UtilisationReport>,
}

impl Report {
    /// The report of a run: its facts and its students' findings, with the derived figures (the
    /// compression ratio, the KD gain) and, on CUDA, the allocator's measured peak.
    pub fn new(run: RunFacts, distilled: Distilled) -> Report {
        let Distilled { teacher, student, baseline } = distilled;
        Report {
            distill_version: env!("CARGO_PKG_VERSION"),
            config: run.config,
            device: format!("{:?}", run.device).to_lowercase(),
            data: run.data,
            compression_ratio: teacher.params as f64 / student.params.max(1) as f64,
            // a language model's gain is its perplexity's (the summary says it); next-token
            // accuracy points would read as the verdict
            kd_gain_points: baseline
                .as_ref()
                .filter(|_| student.test_perplexity.is_none())
                .and_then(|b| Some(100.0 * (student.test_accuracy? - b.test_accuracy?))),
            teacher,
            student,
            baseline,
            memory: run.memory.map(|m| MemoryReport::measured(m, run.device)),
            wall_seconds: run.wall_seconds,
            phases: run.phases,
            output_dir: run.output_dir,
            data_parallel: run.data_parallel,
            utilisation: run.utilisation,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::latency::Latency;
    use crate::export::section::HfExport;
    use crate::train::objective::{Agreement, LossValues};

    #[test]
    fn the_final_loss_parts_keep_their_names_and_place() {
        let report = StudentReport {
            alpha: 0.9,
            temperature: Some(4.0),
            divergence: Some("forward_kl".into()),
            beta: None,
            params: 10,
            test_accuracy: Some(0.5),
            agreement: None,
            objective: "logits".into(),
            agreement_metric: Agreement::Top1,
            spearman: None,
            test_perplexity: None,
            final_losses: LossValues { loss: 1.5, kd: 2.5, ce: 0.5, hidden: None },
            steps: 3,
            batch_size: 32,
            samples_per_s: 1.0,
            train_seconds: 2.0,
            safetensors_bytes: 4,
            torchscript_bytes: 5,
            precision: "fp32".into(),
            teacher_precision: "fp32".into(),
            checkpointing_segments: 1,
            skipped_steps: 0,
            final_loss_scale: None,
            samples_dropped_per_epoch: 0,
            latency: Some(Latency { batch_1_ms: 0.25, large_batch: 256, large_batch_ms: 1.0, threads: 1 }),
            latency_not_measured: None,
            prune: None,
            hf: HfExport { not_written: Some("why".into()), ..HfExport::default() },
        };
        let json = serde_json::to_string(&report).unwrap();
        assert!(json.ends_with(r#""prune":null,"hf":{"not_written":"why"}}"#), "{json}");
        assert!(
            json.contains(r#""agreement":null,"final_loss":1.5,"final_kd":2.5,"final_ce":0.5,"steps":3,"#),
            "{json}"
        );
        let back: StudentReport = serde_json::from_str(&json).unwrap();
        assert_eq!((back.final_losses, back.hf), (report.final_losses, report.hf));
        // a report written before the field reads as no word on a folder
        let old = json.replace(r#","hf":{"not_written":"why"}"#, "");
        assert_eq!(serde_json::from_str::<StudentReport>(&old).unwrap().hf, HfExport::default());
    }
}
