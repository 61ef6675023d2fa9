//! Stage 5 of a run (after `prune`): training. `trainer` (the loop), `step` (one forward and
//! backward, with `backward` and `amp`'s loss scaling), `objective` and `chunked_loss` (the
//! distillation loss), `optim` and `schedule` (the optimisers and the learning rate), `batches`,
//! `train_io` (what a training run reads and how it ends), `loop_state` (the loop's position and running
//! sums), `checkpoint`, `eval` and `similarity`, `metrics` (`metrics.jsonl`), `memory_plan`
//! (the estimator on the device, which resolves `train.batch_size = "auto"`) and `sample_flops`
//! (a training sample's FLOPs over the run's batches, for the report's MFU).

pub mod amp;
pub mod backward;
pub mod batches;
pub mod checkpoint;
pub mod chunked_loss;
pub mod eval;
pub mod fused_lm_loss;
pub mod hidden_step;
pub mod loop_state;
pub mod memory_plan;
pub mod metrics;
pub mod objective;
pub mod optim;
pub mod sample_flops;
pub mod schedule;
pub mod similarity;
pub mod step;
pub mod train_io;
pub mod trainer;
