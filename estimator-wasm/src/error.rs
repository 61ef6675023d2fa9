//! The errors of the estimator and of the cfg.toml schema.
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

/// Why an estimate could not be made. Every failure on user input is one of these; the
/// estimator never panics and never wraps around.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EstimateError {
    /// The configuration is invalid (the same checks as [`crate::spec::Config::validate`]).
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// An input of the estimate itself (batch, teacher counts, dataset) is out of range.
    #[error("{key}: {message}")]
    Invalid { key: String, message: String },
    /// A byte count does not fit in 64 bits (over 16 EiB): the plan is absurd.
    #[error("{what} overflows 64-bit bytes (more than 16 EiB): the plan is too large to price")]
    Overflow { what: String },
    /// A GPU name that is not in the catalogue.
    #[error("unknown GPU \"{name}\"; known: {known}")]
    UnknownGpu { name: String, known: String },
}

impl EstimateError {
    pub(crate) fn overflow(what: impl Into<String>) -> EstimateError {
        EstimateError::Overflow { what: what.into() }
    }

    pub(crate) fn invalid(key: &str, message: impl Into<String>) -> EstimateError {
        EstimateError::Invalid { key: key.to_string(), message: message.into() }
    }
}
