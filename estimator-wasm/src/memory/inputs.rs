//! What a caller knows beyond the cfg.toml ([`Inputs`]): a micro-batch, the teacher's exact
//! counts ([`TeacherModel`]), the datasets kept on the device ([`DatasetSize`]).
use serde::Serialize;

use crate::memory::errors::EstimateError;
use crate::schema::arch::Layer;
use crate::schema::catalogue::Gpu;
use crate::schema::limits::{self, MAX_BATCH, MAX_LAYER_LIST};

/// What `distill` (or another caller) knows beyond the cfg.toml.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inputs {
    /// Micro-batch per GPU; `None` takes `train.batch_size` (an error when it is `"auto"`).
    pub batch: Option<u64>,
    /// The teacher's exact counts (from the TorchScript file), overriding `[teacher]`.
    pub teacher: Option<TeacherModel>,
    /// The datasets `distill` keeps on the device; `None` leaves them (and the size of the
    /// cached teacher logits) out.
    pub dataset: Option<DatasetSize>,
    /// The run's own device (its memory, CUDA context and cuBLAS workspace), which prices the
    /// runtime instead of `[estimate] gpu`; `None` takes the cfg's.
    pub device: Option<Gpu>,
    /// Text as the run pads it: the widths of its batches instead of `data.input_shape`'s
    /// (`None`: every batch at `data.input_shape[0]` tokens, an upper bound).
    pub text: Option<TextWidths>,
}

/// The padded widths (tokens per row) of a text run's batches, as its data makes them: each
/// batch is padded to its longest sentence (`distill`'s dynamic padding), so what a step holds
/// depends on the batch's rows and width, not on `data.input_shape`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TextWidths {
    /// The training batches that can peak, as (rows, width) pairs: for each width, the most
    /// rows any batch of that width has (a smaller batch of the same or a narrower width holds
    /// less). Empty: priced at the micro-batch and `data.input_shape[0]`.
    pub train: Vec<(u64, u64)>,
    /// Every training batch of the run's first epoch, as (rows, width) pairs in the order the
    /// trainer meets them (its seeded, length-bucketed order, the last batch partial), for the
    /// caching allocator's replay: blocks cached at one width and too small for the next open
    /// segments that the peak's own tensors do not show. Empty: unknown, and the replay runs
    /// the `train` frontier twice instead. The allocated peak is priced from `train` either way.
    pub steps: Vec<(u64, u64)>,
    /// The batches of the teacher's pass over the train set that can peak, as (rows, width)
    /// pairs (at most `train.eval_batch_size` rows). Empty: `train.eval_batch_size` rows at
    /// `data.input_shape[0]`.
    pub teacher_pass: Vec<(u64, u64)>,
    /// The batches of the evaluation over the test set that can peak, likewise.
    pub evaluation: Vec<(u64, u64)>,
}

/// A teacher as the estimator needs it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TeacherModel {
    /// Parameters, in elements (exact when read from the TorchScript file).
    pub params: u64,
    /// Buffers (BatchNorm statistics), in elements.
    pub buffers: u64,
    /// The layer list, for the inference working set; `None` when only counts are known (the
    /// working set is then bounded below by the input and the logits).
    pub layers: Option<Vec<Layer>>,
}

/// Train and test sets resident on the device, as `distill` keeps them (the size of the data
/// set for the memory estimate, not the data).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DatasetSize {
    pub train_samples: u64,
    pub test_samples: u64,
    /// Bytes of one stored input sample (1 per pixel for uint8 images, 4 per value for float).
    pub sample_bytes: u64,
}

impl Inputs {
    /// These inputs under the rules the cfg.toml keys they stand for follow: the batch as
    /// `train.batch_size`, the teacher's counts as `teacher.params` and `teacher.buffers`, its
    /// layer list at most [`MAX_LAYER_LIST`] long.
    ///
    /// # Errors
    /// [`EstimateError::Spec`] on those keys; [`EstimateError::Invalid`] on `teacher` for too
    /// many layers and on `dataset` for zero train samples or sample bytes.
    pub(crate) fn check(&self) -> Result<(), EstimateError> {
        if let Some(b) = self.batch {
            limits::within("train.batch_size", b, 1, MAX_BATCH)?;
        }
        if let Some(t) = &self.teacher {
            crate::schema::check_teacher_counts(t.params, t.buffers)?;
            if let Some(n) = t.layers.as_ref().map(Vec::len).filter(|&n| n > MAX_LAYER_LIST) {
                return Err(EstimateError::invalid("teacher", format!("has {n} layers; at most {MAX_LAYER_LIST}")));
            }
        }
        if let Some(d) = self.dataset {
            if d.train_samples == 0 || d.sample_bytes == 0 {
                return Err(EstimateError::invalid("dataset", "train_samples and sample_bytes must be >= 1"));
            }
        }
        Ok(())
    }
}
