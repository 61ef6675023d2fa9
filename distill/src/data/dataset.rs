//! The in-memory dataset every kind of data file loads into, with what the trainer needs from
//! it (length, a batch of inputs and labels by index, consecutive chunks, a held-out split, the
//! file row of a row for messages), and the seeded order of mini-batches.
use std::path::PathBuf;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tch::{Device, Tensor};

use crate::error::{DistillError, Result};

/// Samples and labels, on one device.
#[derive(Debug)]
pub struct Dataset {
    pub path: PathBuf,
    /// Inputs [N, ...input_shape], Uint8 or Float.
    pub x: Tensor,
    /// Labels [N], Int64.
    pub y: Tensor,
    /// The file row of each row [N] Int64 when they differ (after [`Dataset::split`]), so that
    /// messages name the row of the file; `None` when row `i` is the file's row `i`.
    pub rows_in_file: Option<Tensor>,
}

impl Dataset {
    pub fn len(&self) -> usize {
        self.x.size()[0] as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Splits off a held-out tail of a seeded permutation: (train, test) with `round(n * fraction)`
    /// test samples.
    pub fn split(self, fraction: f64, seed: u64) -> Result<(Dataset, Dataset)> {
        let n = self.len();
        let n_test = ((n as f64) * fraction).round() as usize;
        if n_test == 0 || n_test >= n {
            return Err(DistillError::data(
                &self.path,
                format!("data.holdout = {fraction} leaves no train or no test samples out of {n}"),
            ));
        }
        let order = permutation(n, seed, u64::MAX);
        let index = |r: &[i64]| Tensor::from_slice(r);
        let (train_idx, test_idx) = order.split_at(n - n_test);
        let part = |idx: &[i64]| Dataset {
            path: self.path.clone(),
            x: self.x.index_select(0, &index(idx)),
            y: self.y.index_select(0, &index(idx)),
            rows_in_file: Some(index(idx)),
        };
        Ok((part(train_idx), part(test_idx)))
    }

    /// Moves the arrays to `device` (once, before training).
    pub fn to_device(self, device: Device) -> Dataset {
        let rows_in_file = self.rows_in_file.map(|r| r.to_device(device));
        Dataset { path: self.path, x: self.x.to_device(device), y: self.y.to_device(device), rows_in_file }
    }

    /// The rows of the file [B] that rows `index` ([B] Int64, any device) are, for messages.
    pub fn file_rows(&self, index: &Tensor) -> Tensor {
        match &self.rows_in_file {
            Some(rows) => rows.index_select(0, &index.to_device(rows.device())),
            None => index.shallow_clone(),
        }
    }

    /// Rows `index` (Int64 [B] on the same device) as (x [B, ...], y [B]).
    pub fn batch(&self, index: &Tensor) -> (Tensor, Tensor) {
        (self.x.index_select(0, index), self.y.index_select(0, index))
    }

    /// Consecutive batches of at most `size` rows, in order (for evaluation).
    pub fn chunks(&self, size: usize) -> impl Iterator<Item = (Tensor, Tensor)> + '_ {
        let n = self.len() as i64;
        (0..n).step_by(size).map(move |start| {
            let len = (size as i64).min(n - start);
            (self.x.narrow(0, start, len), self.y.narrow(0, start, len))
        })
    }
}

/// The training order of epoch `epoch`: a Fisher-Yates shuffle of 0..n from a ChaCha8 stream
/// seeded by (`seed`, `epoch`), so any epoch's order can be rebuilt on resume without replaying
/// earlier ones.
pub fn permutation(n: usize, seed: u64, epoch: u64) -> Vec<i64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(epoch);
    let mut order: Vec<i64> = (0..n as i64).collect();
    order.shuffle(&mut rng);
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    #[test]
    fn permutation_is_a_seeded_shuffle_per_epoch() {
        let a = permutation(100, 7, 0);
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..100).collect::<Vec<i64>>());
        assert_eq!(a, permutation(100, 7, 0));
        assert_ne!(a, permutation(100, 7, 1));
        assert_ne!(a, permutation(100, 8, 0));
    }

    #[test]
    fn split_rows_map_back_to_the_file_rows() {
        // y[i] = i, so the file row of every split row is its label
        let y = Tensor::arange(10, (Kind::Int64, Device::Cpu));
        let d = Dataset { path: "d".into(), x: y.reshape([10, 1]), y, rows_in_file: None };
        let (train, test) = d.split(0.3, 5).unwrap();
        for part in [&train, &test] {
            let all = Tensor::arange(part.len() as i64, (Kind::Int64, Device::Cpu));
            assert_eq!(Vec::<i64>::try_from(part.file_rows(&all)).unwrap(), Vec::<i64>::try_from(&part.y).unwrap());
        }
        assert_ne!(Vec::<i64>::try_from(&test.y).unwrap(), vec![0, 1, 2], "a shuffled split");
    }
}
