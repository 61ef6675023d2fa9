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
//!
//! Both are written from a CPU copy of the student ([`cpu_copy`]), so they load on a CPU-only
//! machine (`torch.jit.load` without `map_location`) whatever device trained it.
use std::path::{Path, PathBuf};

use estimator_wasm::schema::Config;
use tch::{nn::VarStore, CModule, Device, Tensor};

use crate::error::{DistillError, Result};
use crate::student::Student;

/// Writes the student of `spec` (variables in `vs`, on any device) to `safetensors` and, traced
/// in eval mode on `example` [B, ...input_shape], to `torchscript`; both from a CPU copy.
///
/// # Errors
/// [`DistillError::Torch`] when libtorch cannot copy, trace or write; I/O errors of the rename.
pub fn save_student(
    spec: &Config,
    vs: &VarStore,
    student: &Student,
    example: &Tensor,
    safetensors: &Path,
    torchscript: &Path,
) -> Result<()> {
    let (mut cpu, student) = cpu_copy(spec, vs, student)?;
    save_safetensors(&cpu, safetensors)?;
    save_torchscript(&student, &mut cpu, &example.to_device(Device::Cpu), torchscript)
}

/// A copy of `student` (built from `spec`, variables in `vs`) on the CPU: every variable
/// (running statistics included) and every structured-pruning unit mask. The originals are
/// untouched, whatever their device.
///
/// # Errors
/// [`DistillError::Torch`] when `vs` lacks a variable of `spec`'s student.
pub fn cpu_copy(spec: &Config, vs: &VarStore, student: &Student) -> Result<(VarStore, Student)> {
    let mut cpu = VarStore::new(Device::Cpu);
    let mut copy = Student::new(&cpu.root(), spec)?;
    cpu.copy(vs)?;
    copy.unit_masks = student.unit_masks.iter().map(|m| m.as_ref().map(|t| t.to_device(Device::Cpu).copy())).collect();
    Ok((cpu, copy))
}

/// Writes `vs` to `path` (a `.safetensors` file).
fn save_safetensors(vs: &VarStore, path: &Path) -> Result<()> {
    let tmp = tmp_beside(path);
    vs.save(&tmp).map_err(|e| DistillError::Torch(format!("writing {}: {e}", path.display())))?;
    crate::durable::publish(&tmp, path).map_err(|e| DistillError::io(path, e))
}

/// Traces `student` in eval mode on `example` [B, ...] and writes TorchScript to `path`; the
/// tensors traced in are the student's, so it must be on the CPU ([`cpu_copy`]).
/// Freezes `vs` (tracing cannot capture tensors that require grad).
fn save_torchscript(student: &Student, vs: &mut VarStore, example: &Tensor, path: &Path) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    #[test]
    fn cpu_copy_is_a_separate_cpu_student_computing_the_same_function() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/digits-student.toml");
        let text = std::fs::read_to_string(path)
            .unwrap()
            .replace("family = \"mlp\"", "family = \"cnn\"\nchannels = [3]\nnorm = \"batch\"");
        let spec = Config::from_toml_str(&text).unwrap();
        let vs = VarStore::new(Device::Cpu);
        let mut student = Student::new(&vs.root(), &spec).unwrap();
        let act = student.block_index("conv1_act").unwrap();
        student.unit_masks[act] = Some(Tensor::from_slice(&[1.0f32, 0.0, 1.0]).reshape([1, 3, 1, 1]));
        let (cpu, copy) = cpu_copy(&spec, &vs, &student).unwrap();

        let (src, dst) = (vs.variables(), cpu.variables());
        assert_eq!(src.len(), dst.len());
        // conv1.weight, conv1_bn (4), fc1 (2), fc1_norm (4), head (2).
        assert_eq!(src.len(), 13, "{:?}", src.keys());
        for (name, t) in &src {
            let c = &dst[name];
            assert_eq!(c.device(), Device::Cpu, "{name}");
            assert!(c.equal(t), "{name}");
            assert_ne!(c.data_ptr(), t.data_ptr(), "{name} aliases the original");
        }
        let mask = copy.unit_masks[act].as_ref().unwrap();
        assert_eq!(
            (mask.device(), Vec::<f32>::try_from(mask.flatten(0, -1)).unwrap()),
            (Device::Cpu, vec![1.0, 0.0, 1.0])
        );
        let x = Tensor::linspace(-1.0, 1.0, 2 * 64, (Kind::Float, Device::Cpu)).reshape([2, 1, 8, 8]);
        let (a, b) = tch::no_grad(|| (student.forward(&x, false), copy.forward(&x, false)));
        assert!(a.equal(&b));
    }
}
