//! `train.batch_size = "auto"` to the edge, for a caller that can afford the allocator's replay
//! (`distill`, not the browser): the largest micro-batch whose replayed device total fits the
//! device less its safety margin. The replayed total is the CUDA context and NCCL plus the
//! caching allocator's peak reserved bytes over the whole run ([`Plan::reserved_replay`],
//! `docs/memory-model.md` section 7c), in place of the fast bound's peak-moment segments plus
//! the flat `estimate.fragmentation` reserve ([`crate::memory::batch::search`]), which is 10% by
//! default where the recorded runs fragment 0 to 49%.
//!
//! Each probe is a whole plan and replay (milliseconds), so the search starts from the fast
//! bound's answer and brackets the edge by doubling steps before halving them: a few dozen
//! plans. The replay is a step function of the batch and not strictly monotone (segments are
//! rounded, blocks are reused or not), so the result is a batch that fits whose successor does
//! not, not necessarily the largest such batch.
use crate::memory::batch::{bisect, within};
use crate::memory::breakdown::Plan;
use crate::memory::errors::EstimateError;

/// What [`search_replayed`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayedSearch {
    /// A micro-batch whose [`Plan::fit_total`] is at most the budget while the next one's is
    /// not (or `most`); `None` when not even 1 fits.
    pub batch: Option<u64>,
    /// Plans the search made.
    pub evaluations: u32,
}

/// Searches the micro-batches 1 to `most` for the largest whose plan (`plan_at`, e.g.
/// [`crate::estimate`] at that batch) needs at most `budget` bytes of device memory by
/// [`Plan::fit_total`], starting from `start` (the fast bound's answer: the edge is near).
///
/// # Errors
/// The errors of `plan_at`, but for [`EstimateError::Overflow`] (a batch that overflows does
/// not fit).
pub fn search_replayed(
    mut plan_at: impl FnMut(u64) -> Result<Plan, EstimateError>,
    budget: u64,
    start: u64,
    most: u64,
) -> Result<ReplayedSearch, EstimateError> {
    let most = most.max(1);
    let mut evaluations = 0u32;
    let mut fits = |b: u64| -> Result<bool, EstimateError> {
        evaluations += 1;
        within(plan_at(b).map(|plan| plan.fit_total()), budget)
    };
    let start = start.clamp(1, most);
    // bracket: fits(lo), and hi does not fit (or hi = most + 1)
    let (mut lo, mut hi);
    if fits(start)? {
        lo = start;
        let mut step = (start / 32).max(1);
        loop {
            let next = lo.saturating_add(step);
            if next > most {
                hi = most + 1;
                if lo < most && fits(most)? {
                    lo = most;
                }
                break;
            }
            if fits(next)? {
                lo = next;
                step = step.saturating_mul(2);
            } else {
                hi = next;
                break;
            }
        }
    } else {
        hi = start;
        let mut step = (start / 32).max(1);
        loop {
            let next = hi.saturating_sub(step).max(1);
            if fits(next)? {
                lo = next;
                break;
            }
            if next == 1 {
                return Ok(ReplayedSearch { batch: None, evaluations });
            }
            hi = next;
            step = step.saturating_mul(2);
        }
    }
    let batch = bisect(lo, hi, &mut fits)?;
    Ok(ReplayedSearch { batch: Some(batch), evaluations })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::inputs::Inputs;
    use crate::schema::catalogue::gpu;
    use crate::schema::Config;

    /// A small MLP on an H200, priced for CUDA.
    fn mlp() -> (Config, Inputs) {
        let text = "[data]\ninput_shape = [784]\nclasses = 10\n[student]\nfamily = \"mlp\"\nhidden = [4096]\n\
                    [teacher]\nparams = 100000\n[estimate]\ntarget = \"cuda\"\n";
        (Config::from_toml_str(text).unwrap(), Inputs { device: Some(*gpu("H200").unwrap()), ..Inputs::default() })
    }

    #[test]
    fn the_search_lands_on_a_batch_that_fits_whose_successor_does_not() {
        let (c, i) = mlp();
        let at = |b: u64| crate::estimate(&c, &Inputs { batch: Some(b), ..i.clone() });
        let start = crate::max_batch(&c, &i, &i.device.unwrap(), 0.05).unwrap().unwrap();
        // a budget that the fast bound's batch overshoots and one it leaves room in
        for budget in [at(start).unwrap().fit_total() / 2, at(start).unwrap().fit_total() * 3] {
            let found = search_replayed(at, budget, start, crate::schema::limits::MAX_BATCH).unwrap();
            let b = found.batch.unwrap();
            assert!(at(b).unwrap().fit_total() <= budget);
            assert!(at(b + 1).unwrap().fit_total() > budget, "batch {b} + 1 fits {budget}");
            assert!(found.evaluations < 64, "{} plans", found.evaluations);
        }
        // nothing fits a budget below the batch of 1's, and `most` caps the batch
        let one = at(1).unwrap().fit_total();
        assert_eq!(search_replayed(at, one - 1, start, 1_000_000).unwrap().batch, None);
        assert_eq!(search_replayed(at, u64::MAX, start, 7).unwrap().batch, Some(7));
    }

    #[test]
    fn a_cuda_plan_fits_by_its_replay_and_a_cpu_plan_by_its_total() {
        let (c, i) = mlp();
        let cuda = crate::estimate(&c, &Inputs { batch: Some(64), ..i.clone() }).unwrap();
        let replay = cuda.reserved_replay.unwrap();
        assert_eq!(cuda.replayed_total(), Some(replay + cuda.totals.cuda_context));
        assert_eq!(cuda.fit_total(), replay + cuda.totals.cuda_context);
        let mut cpu_cfg = c.clone();
        cpu_cfg.estimate.target = crate::schema::Target::Cpu;
        let cpu = crate::estimate(&cpu_cfg, &Inputs { batch: Some(64), device: None, ..i }).unwrap();
        assert_eq!((cpu.replayed_total(), cpu.fit_total()), (None, cpu.totals.total));
    }
}
