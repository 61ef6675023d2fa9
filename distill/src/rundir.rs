//! The output folder of a run, written so that nothing is ever half-written or lost.
//!
//! Everything goes into `<out>.partial/`; each file is written to a temp name and renamed. Only a
//! finished run renames `<out>.partial` to `<out>` (replacing an earlier `<out>` only with
//! `--overwrite`, and only at that moment). A run that fails before its first checkpoint removes
//! its `.partial` folder; one with checkpoints keeps it for `--resume`. An earlier result in
//! `<out>` survives any failure.
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{DistillError, Result};

#[derive(Debug)]
pub struct RunDir {
    /// Where the finished run will live.
    pub out: PathBuf,
    /// Where it is written meanwhile.
    pub partial: PathBuf,
    overwrite: bool,
    committed: bool,
}

impl RunDir {
    /// Claims `out`, creating `<out>.partial`.
    ///
    /// # Errors
    /// [`DistillError::Usage`] when `out` exists without `overwrite`, or a `.partial` from an
    /// interrupted run is in the way; [`DistillError::Io`] when the folder cannot be created.
    pub fn create(out: &Path, overwrite: bool) -> Result<RunDir> {
        if out.exists() && !overwrite {
            return Err(DistillError::Usage(format!(
                "{} already exists: pass --overwrite to replace it when this run finishes, or choose another --out",
                out.display()
            )));
        }
        let partial = partial_path(out);
        if partial.exists() {
            return Err(DistillError::Usage(format!(
                "{} is left from an interrupted run: continue it with `distill --resume {}`, or delete it",
                partial.display(),
                out.display()
            )));
        }
        std::fs::create_dir_all(&partial).map_err(|e| DistillError::io(&partial, e))?;
        Ok(RunDir { out: out.to_path_buf(), partial, overwrite, committed: false })
    }

    /// Reopens the `.partial` folder of an interrupted run for `--resume`.
    ///
    /// # Errors
    /// [`DistillError::Usage`] when there is none.
    pub fn reopen(out: &Path) -> Result<RunDir> {
        let partial = partial_path(out);
        if !partial.join("run.json").is_file() {
            return Err(DistillError::Usage(format!(
                "--resume {}: no interrupted run there ({} with run.json not found)",
                out.display(),
                partial.display()
            )));
        }
        Ok(RunDir { out: out.to_path_buf(), partial, overwrite: true, committed: false })
    }

    /// True when a phase of this run has written a checkpoint (then the folder is kept).
    pub fn has_checkpoints(&self) -> bool {
        ["checkpoints", "baseline/checkpoints"]
            .iter()
            .any(|d| !crate::checkpoint::list(&self.partial.join(d)).is_empty())
    }

    /// Path of `name` inside the folder being written.
    pub fn path(&self, name: &str) -> PathBuf {
        self.partial.join(name)
    }

    /// Writes `bytes` to `name` via a temp file and a rename.
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<PathBuf> {
        let path = self.path(name);
        write_atomic(&path, |f| f.write_all(bytes))?;
        Ok(path)
    }

    /// Publishes the finished run at `out`.
    ///
    /// # Errors
    /// [`DistillError::Io`] when a rename fails; the `.partial` folder is then kept.
    pub fn commit(mut self) -> Result<PathBuf> {
        if self.out.exists() && self.overwrite {
            let old = self.out.with_extension("replaced");
            let _ = std::fs::remove_dir_all(&old);
            std::fs::rename(&self.out, &old).map_err(|e| DistillError::io(&self.out, e))?;
            std::fs::rename(&self.partial, &self.out).map_err(|e| DistillError::io(&self.out, e))?;
            let _ = std::fs::remove_dir_all(&old);
        } else {
            std::fs::rename(&self.partial, &self.out).map_err(|e| DistillError::io(&self.out, e))?;
        }
        self.committed = true;
        Ok(self.out.clone())
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if !self.committed && !self.has_checkpoints() {
            let _ = std::fs::remove_dir_all(&self.partial);
        }
    }
}

/// `<out>.partial`, beside `out`.
pub fn partial_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".partial");
    out.with_file_name(name)
}

/// Writes `path` through `<path>.tmp` and a rename, so readers see the old or the new file.
pub fn write_atomic(path: &Path, fill: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>) -> Result<()> {
    let mut tmp_name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    let result = std::fs::File::create(&tmp).and_then(|mut f| {
        fill(&mut f)?;
        f.sync_all()
    });
    if let Err(e) = result.and_then(|_| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(DistillError::io(path, e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_run_leaves_earlier_result_and_no_partial() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run");
        std::fs::create_dir(&out).unwrap();
        std::fs::write(out.join("report.json"), "old").unwrap();
        assert!(RunDir::create(&out, false).is_err(), "existing output needs --overwrite");
        {
            let run = RunDir::create(&out, true).unwrap();
            run.write("report.json", b"new").unwrap();
            // dropped without commit: a failure
        }
        assert!(!partial_path(&out).exists());
        assert_eq!(std::fs::read_to_string(out.join("report.json")).unwrap(), "old");
        let run = RunDir::create(&out, true).unwrap();
        run.write("report.json", b"new").unwrap();
        run.commit().unwrap();
        assert_eq!(std::fs::read_to_string(out.join("report.json")).unwrap(), "new");
        assert!(!partial_path(&out).exists());
    }
}
