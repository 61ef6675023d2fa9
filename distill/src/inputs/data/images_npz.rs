//! Image (or vector) datasets from `.npz` files.
//!
//! An `.npz` holds `x` ([N, C, H, W] or [N, D]; uint8, any int or float dtype) and `y` (integer
//! labels [N], any int dtype). `x` stays in its stored dtype (uint8 pixels take a quarter of the
//! memory of floats) and is normalised per batch on the device ([`Images`]):
//! `((x * scale) - mean) / std`.
use std::path::Path;

use estimator_wasm::schema::DataSpec;
use npyz::{npz::NpzArchive, DType, Order, TypeChar};
use tch::{Device, Kind, Tensor};

use super::dataset::{Dataset, Examples};
use super::images::Images;
use super::normalize::Normalizer;
use crate::host::error::{DistillError, Result};

/// Reads the `.npz` at `path` and checks it against `spec` (input shape, label range).
///
/// # Errors
/// [`DistillError::Data`] naming the file, the array and the fix.
pub fn load(path: &Path, spec: &DataSpec) -> Result<Dataset> {
    let err = |m: String| DistillError::data(path, m);
    if let Err(e) = std::fs::metadata(path) {
        return Err(err(format!("cannot read ({e}): {}", super::check_paths())));
    }
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
    let images = Images::new(x, Normalizer::new(spec, Device::Cpu));
    Ok(Dataset::new(path.to_path_buf(), Examples::Images(images), Some(y)))
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

/// An array read from an npz member, in one of the element types we accept.
enum Array {
    U8(Vec<u8>, Vec<u64>),
    I64(Vec<i64>, Vec<u64>),
    F32(Vec<f32>, Vec<u64>),
}

fn read_array<R: std::io::Read + std::io::Seek>(npz: &mut NpzArchive<R>, name: &str, path: &Path) -> Result<Array> {
    let err = |m: String| DistillError::data(path, m);
    // what the file holds, for a missing array: `arr_0, arr_1` from numpy.savez(path, a, b)
    let mut held: Vec<String> = npz.array_names().map(|n| format!("{n:?}")).collect();
    held.sort();
    let held = if held.is_empty() { "none".to_string() } else { held.join(", ") };
    let file = npz.by_name(name).map_err(|e| err(format!("cannot read array {name} ({e})")))?.ok_or_else(|| {
        err(format!(
            "has no array named {name:?} (it holds {held}): save it with numpy.savez(path, x=inputs, y=labels), the arrays named by keyword"
        ))
    })?;
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
    fn non_finite_inputs_are_refused_with_the_first_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.npz");
        let x = Tensor::from_slice(&[1f32, 2., 3., f32::INFINITY, 5., f32::NAN, 7., 8.]).reshape([4, 2]);
        Tensor::write_npz(&[("x", &x), ("y", &Tensor::from_slice(&[0i64, 1, 0, 1]))], &path).unwrap();
        let spec =
            estimator_wasm::Config::from_toml_str("[data]\ninput_shape=[2]\nclasses=2\n[student]\nfamily=\"mlp\"")
                .unwrap()
                .data;
        let e = load(&path, &spec).unwrap_err().to_string();
        assert!(
            e.ends_with("d.npz: x row 1 holds inf (2 row(s) in all hold NaN or inf): repair or drop those rows"),
            "{e}"
        );
        // a missing file says where its relative path was taken from
        let e = load(&dir.path().join("none.npz"), &spec).unwrap_err().to_string();
        assert!(e.contains("none.npz: cannot read ("), "{e}");
        assert!(e.ends_with(&format!("): {}", super::super::check_paths())), "{e}");
    }
}
