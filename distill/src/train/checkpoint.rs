//! Resumable checkpoints: `<dir>/step-<N>/` holds `tensors.safetensors` (student variables,
//! optimiser moments, pruning masks, loss scale) and `state.json` (step, running sums, ...).
//! Each is written into `step-<N>.tmp/`, flushed to the disk and renamed into place (see
//! `durable`), so a checkpoint exists whole or not at all, also after a power loss; only the
//! newest `keep` are kept. Resuming takes the newest checkpoint that loads ([`resume_newest`]).
//!
//! What a trainer's checkpoint holds is encoded here too ([`Snapshot`] out, [`Restored`] in):
//! tensors named `model/<variable>`, `optim/<moment>`, the pruner's own prefixes, and
//! `amp/scale`, `amp/growth_tracker`; `state.json` holds the loop's [`LoopState`], the optimiser's
//! step count and the resolved cfg.toml, so that resuming under another configuration is refused.
use std::path::{Path, PathBuf};

use serde::{de::DeserializeOwned, Deserialize, Serialize};
use tch::{nn::VarStore, Tensor};

use crate::host::durable::{create_dir_all, replace_via, sync_file};
use crate::host::error::{DistillError, Result};
use crate::train::loop_state::LoopState;

/// What `state.json` of a trainer's checkpoint holds.
#[derive(Serialize, Deserialize)]
struct Saved {
    state: LoopState,
    optimizer_step: u64,
    /// The resolved cfg.toml, to refuse resuming under another configuration.
    config: String,
}

/// Everything of a trainer that a checkpoint keeps, borrowed at one step.
pub struct Snapshot<'a> {
    /// The student's variables (parameters and buffers).
    pub vs: &'a VarStore,
    /// The optimiser's moments (`Optimizer::state`) and its step count.
    pub optim: Vec<(String, Tensor)>,
    pub optimizer_step: u64,
    /// The pruner's masks and scores, already named under its prefixes (`Pruner::state`).
    pub prune: Vec<(String, Tensor)>,
    /// fp16: the loss scale and its growth tracker (`GradScaler::state`).
    pub amp: Option<(Tensor, Tensor)>,
    pub state: &'a LoopState,
    /// The resolved cfg.toml.
    pub config: String,
}

impl Snapshot<'_> {
    /// Writes this snapshot as checkpoint `state.step` under `dir`, keeping the newest `keep`.
    ///
    /// # Errors
    /// As [`save`].
    pub fn write(self, dir: &Path, keep: usize) -> Result<PathBuf> {
        let mut tensors: Vec<(String, Tensor)> =
            self.vs.variables().into_iter().map(|(n, t)| (format!("model/{n}"), t)).collect();
        tensors.extend(self.optim.into_iter().map(|(n, t)| (format!("optim/{n}"), t)));
        tensors.extend(self.prune);
        if let Some((scale, tracker)) = self.amp {
            tensors.push(("amp/scale".into(), scale));
            tensors.push(("amp/growth_tracker".into(), tracker));
        }
        let saved = Saved { state: self.state.clone(), optimizer_step: self.optimizer_step, config: self.config };
        save(dir, self.state.step(), &tensors, &saved, keep)
    }
}

/// A trainer's checkpoint read back (tensors on the CPU).
pub struct Restored {
    tensors: Vec<(String, Tensor)>,
    /// The loop's position and running sums at the checkpoint's step.
    pub state: LoopState,
    /// The optimiser's steps taken (AdamW's bias-correction t).
    pub optimizer_step: u64,
}

impl Restored {
    /// Reads the checkpoint at `path`, written by [`Snapshot::write`] for the resolved cfg.toml
    /// `config`.
    ///
    /// # Errors
    /// [`DistillError::Usage`] when the checkpoint is unreadable or was written for another
    /// configuration.
    pub fn read(path: &Path, config: &str) -> Result<Restored> {
        let (tensors, saved): (Vec<(String, Tensor)>, Saved) = load(path)?;
        if saved.config != config {
            return Err(DistillError::Usage(format!(
                "{}: this checkpoint was written by a run of another configuration than this run's config.toml (copied from \
                 another run?): move it to the run it came from and resume that one",
                path.display()
            )));
        }
        Ok(Restored { tensors, state: saved.state, optimizer_step: saved.optimizer_step })
    }

    /// Copies the saved student variables into `vs` (those it holds).
    pub fn copy_model_into(&self, vs: &VarStore) {
        tch::no_grad(|| {
            for (name, mut var) in vs.variables() {
                if let Some(t) = self.get(&format!("model/{name}")) {
                    var.copy_(&t);
                }
            }
        });
    }

    /// The optimiser's moments, names without their `optim/` prefix.
    pub fn optim(&self) -> Vec<(String, Tensor)> {
        self.tensors
            .iter()
            .filter_map(|(n, t)| n.strip_prefix("optim/").map(|k| (k.to_string(), t.shallow_clone())))
            .collect()
    }

    /// Every tensor under its saved name (the pruner picks its own).
    pub fn tensors(&self) -> &[(String, Tensor)] {
        &self.tensors
    }

    /// fp16: the saved loss scale and growth tracker.
    pub fn amp(&self) -> Option<(Tensor, Tensor)> {
        Some((self.get("amp/scale")?, self.get("amp/growth_tracker")?))
    }

    fn get(&self, key: &str) -> Option<Tensor> {
        self.tensors.iter().find(|(n, _)| n == key).map(|(_, t)| t.shallow_clone())
    }
}

/// Writes checkpoint `step` under `dir`, removes half-written ones and prunes old ones; returns
/// its folder.
///
/// # Errors
/// [`DistillError::Io`] or [`DistillError::Torch`] when a file cannot be written or flushed.
pub fn save(
    dir: &Path,
    step: u64,
    tensors: &[(String, Tensor)],
    state: &impl Serialize,
    keep: usize,
) -> Result<PathBuf> {
    create_dir_all(dir).map_err(|e| DistillError::io(dir, e))?;
    remove_stale(dir);
    let final_dir = dir.join(format!("{STEP_PREFIX}{step:09}"));
    let tmp = dir.join(format!("{STEP_PREFIX}{step:09}{TMP_SUFFIX}"));
    let on_cpu: Vec<(String, Tensor)> =
        tensors.iter().map(|(n, t)| (n.clone(), t.to_device(tch::Device::Cpu))).collect();
    let json = serde_json::to_vec_pretty(state).expect("checkpoint state serialises");
    let _ = std::fs::remove_dir_all(&final_dir);
    replace_via(&final_dir, &tmp, |tmp| {
        std::fs::create_dir(tmp).map_err(|e| DistillError::io(tmp, e))?;
        let tensors_file = tmp.join("tensors.safetensors");
        Tensor::write_safetensors(&on_cpu, &tensors_file)
            .map_err(|e| DistillError::Torch(format!("writing checkpoint {}: {e}", tmp.display())))?;
        sync_file(&tensors_file).map_err(|e| DistillError::io(&tensors_file, e))?;
        let state_file = tmp.join("state.json");
        std::fs::write(&state_file, json)
            .and_then(|_| sync_file(&state_file))
            .map_err(|e| DistillError::io(&state_file, e))
    })?;
    let mut all = list(dir);
    while all.len() > keep.max(1) {
        let _ = std::fs::remove_dir_all(all.remove(0));
    }
    Ok(final_dir)
}

/// Checkpoint folders are `step-<N>` (N zero-padded to 9 digits, so that names sort as steps);
/// one being written is `step-<N>.tmp`.
const STEP_PREFIX: &str = "step-";
const TMP_SUFFIX: &str = ".tmp";

/// The `step-<N>` folders under `dir` (written whole: not `.tmp`), oldest first, whatever they
/// hold.
fn step_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            p.is_dir() && name.starts_with(STEP_PREFIX) && !name.ends_with(TMP_SUFFIX)
        })
        .collect();
    found.sort();
    found
}

/// Complete checkpoints under `dir` (those with a `state.json`), oldest first.
pub fn list(dir: &Path) -> Vec<PathBuf> {
    step_dirs(dir).into_iter().filter(|p| p.join("state.json").is_file()).collect()
}

/// Removes the `step-*.tmp` folders that a crash left half-written under `dir`.
pub fn remove_stale(dir: &Path) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(STEP_PREFIX) && name.ends_with(TMP_SUFFIX) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Reads a checkpoint folder: its tensors (on CPU) and its state.
///
/// # Errors
/// [`DistillError::Usage`] when either file is missing, empty, truncated or not what
/// [`save`] writes.
pub fn load<T: DeserializeOwned>(path: &Path) -> Result<(Vec<(String, Tensor)>, T)> {
    let tensors = Tensor::read_safetensors(path.join("tensors.safetensors")).map_err(|e| {
        DistillError::Usage(format!(
            "{}: unreadable checkpoint ({})",
            path.display(),
            crate::host::error::first_line(&e.to_string())
        ))
    })?;
    let text = std::fs::read(path.join("state.json"))
        .map_err(|e| DistillError::Usage(format!("{}: unreadable checkpoint state ({e})", path.display())))?;
    let state = serde_json::from_slice(&text)
        .map_err(|e| DistillError::Usage(format!("{}: unreadable checkpoint state ({e})", path.display())))?;
    Ok((tensors, state))
}

/// What [`resume_newest`] did.
#[derive(Debug)]
pub struct Resumed {
    /// The checkpoint restored.
    pub used: PathBuf,
    /// Newer checkpoints that did not load, with the reason; they are removed (they would
    /// otherwise count among the `keep` newest and push out good ones).
    pub skipped: Vec<(PathBuf, String)>,
}

impl Resumed {
    /// One line for the progress output naming what was skipped and why; `None` when nothing was.
    pub fn skipped_line(&self, name: &str) -> Option<String> {
        (!self.skipped.is_empty()).then(|| {
            let skipped: Vec<String> = self.skipped.iter().map(|(p, why)| format!("{} ({why})", p.display())).collect();
            format!(
                "warning: {name}: removed checkpoint(s) that do not load: {}; resuming from the newest that does, {}",
                skipped.join("; "),
                self.used.display()
            )
        })
    }
}

/// Restores the newest checkpoint under `dir` that `restore` accepts, trying older ones when a
/// newer one is empty or truncated (a power loss) or otherwise refused; removes stale `.tmp`
/// folders first. `Ok(None)` when `dir` holds no checkpoint (a fresh start).
///
/// `restore` must leave its target untouched when it fails (it is then called again).
///
/// # Errors
/// [`DistillError::Usage`] when checkpoints exist but none loads, naming each and its reason.
pub fn resume_newest(dir: &Path, mut restore: impl FnMut(&Path) -> Result<()>) -> Result<Option<Resumed>> {
    remove_stale(dir);
    let mut candidates = step_dirs(dir);
    let mut skipped = Vec::new();
    while let Some(path) = candidates.pop() {
        match restore(&path) {
            Ok(()) => {
                for (bad, _) in &skipped {
                    let _ = std::fs::remove_dir_all(bad);
                }
                return Ok(Some(Resumed { used: path, skipped }));
            }
            Err(e) => {
                let why = e.to_string();
                // the path leads most messages; keep the reason only
                let why = why.strip_prefix(&format!("{}: ", path.display())).unwrap_or(&why).to_string();
                skipped.push((path, why));
            }
        }
    }
    if skipped.is_empty() {
        return Ok(None);
    }
    let all: Vec<String> = skipped.iter().map(|(p, why)| format!("{} ({why})", p.display())).collect();
    Err(DistillError::Usage(format!(
        "no checkpoint under {} loads: {}; delete that folder to train this student from the start",
        dir.display(),
        all.join("; ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(paths: &[PathBuf]) -> Vec<String> {
        paths.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn keeps_the_newest_and_ignores_half_written_ones() {
        let dir = tempfile::tempdir().unwrap();
        let t = vec![("w".to_string(), Tensor::from_slice(&[1.5f32, 2.0]))];
        for step in [10u64, 20, 30, 40] {
            save(dir.path(), step, &t, &step, 2).unwrap();
        }
        std::fs::create_dir(dir.path().join("step-000000050.tmp")).unwrap();
        assert_eq!(names(&list(dir.path())), ["step-000000030", "step-000000040"]);
        let (tensors, step): (_, u64) = load(&list(dir.path())[1]).unwrap();
        assert_eq!(step, 40);
        assert_eq!(Vec::<f32>::try_from(&tensors[0].1).unwrap(), [1.5, 2.0]);
        // the next save removes the stale half-written folder of an earlier crash
        save(dir.path(), 45, &t, &45u64, 2).unwrap();
        assert!(!dir.path().join("step-000000050.tmp").exists());
    }

    #[test]
    fn a_checkpoint_is_flushed_before_and_after_its_rename() {
        let dir = tempfile::tempdir().unwrap();
        let t = vec![("w".to_string(), Tensor::from_slice(&[1.0f32]))];
        let ckpt = dir.path().join("ckpt");
        crate::host::durable::take_synced();
        save(&ckpt, 7, &t, &7u64, 2).unwrap();
        let tmp = ckpt.join("step-000000007.tmp");
        assert_eq!(
            crate::host::durable::take_synced(),
            [
                dir.path().to_path_buf(), // the new checkpoints folder, into its parent
                tmp.join("tensors.safetensors"),
                tmp.join("state.json"),
                tmp.clone(),
                ckpt.clone(), // the rename
            ]
        );
    }

    #[test]
    fn resume_falls_back_to_the_newest_checkpoint_that_loads() {
        let dir = tempfile::tempdir().unwrap();
        let t = vec![("w".to_string(), Tensor::from_slice(&[3.0f32]))];
        for step in [10u64, 20, 30] {
            save(dir.path(), step, &t, &step, 3).unwrap();
        }
        // a power loss: step 30's files exist but are empty, step 20's state is cut short,
        // and a half-written step 40 is left
        let newest = dir.path().join("step-000000030");
        std::fs::write(newest.join("tensors.safetensors"), b"").unwrap();
        std::fs::write(newest.join("state.json"), b"").unwrap();
        std::fs::write(dir.path().join("step-000000020/state.json"), b"2").unwrap();
        std::fs::create_dir(dir.path().join("step-000000040.tmp")).unwrap();
        let mut restored = None;
        let resumed = resume_newest(dir.path(), |p| {
            let (_, step): (Vec<(String, Tensor)>, u64) = load(p)?;
            if step == 2 {
                return Err(DistillError::Usage(format!("{}: step 2 is not 20", p.display())));
            }
            restored = Some(step);
            Ok(())
        })
        .unwrap()
        .unwrap();
        assert_eq!(restored, Some(10));
        assert_eq!(resumed.used, dir.path().join("step-000000010"));
        assert_eq!(
            names(&resumed.skipped.iter().map(|s| s.0.clone()).collect::<Vec<_>>()),
            ["step-000000030", "step-000000020"]
        );
        assert!(resumed.skipped[0].1.starts_with("unreadable checkpoint"), "{}", resumed.skipped[0].1);
        assert_eq!(resumed.skipped[1].1, "step 2 is not 20");
        let line = resumed.skipped_line("student").unwrap();
        assert!(line.contains("step-000000030 (unreadable checkpoint") && line.ends_with("step-000000010"), "{line}");
        // the unreadable ones and the stale .tmp are gone; the one resumed from stays
        let left: Vec<String> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert_eq!(left, ["step-000000010"]);

        // nothing loads: an error naming each checkpoint, and nothing removed
        let e = resume_newest(dir.path(), |p| Err(DistillError::Usage(format!("{}: bad", p.display()))))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no checkpoint under") && e.contains("step-000000010 (bad)"), "{e}");
        assert!(dir.path().join("step-000000010").is_dir());
        // an empty folder: a fresh start
        let empty = tempfile::tempdir().unwrap();
        assert!(resume_newest(empty.path(), |_| unreachable!()).unwrap().is_none());
    }
}
