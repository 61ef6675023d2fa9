//! The one error type of the trainer. Every variant prints as a single line that names the file,
//! key or shape at fault and how to fix it; `main` prints it once and exits with code 2.
use std::path::{Path, PathBuf};

use thiserror::Error;

#[derive(Debug, Error)]
pub enum DistillError {
    /// The cfg.toml is missing, unreadable, malformed or out of range.
    #[error("{}: {message}", path.display())]
    Config { path: PathBuf, message: String },
    /// A data file is missing, unreadable, or holds the wrong arrays, dtypes or shapes.
    #[error("{}: {message}", path.display())]
    Data { path: PathBuf, message: String },
    /// The teacher file is missing, not TorchScript, or its output does not fit the config.
    #[error("{}: {message}", path.display())]
    Teacher { path: PathBuf, message: String },
    /// A command-line value is unusable (device, output folder, flags).
    #[error("{0}")]
    Usage(String),
    /// Training produced a non-finite loss (the inputs and the teacher's logits are checked
    /// finite before they reach the loss, so the student's own training diverged).
    #[error("loss became {value} at step {step} (epoch {epoch}) from finite inputs and soft targets: lower train.lr or raise train.warmup_steps")]
    Diverged { step: u64, epoch: u64, value: f64 },
    /// fp16: the loss scaler skipped `skipped` steps in a row (`amp::MAX_CONSECUTIVE_SKIPS`).
    #[error("fp16: {skipped} steps in a row skipped for a non-finite loss or gradients (the last at step {step}, epoch {epoch}, loss {value}; loss scale backed off to {scale}): the scale is not the cause; lower train.lr, use train.precision = \"bf16\" or \"fp32\", or check the data for NaN/inf")]
    Overflow { skipped: u64, step: u64, epoch: u64, value: f64, scale: f64 },
    /// The loss has no graph to any trainable parameter of the student ([`crate::train::backward`]):
    /// there is nothing to train, and libtorch's autograd would crash on it.
    #[error("nothing to train: the loss depends on no trainable parameter of the student (kd.alpha = 0 leaves the label term alone, and this data has no labels): set kd.alpha > 0")]
    NothingToTrain,
    /// A student tensor (parameter or buffer) is NaN/inf when training ends: nothing is exported.
    #[error("student tensor {name} holds {count} NaN/inf value(s) of {numel} after training: not exported; lower train.lr, or check the data and student.init for NaN/inf")]
    NonFinite { name: String, count: i64, numel: i64 },
    /// Reading or writing an output or checkpoint failed.
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// A data-parallel job's process group failed: a peer that is gone, a rendezvous that timed
    /// out, a port in use (the message names the rank and the call).
    #[error("data-parallel: {0}")]
    Distributed(String),
    /// libtorch reported an error outside the cases above.
    #[error("libtorch: {0}")]
    Torch(String),
    /// Stopped early by Ctrl-C (or SIGTERM) after writing a checkpoint.
    #[error("stopped after step {step} with a checkpoint")]
    Interrupted { step: u64 },
    /// Stopped where `--stop-after-steps` asked, after writing a checkpoint: not a failure
    /// (`main` exits 0 with this line, no `error:`).
    #[error("stopped after step {step} as --stop-after-steps asked, with a checkpoint")]
    StoppedAsAsked { step: u64 },
    /// Stopped on request (Ctrl-C) during the teacher's pass over the `set` set, before
    /// training: no step was trained since the last checkpoint, if any.
    #[error("interrupted during the teacher's pass over the {set} set ({done} of {total} samples), before training")]
    TeacherPassInterrupted { set: &'static str, done: u64, total: u64 },
    /// Any error of a run that has checkpoints: they are kept, and the message says how to go on.
    #[error("{source}; checkpoints kept in {}: continue with {}", partial.display(), resume_command(out, *world))]
    Resumable { source: Box<DistillError>, out: PathBuf, partial: PathBuf, world: usize },
    /// An error of a run that has checkpoints whose fix is a change to the cfg.toml, the teacher
    /// or the data: `--resume` keeps all three, so it would fail again; the message says to
    /// start again instead.
    #[error("{source}; --resume would repeat this (it keeps the run's cfg, teacher and data): make the fix, delete {} and run again", partial.display())]
    Restart { source: Box<DistillError>, out: PathBuf, partial: PathBuf },
}

pub type Result<T, E = DistillError> = std::result::Result<T, E>;

/// How to continue the run in `out`: `distill --resume OUT`, and for a job of `world` processes
/// the torchrun line that starts as many.
fn resume_command(out: &Path, world: usize) -> String {
    let out = out.display();
    match world {
        1 => format!("`distill --resume {out}`"),
        n => format!(
            "`distill --resume {out}` on as many processes ({n}: `torchrun --nproc-per-node={n} --no-python distill --resume {out}` on one machine)"
        ),
    }
}

impl DistillError {
    pub fn config(path: &Path, message: impl Into<String>) -> Self {
        DistillError::Config { path: path.to_path_buf(), message: message.into() }
    }

    pub fn data(path: &Path, message: impl Into<String>) -> Self {
        DistillError::Data { path: path.to_path_buf(), message: message.into() }
    }

    pub fn teacher(path: &Path, message: impl Into<String>) -> Self {
        DistillError::Teacher { path: path.to_path_buf(), message: message.into() }
    }

    pub fn io(path: &Path, source: std::io::Error) -> Self {
        DistillError::Io { path: path.to_path_buf(), source }
    }

    /// This error, noting that the run's checkpoints (in `partial`, the folder being written
    /// for `out`) survive it, or, when its fix changes what a resumed run keeps (cfg, teacher,
    /// data), that the run must start again.
    pub fn resumable(self, out: &Path, partial: &Path) -> Self {
        let (source, out, partial) = (Box::new(self), out.to_path_buf(), partial.to_path_buf());
        match *source {
            DistillError::Config { .. }
            | DistillError::Data { .. }
            | DistillError::Teacher { .. }
            | DistillError::Diverged { .. }
            | DistillError::Overflow { .. }
            | DistillError::NonFinite { .. }
            | DistillError::NothingToTrain => DistillError::Restart { source, out, partial },
            _ => DistillError::Resumable { source, out, partial, world: 1 },
        }
    }

    /// [`DistillError::resumable`] of a data-parallel job of `world` processes: its checkpoints
    /// continue only with as many, which the message says.
    pub fn resumable_in_job(self, out: &Path, partial: &Path, world: usize) -> Self {
        match self.resumable(out, partial) {
            DistillError::Resumable { source, out, partial, .. } => {
                DistillError::Resumable { source, out, partial, world }
            }
            other => other,
        }
    }

    /// True when the run stopped on request (Ctrl-C: exit code 130; `--stop-after-steps`: 0)
    /// rather than failed (2).
    pub fn is_interrupt(&self) -> bool {
        match self {
            DistillError::Interrupted { .. }
            | DistillError::TeacherPassInterrupted { .. }
            | DistillError::StoppedAsAsked { .. } => true,
            DistillError::Resumable { source, .. } => source.is_interrupt(),
            _ => false,
        }
    }

    /// True when the run stopped where `--stop-after-steps` asked (exit code 0).
    pub fn is_requested_stop(&self) -> bool {
        match self {
            DistillError::StoppedAsAsked { .. } => true,
            DistillError::Resumable { source, .. } => source.is_requested_stop(),
            _ => false,
        }
    }

    /// A student's loop that stopped after `step`: where `--stop-after-steps` (`stop_after`)
    /// asked, or else by Ctrl-C.
    pub fn stopped(step: u64, stop_after: Option<u64>) -> Self {
        match stop_after == Some(step) {
            true => DistillError::StoppedAsAsked { step },
            false => DistillError::Interrupted { step },
        }
    }
}

impl From<tch::TchError> for DistillError {
    fn from(e: tch::TchError) -> Self {
        DistillError::Torch(first_line(&e.to_string()))
    }
}

/// libtorch messages carry C++ backtraces after the first line; keep the reason only. A
/// TorchScript interpreter error starts with "The following operation failed ..." and gives
/// its reason last, as `RuntimeError: ...`: that line is kept then.
pub fn first_line(message: &str) -> String {
    let raised = message.lines().map(str::trim).rev().find(|l| {
        l.split_once(": ").is_some_and(|(kind, _)| kind.ends_with("Error") && !kind.contains(char::is_whitespace))
    });
    raised.or_else(|| message.lines().map(str::trim).find(|l| !l.is_empty())).unwrap_or("unknown error").to_string()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{first_line, DistillError};

    #[test]
    fn an_error_fixed_in_the_cfg_does_not_advise_resume() {
        let diverged = DistillError::Diverged { step: 40, epoch: 1, value: f64::NAN }
            .resumable(Path::new("fn"), Path::new("fn.partial"));
        assert_eq!(
            diverged.to_string(),
            "loss became NaN at step 40 (epoch 1) from finite inputs and soft targets: lower train.lr or raise train.warmup_steps; --resume would repeat this (it keeps the run's cfg, teacher and data): make the fix, delete fn.partial and run again"
        );
        let overflow = DistillError::Overflow { skipped: 17, step: 9, epoch: 1, value: f64::INFINITY, scale: 0.5 };
        let student = DistillError::NonFinite { name: "fc1.weight".into(), count: 1, numel: 2 };
        let teacher = DistillError::teacher(Path::new("t.pt"), "NaN logits");
        for e in [overflow, student, teacher] {
            let e = e.resumable(Path::new("fn"), Path::new("fn.partial")).to_string();
            assert!(!e.contains("distill --resume"), "{e}");
            assert!(e.ends_with("make the fix, delete fn.partial and run again"), "{e}");
        }
        // an I/O error or Ctrl-C is not fixed in the inputs: resuming is the way on
        let io = DistillError::io(Path::new("fn.partial/x"), std::io::Error::other("disk full"))
            .resumable(Path::new("fn"), Path::new("fn.partial"));
        assert_eq!(
            io.to_string(),
            "fn.partial/x: disk full; checkpoints kept in fn.partial: continue with `distill --resume fn`"
        );
        assert!(DistillError::Interrupted { step: 3 }
            .resumable(Path::new("fn"), Path::new("fn.partial"))
            .is_interrupt());
    }

    #[test]
    fn the_reason_of_a_torchscript_error_is_kept() {
        let script = "Internal torch error: The following operation failed in the TorchScript interpreter.
Traceback of TorchScript (most recent call last):
  File \"code/__torch__.py\", line 12, in forward
    _0 = torch.matmul(x, torch.linalg_inv(self.m))
RuntimeError: linalg.inv: Low precision dtypes not supported. Got Half
";
        assert_eq!(first_line(script), "RuntimeError: linalg.inv: Low precision dtypes not supported. Got Half");
        let cxx = "  mat1 and mat2 shapes cannot be multiplied (8x64 and 32x10)\nException raised from meta at ...\nframe #0: c10::Error::Error";
        assert_eq!(first_line(cxx), "mat1 and mat2 shapes cannot be multiplied (8x64 and 32x10)");
    }
}
