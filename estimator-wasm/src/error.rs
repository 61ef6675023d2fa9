//! The one error type of the estimator and the cfg.toml schema.
use thiserror::Error;

/// Why a cfg.toml (or an estimate request) was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SpecError {
    /// TOML syntax, an unknown key or a wrong type; the message carries line and column.
    #[error("{0}")]
    Parse(String),
    /// A value out of range or inconsistent with another key.
    #[error("{key}: {message}")]
    Invalid { key: String, message: String },
}
