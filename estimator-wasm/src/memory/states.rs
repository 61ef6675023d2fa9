//! Model states: weights, gradients and optimiser states per precision recipe, optimiser and
//! sharding (`docs/memory-model.md` section 1; ZeRO, Rajbhandari et al. 2020, arXiv:1910.02054).
use serde::Serialize;

use crate::memory::errors::EstimateError;
use crate::memory::runtime::{add, mul};
use crate::schema::dtype::Recipe;
use crate::schema::OptimizerKind;

/// Bytes per trainable parameter element of each model state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PerParam {
    /// The weight as the forward reads it.
    pub weight: u64,
    /// Its gradient (in the weight's dtype).
    pub grad: u64,
    /// Optimiser state: AdamW m and v, or the SGD momentum buffer, plus an fp32 master copy
    /// where the recipe keeps one.
    pub optimizer: u64,
}

impl PerParam {
    /// Bytes per parameter for `recipe` and `optimizer` (`momentum` 0 means plain SGD).
    /// fp32 + AdamW: 4 + 4 + 8 = 16; pure bf16 + AdamW: 2 + 2 + 4 = 8; bf16 with fp32 master
    /// + AdamW: 2 + 2 + 12 = 16 (the ZeRO paper's K = 12).
    pub fn of(recipe: &Recipe, optimizer: OptimizerKind, momentum: f64) -> PerParam {
        let state = recipe.optimizer_state.bytes();
        let moments = match optimizer {
            OptimizerKind::Adamw => 2 * state,
            OptimizerKind::Sgd if momentum > 0.0 => state,
            OptimizerKind::Sgd => 0,
        };
        let master = if recipe.master_copy { 4 } else { 0 };
        PerParam { weight: recipe.weight.bytes(), grad: recipe.weight.bytes(), optimizer: moments + master }
    }

    /// Moment tensors per parameter tensor (2 for AdamW, 1 for SGD with momentum, 0 otherwise),
    /// plus 1 for a master copy.
    pub fn optimizer_tensors(optimizer: OptimizerKind, momentum: f64, recipe: &Recipe) -> u64 {
        let moments = match optimizer {
            OptimizerKind::Adamw => 2,
            OptimizerKind::Sgd if momentum > 0.0 => 1,
            OptimizerKind::Sgd => 0,
        };
        moments + u64::from(recipe.master_copy)
    }
}

/// Model-state bytes on one GPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ModelStates {
    pub weights: u64,
    pub grads: u64,
    pub optimizer: u64,
}

impl ModelStates {
    pub fn total(&self) -> Result<u64, EstimateError> {
        add(add(self.weights, self.grads, "model states")?, self.optimizer, "model states")
    }
}

/// Model states per GPU for `params` parameters over `n` data-parallel GPUs at ZeRO `stage`
/// (0 = replicas, as DDP): stage 1 shards the optimiser states, 2 also the gradients, 3 also
/// the weights, each as a flat partition of `ceil(params / n)` elements.
///
/// # Errors
/// [`EstimateError::Overflow`] past 2^64 bytes.
pub fn zero_states(params: u64, per: PerParam, n: u64, stage: u64) -> Result<ModelStates, EstimateError> {
    let shard = params.div_ceil(n.max(1));
    let pick = |sharded: bool| if sharded { shard } else { params };
    Ok(ModelStates {
        weights: mul(pick(stage >= 3), per.weight, "weights")?,
        grads: mul(pick(stage >= 2), per.grad, "gradients")?,
        optimizer: mul(pick(stage >= 1), per.optimizer, "optimizer states")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Precision;

    #[test]
    fn bytes_per_parameter_per_recipe() {
        let adam = |p| PerParam::of(&Recipe::student(p), OptimizerKind::Adamw, 0.9);
        assert_eq!(adam(Precision::Fp32), PerParam { weight: 4, grad: 4, optimizer: 8 });
        assert_eq!(adam(Precision::Bf16), PerParam { weight: 4, grad: 4, optimizer: 8 });
        assert_eq!(adam(Precision::PureBf16), PerParam { weight: 2, grad: 2, optimizer: 4 });
        assert_eq!(adam(Precision::Bf16Master), PerParam { weight: 2, grad: 2, optimizer: 12 });
        let sgd = |m| PerParam::of(&Recipe::student(Precision::Fp32), OptimizerKind::Sgd, m);
        assert_eq!(sgd(0.9).optimizer, 4);
        assert_eq!(sgd(0.0).optimizer, 0);
    }

    /// ZeRO paper, Figure 1: a 7.5B model on N_d = 64 GPUs with the 16-byte recipe (2 + 2 + 12).
    #[test]
    fn zero_paper_figure_one() {
        let psi = 7_500_000_000;
        let per = PerParam { weight: 2, grad: 2, optimizer: 12 };
        let gb = |stage| zero_states(psi, per, 64, stage).unwrap().total().unwrap();
        assert_eq!(gb(0), 120_000_000_000);
        assert_eq!(gb(1), 31_406_250_000); // 31.4 GB
        assert_eq!(gb(2), 16_640_625_000); // 16.6 GB
        assert_eq!(gb(3), 1_875_000_000); // 1.9 GB
    }

    #[test]
    fn a_trillion_parameters_fit_in_u64_and_more_overflow() {
        let per = PerParam { weight: 4, grad: 4, optimizer: 8 };
        assert_eq!(zero_states(1_000_000_000_000, per, 1, 0).unwrap().total().unwrap(), 16_000_000_000_000);
        assert!(matches!(zero_states(u64::MAX / 2, per, 1, 0), Err(EstimateError::Overflow { .. })));
    }
}
