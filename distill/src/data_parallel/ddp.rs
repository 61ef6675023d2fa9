//! DistributedDataParallel for a tch student: parameters and buffers copied from rank 0 at the
//! start, gradients averaged by c10d's Reducer in buckets while autograd runs the backward (so
//! communication overlaps computation), and BatchNorm buffers as rank 0 has them.
//!
//! `torch.nn.parallel.DistributedDataParallel` re-sends rank 0's buffers before every forward
//! (`broadcast_buffers`). A training-mode BatchNorm normalises with the batch's statistics and
//! only updates its running ones, so between evaluations the buffers change nothing: rank 0's
//! evolve from its own batches either way. They are sent when they are read instead
//! ([`Ddp::sync_buffers`]: before an evaluation and a checkpoint), the same values for one
//! collective per epoch instead of one per step (each a round trip, ~1 ms on loopback Gloo).
//!
//! The Reducer hooks the parameters' gradient accumulators, so the backward must accumulate into
//! `.grad` (`Tensor::f_backward`), not return gradients (`autograd::grad`), which runs no
//! accumulator: the step's data-parallel path does so ([`crate::train::step`]).
use std::ffi::c_void;

use tch::Tensor;

use super::ffi;
use super::group::ProcessGroup;
use crate::host::error::Result;

/// DDP's `bucket_cap_mb` default: 25 MiB.
pub const BUCKET_CAP_BYTES: i64 = 25 * 1024 * 1024;

/// The Reducer of one student's parameters in one process group.
pub struct Ddp<'g> {
    group: &'g ProcessGroup,
    reducer: *mut c_void,
    params: Vec<Tensor>,
    buffers: Vec<Tensor>,
}

impl<'g> Ddp<'g> {
    /// Sends rank 0's `params` and `buffers` (in the same order on every rank: tch's trainable
    /// variables sorted by name, and the buffers sorted by name) to every rank, then builds the
    /// Reducer over `params` with gradients as views into its buckets.
    ///
    /// # Errors
    /// [`crate::DistillError::Distributed`] from the broadcast or the Reducer.
    pub fn new(group: &'g ProcessGroup, params: &[Tensor], buffers: &[Tensor]) -> Result<Ddp<'g>> {
        let params: Vec<Tensor> = params.iter().map(Tensor::shallow_clone).collect();
        let buffers: Vec<Tensor> = buffers.iter().map(Tensor::shallow_clone).collect();
        tch::no_grad(|| {
            let all: Vec<&Tensor> = params.iter().chain(&buffers).collect();
            group.broadcast(&all, 0)
        })?;
        let handles = ffi::handles(&params.iter().collect::<Vec<_>>());
        let mut reducer = std::ptr::null_mut();
        // SAFETY: the handles point at live parameters; the Reducer keeps its own references.
        let message = unsafe {
            ffi::dist_reducer_new(
                group.handle(),
                handles.as_ptr(),
                handles.len() as i32,
                BUCKET_CAP_BYTES,
                1,
                &mut reducer,
            )
        };
        ffi::check(message, &format!("rank {}: building the DDP Reducer", group.rank))?;
        Ok(Ddp { group, reducer, params, buffers })
    }

    /// Before a step's forward: gradients dropped (set to none: tch's zero_grad would detach the
    /// bucket views in place, which libtorch refuses), and the Reducer told a forward comes (it
    /// re-buckets by the backward's order after the first step).
    ///
    /// # Errors
    /// [`crate::DistillError::Distributed`] when a peer is gone.
    pub fn before_forward(&self) -> Result<()> {
        let handles = ffi::handles(&self.params.iter().collect::<Vec<_>>());
        // SAFETY: live parameters.
        ffi::check(unsafe { ffi::dist_zero_grad(handles.as_ptr(), handles.len() as i32) }, "zero_grad")?;
        // SAFETY: the Reducer is live until drop.
        self.group.check(unsafe { ffi::dist_reducer_prepare_forward(self.reducer) }, "preparing the forward")
    }

    /// Before the backward: arms the hooks that all-reduce each bucket once its gradients are in.
    /// The backward's errors come from those all-reduces too: see [`Ddp::backward_error`].
    ///
    /// # Errors
    /// [`crate::DistillError::Distributed`] from the Reducer.
    pub fn before_backward(&self) -> Result<()> {
        // SAFETY: the Reducer is live until drop.
        self.group.check(unsafe { ffi::dist_reducer_prepare_backward(self.reducer) }, "preparing the backward")
    }

    /// Averages `grads` (aligned with the parameters, undefined where a parameter got none),
    /// computed outside the Reducer by a step of several backward passes, and returns the
    /// averages as [`Ddp::grads`]. One backward of the surrogate `sum_i sum(p_i * g_i)`, whose
    /// gradient in `p_i` is exactly `g_i`, runs every parameter's accumulator once, so the
    /// Reducer all-reduces its buckets as after a plain backward (without overlapping the
    /// step's computation). Call [`Ddp::before_forward`] before the step, as for a plain one.
    ///
    /// # Errors
    /// [`crate::DistillError::Distributed`] when a peer is gone.
    pub fn average(&self, grads: &[Tensor]) -> Result<Vec<Tensor>> {
        debug_assert_eq!(grads.len(), self.params.len());
        let root = self
            .params
            .iter()
            .zip(grads)
            .filter(|(_, g)| g.defined())
            .map(|(p, g)| (p * g.detach()).sum(tch::Kind::Float))
            .reduce(|a, b| a + b);
        self.before_backward()?;
        if let Some(root) = root {
            root.f_backward().map_err(|e| self.backward_error(e))?;
        }
        Ok(self.grads())
    }

    /// Sends rank 0's buffers to every rank (before an evaluation or a checkpoint, so every rank
    /// evaluates the same student and rank 0 saves what all hold).
    ///
    /// # Errors
    /// [`crate::DistillError::Distributed`] when a peer is gone.
    pub fn sync_buffers(&self) -> Result<()> {
        tch::no_grad(|| self.group.broadcast(&self.buffers.iter().collect::<Vec<_>>(), 0))
    }

    /// The parameters and then the buffers, in the order every rank holds them.
    pub fn tensors(&self) -> Vec<Tensor> {
        self.params.iter().chain(&self.buffers).map(Tensor::shallow_clone).collect()
    }

    /// The averaged gradients after the backward, aligned with the parameters (undefined where
    /// a parameter got none).
    pub fn grads(&self) -> Vec<Tensor> {
        self.params.iter().map(Tensor::grad).collect()
    }

    /// A backward's error under the Reducer, as one line naming this rank and the ranks that
    /// are gone ([`ProcessGroup::failure`]: a peer that is gone fails the bucket all-reduce).
    pub fn backward_error(&self, e: tch::TchError) -> crate::DistillError {
        let text = e.to_string();
        let first = text.lines().next().unwrap_or_default().replace("Internal torch error: ", "");
        self.group.failure("gradient all-reduce", &first)
    }

    pub fn group(&self) -> &ProcessGroup {
        self.group
    }
}

impl Drop for Ddp<'_> {
    fn drop(&mut self) {
        // SAFETY: made by dist_reducer_new, freed once; an error here has nowhere to go.
        let message = unsafe { ffi::dist_reducer_free(self.reducer) };
        let _ = ffi::check(message, "freeing the Reducer");
    }
}
