//! Checks that run before any output is written, so a bad combination of teacher, config and
//! data fails in seconds with a message that names the file and the fix (kd-pitfalls T1, T4).
use tch::{Device, Tensor};

use crate::error::{DistillError, Result};
use crate::student::Student;
use crate::teacher::Teacher;

/// `--device auto|cpu|cuda|cuda:N`: auto picks CUDA device 0 when libtorch sees one.
///
/// # Errors
/// [`DistillError::Usage`] for an unknown name or a CUDA device that is not there.
pub fn parse_device(name: &str) -> Result<Device> {
    let cuda_count = tch::Cuda::device_count() as usize;
    let device = match name {
        "auto" => return Ok(Device::cuda_if_available()),
        "cpu" => return Ok(Device::Cpu),
        "cuda" => 0,
        other => match other.strip_prefix("cuda:").and_then(|i| i.parse::<usize>().ok()) {
            Some(i) => i,
            None => return Err(DistillError::Usage(format!("--device {name}: use auto, cpu, cuda or cuda:N"))),
        },
    };
    if device >= cuda_count {
        return Err(DistillError::Usage(format!(
            "--device {name}: libtorch sees {cuda_count} CUDA device(s); use --device cpu or auto"
        )));
    }
    Ok(Device::Cuda(device))
}

/// The teacher's logits on a probe batch must be [B, classes] and finite.
pub fn check_teacher_logits(teacher: &Teacher, logits: &Tensor, batch: i64, classes: u64) -> Result<()> {
    let size = logits.size();
    if size != [batch, classes as i64] {
        let got = size.get(1).map(|c| c.to_string()).unwrap_or_else(|| format!("{size:?}"));
        return Err(DistillError::teacher(
            &teacher.path,
            format!(
                "the teacher outputs logits of shape {size:?} for a batch of {batch}, but data.classes = {classes}: \
                 the teacher has {got} classes; set data.classes to match or use a teacher for this label set"
            ),
        ));
    }
    if !bool::try_from(logits.isfinite().all()).unwrap_or(false) {
        return Err(DistillError::teacher(
            &teacher.path,
            "the teacher's logits contain NaN or inf on the first batch; check data.scale/mean/std",
        ));
    }
    Ok(())
}

/// Refuses a student that computes the same function as the teacher (kd-pitfalls T4: KD from a
/// copy of yourself has a zero KL term and silently wastes the run).
pub fn check_not_identical(teacher: &Teacher, teacher_logits: &Tensor, student: &Student, x: &Tensor) -> Result<()> {
    let student_logits = tch::no_grad(|| student.forward(x, false));
    let diff = (student_logits - teacher_logits).abs().max().double_value(&[]);
    if diff < 1e-6 {
        return Err(DistillError::teacher(
            &teacher.path,
            "the teacher and the student are identical (same outputs on the first batch): \
             distilling a network into itself learns nothing; use a different student.init or teacher",
        ));
    }
    Ok(())
}
