//! Who this process is in a data-parallel job, from its launcher's environment.
//!
//! | launcher | rank, world size, local rank | store endpoint |
//! |---|---|---|
//! | torchrun (and Kubeflow's PyTorchJob, which sets the same names) | `RANK`, `WORLD_SIZE`, `LOCAL_RANK` | `MASTER_ADDR`, `MASTER_PORT` |
//! | Slurm `srun` | `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID` | `MASTER_ADDR`, `MASTER_PORT` from the batch script |
//! | Open MPI `mpirun` | `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`, `OMPI_COMM_WORLD_LOCAL_RANK` | as above |
//!
//! torchrun's own variables win, then Slurm's, then Open MPI's. torchrun also sets
//! `TORCHELASTIC_USE_AGENT_STORE=True` (its agent serves the store: every rank is a client) and
//! `TORCHELASTIC_RESTART_COUNT` (keys of a restarted job go under a fresh prefix). A world of one
//! is no job: [`DistEnv::from_vars`] returns `None` and no process group is made.
use crate::host::error::{DistillError, Result};

/// This process's place in the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistEnv {
    pub rank: usize,
    pub world: usize,
    /// Rank on this machine (the CUDA device index).
    pub local_rank: usize,
    /// The TCPStore's host and port.
    pub master_addr: String,
    pub master_port: u16,
    /// torchrun's agent serves the store; rank 0 must not.
    pub agent_store: bool,
    /// How many times torchrun has restarted the job's workers (`--max-restarts`): 0 on the
    /// first attempt, and always 0 under other launchers.
    pub restart: u64,
    /// Store key prefix: `distill/<restart count>`.
    pub prefix: String,
    /// `GLOO_SOCKET_IFNAME`: the network interfaces Gloo binds, comma-separated (`None`: the
    /// address this host's name resolves to).
    pub gloo_interfaces: Option<String>,
}

impl DistEnv {
    /// Reads the launch variables through `var` (`std::env::var` in the binary).
    ///
    /// # Errors
    /// [`DistillError::Usage`] naming the variable that is malformed, out of range or missing
    /// (a world above one needs `MASTER_ADDR` and `MASTER_PORT`).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<DistEnv>> {
        let launchers = [
            ("RANK", "WORLD_SIZE", "LOCAL_RANK"),
            ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
            ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
        ];
        let Some((rank_key, world_key, local_key)) = launchers.into_iter().find(|(r, _, _)| var(r).is_some()) else {
            if let Some(world) = var("WORLD_SIZE").filter(|w| w.trim() != "1") {
                return Err(DistillError::Usage(format!(
                    "WORLD_SIZE={world} is set but RANK is not: set RANK (0 to WORLD_SIZE - 1) for each process, or \
                     launch with torchrun"
                )));
            }
            return Ok(None);
        };
        let number = |key: &str| -> Result<Option<usize>> {
            var(key)
                .map(|v| {
                    v.trim().parse::<usize>().map_err(|_| {
                        DistillError::Usage(format!("{key}={v:?} is not a non-negative integer (set by the launcher)"))
                    })
                })
                .transpose()
        };
        let rank = number(rank_key)?.expect("found above");
        let world = number(world_key)?
            .ok_or_else(|| DistillError::Usage(format!("{rank_key} is set but {world_key} is not: set both")))?;
        if world == 0 || rank >= world {
            return Err(DistillError::Usage(format!("{rank_key}={rank} must be below {world_key}={world}")));
        }
        if world == 1 {
            return Ok(None);
        }
        let local_rank = number(local_key)?.unwrap_or(rank);
        let need = |key: &str| {
            var(key).filter(|v| !v.is_empty()).ok_or_else(|| {
                DistillError::Usage(format!(
                    "{world_key}={world} but {key} is unset: set MASTER_ADDR and MASTER_PORT to rank 0's host and a free port"
                ))
            })
        };
        let master_addr = need("MASTER_ADDR")?;
        let port = need("MASTER_PORT")?;
        let master_port = port
            .parse::<u16>()
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| DistillError::Usage(format!("MASTER_PORT={port:?} is not a port number (1-65535)")))?;
        let agent_store = var("TORCHELASTIC_USE_AGENT_STORE").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let restart = match var("TORCHELASTIC_RESTART_COUNT") {
            Some(v) => v.trim().parse::<u64>().map_err(|_| {
                DistillError::Usage(format!(
                    "TORCHELASTIC_RESTART_COUNT={v:?} is not a non-negative integer (set by torchrun)"
                ))
            })?,
            None => 0,
        };
        Ok(Some(DistEnv {
            rank,
            world,
            local_rank,
            master_addr,
            master_port,
            agent_store,
            restart,
            prefix: format!("distill/{restart}"),
            gloo_interfaces: var("GLOO_SOCKET_IFNAME").filter(|v| !v.trim().is_empty()),
        }))
    }

    /// [`DistEnv::from_vars`] on this process's environment.
    ///
    /// # Errors
    /// As [`DistEnv::from_vars`].
    pub fn from_process() -> Result<Option<DistEnv>> {
        DistEnv::from_vars(|k| std::env::var(k).ok())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn read(pairs: &[(&str, &str)]) -> Result<Option<DistEnv>> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        DistEnv::from_vars(|k| map.get(k).cloned())
    }

    const MASTER: [(&str, &str); 2] = [("MASTER_ADDR", "10.0.0.1"), ("MASTER_PORT", "29500")];

    #[test]
    fn torchrun_variables_with_its_agent_store() {
        let mut vars = vec![("RANK", "3"), ("WORLD_SIZE", "4"), ("LOCAL_RANK", "1")];
        vars.extend(MASTER);
        vars.extend([("TORCHELASTIC_USE_AGENT_STORE", "True"), ("TORCHELASTIC_RESTART_COUNT", "2")]);
        let env = read(&vars).unwrap().unwrap();
        assert_eq!(
            env,
            DistEnv {
                rank: 3,
                world: 4,
                local_rank: 1,
                master_addr: "10.0.0.1".into(),
                master_port: 29500,
                agent_store: true,
                restart: 2,
                prefix: "distill/2".into(),
                gloo_interfaces: None,
            }
        );
    }

    #[test]
    fn slurm_and_open_mpi_map_to_the_same_fields() {
        let mut slurm = vec![("SLURM_PROCID", "1"), ("SLURM_NTASKS", "2"), ("SLURM_LOCALID", "0")];
        slurm.extend(MASTER);
        let env = read(&slurm).unwrap().unwrap();
        assert_eq!((env.rank, env.world, env.local_rank, env.agent_store), (1, 2, 0, false));
        assert_eq!(env.prefix, "distill/0");
        let mut mpi = vec![("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "8")];
        mpi.extend(MASTER);
        let env = read(&mpi).unwrap().unwrap();
        assert_eq!((env.rank, env.world, env.local_rank), (0, 8, 0), "local rank defaults to the rank");
        // torchrun's names win over Slurm's (torchrun inside an allocation)
        let mut both = slurm.clone();
        both.extend([("RANK", "0"), ("WORLD_SIZE", "3")]);
        assert_eq!(read(&both).unwrap().unwrap().world, 3);
    }

    #[test]
    fn no_launcher_or_a_world_of_one_is_no_job() {
        assert_eq!(read(&[]).unwrap(), None);
        assert_eq!(read(&[("RANK", "0"), ("WORLD_SIZE", "1")]).unwrap(), None);
    }

    #[test]
    fn bad_launch_variables_name_the_variable() {
        let err = |vars: &[(&str, &str)]| read(vars).unwrap_err().to_string();
        assert!(err(&[("RANK", "x"), ("WORLD_SIZE", "2")]).contains("RANK=\"x\""));
        assert!(err(&[("RANK", "2"), ("WORLD_SIZE", "2")]).contains("RANK=2 must be below WORLD_SIZE=2"));
        assert!(err(&[("RANK", "0")]).contains("WORLD_SIZE is not"));
        assert!(err(&[("WORLD_SIZE", "2")]).contains("WORLD_SIZE=2 is set but RANK is not"));
        assert_eq!(read(&[("WORLD_SIZE", "1")]).unwrap(), None);
        assert!(err(&[("RANK", "0"), ("WORLD_SIZE", "2")]).contains("MASTER_ADDR is unset"));
        let bad_port = [("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "h"), ("MASTER_PORT", "70000")];
        assert!(err(&bad_port).contains("MASTER_PORT=\"70000\""));
        let mut restarted = vec![("RANK", "0"), ("WORLD_SIZE", "2"), ("TORCHELASTIC_RESTART_COUNT", "one")];
        restarted.extend(MASTER);
        assert!(err(&restarted).contains("TORCHELASTIC_RESTART_COUNT=\"one\""));
    }
}
