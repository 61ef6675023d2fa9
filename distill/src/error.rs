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
    /// Training produced a non-finite loss.
    #[error("loss became {value} at step {step} (epoch {epoch}): lower train.lr, raise train.warmup_steps or check the data for NaN/inf")]
    Diverged { step: u64, epoch: u64, value: f64 },
    /// Reading or writing an output or checkpoint failed.
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// libtorch reported an error outside the cases above.
    #[error("libtorch: {0}")]
    Torch(String),
}

pub type Result<T, E = DistillError> = std::result::Result<T, E>;

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
}

impl From<tch::TchError> for DistillError {
    fn from(e: tch::TchError) -> Self {
        DistillError::Torch(first_line(&e.to_string()))
    }
}

/// libtorch messages carry C++ backtraces after the first line; keep the reason only.
pub fn first_line(message: &str) -> String {
    message.lines().find(|l| !l.trim().is_empty()).unwrap_or("unknown error").trim().to_string()
}
