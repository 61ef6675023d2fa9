//! The mini-batches of an epoch, chosen so that BatchNorm can train on every one of them.
//!
//! An epoch visits a seeded permutation of the `n` training samples (`data::permutation`) in
//! batches of `b = min(train.batch_size, n)` samples: `n / b` full batches and a last one of
//! `n % b`. BatchNorm in training mode normalises each channel over the values of the batch
//! (B of them for BatchNorm1d on [B, F], B * H * W for BatchNorm2d on [B, C, H, W]) and updates
//! its running variance with the unbiased estimate `var * m / (m - 1)`: with a single value per
//! channel (m = 1) that is 0 / 0 = NaN, and every later evaluation outputs NaN. PyTorch refuses
//! such a batch ("Expected more than 1 value per channel when training",
//! `torch.nn.functional._verify_batch_size`); libtorch does not check.
//!
//! So a last batch of one sample that would give a BatchNorm layer one value per channel is
//! dropped, like `DataLoader(drop_last=True)` but only when needed: the epoch takes `n / b`
//! optimiser steps and leaves out the last sample of its permutation (a different one each
//! epoch). A run whose every batch would be such a batch (`batch_size = 1`, or one training
//! sample) is refused. The learning-rate and pruning schedules count the steps given here.
use std::ops::Range;

use estimator_wasm::schema::arch::Op;

use crate::host::error::{DistillError, Result};
use crate::student::{Block, Student};

/// How the `n` training samples of an epoch are cut into optimiser steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batches {
    /// Samples of a full batch: `min(train.batch_size, n)`.
    pub size: usize,
    /// Optimiser steps per epoch.
    pub steps_per_epoch: u64,
    /// Samples left out of every epoch: 1 when the last batch would hold a single sample that a
    /// BatchNorm layer cannot train on, else 0.
    pub dropped: usize,
    /// Training samples.
    pub samples: usize,
    /// Data-parallel ranks that share each batch (1 without data parallelism).
    pub world: usize,
    /// Samples a step asked for: `train.batch_size` times the ranks (more than `samples` when
    /// the batch holds the whole train set).
    pub asked: usize,
}

impl Batches {
    /// The batches of `n` samples at `train.batch_size = batch_size` for `student`.
    ///
    /// # Errors
    /// [`DistillError::Usage`] naming `train.batch_size` (or the training set) and the BatchNorm
    /// layer when every batch would give that layer one value per channel.
    pub fn new(n: usize, batch_size: usize, student: &Student) -> Result<Batches> {
        Batches::sharded(n, batch_size, 1, student)
    }

    /// The batches of a data-parallel job of `world` ranks, each rank training on
    /// `train.batch_size = batch_size` samples of every step: a step takes `world * batch_size`
    /// samples of the epoch's permutation (the global batch), which [`Batches::shard`] splits.
    /// The BatchNorm rule holds for the smallest share, and a last batch with fewer samples than
    /// ranks is dropped (a rank without samples could not join the gradients' all-reduce).
    ///
    /// # Errors
    /// As [`Batches::new`]; [`DistillError::Usage`] when the training set has fewer samples
    /// than ranks.
    pub fn sharded(n: usize, batch_size: usize, world: usize, student: &Student) -> Result<Batches> {
        let world = world.max(1);
        if n < world {
            return Err(DistillError::Usage(format!(
                "the training set holds {n} samples, fewer than the job's {world} ranks: launch at most {n} processes"
            )));
        }
        let blocks = student.layered().map_or(&[][..], |s| &s.blocks);
        let size = batch_size.saturating_mul(world).min(n).max(1);
        // The smallest rank's share of a batch of b samples is b / world.
        let trainable = |b: usize| match batch_norm_values(blocks) {
            Some((per_sample, _)) => (b / world) as u64 * per_sample > 1,
            None => b / world > 0,
        };
        if !trainable(size) {
            let (_, layer) = batch_norm_values(blocks).expect("only BatchNorm makes a batch untrainable");
            let (cause, fix) = if batch_size <= 1 {
                ("train.batch_size = 1".to_string(), "set train.batch_size >= 2")
            } else {
                (format!("the training set holds {n} sample (after data.holdout)"), "train on at least 2 samples")
            };
            // student.norm = "layer" exists for mlp students only (the schema refuses it for a CNN).
            let cnn = blocks.iter().any(|b| matches!(b.layer.op, Op::Conv2d { .. }));
            let norms = if cnn { "\"none\"" } else { "\"layer\" or \"none\"" };
            return Err(DistillError::Usage(format!(
                "{cause}, but layer {layer} (BatchNorm) needs at least 2 samples per batch in training (one sample gives it \
                 one value per channel and a NaN running variance); {fix}, or set student.norm = {norms}"
            )));
        }
        let (full, rest) = (n / size, n % size);
        let dropped = if rest > 0 && !trainable(rest) { rest } else { 0 };
        let steps_per_epoch = (full + usize::from(rest > 0 && dropped == 0)) as u64;
        let asked = batch_size.saturating_mul(world);
        Ok(Batches { size, steps_per_epoch, dropped, samples: n, world, asked })
    }

    /// The part of a step's positions `range` (from [`Batches::range`]) that rank `rank` trains
    /// on: contiguous, the sizes differing by at most one.
    pub fn shard(&self, range: Range<usize>, rank: usize) -> Range<usize> {
        let m = range.len();
        (range.start + rank * m / self.world)..(range.start + (rank + 1) * m / self.world)
    }

    /// Positions in the epoch's permutation of the samples of step `i` (0-based, `i <
    /// steps_per_epoch`).
    pub fn range(&self, i: u64) -> Range<usize> {
        let start = i as usize * self.size;
        start..(start + self.size).min(self.samples)
    }

    /// A line for the log when samples are dropped, or when a batch asked for more samples than
    /// the train set holds (every step then trains on all of them).
    pub fn note(&self) -> Option<String> {
        if self.asked > self.samples {
            let per_rank = if self.world > 1 { format!(" x {} ranks", self.world) } else { String::new() };
            return Some(format!(
                "note: train.batch_size = {}{per_rank} is more than the {} training samples: each step trains on all of \
                 them (full-batch training, 1 step per epoch); set a smaller batch for mini-batches",
                self.asked / self.world,
                self.samples
            ));
        }
        if self.dropped > 0 && self.world > 1 {
            return Some(format!(
                "note: {} training samples in global batches of {} over {} ranks leave a last batch of {} that not every \
                 rank can train on: it is dropped from every epoch ({} steps per epoch)",
                self.samples, self.size, self.world, self.dropped, self.steps_per_epoch
            ));
        }
        (self.dropped > 0).then(|| {
            format!(
                "note: {} training samples in batches of {} leave a last batch of {}, which BatchNorm cannot train on: \
                 it is dropped from every epoch (a different sample each time; {} steps per epoch)",
                self.samples, self.size, self.dropped, self.steps_per_epoch
            )
        })
    }
}

/// The fewest values per channel that one sample gives a BatchNorm layer of `blocks` (1 for
/// BatchNorm1d on [F], H * W for BatchNorm2d on [C, H, W]), with that layer's id; `None`
/// without BatchNorm.
pub fn batch_norm_values(blocks: &[Block]) -> Option<(u64, &str)> {
    blocks
        .iter()
        .filter(|b| matches!(b.layer.op, Op::BatchNorm { .. }))
        .map(|b| (b.layer.input.iter().skip(1).product::<u64>().max(1), b.layer.id.as_str()))
        .min_by_key(|(values, _)| *values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use estimator_wasm::schema::Config;
    use tch::nn::VarStore;
    use tch::Device;

    /// A student over `input_shape` with `student` keys.
    fn blocks(input_shape: &str, student: &str) -> Student {
        let text = format!("[data]\ninput_shape = {input_shape}\nclasses = 10\n[student]\n{student}\n");
        let spec = Config::from_toml_str(&text).unwrap();
        Student::new(&VarStore::new(Device::Cpu).root(), &spec).unwrap()
    }

    /// [`batch_norm_values`] of a layered student.
    fn bn_values(student: &Student) -> Option<(u64, &str)> {
        batch_norm_values(&student.layered().unwrap().blocks)
    }

    #[test]
    fn a_last_batch_of_one_sample_is_dropped_only_under_batch_norm_1d() {
        let _rng = crate::torch::test_rng::lock();
        let bn = blocks("[1, 8, 8]", "family = \"mlp\"\nhidden = [32]\nnorm = \"batch\"");
        assert_eq!(bn_values(&bn), Some((1, "fc1_norm")));
        // digits: 1437 = 4 * 359 + 1; the 1-sample batch goes, 359 steps remain.
        let b = Batches::new(1437, 4, &bn).unwrap();
        assert_eq!((b.size, b.steps_per_epoch, b.dropped), (4, 359, 1));
        assert_eq!(b.range(358), 1432..1436);
        assert!(b.note().unwrap().contains("1437 training samples in batches of 4 leave a last batch of 1"));
        // data.holdout = 0.1 leaves 1437 - 144 = 1293 = 4 * 323 + 1.
        assert_eq!(Batches::new(1293, 4, &bn).unwrap().steps_per_epoch, 323);
        // A last batch of 2 trains; so does one batch larger than the data (all 1437 samples).
        assert_eq!(
            Batches::new(1438, 4, &bn).unwrap(),
            Batches { size: 4, steps_per_epoch: 360, dropped: 0, samples: 1438, world: 1, asked: 4 }
        );
        assert_eq!(
            Batches::new(1437, 5000, &bn).unwrap(),
            Batches { size: 1437, steps_per_epoch: 1, dropped: 0, samples: 1437, world: 1, asked: 5000 }
        );
        assert_eq!(
            Batches::new(1437, 5000, &bn).unwrap().note().unwrap(),
            "note: train.batch_size = 5000 is more than the 1437 training samples: each step trains on all of them \
             (full-batch training, 1 step per epoch); set a smaller batch for mini-batches"
        );
        assert_eq!(Batches::new(1437, 1437, &bn).unwrap().note(), None);
        // Without BatchNorm, or with LayerNorm, nothing is dropped.
        for other in ["norm = \"none\"", "norm = \"layer\""] {
            let plain = blocks("[1, 8, 8]", &format!("family = \"mlp\"\nhidden = [32]\n{other}"));
            assert_eq!(Batches::new(1437, 4, &plain).unwrap().steps_per_epoch, 360);
        }
    }

    #[test]
    fn batch_norm_2d_counts_every_pixel_of_a_channel() {
        let _rng = crate::torch::test_rng::lock();
        // conv1_bn on [4, 2, 2]: one sample gives 4 values per channel, so a 1-sample batch
        // trains; the CNN has no hidden BatchNorm1d (hidden = []).
        let cnn =
            blocks("[1, 2, 2]", "family = \"cnn\"\nchannels = [4]\npool = \"none\"\nhidden = []\nnorm = \"batch\"");
        assert_eq!(bn_values(&cnn), Some((4, "conv1_bn")));
        assert_eq!(Batches::new(9, 4, &cnn).unwrap().steps_per_epoch, 3);
        assert_eq!(Batches::new(9, 1, &cnn).unwrap().steps_per_epoch, 9);
        // On a 1x1 map BatchNorm2d sees one value per channel per sample, like BatchNorm1d.
        let one =
            blocks("[3, 1, 1]", "family = \"cnn\"\nchannels = [4]\npool = \"none\"\nhidden = []\nnorm = \"batch\"");
        assert_eq!(bn_values(&one), Some((1, "conv1_bn")));
        assert_eq!(Batches::new(9, 4, &one).unwrap().steps_per_epoch, 2);
    }

    #[test]
    fn every_batch_untrainable_is_refused_with_the_key() {
        let _rng = crate::torch::test_rng::lock();
        let bn = blocks("[64]", "family = \"mlp\"\nhidden = [16, 8]\nnorm = \"batch\"");
        let e = Batches::new(100, 1, &bn).unwrap_err().to_string();
        assert!(e.starts_with("train.batch_size = 1, but layer fc1_norm (BatchNorm) needs at least 2 samples"), "{e}");
        assert!(!e.contains('\n'));
        let e = Batches::new(1, 32, &bn).unwrap_err().to_string();
        assert!(e.starts_with("the training set holds 1 sample (after data.holdout), but layer fc1_norm"), "{e}");
        assert!(e.ends_with("train on at least 2 samples, or set student.norm = \"layer\" or \"none\""), "{e}");
        // A CNN cannot take norm = "layer"; its conv1_bn sees 64 values per sample, fc1_norm one.
        let cnn = blocks("[1, 8, 8]", "family = \"cnn\"\nchannels = [4]\nhidden = [16]\nnorm = \"batch\"");
        assert_eq!(
            Batches::new(100, 1, &cnn).unwrap_err().to_string(),
            "train.batch_size = 1, but layer fc1_norm (BatchNorm) needs at least 2 samples per batch in training (one \
             sample gives it one value per channel and a NaN running variance); set train.batch_size >= 2, or set \
             student.norm = \"none\""
        );
        let plain = blocks("[64]", "family = \"mlp\"\nhidden = [16]");
        assert_eq!(Batches::new(1, 32, &plain).unwrap().steps_per_epoch, 1);
        assert_eq!(Batches::new(100, 1, &plain).unwrap().steps_per_epoch, 100);
    }

    #[test]
    fn data_parallel_batches_split_each_global_batch_between_the_ranks() {
        let _rng = crate::torch::test_rng::lock();
        let plain = blocks("[64]", "family = \"mlp\"\nhidden = [16]");
        // 2 ranks x 32: global batches of 64; 1000 = 15 x 64 + 40, the last split 20 + 20
        let b = Batches::sharded(1000, 32, 2, &plain).unwrap();
        assert_eq!((b.size, b.steps_per_epoch, b.dropped), (64, 16, 0));
        assert_eq!((b.shard(b.range(0), 0), b.shard(b.range(0), 1)), (0..32, 32..64));
        assert_eq!((b.shard(b.range(15), 0), b.shard(b.range(15), 1)), (960..980, 980..1000));
        // 3 ranks: 1000 = 10 x 96 + 40, shares 13, 13, 14
        let b = Batches::sharded(1000, 32, 3, &plain).unwrap();
        let last: Vec<_> = (0..3).map(|r| b.shard(b.range(10), r).len()).collect();
        assert_eq!(last, [13, 13, 14]);
        // a last batch of 1 sample cannot go to 2 ranks: dropped, and said so
        let b = Batches::sharded(129, 32, 2, &plain).unwrap();
        assert_eq!((b.steps_per_epoch, b.dropped), (2, 1));
        assert!(b.note().unwrap().contains("over 2 ranks leave a last batch of 1"), "{:?}", b.note());
        // BatchNorm1d: each rank needs 2 samples; a last batch of 3 over 2 ranks leaves one with 1
        let bn = blocks("[64]", "family = \"mlp\"\nhidden = [16]\nnorm = \"batch\"");
        assert_eq!(Batches::sharded(131, 32, 2, &bn).unwrap().dropped, 3);
        assert_eq!(Batches::sharded(132, 32, 2, &bn).unwrap().dropped, 0);
        let e = Batches::sharded(3, 32, 4, &plain).unwrap_err().to_string();
        assert!(e.contains("3 samples, fewer than the job's 4 ranks"), "{e}");
        // one rank is Batches::new
        assert_eq!(Batches::sharded(1437, 4, 1, &bn).unwrap(), Batches::new(1437, 4, &bn).unwrap());
    }
}
