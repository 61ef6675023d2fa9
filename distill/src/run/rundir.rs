//! The output folder of a run, written so that nothing is ever half-written or lost.
//!
//! Everything goes into `<out>.partial/`; each file is written to a temp name and renamed. Only a
//! finished run renames `<out>.partial` to `<out>` (replacing an earlier `<out>` only with
//! `--overwrite`, and only at that moment). A new run that fails before its first checkpoint
//! removes its `.partial` folder; one with checkpoints keeps it for `--resume`, and a reopened
//! one (`--resume`, a torchrun restart) is never removed: it was there before. An earlier result
//! in `<out>` survives any failure.
//!
//! A run holds its folder while it lives: an advisory lock (`flock`) on `.partial/.lock`, which
//! holds the process id and dies with the process. A second run or `--resume` on that folder
//! is refused while it is held, so that two processes never write one folder.
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::host::durable::{create_dir_all, publish, sync_contents, write_atomic};
use crate::host::error::{DistillError, Result};

#[derive(Debug)]
pub struct RunDir {
    /// Where the finished run will live.
    pub out: PathBuf,
    /// Where it is written meanwhile.
    pub partial: PathBuf,
    overwrite: bool,
    committed: bool,
    /// Made by this run ([`RunDir::create`]), so removed when it fails before a checkpoint.
    created: bool,
    /// The lock on `.partial/.lock` while this process holds the folder (`None`: a job's rank
    /// above 0 reading rank 0's folder, which rank 0 holds).
    _lock: Option<File>,
}

impl RunDir {
    /// Claims `out`, creating `<out>.partial`.
    ///
    /// # Errors
    /// As [`RunDir::check_free`], or when the folder cannot be created (read-only or missing
    /// parent).
    pub fn create(out: &Path, overwrite: bool) -> Result<RunDir> {
        Self::check_free(out, overwrite)?;
        let partial = partial_path(out);
        create_dir_all(&partial).map_err(|e| {
            DistillError::Usage(format!(
                "cannot create the output folder {} ({e}): choose another --out",
                partial.display()
            ))
        })?;
        // a run that started in the same instant holds it now: refused before this one owns it
        let lock = hold(&partial).map_err(|pid| {
            DistillError::Usage(format!(
                "{} was just taken by another distill process{pid}: choose another --out",
                partial.display()
            ))
        })?;
        Ok(RunDir { out: out.to_path_buf(), partial, overwrite, committed: false, created: true, _lock: lock })
    }

    /// Whether a new run may claim `out`, without claiming it: checked before any work, and
    /// again by [`RunDir::create`].
    ///
    /// # Errors
    /// [`DistillError::Usage`] when `out` has no folder name of its own (`.`, `..`, `/`), exists
    /// without `overwrite` or is not an earlier distill run, or its `.partial` folder is held by
    /// a running distill or left from an interrupted run.
    pub fn check_free(out: &Path, overwrite: bool) -> Result<()> {
        if out.file_name().is_none() {
            return Err(DistillError::Usage(format!(
                "--out {}: name a folder of its own for the run (for example runs/student-1)",
                out.display()
            )));
        }
        // what --overwrite would refuse is never offered it
        check_replaceable(out)?;
        if out.exists() && !overwrite {
            return Err(DistillError::Usage(format!(
                "{} already exists: pass --overwrite to replace it when this run finishes, or choose another --out",
                out.display()
            )));
        }
        let partial = partial_path(out);
        if let Some(pid) = holder(&partial) {
            return Err(DistillError::Usage(format!(
                "{} is in use by another distill process{pid} that is still running: wait for it to finish or stop it, or choose another --out",
                partial.display()
            )));
        }
        if partial.exists() {
            // `--resume` needs the run.json of the run; without it only deleting helps
            let how = if partial.join("run.json").is_file() {
                format!("continue it with `distill --resume {}`, or delete it", out.display())
            } else {
                "it cannot be resumed (no run.json): delete it".to_string()
            };
            return Err(DistillError::Usage(format!("{} is left from an interrupted run: {how}", partial.display())));
        }
        Ok(())
    }

    /// Reopens the `.partial` folder of an interrupted run for `--resume`: `out` is the run's
    /// `--out`, or its `.partial` folder itself (then the run's `out` is the name without it).
    /// `owner`: this process holds the folder (all but a job's ranks above 0, which read the
    /// folder that rank 0 holds).
    ///
    /// # Errors
    /// [`DistillError::Usage`] when there is none, or another process holds it.
    pub fn reopen(out: &Path, owner: bool) -> Result<RunDir> {
        let named = out.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".partial"));
        let out = match named {
            Some(name) if !name.is_empty() && out.join("run.json").is_file() => &out.with_file_name(name),
            _ => out,
        };
        let partial = partial_path(out);
        if !partial.join("run.json").is_file() {
            return Err(DistillError::Usage(if out.join("report.json").is_file() {
                format!(
                    "--resume {}: that run has finished (its report.json is there); start a new one with --out",
                    out.display()
                )
            } else {
                format!(
                    "--resume {}: no interrupted run there ({} with run.json not found)",
                    out.display(),
                    partial.display()
                )
            }));
        }
        // the finished run is renamed to `out`: what is there must be replaceable, checked now
        // rather than after the training
        if out.exists() && !out.join("report.json").is_file() {
            return Err(DistillError::Usage(format!(
                "--resume {0}: {0} exists and is not a finished distill run (no report.json), so the resumed run could not take its name: move it away, then resume again",
                out.display()
            )));
        }
        let lock = if owner {
            hold(&partial).map_err(|pid| {
                DistillError::Usage(format!(
                    "--resume {}: {} is in use by another distill process{pid} that is still running: wait for it to finish or stop it, then resume",
                    out.display(),
                    partial.display()
                ))
            })?
        } else {
            None
        };
        Ok(RunDir { out: out.to_path_buf(), partial, overwrite: true, committed: false, created: false, _lock: lock })
    }

    /// True when the folder stays after a failure: a student of this run has written a
    /// checkpoint, or the run was reopened (its folder was there before it).
    pub fn kept(&self) -> bool {
        !self.created || self.has_checkpoints()
    }

    /// True when a student of this run has written a checkpoint.
    fn has_checkpoints(&self) -> bool {
        ["checkpoints", "baseline/checkpoints"]
            .iter()
            .any(|d| !crate::train::checkpoint::list(&self.partial.join(d)).is_empty())
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

    /// Publishes the finished run at `out`, replacing an earlier run there (`--overwrite`): it is
    /// moved aside to `<out>.replaced-<pid>` first and removed only once the new run is in place.
    ///
    /// # Errors
    /// [`DistillError::Usage`] when what is now at `out` is not a distill run;
    /// [`DistillError::Io`] when a rename fails. The `.partial` folder is then kept.
    pub fn commit(mut self) -> Result<PathBuf> {
        // Every file of the run on the disk before the folder takes its final name, and that
        // name on the disk before the earlier run is removed (see `durable`).
        sync_contents(&self.partial).map_err(|e| DistillError::io(&self.partial, e))?;
        let old = sibling(&self.out, &format!(".replaced-{}", std::process::id()));
        let replacing = self.out.exists() && self.overwrite;
        if replacing {
            check_replaceable(&self.out)?;
            std::fs::rename(&self.out, &old).map_err(|e| DistillError::io(&self.out, e))?;
        }
        publish(&self.partial, &self.out).map_err(|e| DistillError::io(&self.out, e))?;
        // the lock has served (this process still holds it until it drops): not part of the result
        let _ = std::fs::remove_file(self.out.join(LOCK));
        if replacing {
            let _ = std::fs::remove_dir_all(&old);
        }
        self.committed = true;
        Ok(self.out.clone())
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if !self.committed && !self.kept() {
            let _ = std::fs::remove_dir_all(&self.partial);
        }
    }
}

/// The lock file inside a run's `.partial` folder.
const LOCK: &str = ".lock";

/// Takes the lock on `partial`'s lock file and writes this process's id into it; `Err` holds
/// `" (pid N)"` of the process holding it (or `""` when unknown). `Ok(None)` when the lock file
/// cannot be opened (a read-only folder): the run's own writes then fail, naming the folder.
fn hold(partial: &Path) -> std::result::Result<Option<File>, String> {
    let open = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(partial.join(LOCK));
    let Ok(mut f) = open else { return Ok(None) };
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(pid_of(&mut f));
    }
    let _ = f.set_len(0).and_then(|()| f.write_all(std::process::id().to_string().as_bytes()));
    Ok(Some(f))
}

/// `Some(" (pid N)")` when a live process holds `partial` (`Some("")` when its id is unknown),
/// `None` when no process does.
fn holder(partial: &Path) -> Option<String> {
    let mut f = File::open(partial.join(LOCK)).ok()?;
    // SAFETY: flock on a descriptor this function owns; a shared lock taken is released on close.
    let held = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } != 0;
    held.then(|| pid_of(&mut f))
}

/// `" (pid N)"` from a lock file's contents, or `""`.
fn pid_of(f: &mut File) -> String {
    let mut text = String::new();
    let _ = f.read_to_string(&mut text);
    text.trim().parse::<u32>().map(|pid| format!(" (pid {pid})")).unwrap_or_default()
}

/// `<out>.partial`, beside `out`.
pub fn partial_path(out: &Path) -> PathBuf {
    sibling(out, ".partial")
}

/// `<path><suffix>` beside `path` (the suffix is appended: `exp.v1` gives `exp.v1.partial`).
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(suffix);
    path.with_file_name(name)
}

/// `--overwrite` replaces only an earlier run: a folder holding `report.json`, a finished
/// run's last file. Anything else at `out` is the user's and stays.
fn check_replaceable(out: &Path) -> Result<()> {
    if out.exists() && !out.join("report.json").is_file() {
        let what = if out.is_dir() { "a folder" } else { "a file" };
        return Err(DistillError::Usage(format!(
            "{} is {what} that is not a finished distill run (no report.json), which distill never replaces, --overwrite or not: move it away or choose another --out",
            out.display()
        )));
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
        std::fs::write(run.path("metrics.jsonl"), "appended, never flushed\n").unwrap();
        crate::host::durable::take_synced();
        run.commit().unwrap();
        // every file is flushed before the folder is renamed, and the rename before returning
        let partial = partial_path(&out);
        let mut synced = crate::host::durable::take_synced();
        assert_eq!(synced.pop().as_deref(), Some(dir.path()));
        assert_eq!(synced.pop(), Some(partial.clone()));
        synced.sort();
        assert_eq!(synced, [partial.join(".lock"), partial.join("metrics.jsonl"), partial.join("report.json")]);
        assert_eq!(std::fs::read_to_string(out.join("report.json")).unwrap(), "new");
        assert!(!out.join(LOCK).exists(), "the lock file is not part of the result");
        assert!(!partial_path(&out).exists());
        let siblings: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(siblings, ["run"], "the replaced run is gone, nothing else is left");
    }

    #[test]
    fn reopen_takes_the_out_folder_or_its_partial_folder() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("a.partial")).unwrap();
        std::fs::write(dir.path().join("a.partial/run.json"), "{}").unwrap();
        for given in ["a", "a.partial"] {
            let run = RunDir::reopen(&dir.path().join(given), false).unwrap();
            assert_eq!((run.out.clone(), run.partial.clone()), (dir.path().join("a"), dir.path().join("a.partial")));
            std::mem::forget(run); // keep the folder (Drop removes one without checkpoints)
        }
        let e = RunDir::reopen(&dir.path().join("b.partial"), true).unwrap_err().to_string();
        assert!(e.contains("no interrupted run there"), "{e}");
        // a folder of the user's where the run will finish: refused before any work
        std::fs::create_dir(dir.path().join("a")).unwrap();
        let e = RunDir::reopen(&dir.path().join("a"), true).unwrap_err().to_string();
        let a = dir.path().join("a");
        assert_eq!(e, format!("--resume {0}: {0} exists and is not a finished distill run (no report.json), so the resumed run could not take its name: move it away, then resume again", a.display()));
        assert!(dir.path().join("a.partial/run.json").is_file());
    }

    #[test]
    fn overwrite_replaces_only_earlier_runs() {
        let dir = tempfile::tempdir().unwrap();
        for out in [".", "..", "/"] {
            let e = RunDir::create(Path::new(out), true).unwrap_err().to_string();
            assert!(e.contains("name a folder"), "{out}: {e}");
        }
        // a folder or a file of the user's is never replaced
        let notes = dir.path().join("notes");
        std::fs::create_dir(&notes).unwrap();
        std::fs::write(notes.join("data.txt"), "mine").unwrap();
        let file = dir.path().join("afile");
        std::fs::write(&file, "mine").unwrap();
        // with or without --overwrite: the line does not offer a flag that would then refuse
        for (out, what) in [(&notes, "a folder"), (&file, "a file")] {
            for overwrite in [false, true] {
                let e = RunDir::create(out, overwrite).unwrap_err().to_string();
                assert_eq!(e, format!("{} is {what} that is not a finished distill run (no report.json), which distill never replaces, --overwrite or not: move it away or choose another --out", out.display()));
                assert!(!partial_path(out).exists());
            }
        }
        assert_eq!(std::fs::read_to_string(notes.join("data.txt")).unwrap(), "mine");
        // the backup name is appended, so a sibling `exp.replaced` is not touched
        let exp = dir.path().join("exp.v1");
        std::fs::create_dir(&exp).unwrap();
        std::fs::write(exp.join("report.json"), "old").unwrap();
        std::fs::create_dir(dir.path().join("exp.replaced")).unwrap();
        std::fs::write(dir.path().join("exp.replaced/notes.txt"), "keep").unwrap();
        let run = RunDir::create(&exp, true).unwrap();
        assert_eq!(run.partial, dir.path().join("exp.v1.partial"));
        run.write("report.json", b"new").unwrap();
        run.commit().unwrap();
        assert_eq!(std::fs::read_to_string(exp.join("report.json")).unwrap(), "new");
        assert_eq!(std::fs::read_to_string(dir.path().join("exp.replaced/notes.txt")).unwrap(), "keep");
    }

    #[test]
    fn a_reopened_run_is_never_removed_even_without_checkpoints() {
        // the folder of an interrupted run was there before: a resumed run (or a job's rank that
        // reads it) failing before its first checkpoint must leave it as it was
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run");
        let partial = partial_path(&out);
        std::fs::create_dir(&partial).unwrap();
        std::fs::write(partial.join("run.json"), "{}").unwrap();
        drop(RunDir::reopen(&out, true).unwrap());
        assert!(partial.join("run.json").is_file());
        let fresh = dir.path().join("fresh");
        drop(RunDir::create(&fresh, false).unwrap());
        assert!(!partial_path(&fresh).exists(), "a new run's folder goes when it fails before a checkpoint");
    }

    #[test]
    fn a_folder_is_held_by_its_run_until_the_run_ends() {
        // a second run, or --resume, on the folder of a run that is still going is refused with
        // the holder's pid (flock locks of two open files conflict within one process too)
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run");
        let partial = partial_path(&out);
        let first = RunDir::create(&out, false).unwrap();
        std::fs::write(partial.join("run.json"), "{}").unwrap();
        let pid = std::process::id();
        let e = RunDir::create(&out, false).unwrap_err().to_string();
        assert_eq!(e, format!("{} is in use by another distill process (pid {pid}) that is still running: wait for it to finish or stop it, or choose another --out", partial.display()));
        let e = RunDir::reopen(&out, true).unwrap_err().to_string();
        assert_eq!(e, format!("--resume {}: {} is in use by another distill process (pid {pid}) that is still running: wait for it to finish or stop it, then resume", out.display(), partial.display()));
        // a job's rank above 0 reads the folder its rank 0 holds
        drop(RunDir::reopen(&out, false).unwrap());
        drop(first);
        // the lock dies with its holder: the folder is then an interrupted run's, to resume
        std::fs::create_dir(&partial).unwrap();
        std::fs::write(partial.join("run.json"), "{}").unwrap();
        let resumed = RunDir::reopen(&out, true).unwrap();
        assert_eq!(std::fs::read_to_string(partial.join(LOCK)).unwrap(), pid.to_string());
        assert!(RunDir::reopen(&out, true).is_err(), "held by the resumed run");
        drop(resumed);
        drop(RunDir::reopen(&out, true).unwrap());
        assert!(partial.join("run.json").is_file());
    }
}
