//! What a plan reports besides bytes: parameter counts, the pruning summary and notes on
//! what is priced and how.
use crate::memory::breakdown::{Counts, Pruning};
use crate::memory::compiled::Summary;
use crate::memory::errors::EstimateError;
use crate::memory::inputs::TeacherModel;
use crate::memory::runtime::mul;
use crate::memory::setup::Compile;
use crate::memory::stage_plan::Sharding;
use crate::memory::states::{ModelStates, PerParam};
use crate::schema::arch::{self, Layer};
use crate::schema::{Config, PruneMethod};

impl Compile<'_> {
    /// The counts of the student's `layers` and of `teacher`, the pruning summary, and the
    /// notes gathered while compiling.
    ///
    /// # Errors
    /// The structured student's expansion errors; [`EstimateError::Overflow`].
    pub(crate) fn summary(
        self,
        layers: &[Layer],
        teacher: Option<&TeacherModel>,
        sharding: &Sharding,
    ) -> Result<Summary, EstimateError> {
        let config = self.config;
        let counts = Counts {
            student: arch::param_count(layers),
            student_buffers: layers.iter().fold(0u64, |a, l| a.saturating_add(l.op.buffers())),
            teacher: teacher.map_or(0, |t| t.params),
            teacher_buffers: teacher.map_or(0, |t| t.buffers),
        };
        let pruning = match &config.prune {
            Some(pr) => Some(pruning(config, pr, sharding.per, sharding.mask_bytes, layers)?),
            None => None,
        };
        Ok(Summary { counts, pruning, notes: self.notes })
    }
}

/// The pruning summary: masks of magnitude pruning, the shrunk student of structured pruning.
fn pruning(
    config: &Config,
    pr: &crate::schema::PruneSpec,
    per: PerParam,
    mask_bytes: u64,
    layers: &[Layer],
) -> Result<Pruning, EstimateError> {
    let prunable = layers.iter().fold(0u64, |acc, l| acc.saturating_add(l.op.prunable()));
    let dense = arch::param_count(layers);
    let (final_params, nonzero) = match pr.method {
        PruneMethod::Magnitude => {
            let zeroed = (prunable as f64 * pr.sparsity).floor() as u64;
            (dense, dense.saturating_sub(zeroed))
        }
        PruneMethod::Structured => {
            let shrunk = arch::layers(&arch::structured(&config.student, pr.sparsity), &config.data)?;
            let p = arch::param_count(&shrunk);
            (p, p)
        }
    };
    Ok(Pruning {
        method: pr.method,
        sparsity: pr.sparsity,
        mask_bytes: mul(prunable, mask_bytes, "pruning masks")?,
        dense_params: dense,
        final_params,
        nonzero_params: nonzero,
        final_model_states: ModelStates {
            weights: mul(final_params, per.weight, "weights")?,
            grads: mul(final_params, per.grad, "gradients")?,
            optimizer: mul(final_params, per.optimizer, "optimizer states")?,
        },
    })
}
