//! The errors of the cfg.toml schema (the estimator's own are `crate::memory::errors`).
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

/// A GPU name that is not in the catalogue ([`crate::schema::catalogue::gpu`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown GPU \"{name}\"; known: {known}")]
pub struct UnknownGpu {
    /// The name as given, at most its first [`crate::schema::names::ECHO_CHARS`] characters.
    pub name: String,
    /// The catalogue's names, comma-separated.
    pub known: String,
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
