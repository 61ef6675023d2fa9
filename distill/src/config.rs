//! Reading a cfg.toml from disk: the schema and its validation live in `estimator_wasm::spec`;
//! this file adds what only the trainer needs (file paths resolved against the cfg's folder).
use std::path::{Path, PathBuf};

use estimator_wasm::spec::Config;

use crate::error::{DistillError, Result};

/// A validated cfg.toml plus the data paths it names, resolved.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The cfg.toml as given on the command line.
    pub path: PathBuf,
    pub spec: Config,
    /// `[data].train`, relative to the cfg.toml's folder.
    pub train: PathBuf,
    /// `[data].test`, or `None` when `[data].holdout` splits the train file.
    pub test: Option<PathBuf>,
}

impl RunConfig {
    /// Loads, parses and validates `path`.
    ///
    /// # Errors
    /// [`DistillError::Config`] naming the file with the line/column or key at fault.
    pub fn load(path: &Path) -> Result<RunConfig> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            DistillError::config(path, format!("cannot read the student config ({e}); pass --student <cfg.toml>"))
        })?;
        let spec = Config::from_toml_str(&text).map_err(|e| DistillError::config(path, e.to_string()))?;
        RunConfig::from_spec(path, spec)
    }

    /// Resolves the data paths of an already parsed `spec` read from `path`.
    ///
    /// # Errors
    /// [`DistillError::Config`] when `[data].train` is missing or neither `test` nor `holdout`
    /// gives a held-out set.
    pub fn from_spec(path: &Path, spec: Config) -> Result<RunConfig> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let train = spec.data.train.as_ref().map(|p| dir.join(p)).ok_or_else(|| {
            DistillError::config(path, "data.train is missing: set it to an .npz with arrays x and y")
        })?;
        let test = spec.data.test.as_ref().map(|p| dir.join(p));
        if test.is_none() && spec.data.holdout.is_none() {
            return Err(DistillError::config(
                path,
                "data.test is missing: set it to a held-out .npz, or set data.holdout = 0.1 to split data.train",
            ));
        }
        Ok(RunConfig { path: path.to_path_buf(), spec, train, test })
    }
}
