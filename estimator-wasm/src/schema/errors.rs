//! The errors of the estimator and of the cfg.toml schema.
use thiserror::Error;

/// Why a cfg.toml (or an estimate request) was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SpecError {
    /// TOML syntax, an unknown key or a wrong type, at a 1-based line and column of the text
    /// when the parser knows it; the reason names the key path where it is known.
    #[error("TOML parse error{}: {reason}", place.map_or_else(String::new, |(l, c)| format!(" at line {l}, column {c}")))]
    Parse { place: Option<(usize, usize)>, reason: String },
    /// A value out of range or inconsistent with another key.
    #[error("{key}: {message}")]
    Invalid { key: String, message: String },
}

impl SpecError {
    /// The message without its place in the text (for text the user did not write as such,
    /// like a cfg rewritten by command-line overrides).
    pub fn reason(&self) -> String {
        match self {
            SpecError::Parse { reason, .. } => reason.clone(),
            invalid => invalid.to_string(),
        }
    }
}

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

#[cfg(test)]
mod tests {
    use crate::Config;

    #[test]
    fn reason_drops_the_place_in_the_text() {
        let e = Config::from_toml_str("[data]\ninput_shape = [4]\nclasses = 3\n[student]\nhiden = 3\n").unwrap_err();
        assert!(e.to_string().starts_with("TOML parse error at line 5, column 1: unknown field `hiden`"), "{e}");
        assert!(e.reason().starts_with("unknown field `hiden`"), "{}", e.reason());
        assert!(e.reason().ends_with("for key `student`"), "{}", e.reason());
        let e = Config::from_toml_str(
            "[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\n[kd]\nalpha = 2.0\n",
        )
        .unwrap_err();
        assert_eq!(e.reason(), e.to_string(), "a range error names its key, not a place");
    }
}
