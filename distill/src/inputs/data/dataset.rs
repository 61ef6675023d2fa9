//! The in-memory dataset every kind of data file loads into, with what the trainer needs from
//! it (length, a ready batch of examples by index, consecutive chunks, a held-out split, the
//! file row of a row for messages), and the seeded order of mini-batches. Each kind of example
//! (images and vectors, [`Images`]; sentences, [`Text`]) is one variant of [`Examples`] and owns
//! how its batches are prepared (images are normalised, sentences padded); nothing outside
//! `data/` prepares inputs.
use std::path::{Path, PathBuf};

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tch::{Device, Kind, Tensor};

use super::buckets::bucketed;
use super::images::Images;
use super::input::{Batch, ModelInput};
use super::normalize::ChannelStats;
use super::text::{Text, TextStats};
use crate::host::error::{DistillError, Result};

/// The examples of a dataset, one variant per kind of input.
#[derive(Debug)]
pub enum Examples {
    /// Images [N, C, H, W] or vectors [N, D], normalised per batch.
    Images(Images),
    /// Sentences as token ids, padded per batch to its longest (ids and attention mask).
    Text(Text),
}

impl Examples {
    fn len(&self) -> usize {
        match self {
            Examples::Images(i) => i.len(),
            Examples::Text(t) => t.len(),
        }
    }

    fn select(&self, index: &Tensor) -> Examples {
        match self {
            Examples::Images(i) => Examples::Images(i.select(index)),
            Examples::Text(t) => Examples::Text(t.select(index)),
        }
    }

    fn into_device(self, device: Device) -> Examples {
        match self {
            Examples::Images(i) => Examples::Images(i.to_device(device)),
            Examples::Text(t) => Examples::Text(t.into_device(device)),
        }
    }

    fn input(&self, index: &Tensor) -> ModelInput {
        match self {
            Examples::Images(i) => i.input(index),
            Examples::Text(t) => t.input(index),
        }
    }

    fn input_range(&self, start: i64, len: i64) -> ModelInput {
        match self {
            Examples::Images(i) => i.input_range(start, len),
            Examples::Text(t) => t.input_range(start, len),
        }
    }
}

/// Examples and their labels, on one device.
#[derive(Debug)]
pub struct Dataset {
    path: PathBuf,
    examples: Examples,
    /// Labels [N] (Int64); `None` for unlabelled data.
    labels: Option<Tensor>,
    /// The file row of each row [N] Int64 when they differ (after [`Dataset::split`]), so that
    /// messages name the row of the file; `None` when row `i` is the file's row `i`.
    rows_in_file: Option<Tensor>,
}

impl Dataset {
    /// The dataset of `examples` and `labels` ([N] Int64) read from the file `path`.
    pub fn new(path: PathBuf, examples: Examples, labels: Option<Tensor>) -> Dataset {
        Dataset { path, examples, labels, rows_in_file: None }
    }

    /// The data file it was read from (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn len(&self) -> usize {
        self.examples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Labels [N] (Int64); `None` for unlabelled data.
    pub fn labels(&self) -> Option<&Tensor> {
        self.labels.as_ref()
    }

    /// The image (or vector) examples, for what only they have (raw values, channel
    /// statistics); `None` for other kinds.
    pub fn images(&self) -> Option<&Images> {
        match &self.examples {
            Examples::Images(i) => Some(i),
            Examples::Text(_) => None,
        }
    }

    /// The sentences of a text dataset, as token ids; `None` for other kinds.
    pub fn text(&self) -> Option<&Text> {
        match &self.examples {
            Examples::Text(t) => Some(t),
            Examples::Images(_) => None,
        }
    }

    /// What reading a text file counted (sentences, blank lines skipped, truncated sentences,
    /// tokens): the file's, also after [`Dataset::split`]; `None` for other kinds.
    pub fn text_stats(&self) -> Option<&TextStats> {
        self.text().map(Text::stats)
    }

    /// Bytes of one sample as the dataset keeps it (for the memory plan); for text, as a batch
    /// holds it at the widest (ids and mask, Int64, `data.input_shape[0]` tokens).
    pub fn sample_bytes(&self) -> u64 {
        match &self.examples {
            Examples::Images(i) => i.sample_bytes(),
            Examples::Text(t) => t.sample_bytes(),
        }
    }

    /// Per-channel statistics of the raw inputs (see [`super::normalize::channel_stats`]);
    /// empty for inputs without channels.
    pub fn channel_stats(&self) -> Vec<ChannelStats> {
        self.images().map(Images::channel_stats).unwrap_or_default()
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
            examples: self.examples.select(&index(idx)),
            labels: self.labels.as_ref().map(|y| y.index_select(0, &index(idx))),
            rows_in_file: Some(index(idx)),
        };
        Ok((part(train_idx), part(test_idx)))
    }

    /// Moves the arrays to `device` (once, before training).
    pub fn to_device(self, device: Device) -> Dataset {
        Dataset {
            path: self.path,
            examples: self.examples.into_device(device),
            labels: self.labels.map(|y| y.to_device(device)),
            rows_in_file: self.rows_in_file.map(|r| r.to_device(device)),
        }
    }

    /// The rows of the file [B] that rows `index` ([B] Int64, any device) are, for messages.
    pub fn file_rows(&self, index: &Tensor) -> Tensor {
        match &self.rows_in_file {
            Some(rows) => rows.index_select(0, &index.to_device(rows.device())),
            None => index.shallow_clone(),
        }
    }

    /// Rows `index` (Int64 [B] on the same device), ready for the networks.
    pub fn batch(&self, index: &Tensor) -> Batch {
        Batch {
            input: self.examples.input(index),
            labels: self.labels.as_ref().map(|y| y.index_select(0, index)),
            index: index.shallow_clone(),
        }
    }

    /// The training order of epoch `epoch` in batches of `batch` samples: the [`permutation`]
    /// of the samples, and for text its length-bucketed form ([`super::buckets::bucketed`]), so
    /// that sentences of similar length share a batch. Rebuilt exactly from (`seed`, `epoch`).
    pub fn epoch_order(&self, seed: u64, epoch: u64, batch: usize) -> Vec<i64> {
        let order = permutation(self.len(), seed, epoch);
        match &self.examples {
            Examples::Images(_) => order,
            Examples::Text(t) => bucketed(order, |i| t.sentence(i).len(), batch, seed, epoch),
        }
    }

    /// Batches of at most `size` rows covering every row once, for passes whose outputs are put
    /// back in row order (evaluation, the teacher's cache): consecutive rows for images; for
    /// text, rows sorted by length, so a batch pads little. Each batch's `index` says its rows.
    pub fn eval_batches(&self, size: usize) -> Box<dyn Iterator<Item = Batch> + '_> {
        match &self.examples {
            Examples::Images(_) => Box::new(self.chunks(size)),
            Examples::Text(t) => {
                let mut order: Vec<i64> = (0..self.len() as i64).collect();
                order.sort_by_key(|&i| t.sentence(i as usize).len());
                let device = self.labels.as_ref().map_or(Device::Cpu, Tensor::device);
                Box::new(
                    order
                        .chunks(size.max(1))
                        .map(|rows| Tensor::from_slice(rows).to_device(device))
                        .collect::<Vec<_>>()
                        .into_iter()
                        .map(move |index| self.batch(&index)),
                )
            }
        }
    }

    /// Consecutive batches of at most `size` rows, in order (for evaluation).
    pub fn chunks(&self, size: usize) -> impl Iterator<Item = Batch> + '_ {
        let n = self.len() as i64;
        (0..n).step_by(size).map(move |start| {
            let len = (size as i64).min(n - start);
            Batch {
                input: self.examples.input_range(start, len),
                labels: self.labels.as_ref().map(|y| y.narrow(0, start, len)),
                index: Tensor::arange_start(start, start + len, (Kind::Int64, Device::Cpu)),
            }
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
        let spec =
            estimator_wasm::Config::from_toml_str("[data]\ninput_shape=[1]\nclasses=10\n[student]\nfamily=\"mlp\"")
                .unwrap()
                .data;
        let images = Images::new(y.reshape([10, 1]), super::super::Normalizer::new(&spec, Device::Cpu));
        let d = Dataset::new("d".into(), Examples::Images(images), Some(y));
        let (train, test) = d.split(0.3, 5).unwrap();
        for part in [&train, &test] {
            let all = Tensor::arange(part.len() as i64, (Kind::Int64, Device::Cpu));
            let labels = part.labels().unwrap();
            assert_eq!(Vec::<i64>::try_from(part.file_rows(&all)).unwrap(), Vec::<i64>::try_from(labels).unwrap());
        }
        assert_ne!(Vec::<i64>::try_from(test.labels().unwrap()).unwrap(), vec![0, 1, 2], "a shuffled split");
        // images train in the plain permutation's order
        assert_eq!(train.epoch_order(5, 2, 3), permutation(train.len(), 5, 2));
    }
}
