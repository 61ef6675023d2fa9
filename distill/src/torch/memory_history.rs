//! `--cuda-memory-history FILE`: PyTorch's own record of the CUDA caching allocator
//! (`csrc/memory_history.cpp`): every segment it opens and every block it hands out and takes
//! back, in order, kept from the start of the run and written at its end (finished, failed or
//! panicked) as the pickled snapshot that `torch.cuda.memory._snapshot()` returns. That is the
//! ground truth to hold `distill plan`'s replay of the allocator against (docs/memory-model.md,
//! section 7c; `bench/gpu/allocator_history.py` turns it into the request stream that
//! `estimator-wasm`'s `replay_requests` example replays, and https://pytorch.org/memory_viz
//! draws it). With `DISTILL_CUDA_MEMORY_STACKS=1` each event also keeps its C++ stack.
use std::ffi::{c_char, c_int};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::host::durable::write_atomic;
use crate::host::error::{DistillError, Result};
use crate::torch::shim::{free_shim_buffer, take_message};

extern "C" {
    fn distill_cuda_memory_history_start(cpp_stacks: c_int) -> *mut c_char;
    fn distill_cuda_memory_snapshot(bytes: *mut *mut c_char, len: *mut i64) -> *mut c_char;
}

/// A recording under way, to be written to its file by [`History::write`].
#[derive(Debug)]
pub struct History {
    path: PathBuf,
}

/// Starts recording the allocator's history for `path`, of a run on `device` (`--device`, as
/// parsed by the run).
///
/// # Errors
/// [`DistillError::Usage`] when the run is not on CUDA (`--device cpu`, or `auto` where
/// libtorch sees no CUDA device); [`DistillError::Torch`] when libtorch refuses to record.
pub fn start(path: &Path, device: tch::Device) -> Result<History> {
    if !device.is_cuda() {
        return Err(DistillError::Usage(format!(
            "--cuda-memory-history {}: the run is on the cpu (--device cpu, or auto without a CUDA device), and the \
             history is the CUDA caching allocator's; drop the flag or run on a GPU",
            path.display()
        )));
    }
    let stacks = std::env::var("DISTILL_CUDA_MEMORY_STACKS").is_ok_and(|v| v == "1");
    // SAFETY: no pointers cross; the message (if any) is taken and freed.
    let message = unsafe { distill_cuda_memory_history_start(c_int::from(stacks)) };
    take_message(message).map_or(Ok(History { path: path.to_path_buf() }), |m| Err(DistillError::Torch(m)))
}

impl History {
    /// Writes the history recorded so far to its file, through a temp file and a rename.
    ///
    /// # Errors
    /// [`DistillError::Torch`] when libtorch cannot make the snapshot, [`DistillError::Io`]
    /// naming the file when it cannot be written.
    pub fn write(self) -> Result<PathBuf> {
        let (mut bytes, mut len): (*mut c_char, i64) = (std::ptr::null_mut(), 0);
        // SAFETY: two valid out-pointers; on success `bytes` is a malloc'd buffer of `len` bytes,
        // written from where it lies (a long run's history is large) and then freed.
        let message = unsafe { distill_cuda_memory_snapshot(&mut bytes, &mut len) };
        if let Some(m) = take_message(message) {
            return Err(DistillError::Torch(format!("--cuda-memory-history {}: {m}", self.path.display())));
        }
        let pickled = unsafe { std::slice::from_raw_parts(bytes.cast::<u8>(), usize::try_from(len).unwrap_or(0)) };
        let written = write_atomic(&self.path, |f| f.write_all(pickled));
        unsafe { free_shim_buffer(bytes) };
        written.map(|()| self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_run_is_refused_with_the_flag_and_the_fix() {
        let err = start(Path::new("h.pickle"), tch::Device::Cpu).unwrap_err().to_string();
        assert_eq!(
            err,
            "--cuda-memory-history h.pickle: the run is on the cpu (--device cpu, or auto without a CUDA device), \
             and the history is the CUDA caching allocator's; drop the flag or run on a GPU"
        );
    }
}
