//! The tensors of a Hugging Face model folder: `model.safetensors`, or the shards that
//! `model.safetensors.index.json` maps each name to. Only the headers are read at open (their
//! layout by the `safetensors` crate's [`Metadata`]); a tensor's bytes are read when it is taken,
//! straight into a CPU tensor of the file's dtype, then moved and cast to the kind the teacher
//! runs in, one tensor at a time: a 16-bit checkpoint never exists whole in host memory, nor in
//! fp32 beyond the one tensor being cast.
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use safetensors::tensor::Metadata;
use safetensors::Dtype;
use serde_json::Value;
use tch::{Device, Kind, Tensor};

use crate::host::error::{DistillError, Result};

/// The single-file checkpoint and the index of a sharded one.
pub const SINGLE: &str = "model.safetensors";
pub const INDEX: &str = "model.safetensors.index.json";

/// Where one tensor lies: its file, dtype, shape and byte range.
#[derive(Debug, Clone)]
struct Entry {
    file: PathBuf,
    dtype: Dtype,
    shape: Vec<i64>,
    /// Absolute offset of its first byte in `file`, and its length.
    start: u64,
    len: usize,
}

/// The tensors of a checkpoint by name, their bytes still on disk.
#[derive(Debug)]
pub struct Checkpoint {
    dir: PathBuf,
    entries: HashMap<String, Entry>,
}

impl Checkpoint {
    /// Reads the headers of the checkpoint in the model folder `dir`.
    ///
    /// # Errors
    /// [`DistillError::Teacher`] naming the file: no checkpoint in `dir`, an index naming a file
    /// that is not there, a header that is not safetensors, a tensor whose dtype is not F32, F16
    /// or BF16, or a byte range past the file's end.
    pub fn open(dir: &Path) -> Result<Checkpoint> {
        let files: Vec<PathBuf> = if dir.join(SINGLE).is_file() {
            vec![dir.join(SINGLE)]
        } else if dir.join(INDEX).is_file() {
            shards(dir)?
        } else {
            return Err(DistillError::teacher(
                dir,
                format!("no {SINGLE} or {INDEX}: a Hugging Face model folder holds its weights as safetensors (save_pretrained writes them)"),
            ));
        };
        let mut entries = HashMap::new();
        for file in files {
            read_header(&file, &mut entries)?;
        }
        Ok(Checkpoint { dir: dir.to_path_buf(), entries })
    }

    /// Bytes of the safetensors files in the folder `dir` (for the report's teacher size).
    pub fn file_bytes(dir: &Path) -> u64 {
        let files = std::fs::read_dir(dir).into_iter().flatten().flatten();
        let weights = files.filter(|f| f.file_name().to_string_lossy().ends_with(".safetensors"));
        weights.filter_map(|f| f.metadata().ok()).map(|m| m.len()).sum()
    }

    /// Parameter elements of every tensor in the checkpoint.
    pub fn elements(&self) -> u64 {
        self.entries.values().map(|e| e.shape.iter().product::<i64>() as u64).sum()
    }

    /// Whether every tensor of the checkpoint is stored in `kind` (its values are then the
    /// file's exactly once loaded in `kind`; in fp32 they are whatever the file's dtype).
    pub fn stored_in(&self, kind: Kind) -> bool {
        kind == Kind::Float || self.entries.values().all(|e| file_kind(e.dtype) == kind)
    }

    /// Whether the checkpoint holds `name`.
    pub fn has(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// The tensor `name`, checked to be of shape `shape`, on `device` in `kind`.
    ///
    /// # Errors
    /// [`DistillError::Teacher`] naming the tensor and both shapes when it is missing or of
    /// another shape, or the file when it cannot be read.
    pub fn tensor(&self, name: &str, shape: &[i64], kind: Kind, device: Device) -> Result<Tensor> {
        let e = self.entries.get(name).ok_or_else(|| {
            DistillError::teacher(&self.dir, format!("tensor {name} is missing (config.json makes it {shape:?})"))
        })?;
        if e.shape != shape {
            return Err(DistillError::teacher(
                &e.file,
                format!("tensor {name} has shape {:?} but config.json makes it {shape:?}", e.shape),
            ));
        }
        let io = |err: std::io::Error| DistillError::teacher(&e.file, format!("cannot read tensor {name} ({err})"));
        let mut bytes = vec![0u8; e.len];
        let mut f = File::open(&e.file).map_err(io)?;
        f.seek(SeekFrom::Start(e.start)).map_err(io)?;
        f.read_exact(&mut bytes).map_err(io)?;
        let t = Tensor::f_from_data_size(&bytes, shape, file_kind(e.dtype))?;
        drop(bytes);
        Ok(t.to_device(device).to_kind(kind))
    }
}

/// The tensor kind of a safetensors dtype among those [`read_header`] admits.
fn file_kind(dtype: Dtype) -> Kind {
    match dtype {
        Dtype::F16 => Kind::Half,
        Dtype::BF16 => Kind::BFloat16,
        _ => Kind::Float,
    }
}

/// The shard files `dir`'s index names, each once, in order.
fn shards(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join(INDEX);
    let err = |m: String| DistillError::teacher(&index, m);
    let text = std::fs::read_to_string(&index).map_err(|e| err(format!("cannot read it ({e})")))?;
    let json: Value = serde_json::from_str(&text).map_err(|e| err(format!("not JSON ({e})")))?;
    let map = json.get("weight_map").and_then(Value::as_object).ok_or_else(|| err("has no weight_map".into()))?;
    let mut files: BTreeMap<String, &str> = BTreeMap::new();
    for (name, file) in map {
        let file = file.as_str().ok_or_else(|| err(format!("weight_map[\"{name}\"] is not a file name")))?;
        files.entry(file.to_string()).or_insert(name);
    }
    files
        .into_iter()
        .map(|(file, name)| match dir.join(&file) {
            path if path.is_file() => Ok(path),
            _ => Err(err(format!(
                "names {file} (for {name}, among others), which is not in {}: copy every shard the index names",
                dir.display()
            ))),
        })
        .collect()
}

/// Adds the tensors of the safetensors file `file`'s header to `entries`.
fn read_header(file: &Path, entries: &mut HashMap<String, Entry>) -> Result<()> {
    let err = |m: String| DistillError::teacher(file, m);
    let mut f = File::open(file).map_err(|e| err(format!("cannot read it ({e})")))?;
    let size = f.metadata().map_err(|e| err(format!("cannot read it ({e})")))?.len();
    let mut head = [0u8; 8];
    f.read_exact(&mut head).map_err(|_| err("too short for a safetensors file".into()))?;
    let n = u64::from_le_bytes(head);
    if n.saturating_add(8) > size || n > 100_000_000 {
        return Err(err(format!("not a safetensors file (a header of {n} bytes in a file of {size})")));
    }
    let mut text = vec![0u8; n as usize];
    f.read_exact(&mut text).map_err(|e| err(format!("cannot read its header ({e})")))?;
    // dtypes first, by name: the crate's header type does not know every dtype a file may hold
    let raw: serde_json::Map<String, Value> =
        serde_json::from_slice(&text).map_err(|e| err(format!("its header is not JSON ({e})")))?;
    for (name, info) in raw.iter().filter(|(k, _)| *k != "__metadata__") {
        let dtype = info.get("dtype").and_then(Value::as_str).unwrap_or("?");
        if !matches!(dtype, "F32" | "F16" | "BF16") {
            return Err(err(format!(
                "tensor {name} is {dtype}: distill reads F32, F16 and BF16 weights; save the model in one of them \
                 (model.to(torch.bfloat16).save_pretrained(DIR)), not quantised"
            )));
        }
    }
    let metadata: Metadata =
        serde_json::from_slice(&text).map_err(|e| err(format!("not a safetensors header ({e})")))?;
    let data_start = 8 + n;
    for (name, info) in metadata.tensors() {
        let (start, end) = info.data_offsets;
        let elements: usize = info.shape.iter().product();
        if end < start || end - start != elements * info.dtype.size() || data_start + end as u64 > size {
            return Err(err(format!(
                "tensor {name}: its byte range {start}..{end} does not fit its shape {:?} or the file",
                info.shape
            )));
        }
        let shape = info.shape.iter().map(|&d| d as i64).collect();
        let entry = Entry {
            file: file.to_path_buf(),
            dtype: info.dtype,
            shape,
            start: data_start + start as u64,
            len: end - start,
        };
        entries.insert(name, entry);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder whose `model.safetensors` holds `w` [2, 2] in bf16: 1.0, -2.5, 0.15625 and
    /// 65536.0, each exact in bf16 (bits 0x3F80, 0xC020, 0x3E20, 0x4780, little-endian).
    fn bf16_folder() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let bytes: Vec<u8> = [0x3F80u16, 0xC020, 0x3E20, 0x4780].iter().flat_map(|b| b.to_le_bytes()).collect();
        let view = safetensors::tensor::TensorView::new(Dtype::BF16, vec![2, 2], &bytes).unwrap();
        safetensors::tensor::serialize_to_file([("w", view)], &None, &dir.path().join(SINGLE)).unwrap();
        dir
    }

    #[test]
    fn a_bf16_tensor_loads_as_bf16_with_its_values_and_no_fp32_upcast() {
        let dir = bf16_folder();
        let checkpoint = Checkpoint::open(dir.path()).unwrap();
        let t = checkpoint.tensor("w", &[2, 2], Kind::BFloat16, Device::Cpu).unwrap();
        // 2 bytes an element: the tensor holds the file's bf16, not an fp32 copy of it
        assert_eq!((t.kind(), t.size(), t.numel() * t.kind().elt_size_in_bytes()), (Kind::BFloat16, vec![2, 2], 8));
        let values = Vec::<f32>::try_from(t.to_kind(Kind::Float).flatten(0, -1)).unwrap();
        assert_eq!(values, [1.0, -2.5, 0.15625, 65536.0]);
        // asked for fp32 (teacher.precision = "fp32"), the same values widened
        let wide = checkpoint.tensor("w", &[2, 2], Kind::Float, Device::Cpu).unwrap();
        assert_eq!(Vec::<f32>::try_from(wide.flatten(0, -1)).unwrap(), [1.0, -2.5, 0.15625, 65536.0]);
        assert_eq!(
            (checkpoint.stored_in(Kind::BFloat16), checkpoint.stored_in(Kind::Half), checkpoint.stored_in(Kind::Float)),
            (true, false, true)
        );
    }

    #[test]
    fn a_tensor_of_another_shape_is_named_with_both_shapes() {
        let dir = bf16_folder();
        let err = Checkpoint::open(dir.path()).unwrap().tensor("w", &[4], Kind::BFloat16, Device::Cpu).unwrap_err();
        assert!(err.to_string().ends_with("tensor w has shape [2, 2] but config.json makes it [4]"), "{err}");
    }
}
