//! The one door of the trainer to libtorch's autograd engine: [`run_backward`], refused for a
//! root without a graph.
//!
//! tch's `f_run_backward` hands the engine the root's gradient edge unchecked; a root that
//! requires no gradient has none, and the engine dereferences it (SIGSEGV in
//! `Engine::compute_dependencies`, exit 139, no message, the `.partial` folder left). A loss
//! has no graph when it depends on no trainable parameter of the student: `kd.alpha = 0`
//! (the label term alone) on data without labels (an embedding objective's), a student with
//! nothing trainable, or an objective that ignores the student's output.
use tch::Tensor;

use crate::host::error::{DistillError, Result};

/// The gradients of `root` (a 0-dim loss) with respect to `wrt`, aligned with them
/// (undefined where one is not reached).
///
/// # Errors
/// [`DistillError::NothingToTrain`] when `root` has no graph; [`DistillError::Torch`] when
/// libtorch fails.
pub fn run_backward(root: &Tensor, wrt: &[&Tensor]) -> Result<Vec<Tensor>> {
    if !root.requires_grad() {
        return Err(DistillError::NothingToTrain);
    }
    Ok(Tensor::f_run_backward(&[root], wrt, false, false)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::data::ModelInput;
    use crate::train::objective::{Distance, EmbeddingKd};
    use crate::train::step::{forward_backward, param_segments, StepBatch, StepConfig};
    use estimator_wasm::schema::{Config, Precision};
    use tch::{nn::VarStore, Device, Kind};

    #[test]
    fn a_root_without_a_graph_is_refused_not_handed_to_libtorch() {
        let w = Tensor::ones([2], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        let e = run_backward(&Tensor::zeros([], (Kind::Float, Device::Cpu)), &[&w]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "nothing to train: the loss depends on no trainable parameter of the student (kd.alpha = 0 leaves the \
             label term alone, and this data has no labels): set kd.alpha > 0"
        );
        let g = run_backward(&(&w * 3.0).sum(Kind::Float), &[&w]).unwrap();
        assert_eq!(Vec::<f32>::try_from(&g[0]).unwrap(), [3.0, 3.0]);
    }

    /// An embedding objective at alpha 0 (no label term) through a whole step, with and without
    /// checkpointed segments: the error, where libtorch crashed the process (exit 139).
    #[test]
    fn a_step_whose_loss_has_no_graph_fails_with_the_reason() {
        let _guard = crate::torch::test_rng::lock();
        let spec = Config::from_toml_str(
            "[data]\ninput_shape = [6]\nclasses = 4\n[student]\nfamily = \"mlp\"\nhidden = [5, 3]\n",
        )
        .unwrap();
        let vs = VarStore::new(Device::Cpu);
        let student = crate::student::Student::new(&vs.root(), &spec).unwrap();
        let mut names: Vec<String> = vs.variables().into_keys().collect();
        names.sort();
        let vars = vs.variables();
        let params: Vec<&Tensor> = names.iter().map(|n| &vars[n]).collect();
        let n = student.block_count();
        let input = ModelInput::new(Tensor::ones([3, 6], (Kind::Float, Device::Cpu)));
        let batch = StepBatch { input: &input, labels: None, soft: None, step: 0, weight: 1.0, teacher_hidden: &[] };
        #[allow(clippy::single_range_in_vec_init)]
        for segments in [vec![0..n], vec![0..1, 1..n]] {
            let cfg = StepConfig {
                device: Device::Cpu,
                precision: Precision::Fp32,
                objective: &EmbeddingKd { distance: Distance::Mse, alpha: 0.0 },
                seed: 0,
                segments: &segments,
                param_segment: &param_segments(&student, &names, &segments, None),
                recompute: true,
                ddp: None,
                sync_batch_norm: None,
                loss_chunk: None,
                fused_head: None,
                hidden: None,
            };
            let e = forward_backward(&cfg, &student, &params, &batch, None, &|| None).err().unwrap();
            assert!(matches!(e, DistillError::NothingToTrain), "{segments:?}: {e}");
        }
    }
}
