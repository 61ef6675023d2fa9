//! A c10d process group joined through a TCPStore at the job's master address: the Gloo backend
//! for tensors on the CPU and, on CUDA, the NCCL backend for the GPU's (or Gloo for both, as
//! `DISTILL_DIST_BACKEND=gloo` asks); freed on drop.
use std::ffi::{c_void, CString};
use std::time::Duration;

use tch::Tensor;

use super::env::DistEnv;
use super::ffi;
use crate::host::error::{DistillError, Result};

/// How long a collective, or joining the group, may wait for the other ranks. DDP's default is
/// 30 minutes; 10 ends a job with a lost rank sooner (a dead peer's socket fails at once anyway).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// The c10d backend of a job's collectives on its training device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Gloo over TCP (CPU tensors; also CUDA ones, through the host).
    Gloo,
    /// NCCL on CUDA device `device` (CPU tensors still go through Gloo).
    Nccl { device: usize },
}

impl Backend {
    /// `gloo` or `nccl`, as `report.json` and the log name it.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Gloo => "gloo",
            Backend::Nccl { .. } => "nccl",
        }
    }
}

/// What an all-reduce combines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum = 0,
    Min = 1,
    Max = 2,
}

/// How long a rank whose collective failed waits for the others to answer the roll call that
/// names the ranks that are gone ([`ProcessGroup::failure`]).
pub const ROLL_CALL_WAIT: Duration = Duration::from_secs(3);

/// This process's membership of the job's group.
pub struct ProcessGroup {
    handle: *mut c_void,
    pub rank: usize,
    pub world: usize,
    /// torchrun's agent serves the store (else rank 0 does).
    agent_store: bool,
    pub backend: Backend,
}

impl ProcessGroup {
    /// Joins the group `env` describes with `backend`, waiting at most `timeout` for the others.
    ///
    /// # Errors
    /// [`DistillError::Distributed`] naming the rank and the endpoint when the store or the
    /// group cannot be set up (no rank 0 listening in time, a port in use, no such interface
    /// in `GLOO_SOCKET_IFNAME`, NCCL without a GPU).
    pub fn join(env: &DistEnv, timeout: Duration, backend: Backend) -> Result<ProcessGroup> {
        if let Some(names) = &env.gloo_interfaces {
            check_interfaces(names, &host_interfaces())?;
        }
        let addr = CString::new(env.master_addr.as_str())
            .map_err(|_| DistillError::Usage("MASTER_ADDR holds a NUL byte".into()))?;
        let prefix = CString::new(env.prefix.as_str()).expect("a prefix of digits");
        let ifnames = env
            .gloo_interfaces
            .as_deref()
            .map(CString::new)
            .transpose()
            .map_err(|_| DistillError::Usage("GLOO_SOCKET_IFNAME holds a NUL byte".into()))?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: the strings outlive the call; `handle` is written on success only.
        let message = unsafe {
            ffi::dist_group_new(
                addr.as_ptr(),
                i32::from(env.master_port),
                env.rank as i32,
                env.world as i32,
                timeout.as_millis() as i64,
                i32::from(env.agent_store),
                prefix.as_ptr(),
                match backend {
                    Backend::Nccl { device } => device as i32,
                    Backend::Gloo => -1,
                },
                ifnames.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
                &mut handle,
            )
        };
        let what = format!(
            "rank {} of {} joining the {} group at {}:{}",
            env.rank,
            env.world,
            if backend == Backend::Gloo { "Gloo" } else { "NCCL" },
            env.master_addr,
            env.master_port
        );
        ffi::check(message, &what).map_err(|e| match e {
            DistillError::Distributed(text) => {
                DistillError::Distributed(format!("{}; {}", text.trim_end_matches('.'), join_fix(&text)))
            }
            e => e,
        })?;
        Ok(ProcessGroup { handle, rank: env.rank, world: env.world, agent_store: env.agent_store, backend })
    }

    /// The name of the c10d backend that takes this group's tensors on CUDA (`cuda`) or on the
    /// CPU: `gloo` or `nccl`.
    ///
    /// # Errors
    /// [`DistillError::Distributed`] when no backend is registered for that device type.
    pub fn backend_for(&self, cuda: bool) -> Result<String> {
        let mut out = std::ptr::null_mut();
        // SAFETY: the group handle is live until drop; `out` is written on success only.
        let message = unsafe { ffi::dist_group_backend(self.handle, i32::from(cuda), &mut out) };
        ffi::check(message, "the group's backend")?;
        Ok(crate::torch::shim::take_message(out).unwrap_or_default())
    }

    /// Combines `t` (a CPU tensor) across the ranks in place.
    ///
    /// # Errors
    /// [`DistillError::Distributed`] when a peer is gone (its socket closed) or the timeout passes.
    pub fn all_reduce(&self, t: &Tensor, op: ReduceOp) -> Result<()> {
        // SAFETY: `t` is a live tensor; the group handle is live until drop.
        let message = unsafe { ffi::dist_allreduce(self.handle, t.as_ptr() as ffi::TensorPtr, op as i32) };
        self.check(message, "all-reduce")
    }

    /// Copies rank `root`'s values of `tensors` into every rank's, in place (coalesced in
    /// 250 MiB buffers, as DDP's start-up broadcast). Every rank passes the same shapes in the
    /// same order.
    ///
    /// # Errors
    /// As [`ProcessGroup::all_reduce`].
    pub fn broadcast(&self, tensors: &[&Tensor], root: usize) -> Result<()> {
        if tensors.is_empty() {
            return Ok(());
        }
        let handles = ffi::handles(tensors);
        // SAFETY: the handles point at live tensors for the call.
        let message = unsafe { ffi::dist_broadcast(self.handle, handles.as_ptr(), handles.len() as i32, root as i32) };
        self.check(message, "broadcast")
    }

    /// The sum of every rank's `t` as a new tensor that autograd differentiates: the gradient
    /// reaching each rank's `t` is the sum of the gradients of every rank's result (the backward
    /// all-reduces too). Every rank calls it with the same shape at the same point.
    ///
    /// # Errors
    /// As [`ProcessGroup::all_reduce`].
    pub fn sum_over_ranks(&self, t: &Tensor) -> Result<Tensor> {
        let mut out: ffi::TensorPtr = std::ptr::null_mut();
        // SAFETY: `t` is live; on success the shim hands over a new tensor, which tch then owns.
        let message = unsafe { ffi::dist_sum_over_ranks(self.handle, t.as_ptr() as ffi::TensorPtr, &mut out) };
        self.check(message, "all-reduce of SyncBatchNorm statistics")?;
        // SAFETY: `out` is a heap at::Tensor made by the shim for us.
        Ok(unsafe { Tensor::from_ptr(out) })
    }

    /// Waits until every rank has reached this call.
    ///
    /// # Errors
    /// As [`ProcessGroup::all_reduce`].
    pub fn barrier(&self) -> Result<()> {
        // SAFETY: the group handle is live until drop.
        self.check(unsafe { ffi::dist_barrier(self.handle) }, "barrier")
    }

    /// The group's handle, for the Reducer.
    pub(super) fn handle(&self) -> *mut c_void {
        self.handle
    }

    /// `Ok` when `message` (a shim result) is NULL, else [`ProcessGroup::failure`] of `call`.
    pub(super) fn check(&self, message: *mut std::ffi::c_char, call: &str) -> Result<()> {
        crate::torch::shim::take_message(message).map_or(Ok(()), |text| Err(self.failure(call, &text)))
    }

    /// The one-line error of a failed collective `call` (libtorch's `text`), naming the ranks
    /// that are gone: after a failure every rank that is still alive answers a roll call in the
    /// job's store, and those that have not answered within [`ROLL_CALL_WAIT`] are named (they
    /// exited, or are stuck). When the store is gone too, its host is named: rank 0, or
    /// torchrun's agent.
    pub fn failure(&self, call: &str, text: &str) -> DistillError {
        let mut present = vec![0 as std::ffi::c_int; self.world];
        // SAFETY: `present` holds `world` entries; the group handle is live until drop.
        let answer =
            unsafe { ffi::dist_roll_call(self.handle, ROLL_CALL_WAIT.as_millis() as i64, present.as_mut_ptr()) };
        let who = match crate::torch::shim::take_message(answer) {
            Some(_) if self.agent_store => "torchrun's agent, which serves the job's store, is gone too".to_string(),
            Some(_) => "rank 0 is gone (the job's store, which it served, does not answer)".to_string(),
            None => {
                let gone: Vec<String> = (0..self.world).filter(|&r| present[r] == 0).map(|r| r.to_string()).collect();
                match gone.len() {
                    0 => "every rank is still there (a collective failed on all of them)".to_string(),
                    1 => format!(
                        "rank {} is gone (it did not answer within {} s: see its log)",
                        gone[0],
                        ROLL_CALL_WAIT.as_secs()
                    ),
                    _ => format!(
                        "ranks {} are gone (they did not answer within {} s: see their logs)",
                        gone.join(", "),
                        ROLL_CALL_WAIT.as_secs()
                    ),
                }
            }
        };
        DistillError::Distributed(format!("rank {} of {}: {call} failed: {who}: {text}", self.rank, self.world))
    }
}

/// The fix for a group that could not be joined, by what libtorch said (`text`).
fn join_fix(text: &str) -> &'static str {
    if text.contains("timed out") || text.contains("Timed out") || text.contains("connect") {
        "check MASTER_ADDR and MASTER_PORT (rank 0's host, reachable from this one, and a free port there), and \
         that every rank of WORLD_SIZE was started"
    } else {
        "check the launch variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, GLOO_SOCKET_IFNAME)"
    }
}

/// The network interfaces of this host (`/sys/class/net`), sorted; empty where that is unreadable.
fn host_interfaces() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/net")
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned())).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// Refuses a `GLOO_SOCKET_IFNAME` naming an interface this host does not have (Gloo takes
/// interface names, comma-separated: not NCCL's `^` exclusions or `=` exact-match prefixes), in
/// one line listing those it has; nothing is checked when the host's list is unknown (`present`
/// empty).
///
/// # Errors
/// [`DistillError::Usage`] naming the variable, the unknown name and the interfaces present.
pub fn check_interfaces(names: &str, present: &[String]) -> Result<()> {
    if present.is_empty() {
        return Ok(());
    }
    for name in names.split(',') {
        if !present.iter().any(|p| p == name) {
            let hint = if name.starts_with('^') || name.starts_with('=') {
                " (Gloo takes interface names, comma-separated; ^ and = are NCCL_SOCKET_IFNAME's syntax)"
            } else {
                ""
            };
            return Err(DistillError::Usage(format!(
                "GLOO_SOCKET_IFNAME={names}: this host has no network interface {name:?}{hint}; it has {}",
                present.join(", ")
            )));
        }
    }
    Ok(())
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // SAFETY: made by dist_group_new, freed once.
        unsafe { ffi::dist_group_free(self.handle) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group of one rank on the loopback interface, its store on a free port.
    fn alone() -> ProcessGroup {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let env = DistEnv {
            rank: 0,
            world: 1,
            local_rank: 0,
            master_addr: "127.0.0.1".into(),
            master_port: port,
            agent_store: false,
            restart: 0,
            prefix: "distill/0".into(),
            gloo_interfaces: Some("lo".into()),
        };
        ProcessGroup::join(&env, Duration::from_secs(20), Backend::Gloo).unwrap()
    }

    #[test]
    fn an_interface_the_host_lacks_is_named_with_those_it_has() {
        let present = ["eth0".to_string(), "lo".to_string()];
        assert!(check_interfaces("lo", &present).is_ok());
        assert!(check_interfaces("eth0,lo", &present).is_ok());
        assert_eq!(
            check_interfaces("^lo", &present).unwrap_err().to_string(),
            "GLOO_SOCKET_IFNAME=^lo: this host has no network interface \"^lo\" (Gloo takes interface names, \
             comma-separated; ^ and = are NCCL_SOCKET_IFNAME's syntax); it has eth0, lo"
        );
        assert_eq!(
            check_interfaces("lo,eth1", &present).unwrap_err().to_string(),
            "GLOO_SOCKET_IFNAME=lo,eth1: this host has no network interface \"eth1\"; it has eth0, lo"
        );
        assert!(check_interfaces("anything", &[]).is_ok());
    }

    /// A Gloo job on CUDA failed at its first broadcast ("No backend type associated with device
    /// type cuda", H200, 2026-12-04): Gloo must be registered for CUDA tensors too. The
    /// registration is the same on a machine without a GPU.
    #[test]
    fn a_gloo_group_takes_cuda_tensors_through_gloo() {
        let group = alone();
        assert_eq!(group.backend_for(false).unwrap(), "gloo");
        assert_eq!(group.backend_for(true).unwrap(), "gloo");
    }
}
