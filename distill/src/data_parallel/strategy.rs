//! How this process trains: alone, or as one rank of a data-parallel job. The launcher's
//! environment is read once, in the binary's `main` ([`Launch::from_process`]); the run joins
//! the job's process group once its cfg passed the checks every rank makes alone
//! ([`Launch::join`]), and the trainer holds the [`Strategy`] that comes of it. Every question
//! that depends on this process's rank or the job's size is answered here (the shape of
//! burn-train's `TrainingStrategy`), so that no stage reads a rank or a world size itself.
use tch::{Kind, Tensor};

use super::group::ReduceOp;
use super::replicas::{any_rank, check_identical, check_same_job};
use super::{join_job, Ddp, DistEnv, ProcessGroup};
use crate::host::error::{DistillError, Result};

/// How the binary was launched: alone, or as one process of a data-parallel job (torchrun,
/// Slurm, Open MPI: [`DistEnv`]). Read once; the group is not joined yet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Launch {
    env: Option<DistEnv>,
}

impl Launch {
    /// This process's launch, from its environment variables ([`DistEnv::from_vars`]).
    ///
    /// # Errors
    /// [`DistillError::Usage`] naming a launch variable that is malformed or missing.
    pub fn from_process() -> Result<Launch> {
        Ok(Launch { env: DistEnv::from_process()? })
    }

    /// A process that trains alone (a library caller, a test).
    pub fn single() -> Launch {
        Launch { env: None }
    }

    /// True when this process is one of a data-parallel job's (a world above one).
    pub fn is_job(&self) -> bool {
        self.env.is_some()
    }

    /// True when this process writes the run folder and prints the summary: a process alone,
    /// or a job's rank 0 (the other ranks read rank 0's folder).
    pub fn writes_run_folder(&self) -> bool {
        self.env.as_ref().is_none_or(|e| e.rank == 0)
    }

    /// This process's rank in its job (0 alone).
    pub fn rank(&self) -> usize {
        self.env.as_ref().map_or(0, |e| e.rank)
    }

    /// Processes in the job (1 alone).
    pub fn world_size(&self) -> usize {
        self.env.as_ref().map_or(1, |e| e.world)
    }

    /// How many times torchrun has restarted the job's workers (0 on the first attempt, alone,
    /// and under other launchers).
    pub fn restart(&self) -> u64 {
        self.env.as_ref().map_or(0, |e| e.restart)
    }

    /// Joins the job's process group ([`join_job`]) and returns the strategy with this rank's
    /// training device; alone, [`Strategy::Single`] and `device`.
    ///
    /// # Errors
    /// As [`join_job`].
    pub fn join(&self, device: tch::Device, named: &str) -> Result<(Strategy, tch::Device)> {
        let (group, device) = join_job(self.env.as_ref(), device, named)?;
        Ok((group.map_or(Strategy::Single, Strategy::DataParallel), device))
    }
}

/// How the trainer trains, resolved once: alone, or as one rank of a joined job.
pub enum Strategy {
    Single,
    /// One rank of a data-parallel job: the gradients are averaged over the group's ranks.
    DataParallel(ProcessGroup),
}

impl Strategy {
    /// True for one rank of a data-parallel job.
    pub fn is_data_parallel(&self) -> bool {
        matches!(self, Strategy::DataParallel(_))
    }

    /// True when this process writes the run folder, its checkpoints and teacher outputs: a
    /// process alone, or a job's rank 0.
    pub fn writes_run_folder(&self) -> bool {
        match self {
            Strategy::Single => true,
            Strategy::DataParallel(g) => g.rank == 0,
        }
    }

    /// Processes that train together (1 alone).
    pub fn world_size(&self) -> usize {
        match self {
            Strategy::Single => 1,
            Strategy::DataParallel(g) => g.world,
        }
    }

    /// The c10d backend of the job's collectives ("gloo", "nccl"); `None` alone.
    pub fn backend_name(&self) -> Option<&'static str> {
        match self {
            Strategy::Single => None,
            Strategy::DataParallel(g) => Some(g.backend.name()),
        }
    }

    /// This rank's part of `whole`, as `part(whole, rank)` cuts it; `whole` alone.
    pub fn shard<T>(&self, whole: T, part: impl FnOnce(T, usize) -> T) -> T {
        match self {
            Strategy::Single => whole,
            Strategy::DataParallel(g) => part(whole, g.rank),
        }
    }

    /// The random seed of this rank: `seed` alone and on rank 0, offset by the rank times the
    /// 64-bit golden ratio elsewhere, so that each rank draws its own dropout masks.
    pub fn rank_seed(&self, seed: u64) -> u64 {
        let rank = match self {
            Strategy::Single => 0,
            Strategy::DataParallel(g) => g.rank as u64,
        };
        seed.wrapping_add(rank.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// Whether to stop, the same on every rank: alone, `flag`; in a job, at a step where the
    /// ranks meet (`meet`), true when `flag` is on any rank ([`any_rank`]), and false between
    /// (Ctrl-C reaches the ranks at different times).
    ///
    /// # Errors
    /// [`DistillError::Distributed`] when a peer is gone.
    pub fn agree_to_stop(&self, flag: bool, meet: bool) -> Result<bool> {
        match self {
            Strategy::Single => Ok(flag),
            Strategy::DataParallel(g) if meet => any_rank(g, flag),
            Strategy::DataParallel(_) => Ok(false),
        }
    }

    /// Fails unless every rank holds the same `params` ([`check_identical`]); nothing alone.
    ///
    /// # Errors
    /// As [`check_identical`].
    pub fn check_identical(&self, params: &[Tensor], when: &str) -> Result<()> {
        match self {
            Strategy::Single => Ok(()),
            Strategy::DataParallel(g) => check_identical(g, params, when),
        }
    }

    /// Fails unless every rank hashed the same `job` ([`check_same_job`]); nothing alone.
    ///
    /// # Errors
    /// As [`check_same_job`].
    pub fn check_same_job(&self, job: &[u8]) -> Result<()> {
        match self {
            Strategy::Single => Ok(()),
            Strategy::DataParallel(g) => check_same_job(g, job),
        }
    }

    /// Sums `packed` over the ranks in place (one float64 all-reduce); unchanged alone.
    ///
    /// # Errors
    /// [`DistillError::Distributed`] when a peer is gone.
    pub fn merge(&self, packed: &mut [f64]) -> Result<()> {
        let Strategy::DataParallel(g) = self else { return Ok(()) };
        let t = Tensor::from_slice(packed).to_kind(Kind::Double);
        g.all_reduce(&t, ReduceOp::Sum)?;
        let v = Vec::<f64>::try_from(&t).map_err(|e| DistillError::Torch(e.to_string()))?;
        packed.copy_from_slice(&v);
        Ok(())
    }

    /// The group SyncBatchNorm normalises over when `sync` (`--sync-batch-norm`) is on; `None`
    /// alone or when it is off.
    pub fn sync_batch_norm(&self, sync: bool) -> Option<&ProcessGroup> {
        match self {
            Strategy::DataParallel(g) if sync => Some(g),
            _ => None,
        }
    }

    /// The DDP Reducer of `params` (and rank 0's `buffers`) in the job ([`Ddp::new`]); `None`
    /// alone.
    ///
    /// # Errors
    /// As [`Ddp::new`].
    pub fn reducer(&self, params: &[Tensor], buffers: &[Tensor]) -> Result<Option<Ddp<'_>>> {
        match self {
            Strategy::Single => Ok(None),
            Strategy::DataParallel(g) => Ddp::new(g, params, buffers).map(Some),
        }
    }

    /// A folder of this process's own for a job's ranks above 0, which write no run folder of
    /// use (it goes when they finish); `None` for a process alone and rank 0.
    ///
    /// # Errors
    /// [`DistillError::Io`] when the temporary folder cannot be made.
    pub fn private_folder(&self) -> Result<Option<tempfile::TempDir>> {
        match self {
            Strategy::DataParallel(g) if g.rank > 0 => tempfile::Builder::new()
                .prefix(&format!("distill-rank{}-", g.rank))
                .tempdir()
                .map(Some)
                .map_err(|e| DistillError::io(&std::env::temp_dir(), e)),
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ops::Range;

    use super::*;

    #[test]
    fn alone_the_strategy_keeps_the_whole_batch_and_the_seed() {
        let s = Strategy::Single;
        assert!(s.writes_run_folder() && !s.is_data_parallel());
        assert_eq!(s.world_size(), 1);
        assert_eq!(s.shard(0..64, |r: Range<usize>, rank| r.start + rank..r.end), 0..64);
        assert_eq!(s.rank_seed(7), 7);
        assert!(s.agree_to_stop(true, false).unwrap());
        let mut packed = [1.5, 2.0];
        s.merge(&mut packed).unwrap();
        assert_eq!(packed, [1.5, 2.0]);
        assert!(s.private_folder().unwrap().is_none());
    }

    #[test]
    fn a_launch_alone_writes_its_run_folder() {
        let l = Launch::single();
        assert!(l.writes_run_folder() && !l.is_job());
        assert_eq!((l.world_size(), l.restart()), (1, 0));
    }
}
