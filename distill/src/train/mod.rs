//! Stage 5, training: the loop, one step, the objective, the optimiser and its schedule, batches, checkpoints, evaluation, the memory plan, metrics.jsonl.

pub mod trainer;
pub mod step;
pub mod backward;
pub mod amp;
pub mod optim;
pub mod schedule;
pub mod batches;
pub mod train_io;
pub mod loop_state;
pub mod checkpoint;
pub mod eval;
pub mod similarity;
pub mod objective;
pub mod chunked_loss;
pub mod memory_plan;
pub mod metrics;
