//! Dynamic loss scaling for fp16 training, with `torch.amp.GradScaler` semantics
//! (`torch/amp/grad_scaler.py`): the loss is multiplied by `scale` before backward; the
//! gradients are unscaled and checked for inf/NaN; a step with any non-finite gradient is skipped
//! and the scale halves; after `growth_interval` clean steps in a row it doubles. A non-finite
//! loss counts as a non-finite gradient (its gradients are NaN or meaningless), so it skips the
//! step too instead of stopping the run; the trainer stops only after [`MAX_CONSECUTIVE_SKIPS`]
//! skips in a row.
//!
//! Built on libtorch's `_amp_foreach_non_finite_check_and_unscale_` (single-tensor form) and
//! `_amp_update_scale_`, which have CPU and CUDA kernels.
use tch::{Device, Kind, Tensor};

use crate::host::error::Result;

#[derive(Debug)]
pub struct GradScaler {
    /// Current scale, fp32 [1] on the training device.
    scale: Tensor,
    /// Clean steps since the last change of scale, int32 [1].
    growth_tracker: Tensor,
    growth_factor: f64,
    backoff_factor: f64,
    growth_interval: i64,
}

/// PyTorch's defaults: initial scale 2^16, x2 after 2000 clean steps, x0.5 on overflow.
pub const INITIAL_SCALE: f64 = 65536.0;
pub const GROWTH_INTERVAL: i64 = 2000;

/// Skipped steps in a row after which fp16 training stops: 17 halvings take the initial scale
/// 2^16 to 2^-1, and a scale below 1 no longer magnifies anything, so the overflow comes from
/// the data, the learning rate or fp16's range, not from the scale (PyTorch's `GradScaler` would
/// keep skipping for ever).
pub const MAX_CONSECUTIVE_SKIPS: u64 = 17;

impl GradScaler {
    pub fn new(device: Device) -> GradScaler {
        GradScaler::with(device, INITIAL_SCALE, GROWTH_INTERVAL)
    }

    pub fn with(device: Device, initial: f64, growth_interval: i64) -> GradScaler {
        GradScaler {
            scale: Tensor::from_slice(&[initial as f32]).to_device(device),
            growth_tracker: Tensor::zeros([1], (Kind::Int, device)),
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval,
        }
    }

    /// The current scale.
    pub fn scale(&self) -> f64 {
        self.scale.double_value(&[0])
    }

    /// `loss * scale`, the tensor to back-propagate.
    pub fn scaled(&self, loss: &Tensor) -> Tensor {
        loss * &self.scale
    }

    /// Unscales `grads` in place, updates the scale, and returns whether the optimiser may step
    /// (false: `loss_finite` is false or a gradient held inf/NaN; the step is skipped, which the
    /// caller counts (`LoopState`), and the scale backs off).
    pub fn unscale_and_update(&mut self, grads: &mut [Tensor], loss_finite: bool) -> Result<bool> {
        let flag = if loss_finite { 0.0f32 } else { 1.0 };
        let mut found_inf = Tensor::from_slice(&[flag]).to_device(self.scale.device());
        let inv_scale = self.scale.reciprocal();
        for g in grads.iter_mut().filter(|g| g.defined()) {
            g.f_internal_amp_non_finite_check_and_unscale(&mut found_inf, &inv_scale)?;
        }
        let clean = found_inf.double_value(&[0]) == 0.0;
        let _ = self.scale.f_internal_amp_update_scale_(
            &self.growth_tracker,
            &found_inf,
            self.growth_factor,
            self.backoff_factor,
            self.growth_interval,
        )?;
        Ok(clean)
    }

    /// (scale, growth tracker) for a checkpoint.
    pub fn state(&self) -> (Tensor, Tensor) {
        (self.scale.shallow_clone(), self.growth_tracker.shallow_clone())
    }

    /// Restores a checkpointed state.
    pub fn load_state(&mut self, scale: &Tensor, growth_tracker: &Tensor) {
        let device = self.scale.device();
        self.scale = scale.to_device(device).to_kind(Kind::Float);
        self.growth_tracker = growth_tracker.to_device(device).to_kind(Kind::Int);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grads(values: &[f32]) -> Vec<Tensor> {
        vec![Tensor::from_slice(values), Tensor::from_slice(&[1.0f32, 2.0])]
    }

    /// The scaler and the steps it skipped (the trainer counts them in `LoopState`).
    struct Counted {
        scaler: GradScaler,
        skipped_steps: u64,
    }

    impl Counted {
        fn new(scaler: GradScaler) -> Counted {
            Counted { scaler, skipped_steps: 0 }
        }

        fn unscale_and_update(&mut self, grads: &mut [Tensor], loss_finite: bool) -> Result<bool> {
            let clean = self.scaler.unscale_and_update(grads, loss_finite)?;
            self.skipped_steps += u64::from(!clean);
            Ok(clean)
        }

        fn scale(&self) -> f64 {
            self.scaler.scale()
        }
    }

    #[test]
    fn unscales_clean_gradients_and_grows_after_the_interval() {
        let mut s = Counted::new(GradScaler::with(Device::Cpu, 8.0, 3));
        for step in 1..=3 {
            let mut g = grads(&[8.0, 16.0]);
            assert!(s.unscale_and_update(&mut g, true).unwrap());
            assert_eq!(Vec::<f32>::try_from(&g[0]).unwrap(), [1.0, 2.0]);
            assert_eq!(Vec::<f32>::try_from(&g[1]).unwrap(), [0.125, 0.25]);
            // Grows x2 exactly when the 3rd clean step in a row completes.
            assert_eq!(s.scale(), if step < 3 { 8.0 } else { 16.0 }, "step {step}");
        }
        assert_eq!(s.skipped_steps, 0);
    }

    #[test]
    fn overflow_skips_the_step_and_backs_off() {
        let mut s = Counted::new(GradScaler::new(Device::Cpu));
        assert_eq!(s.scale(), 65536.0);
        let mut g = grads(&[1.0, f32::INFINITY]);
        assert!(!s.unscale_and_update(&mut g, true).unwrap());
        assert_eq!(s.scale(), 32768.0);
        let mut g = grads(&[f32::NAN, 1.0]);
        assert!(!s.unscale_and_update(&mut g, true).unwrap());
        assert_eq!(s.scale(), 16384.0);
        assert_eq!(s.skipped_steps, 2);
        // A clean step after an overflow restarts the growth count; scale holds.
        let mut g = grads(&[1.0, 1.0]);
        assert!(s.unscale_and_update(&mut g, true).unwrap());
        assert_eq!(s.scale(), 16384.0);
    }

    #[test]
    fn a_non_finite_loss_skips_even_with_finite_gradients() {
        let mut s = Counted::new(GradScaler::with(Device::Cpu, 8.0, 2));
        let mut g = grads(&[8.0, 16.0]);
        assert!(!s.unscale_and_update(&mut g, false).unwrap());
        assert_eq!((s.scale(), s.skipped_steps), (4.0, 1));
        // The growth count restarted: two clean steps are needed to double.
        assert!(s.unscale_and_update(&mut grads(&[1.0, 1.0]), true).unwrap());
        assert_eq!(s.scale(), 4.0);
    }

    #[test]
    fn overflow_resets_the_growth_count() {
        let mut s = GradScaler::with(Device::Cpu, 4.0, 2);
        assert!(s.unscale_and_update(&mut grads(&[1.0, 1.0]), true).unwrap());
        assert!(!s.unscale_and_update(&mut grads(&[f32::INFINITY, 1.0]), true).unwrap());
        assert_eq!(s.scale(), 2.0);
        assert!(s.unscale_and_update(&mut grads(&[1.0, 1.0]), true).unwrap());
        assert_eq!(s.scale(), 2.0, "one clean step since the overflow is not enough");
        assert!(s.unscale_and_update(&mut grads(&[1.0, 1.0]), true).unwrap());
        assert_eq!(s.scale(), 4.0);
    }
}
