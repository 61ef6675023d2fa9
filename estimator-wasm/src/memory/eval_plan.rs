//! The passes at `train.eval_batch_size`, which do not depend on the micro-batch: the
//! per-epoch evaluation (a no-grad forward of the student) and the teacher's logit cache
//! (its no-grad forward over the train set, before training).
use crate::memory::compiled::{EvalPlan, StudentPlan, TeacherPlan};
use crate::memory::errors::EstimateError;
use crate::memory::runtime::{mul, AllocatorPool};
use crate::memory::setup::Compile;
use crate::memory::sizes::largest_live;

impl Compile<'_> {
    /// The evaluation of `student` and the teacher's cache pass (`cache_build`: the cache being
    /// concatenated).
    ///
    /// # Errors
    /// [`EstimateError::Invalid`] on `train.eval_batch_size` when a pass needs more than
    /// 2^64 bytes; [`EstimateError::Overflow`] on the cache.
    pub(crate) fn eval(
        &self,
        student: &StudentPlan,
        teacher: Option<&TeacherPlan>,
        cache_build: AllocatorPool,
    ) -> Result<EvalPlan, EstimateError> {
        let (config, cuda) = (self.config, self.cuda);
        let eval_b = config.train.eval_batch_size;
        let eval_error = |e: EstimateError| match e {
            EstimateError::Overflow { .. } => EstimateError::invalid(
                "train.eval_batch_size",
                format!("{eval_b} samples need more than 16 EiB (2^64 bytes) in the evaluation pass; lower it"),
            ),
            e => e,
        };
        let mut eval_batch = AllocatorPool::default();
        for s in &student.batch {
            eval_batch.tensor(s.at(eval_b).map_err(eval_error)?, cuda);
        }
        if let Some(d) = self.inputs.dataset {
            eval_batch.tensor(mul(d.test_samples, 8, "predictions")?, cuda);
            eval_batch.tensor(mul(d.test_samples, 8, "predictions")?, cuda);
        }
        let (id, pool) =
            largest_live(student.layers.iter().map(|l| (l.id.as_str(), l.inference_live.as_slice())), eval_b, cuda);
        let eval_live = (id.map(str::to_string), pool.check("the evaluation pass").map_err(eval_error)?);
        let teacher_eval_live = match teacher {
            Some(t) => {
                let (id, pool) = largest_live(t.layers.iter().map(|(id, s)| (id.as_str(), s.as_slice())), eval_b, cuda);
                (id.map(str::to_string), pool.check("the teacher's forward").map_err(eval_error)?)
            }
            None => (None, AllocatorPool::default()),
        };
        let eval_batch = eval_batch.check("the evaluation batch").map_err(eval_error)?;
        let cache_build = cache_build.check("the teacher logit cache")?;
        Ok(EvalPlan { live: eval_live, batch: eval_batch, teacher_live: teacher_eval_live, cache_build })
    }
}
