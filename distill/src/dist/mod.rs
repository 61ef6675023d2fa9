//! Data-parallel training on libtorch's c10d engine (`csrc/dist_shim.cpp`): who this process is
//! in the job ([`env`], read from torchrun's, Slurm's or Open MPI's variables), its process group
//! ([`group`], Gloo over TCP), and the DDP Reducer that averages gradients during the backward
//! ([`ddp`]), and SyncBatchNorm ([`sync_batch_norm`]). A job of one process creates none of them.
pub mod ddp;
pub mod env;
mod ffi;
pub mod group;
pub mod replicas;
pub mod sync_batch_norm;

pub use ddp::Ddp;
pub use env::DistEnv;
pub use group::ProcessGroup;

use crate::error::{DistillError, Result};
use group::DEFAULT_TIMEOUT;

/// The process group of the data-parallel job this process was launched into (torchrun, Slurm,
/// Open MPI: [`DistEnv`]), or `None` when it runs alone.
///
/// Joining, and every collective after, waits at most `DISTILL_DIST_TIMEOUT_S` seconds (default
/// [`DEFAULT_TIMEOUT`]) for the other ranks.
///
/// # Errors
/// [`DistillError::Usage`] for what a job cannot do yet (CUDA, which needs the NCCL backend)
/// and a malformed timeout; the group's errors.
pub fn join_job(device: tch::Device) -> Result<Option<ProcessGroup>> {
    let Some(env) = DistEnv::from_process()? else { return Ok(None) };
    if device.is_cuda() {
        return Err(DistillError::Usage(format!(
            "data-parallel training on CUDA needs the NCCL backend, which this build lacks: use --device cpu for the {} \
             processes (Gloo)",
            env.world
        )));
    }
    let timeout = match std::env::var("DISTILL_DIST_TIMEOUT_S") {
        Ok(v) => std::time::Duration::from_secs_f64(v.parse::<f64>().ok().filter(|s| *s > 0.0).ok_or_else(|| {
            DistillError::Usage(format!("DISTILL_DIST_TIMEOUT_S={v:?} is not a positive number of seconds"))
        })?),
        Err(_) => DEFAULT_TIMEOUT,
    };
    ProcessGroup::join(&env, timeout).map(Some)
}
