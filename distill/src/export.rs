//! Exporting a trained student: safetensors (for reuse in PyTorch or Rust) and TorchScript
//! (for `torch.jit.load`), both written through a temp name, a flush and a rename (`durable`).
//!
//! * `student.safetensors`: every variable under its cfg.toml layer id, e.g. `conv1.weight`,
//!   `conv1_bn.running_mean`, `head.bias`; the same names as a PyTorch module with those
//!   attribute names, so `model.load_state_dict(safetensors.torch.load_file(...), strict=False)`
//!   fills it.
//! * `student.pt`: the eval-mode forward traced into TorchScript. Inputs are normalised floats
//!   [B, ...input_shape] (see `data.scale/mean/std` in report.json); outputs logits [B, classes].
//!   Weights are baked in as constants, so Python can run it but not fine-tune it.
use std::path::{Path, PathBuf};

use tch::{nn::VarStore, CModule, Tensor};

use crate::error::{DistillError, Result};
use crate::student::Student;

/// Writes `vs` to `path` (a `.safetensors` file).
pub fn save_safetensors(vs: &VarStore, path: &Path) -> Result<()> {
    let tmp = tmp_beside(path);
    vs.save(&tmp).map_err(|e| DistillError::Torch(format!("writing {}: {e}", path.display())))?;
    crate::durable::publish(&tmp, path).map_err(|e| DistillError::io(path, e))
}

/// Traces `student` in eval mode on `example` [B, ...] and writes TorchScript to `path`.
/// Freezes `vs` (tracing cannot capture tensors that require grad).
pub fn save_torchscript(student: &Student, vs: &mut VarStore, example: &Tensor, path: &Path) -> Result<()> {
    vs.freeze();
    let module = CModule::create_by_tracing("Student", "forward", &[example.shallow_clone()], &mut |inputs| {
        vec![student.forward(&inputs[0], false)]
    })?;
    let tmp = tmp_beside(path);
    module.save(&tmp)?;
    crate::durable::publish(&tmp, path).map_err(|e| DistillError::io(path, e))
}

/// `dir/name.tmp.ext` for `dir/name.ext`: the extension must stay last because libtorch and
/// tch pick the file format from it.
fn tmp_beside(path: &Path) -> PathBuf {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let ext = path.extension().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!("{stem}.tmp.{ext}"))
}

/// Size of a file in bytes (0 when it cannot be read).
pub fn file_bytes(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}
