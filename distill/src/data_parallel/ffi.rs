//! The C functions of `csrc/dist_shim.cpp`, which return errors as the other shim does
//! ([`crate::torch::shim::take_message`]).
use std::ffi::{c_char, c_int, c_void};

use crate::host::error::{DistillError, Result};

/// libtorch's handle of a tensor, as tch holds it (`at::Tensor*`).
pub type TensorPtr = *mut torch_sys::C_tensor;

extern "C" {
    pub fn dist_group_new(
        addr: *const c_char,
        port: c_int,
        rank: c_int,
        world: c_int,
        timeout_ms: i64,
        agent_store: c_int,
        prefix: *const c_char,
        nccl_device: c_int,
        ifnames: *const c_char,
        out: *mut *mut c_void,
    ) -> *mut c_char;
    pub fn dist_group_free(group: *mut c_void);
    pub fn dist_group_backend(group: *mut c_void, cuda: c_int, out: *mut *mut c_char) -> *mut c_char;
    pub fn dist_broadcast(group: *mut c_void, ts: *const TensorPtr, n: c_int, root: c_int) -> *mut c_char;
    pub fn dist_allreduce(group: *mut c_void, t: TensorPtr, op: c_int) -> *mut c_char;
    pub fn dist_barrier(group: *mut c_void) -> *mut c_char;
    pub fn dist_sum_over_ranks(group: *mut c_void, t: TensorPtr, out: *mut TensorPtr) -> *mut c_char;
    pub fn dist_roll_call(group: *mut c_void, wait_ms: i64, present: *mut c_int) -> *mut c_char;
    pub fn dist_reducer_new(
        group: *mut c_void,
        params: *const TensorPtr,
        n: c_int,
        bucket_cap_bytes: i64,
        grad_as_bucket_view: c_int,
        out: *mut *mut c_void,
    ) -> *mut c_char;
    pub fn dist_reducer_prepare_forward(reducer: *mut c_void) -> *mut c_char;
    pub fn dist_reducer_prepare_backward(reducer: *mut c_void) -> *mut c_char;
    pub fn dist_reducer_free(reducer: *mut c_void) -> *mut c_char;
    pub fn dist_zero_grad(ts: *const TensorPtr, n: c_int) -> *mut c_char;
}

/// `Err` with the shim's message (prefixed by `what`) when `message` is not NULL.
pub fn check(message: *mut c_char, what: &str) -> Result<()> {
    crate::torch::shim::take_message(message)
        .map_or(Ok(()), |text| Err(DistillError::Distributed(format!("{what}: {text}"))))
}

/// The handles of `tensors`, for an array argument.
pub fn handles(tensors: &[&tch::Tensor]) -> Vec<TensorPtr> {
    // The shim writes the tensors' data and gradients, never the handles.
    tensors.iter().map(|t| t.as_ptr() as TensorPtr).collect()
}
