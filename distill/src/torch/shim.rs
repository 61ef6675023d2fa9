//! Safe wrappers over `csrc/shim.cpp`: autocast with a chosen dtype on CPU or CUDA, the CUDA
//! caching allocator's statistics (`torch.cuda.max_memory_allocated` and friends), and ATen's
//! fused AdamW kernel; over `csrc/script_names.cpp`: a traced module with named inputs; and over
//! `csrc/cuda_device.cpp`: a CUDA device's compute capability.
use std::ffi::{c_char, c_int, c_void, CStr, CString};

use estimator_wasm::schema::Precision;
use tch::{Device, Tensor};

use crate::host::error::{DistillError, Result};
use crate::torch::precision::{autocast_kind, scalar_type_code};

extern "C" {
    fn distill_free(message: *mut c_char);
    fn distill_name_module_inputs(module: *mut c_void, names: *const *const c_char, n: c_int) -> *mut c_char;
    fn distill_autocast_enter(
        cuda: c_int,
        scalar_type: c_int,
        prev_enabled: *mut c_int,
        prev_type: *mut c_int,
    ) -> *mut c_char;
    fn distill_autocast_exit(cuda: c_int, prev_enabled: c_int, prev_type: c_int) -> *mut c_char;
    fn distill_cuda_memory(device: c_int, out: *mut i64) -> *mut c_char;
    fn distill_cuda_reset_peak(device: c_int) -> *mut c_char;
    fn distill_cuda_mem_info(device: c_int, free: *mut i64, total: *mut i64) -> *mut c_char;
    fn distill_cuda_empty_cache() -> *mut c_char;
    fn distill_cuda_capability(device: c_int, major: *mut c_int, minor: *mut c_int) -> *mut c_char;
    #[allow(clippy::too_many_arguments)]
    fn distill_fused_adamw(
        params: *const *mut torch_sys::C_tensor,
        grads: *const *mut torch_sys::C_tensor,
        exp_avgs: *const *mut torch_sys::C_tensor,
        exp_avg_sqs: *const *mut torch_sys::C_tensor,
        n: c_int,
        step: f64,
        lr: f64,
        beta1: f64,
        beta2: f64,
        weight_decay: f64,
        eps: f64,
    ) -> *mut c_char;
}

/// The shims' error convention (`csrc/shim.cpp`, `csrc/dist_shim.cpp`): NULL on success, else a
/// malloc'd message, taken here (and freed) as the first line of its text.
pub(crate) fn take_message(message: *mut c_char) -> Option<String> {
    if message.is_null() {
        return None;
    }
    // SAFETY: the shim returns either NULL or a NUL-terminated strdup'd string we now own.
    let text = unsafe { CStr::from_ptr(message) }.to_string_lossy().into_owned();
    unsafe { distill_free(message) };
    Some(crate::host::error::first_line(&text))
}

/// Frees a buffer a shim allocated with `malloc` (`distill_free`: `free`).
///
/// # Safety
/// `buffer` is NULL or came from a shim's `malloc`/`strdup` and is not used again.
pub(crate) unsafe fn free_shim_buffer(buffer: *mut c_char) {
    unsafe { distill_free(buffer) };
}

/// Turns the shim's error convention into a `Result`.
fn check(message: *mut c_char) -> Result<()> {
    take_message(message).map_or(Ok(()), |text| Err(DistillError::Torch(text)))
}

/// A TorchScript module made by [`trace_named`], owned here: tch's `CModule` keeps its libtorch
/// pointer to itself, and naming the inputs in memory needs it.
pub struct Traced(*mut torch_sys::CModule_);

impl Drop for Traced {
    fn drop(&mut self) {
        // SAFETY: the pointer came from atm_create_for_tracing and is freed once, here.
        unsafe { torch_sys::atm_free(self.0) }
    }
}

impl Traced {
    /// Writes the module to `path` (`torch.jit.save`'s format).
    ///
    /// # Errors
    /// [`DistillError::Torch`] when libtorch cannot write it.
    pub fn save(&self, path: &std::path::Path) -> Result<()> {
        let path = c_text(path.as_os_str().as_encoded_bytes())?;
        // SAFETY: a live module and a NUL-terminated path that outlives the call.
        unsafe { torch_sys::atm_save(self.0, path.as_ptr()) };
        torch_error()
    }
}

/// libtorch's error of the last torch-sys call on this thread, taken (and freed), as tch's
/// `read_and_clean_error` takes it (tch-0.24 src/wrappers/utils.rs).
fn torch_error() -> Result<()> {
    // SAFETY: torch-sys returns NULL or a malloc'd NUL-terminated string that we now own.
    let message = unsafe { torch_sys::get_and_reset_last_err() };
    if message.is_null() {
        return Ok(());
    }
    let text = unsafe { CStr::from_ptr(message) }.to_string_lossy().into_owned();
    unsafe { libc::free(message.cast()) };
    Err(DistillError::Torch(crate::host::error::first_line(&text)))
}

fn c_text(s: &[u8]) -> Result<CString> {
    CString::new(s).map_err(|_| DistillError::Torch(format!("NUL byte in {}", String::from_utf8_lossy(s))))
}

/// Traces `f` on `inputs` into a module whose `forward` takes them under `names` (as tch's
/// `CModule::create_by_tracing`, tch-0.24 src/wrappers/jit.rs, whose tracer names them
/// `argument_1`, `argument_2`, ..., which keyword calls cannot use; renamed in memory by
/// `csrc/script_names.cpp`, so the module is saved once).
///
/// # Errors
/// [`DistillError::Torch`] when libtorch cannot trace `f`, or `names` are not as many as its
/// inputs.
pub fn trace_named(inputs: &[Tensor], names: &[&str], f: impl FnOnce(&[Tensor]) -> Vec<Tensor>) -> Result<Traced> {
    let c_inputs: Vec<*mut torch_sys::C_tensor> = inputs.iter().map(|t| t.as_ptr().cast_mut()).collect();
    // SAFETY: live tensors; the module name is a NUL-terminated literal.
    let module =
        unsafe { torch_sys::atm_create_for_tracing(c"Student".as_ptr(), c_inputs.as_ptr(), c_inputs.len() as c_int) };
    torch_error()?;
    let traced = Traced(module);
    let outputs = f(inputs);
    let c_outputs: Vec<*mut torch_sys::C_tensor> = outputs.iter().map(|t| t.as_ptr().cast_mut()).collect();
    // SAFETY: the module being traced, live output tensors, a NUL-terminated literal.
    unsafe { torch_sys::atm_end_tracing(module, c"forward".as_ptr(), c_outputs.as_ptr(), c_outputs.len() as c_int) };
    torch_error()?;
    let names = names.iter().map(|n| c_text(n.as_bytes())).collect::<Result<Vec<CString>>>()?;
    let pointers: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    // SAFETY: the traced module (a torch::jit::Module), NUL-terminated strings that outlive the
    // call; the shim copies what it keeps.
    check(unsafe { distill_name_module_inputs(module.cast(), pointers.as_ptr(), pointers.len() as c_int) })?;
    Ok(traced)
}

/// Runs `f` under autocast to `precision` on `device` (PyTorch's `torch.autocast(device,
/// dtype)`, the dtype from [`autocast_kind`]); without autocast (fp32) runs `f` unchanged. Ops on autocast's lists (matmul, conv, linear) then run in
/// 16 bits over fp32 weights; reductions such as softmax stay fp32.
///
/// # Errors
/// [`DistillError::Torch`] when libtorch rejects the device/dtype pair.
pub fn autocast<T>(device: Device, precision: Precision, f: impl FnOnce() -> T) -> Result<T> {
    let Some(dtype) = autocast_kind(precision).and_then(scalar_type_code) else { return Ok(f()) };
    let cuda = c_int::from(device.is_cuda());
    let (mut prev_enabled, mut prev_type) = (0, 0);
    // SAFETY: plain C calls with valid out-pointers; state is thread-local in libtorch.
    check(unsafe { distill_autocast_enter(cuda, dtype, &mut prev_enabled, &mut prev_type) })?;
    let out = f();
    check(unsafe { distill_autocast_exit(cuda, prev_enabled, prev_type) })?;
    Ok(out)
}

/// The CUDA caching allocator's counters for one device, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CudaMemory {
    pub allocated: i64,
    pub peak_allocated: i64,
    pub reserved: i64,
    pub peak_reserved: i64,
    pub ooms: i64,
    pub alloc_retries: i64,
}

/// Reads the allocator statistics of CUDA device `index`.
///
/// # Errors
/// [`DistillError::Torch`] without CUDA (libtorch says "Invalid device argument" or similar).
pub fn cuda_memory(index: usize) -> Result<CudaMemory> {
    let mut out = [0i64; 6];
    // SAFETY: `out` has the 6 slots the shim writes.
    check(unsafe { distill_cuda_memory(index as c_int, out.as_mut_ptr()) })?;
    Ok(CudaMemory {
        allocated: out[0],
        peak_allocated: out[1],
        reserved: out[2],
        peak_reserved: out[3],
        ooms: out[4],
        alloc_retries: out[5],
    })
}

/// (free, total) bytes of CUDA device `index` (`torch.cuda.mem_get_info`).
///
/// # Errors
/// [`DistillError::Torch`] without CUDA.
pub fn cuda_mem_info(index: usize) -> Result<(u64, u64)> {
    let (mut free, mut total) = (0i64, 0i64);
    // SAFETY: two valid out-pointers.
    check(unsafe { distill_cuda_mem_info(index as c_int, &mut free, &mut total) })?;
    Ok((free as u64, total as u64))
}

/// The compute capability (major, minor) of CUDA device `index` (`csrc/cuda_device.cpp`).
///
/// # Errors
/// [`DistillError::Torch`] without CUDA or without such a device.
pub fn cuda_capability(index: usize) -> Result<(u32, u32)> {
    let (mut major, mut minor) = (0 as c_int, 0 as c_int);
    // SAFETY: two valid out-pointers.
    check(unsafe { distill_cuda_capability(index as c_int, &mut major, &mut minor) })?;
    Ok((major.max(0) as u32, minor.max(0) as u32))
}

/// Resets the peak counters of CUDA device `index` (`torch.cuda.reset_peak_memory_stats`).
pub fn cuda_reset_peak(index: usize) -> Result<()> {
    check(unsafe { distill_cuda_reset_peak(index as c_int) })
}

/// Releases cached, unused CUDA blocks (`torch.cuda.empty_cache`).
pub fn cuda_empty_cache() -> Result<()> {
    check(unsafe { distill_cuda_empty_cache() })
}

/// AdamW's hyper-parameters for one [`fused_adamw`] call.
#[derive(Debug, Clone, Copy)]
pub struct AdamW {
    pub lr: f64,
    pub betas: [f64; 2],
    pub eps: f64,
    pub weight_decay: f64,
}

/// One AdamW step of `params[i]` (updated in place, with its moments `exp_avgs[i]` and
/// `exp_avg_sqs[i]`) by `grads[i]`, at optimiser step `step` (1 for the first): ATen's fused
/// kernel `_fused_adamw_` (`aten/src/ATen/native/FusedAdam.cpp` and its CPU/CUDA kernels), one call
/// for the whole list instead of ~9 operators per tensor. It is the update of
/// `torch.optim.AdamW(fused=True)`: decoupled decay `p *= 1 - lr * wd`, then the moments and the
/// bias-corrected step of Loshchilov & Hutter (arXiv:1711.05101). Every tensor must share one
/// dtype and device, and each moment the shape and layout of its parameter.
///
/// # Errors
/// [`DistillError::Torch`] when libtorch rejects the lists (mixed dtypes or devices, shapes).
pub fn fused_adamw(
    params: &[&Tensor],
    grads: &[&Tensor],
    exp_avgs: &[&Tensor],
    exp_avg_sqs: &[&Tensor],
    step: u64,
    h: AdamW,
) -> Result<()> {
    let n = params.len();
    assert!(grads.len() == n && exp_avgs.len() == n && exp_avg_sqs.len() == n, "one of each per parameter");
    let handles = |ts: &[&Tensor]| -> Vec<*mut torch_sys::C_tensor> { ts.iter().map(|t| t.as_ptr() as _).collect() };
    let (p, g, m, v) = (handles(params), handles(grads), handles(exp_avgs), handles(exp_avg_sqs));
    let [beta1, beta2] = h.betas;
    // SAFETY: four arrays of n live tensor handles; the kernel writes the tensors' data only.
    check(unsafe {
        distill_fused_adamw(
            p.as_ptr(),
            g.as_ptr(),
            m.as_ptr(),
            v.as_ptr(),
            n as c_int,
            step as f64,
            h.lr,
            beta1,
            beta2,
            h.weight_decay,
            h.eps,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Kind, Tensor};

    #[test]
    fn bf16_autocast_on_cpu_runs_linear_in_bf16_and_restores_state() {
        let x = Tensor::ones([2, 3], (Kind::Float, Device::Cpu));
        let w = Tensor::ones([4, 3], (Kind::Float, Device::Cpu));
        let y = autocast(Device::Cpu, Precision::Bf16, || x.linear::<Tensor>(&w, None)).unwrap();
        assert_eq!(y.kind(), Kind::BFloat16);
        assert_eq!(y.to_kind(Kind::Float).double_value(&[0, 0]), 3.0);
        // Outside the region everything is fp32 again.
        assert_eq!(x.linear::<Tensor>(&w, None).kind(), Kind::Float);
        let nested = autocast(Device::Cpu, Precision::Fp16, || {
            autocast(Device::Cpu, Precision::Bf16, || x.linear::<Tensor>(&w, None)).unwrap().kind()
        });
        assert_eq!(nested.unwrap(), Kind::BFloat16);
        assert_eq!(autocast(Device::Cpu, Precision::Fp16, || x.linear::<Tensor>(&w, None)).unwrap().kind(), Kind::Half);
        assert_eq!(
            autocast(Device::Cpu, Precision::Fp32, || x.linear::<Tensor>(&w, None)).unwrap().kind(),
            Kind::Float
        );
    }

    #[test]
    fn bf16_autocast_rounds_matmul_inputs_to_bf16_on_cpu() {
        // 1 + 2^-10 is not a bf16 value (8 significant bits): autocast rounds it to 1 before the
        // matmul, so the product is 1 inside and 1 + 2^-10 in fp32 outside.
        let x = Tensor::from_slice(&[1.0f32 + 2f32.powi(-10)]).reshape([1, 1]);
        let w = Tensor::ones([1, 1], (Kind::Float, Device::Cpu));
        let inside = autocast(Device::Cpu, Precision::Bf16, || x.matmul(&w)).unwrap();
        assert_eq!(inside.kind(), Kind::BFloat16);
        assert_eq!(inside.to_kind(Kind::Float).double_value(&[0, 0]), 1.0);
        let outside = x.matmul(&w);
        assert_eq!(outside.kind(), Kind::Float);
        assert_eq!(outside.double_value(&[0, 0]), 1.0 + 2f64.powi(-10));
    }

    /// Without CUDA every statistic is a one-line libtorch error; with it, a 4 MiB tensor moves
    /// `allocated` by exactly 4 MiB and the peak follows.
    #[test]
    fn cuda_statistics_count_an_allocation_or_fail_in_one_line() {
        if !tch::Cuda::is_available() {
            let errors = [
                cuda_memory(0).map(|_| ()),
                cuda_mem_info(0).map(|_| ()),
                cuda_reset_peak(0),
                cuda_capability(0).map(|_| ()),
            ];
            for e in errors {
                let text = e.unwrap_err().to_string();
                assert!(text.starts_with("libtorch: ") && !text.contains('\n'), "{text:?}");
            }
            return;
        }
        cuda_reset_peak(0).unwrap();
        let before = cuda_memory(0).unwrap();
        let t = Tensor::zeros([1 << 20], (Kind::Float, Device::Cuda(0)));
        let after = cuda_memory(0).unwrap();
        assert_eq!(after.allocated - before.allocated, 4 << 20);
        assert!(after.peak_allocated >= after.allocated && after.reserved >= after.allocated);
        drop(t);
        assert_eq!(cuda_memory(0).unwrap().allocated, before.allocated);
        let (free, total) = cuda_mem_info(0).unwrap();
        assert!(0 < free && free <= total);
        let (major, _) = cuda_capability(0).unwrap();
        assert!((3..=20).contains(&major), "compute capability {major}.x");
    }
}
