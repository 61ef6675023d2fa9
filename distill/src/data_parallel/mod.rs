//! Data-parallel training on libtorch's c10d engine (`csrc/dist_shim.cpp`): who this process is
//! in the job ([`env`], read from torchrun's, Slurm's or Open MPI's variables), its process group
//! ([`group`], Gloo over TCP), and the DDP Reducer that averages gradients during the backward
//! ([`ddp`]), and SyncBatchNorm ([`sync_batch_norm`]). A job of one process creates none of them.
//! [`strategy`] resolves which of the two this process is, once: the binary reads the launcher's
//! environment ([`Launch`]), the run joins the group ([`Launch::join`]) and the trainer holds the
//! [`Strategy`], which alone branches on ranks.
pub mod ddp;
pub mod env;
mod ffi;
pub mod group;
pub mod replicas;
pub mod strategy;
pub mod sync_batch_norm;

pub use ddp::Ddp;
pub use env::DistEnv;
pub use group::{Backend, ProcessGroup};
pub use strategy::{Launch, Strategy};

use crate::host::error::{DistillError, Result};
use group::DEFAULT_TIMEOUT;

/// The process group of the data-parallel job `env` this process was launched into (torchrun,
/// Slurm, Open MPI: [`DistEnv`]) and this rank's training device, or `None` and `device` when it runs
/// alone.
///
/// On CUDA each rank trains on `cuda:<LOCAL_RANK mod the GPUs it sees>` (torchrun's convention,
/// and device 0 where a launcher gives each process one GPU through `CUDA_VISIBLE_DEVICES`)
/// unless `--device cuda:N` (`named`) picks one, with NCCL for the GPU's tensors.
/// `DISTILL_DIST_BACKEND=gloo` keeps Gloo for them (several ranks sharing one GPU, which NCCL
/// refuses), and `nccl` is refused on the CPU (NCCL moves CUDA tensors only). Joining, and every
/// collective after, waits at most `DISTILL_DIST_TIMEOUT_S` seconds (default [`DEFAULT_TIMEOUT`])
/// for the other ranks.
///
/// # Errors
/// [`DistillError::Usage`] for a malformed timeout or backend, NCCL on the CPU; the group's
/// errors.
pub fn join_job(
    env: Option<&DistEnv>,
    device: tch::Device,
    named: &str,
) -> Result<(Option<ProcessGroup>, tch::Device)> {
    let Some(env) = env else { return Ok((None, device)) };
    let device = match device {
        tch::Device::Cuda(_) if !named.starts_with("cuda:") => {
            tch::Device::Cuda(env.local_rank % (tch::Cuda::device_count().max(1) as usize))
        }
        other => other,
    };
    let timeout = match std::env::var("DISTILL_DIST_TIMEOUT_S") {
        Ok(v) => std::time::Duration::from_secs_f64(v.parse::<f64>().ok().filter(|s| *s > 0.0).ok_or_else(|| {
            DistillError::Usage(format!("DISTILL_DIST_TIMEOUT_S={v:?} is not a positive number of seconds"))
        })?),
        Err(_) => DEFAULT_TIMEOUT,
    };
    let named = std::env::var("DISTILL_DIST_BACKEND").map(|b| b.trim().to_ascii_lowercase());
    let backend = match (named.as_deref(), device) {
        (Ok("gloo"), _) | (Err(_), tch::Device::Cpu) => Backend::Gloo,
        (Ok("nccl") | Err(_), tch::Device::Cuda(gpu)) => Backend::Nccl { device: gpu },
        (Ok("nccl"), _) => {
            return Err(DistillError::Usage(
                "DISTILL_DIST_BACKEND=nccl with --device cpu: NCCL moves CUDA tensors only; train with --device cuda, \
                 or unset it for Gloo"
                    .into(),
            ))
        }
        (Ok(other), _) => {
            return Err(DistillError::Usage(format!("DISTILL_DIST_BACKEND={other:?}: use gloo or nccl (or unset it)")))
        }
        (Err(_), _) => Backend::Gloo,
    };
    Ok((Some(ProcessGroup::join(env, timeout, backend)?), device))
}
