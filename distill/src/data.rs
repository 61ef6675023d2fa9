//! Datasets from `.npz` files, normalisation, and the seeded order of mini-batches.
//!
//! An `.npz` holds `x` ([N, C, H, W] or [N, D]; uint8, any int or float dtype) and `y` (integer
//! labels [N], any int dtype). `x` stays in its stored dtype (uint8 pixels take a quarter of the
//! memory of floats) and is normalised per batch on the device: `((x * scale) - mean) / std`.
use std::path::{Path, PathBuf};

use estimator_wasm::schema::DataSpec;
use npyz::{npz::NpzArchive, DType, Order, TypeChar};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tch::{Device, Kind, Tensor};

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
    /// Reads `path` and checks it against `spec` (input shape, label range).
    ///
    /// # Errors
    /// [`DistillError::Data`] naming the file, the array and the fix.
    pub fn load(path: &Path, spec: &DataSpec) -> Result<Dataset> {
        let err = |m: String| DistillError::data(path, m);
        let mut npz = NpzArchive::open(path)
            .map_err(|e| err(format!("cannot open as .npz ({e}); write it with numpy.savez(path, x=..., y=...)")))?;
        let x = read_array(&mut npz, "x", path)?;
        let y = read_array(&mut npz, "y", path)?;
        let x = x.into_tensor(path, "x", false)?;
        let y = y.into_tensor(path, "y", true)?;
        let n = x.size()[0];
        if y.size() != [n] {
            return Err(err(format!("y has shape {:?} but x holds {n} samples: y must be [N] class ids", y.size())));
        }
        let sample: Vec<i64> = x.size()[1..].to_vec();
        let want: Vec<i64> = spec.input_shape.iter().map(|&d| d as i64).collect();
        let flat_ok = want.len() == 1 && sample.iter().product::<i64>() == want[0];
        if sample != want && !flat_ok {
            return Err(err(format!(
                "x has shape {:?} but data.input_shape = {:?}: set input_shape to x's shape without N, or reshape x",
                x.size(),
                spec.input_shape
            )));
        }
        let x = if flat_ok { x.reshape([n, want[0]]) } else { x };
        if n == 0 {
            return Err(err("x holds no samples".into()));
        }
        check_finite(&x, path)?;
        let (lo, hi) = (y.min().int64_value(&[]), y.max().int64_value(&[]));
        if lo < 0 || hi >= spec.classes as i64 {
            return Err(err(format!(
                "labels y span {lo}..={hi} but data.classes = {}: labels must be 0..{}",
                spec.classes,
                spec.classes - 1
            )));
        }
        Ok(Dataset { path: path.to_path_buf(), x, y, rows_in_file: None })
    }

    pub fn len(&self) -> usize {
        self.x.size()[0] as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Per-channel statistics of the raw inputs (channel = dim 1 of [N, C, H, W]; the whole
    /// sample for [N, D] vectors), accumulated in f64 over chunks of rows.
    pub fn channel_stats(&self) -> Vec<ChannelStats> {
        let channels = if self.x.dim() > 2 { self.x.size()[1] } else { 1 };
        let mut acc = vec![(f64::INFINITY, f64::NEG_INFINITY, 0.0, 0.0, 0.0); channels as usize];
        for (x, _) in self.chunks(4096) {
            // [C, values of that channel in this chunk]
            let x = x.to_kind(Kind::Double);
            let x = if channels > 1 { x.transpose(0, 1).reshape([channels, -1]) } else { x.reshape([1, -1]) };
            let get = |t: Tensor| Vec::<f64>::try_from(&t).expect("a [C] f64 tensor");
            let min = get(x.amin([1].as_slice(), false));
            let max = get(x.amax([1].as_slice(), false));
            let sum = get(x.sum_dim_intlist([1].as_slice(), false, Kind::Double));
            let sq = get(x.square().sum_dim_intlist([1].as_slice(), false, Kind::Double));
            let count = x.size()[1] as f64;
            for (c, a) in acc.iter_mut().enumerate() {
                *a = (a.0.min(min[c]), a.1.max(max[c]), a.2 + sum[c], a.3 + sq[c], a.4 + count);
            }
        }
        acc.into_iter()
            .map(|(min, max, sum, sq, n)| {
                let mean = sum / n;
                ChannelStats { min, max, mean, std: (sq / n - mean * mean).max(0.0).sqrt() }
            })
            .collect()
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

/// (samples, bytes of one sample as `Dataset` keeps it) from the header of `x` in an .npz,
/// without reading the data: uint8 stays 1 byte per value, every other dtype becomes fp32.
pub fn npz_summary(path: &Path) -> Option<(u64, u64)> {
    let mut npz = NpzArchive::open(path).ok()?;
    let x = npz.by_name("x").ok()??;
    let shape = x.shape().to_vec();
    let DType::Plain(ts) = x.dtype() else { return None };
    let per_value = if ts.type_char() == TypeChar::Uint && ts.size_field() == 1 { 1 } else { 4 };
    let n = *shape.first()?;
    Some((n, shape[1..].iter().product::<u64>() * per_value))
}

/// Range of one input channel of a dataset, in the file's units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChannelStats {
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    pub std: f64,
}

impl std::fmt::Display for ChannelStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{:.4}, {:.4}] (mean {:.4}, std {:.4})", self.min, self.max, self.mean, self.std)
    }
}

/// Refuses inputs holding NaN or inf, naming the first row that does.
fn check_finite(x: &Tensor, path: &Path) -> Result<()> {
    if !x.is_floating_point() {
        return Ok(());
    }
    let bad_rows = x.isfinite().logical_not().reshape([x.size()[0], -1]).any_dim(1, false).nonzero();
    let count = bad_rows.size()[0];
    if count == 0 {
        return Ok(());
    }
    let row = bad_rows.int64_value(&[0, 0]);
    let what = if bool::try_from(x.get(row).isnan().any()).unwrap_or(false) { "NaN" } else { "inf" };
    Err(DistillError::data(
        path,
        format!("x row {row} holds {what} ({count} row(s) in all hold NaN or inf): repair or drop those rows"),
    ))
}

/// `((x * scale) - mean) / std`, per channel, in fp32.
#[derive(Debug)]
pub struct Normalizer {
    scale: f64,
    mean: Option<Tensor>,
    std: Option<Tensor>,
}

impl Normalizer {
    pub fn new(spec: &DataSpec, device: Device) -> Normalizer {
        // [1, C, 1, 1] for images, [1, D] (or a scalar) for vectors.
        let rank = spec.input_shape.len() + 1;
        let per_channel = |v: &[f64]| {
            let t = Tensor::from_slice(v).to_kind(Kind::Float).to_device(device);
            let mut shape = vec![1i64; rank];
            shape[1] = v.len() as i64;
            if v.len() > 1 {
                t.reshape(shape.as_slice())
            } else {
                t
            }
        };
        let mean = (!spec.mean.is_empty()).then(|| per_channel(&spec.mean));
        let std = (!spec.std.is_empty()).then(|| per_channel(&spec.std));
        Normalizer { scale: spec.scale, mean, std }
    }

    /// Float [B, ...] normalised inputs for a raw batch of any dtype.
    pub fn apply(&self, x: &Tensor) -> Tensor {
        let mut x = x.to_kind(Kind::Float) * self.scale;
        if let Some(mean) = &self.mean {
            x -= mean;
        }
        if let Some(std) = &self.std {
            x /= std;
        }
        x
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

/// An array read from an npz member, in one of the element types we accept.
enum Array {
    U8(Vec<u8>, Vec<u64>),
    I64(Vec<i64>, Vec<u64>),
    F32(Vec<f32>, Vec<u64>),
}

fn read_array<R: std::io::Read + std::io::Seek>(npz: &mut NpzArchive<R>, name: &str, path: &Path) -> Result<Array> {
    let err = |m: String| DistillError::data(path, m);
    let file = npz
        .by_name(name)
        .map_err(|e| err(format!("cannot read array {name} ({e})")))?
        .ok_or_else(|| err(format!("has no array named {name}: save it with numpy.savez(path, x=inputs, y=labels)")))?;
    let shape = file.shape().to_vec();
    if file.order() == Order::Fortran {
        return Err(err(format!("array {name} is Fortran-ordered: save numpy.ascontiguousarray({name})")));
    }
    let DType::Plain(ts) = file.dtype() else {
        return Err(err(format!("array {name} has a structured dtype: save plain numbers")));
    };
    let bad = |e: std::io::Error| err(format!("array {name} is truncated or corrupt ({e})"));
    let (kind, size) = (ts.type_char(), ts.size_field());
    let to_i64 = |v: Vec<i64>| Array::I64(v, shape.clone());
    Ok(match (kind, size) {
        (TypeChar::Uint, 1) => Array::U8(file.into_vec::<u8>().map_err(bad)?, shape),
        (TypeChar::Uint, 2) => to_i64(file.into_vec::<u16>().map_err(bad)?.into_iter().map(i64::from).collect()),
        (TypeChar::Uint, 4) => to_i64(file.into_vec::<u32>().map_err(bad)?.into_iter().map(i64::from).collect()),
        (TypeChar::Uint, 8) => {
            let v = file.into_vec::<u64>().map_err(bad)?;
            to_i64(v.into_iter().map(|u| i64::try_from(u).unwrap_or(i64::MAX)).collect())
        }
        (TypeChar::Int, 1) => to_i64(file.into_vec::<i8>().map_err(bad)?.into_iter().map(i64::from).collect()),
        (TypeChar::Int, 2) => to_i64(file.into_vec::<i16>().map_err(bad)?.into_iter().map(i64::from).collect()),
        (TypeChar::Int, 4) => to_i64(file.into_vec::<i32>().map_err(bad)?.into_iter().map(i64::from).collect()),
        (TypeChar::Int, 8) => to_i64(file.into_vec::<i64>().map_err(bad)?),
        (TypeChar::Float, 2) => {
            let v = file.into_vec::<half::f16>().map_err(bad)?;
            Array::F32(v.into_iter().map(f32::from).collect(), shape)
        }
        (TypeChar::Float, 4) => Array::F32(file.into_vec::<f32>().map_err(bad)?, shape),
        (TypeChar::Float, 8) => {
            Array::F32(file.into_vec::<f64>().map_err(bad)?.into_iter().map(|v| v as f32).collect(), shape)
        }
        _ => return Err(err(format!("array {name} has dtype {ts}: use uint8, an int or a float dtype"))),
    })
}

impl Array {
    /// Converts to a tensor; `labels` demands integers (Int64 out).
    fn into_tensor(self, path: &Path, name: &str, labels: bool) -> Result<Tensor> {
        let shape_of = |s: &[u64]| s.iter().map(|&d| d as i64).collect::<Vec<i64>>();
        let (t, shape) = match self {
            Array::U8(v, s) if labels => (Tensor::from_slice(&v).to_kind(Kind::Int64), s),
            Array::U8(v, s) => (Tensor::from_slice(&v), s),
            Array::I64(v, s) if labels => (Tensor::from_slice(&v), s),
            Array::I64(v, s) => (Tensor::from_slice(&v).to_kind(Kind::Float), s),
            Array::F32(_, _) if labels => {
                return Err(DistillError::data(path, format!("{name} holds floats: labels must be integer class ids")));
            }
            Array::F32(v, s) => (Tensor::from_slice(&v), s),
        };
        let shape = shape_of(&shape);
        if !labels && shape.len() < 2 {
            return Err(DistillError::data(
                path,
                format!("{name} has shape {shape:?}: expected [N, C, H, W] or [N, D]"),
            ));
        }
        Ok(t.reshape(shape.as_slice()))
    }
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
    fn non_finite_inputs_are_refused_with_the_first_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.npz");
        let x = Tensor::from_slice(&[1f32, 2., 3., f32::INFINITY, 5., f32::NAN, 7., 8.]).reshape([4, 2]);
        Tensor::write_npz(&[("x", &x), ("y", &Tensor::from_slice(&[0i64, 1, 0, 1]))], &path).unwrap();
        let spec =
            estimator_wasm::Config::from_toml_str("[data]\ninput_shape=[2]\nclasses=2\n[student]\nfamily=\"mlp\"")
                .unwrap()
                .data;
        let e = Dataset::load(&path, &spec).unwrap_err().to_string();
        assert!(
            e.ends_with("d.npz: x row 1 holds inf (2 row(s) in all hold NaN or inf): repair or drop those rows"),
            "{e}"
        );
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

    #[test]
    fn channel_stats_per_channel() {
        // channel 0 holds 1, 2, 5, 6; channel 1 holds 3, 4, 7, 8: std sqrt(4.25) each
        let x = Tensor::from_slice(&[1u8, 2, 3, 4, 5, 6, 7, 8]).reshape([2, 2, 1, 2]);
        let d = Dataset { path: "d".into(), x, y: Tensor::from_slice(&[0i64, 1]), rows_in_file: None };
        let s = d.channel_stats();
        let std = 4.25f64.sqrt();
        assert_eq!(s[0], ChannelStats { min: 1.0, max: 6.0, mean: 3.5, std });
        assert_eq!(s[1], ChannelStats { min: 3.0, max: 8.0, mean: 5.5, std });
    }
}
