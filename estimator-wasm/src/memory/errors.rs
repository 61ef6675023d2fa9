//! Why an estimate could not be made ([`EstimateError`]): a schema error ([`SpecError`], through
//! `From`), an input of the estimate out of range, an overflow, an unknown GPU.
use thiserror::Error;

use crate::schema::errors::{SpecError, UnknownGpu};

/// Why an estimate could not be made. Every failure on user input is one of these; the
/// estimator never panics and never wraps around.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EstimateError {
    /// The configuration is invalid (the same checks as [`crate::schema::spec::Config::validate`]).
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// An input of the estimate itself (batch, teacher counts, dataset) is out of range.
    #[error("{key}: {message}")]
    Invalid { key: String, message: String },
    /// A byte count does not fit in 64 bits (over 16 EiB): the plan is absurd.
    #[error("{what} overflows 64-bit bytes (more than 16 EiB): the plan is too large to price")]
    Overflow { what: String },
    /// A GPU name that is not in the catalogue.
    #[error(transparent)]
    UnknownGpu(#[from] UnknownGpu),
}

impl EstimateError {
    pub(crate) fn overflow(what: impl Into<String>) -> EstimateError {
        EstimateError::Overflow { what: what.into() }
    }

    pub(crate) fn invalid(key: &str, message: impl Into<String>) -> EstimateError {
        EstimateError::Invalid { key: key.to_string(), message: message.into() }
    }
}
