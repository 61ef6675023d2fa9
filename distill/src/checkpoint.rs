//! Resumable checkpoints: `<dir>/step-<N>/` holds `tensors.safetensors` (student variables,
//! optimiser moments, pruning masks, loss scale) and `state.json` (step, running sums, ...).
//! Each is written into `step-<N>.tmp/` and renamed into place, so a checkpoint either exists
//! whole or not at all; only the newest `keep` are kept.
use std::path::{Path, PathBuf};

use serde::{de::DeserializeOwned, Serialize};
use tch::Tensor;

use crate::error::{DistillError, Result};

/// Writes checkpoint `step` under `dir` and prunes old ones; returns its folder.
pub fn save(
    dir: &Path,
    step: u64,
    tensors: &[(String, Tensor)],
    state: &impl Serialize,
    keep: usize,
) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| DistillError::io(dir, e))?;
    let final_dir = dir.join(format!("step-{step:09}"));
    let tmp = dir.join(format!("step-{step:09}.tmp"));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir(&tmp).map_err(|e| DistillError::io(&tmp, e))?;
    let on_cpu: Vec<(String, Tensor)> =
        tensors.iter().map(|(n, t)| (n.clone(), t.to_device(tch::Device::Cpu))).collect();
    Tensor::write_safetensors(&on_cpu, tmp.join("tensors.safetensors"))
        .map_err(|e| DistillError::Torch(format!("writing checkpoint {}: {e}", tmp.display())))?;
    let json = serde_json::to_vec_pretty(state).expect("checkpoint state serialises");
    std::fs::write(tmp.join("state.json"), json).map_err(|e| DistillError::io(&tmp, e))?;
    let _ = std::fs::remove_dir_all(&final_dir);
    std::fs::rename(&tmp, &final_dir).map_err(|e| DistillError::io(&final_dir, e))?;
    let mut all = list(dir);
    while all.len() > keep.max(1) {
        let _ = std::fs::remove_dir_all(all.remove(0));
    }
    Ok(final_dir)
}

/// Complete checkpoints under `dir`, oldest first.
pub fn list(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with("step-") && !name.ends_with(".tmp") && p.join("state.json").is_file()
        })
        .collect();
    found.sort();
    found
}

/// Reads a checkpoint folder: its tensors (on CPU) and its state.
pub fn load<T: DeserializeOwned>(path: &Path) -> Result<(Vec<(String, Tensor)>, T)> {
    let tensors = Tensor::read_safetensors(path.join("tensors.safetensors"))
        .map_err(|e| DistillError::Usage(format!("{}: unreadable checkpoint ({e})", path.display())))?;
    let text = std::fs::read(path.join("state.json")).map_err(|e| DistillError::io(path, e))?;
    let state = serde_json::from_slice(&text)
        .map_err(|e| DistillError::Usage(format!("{}: unreadable checkpoint state ({e})", path.display())))?;
    Ok((tensors, state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_and_ignores_half_written_ones() {
        let dir = tempfile::tempdir().unwrap();
        let t = vec![("w".to_string(), Tensor::from_slice(&[1.5f32, 2.0]))];
        for step in [10u64, 20, 30, 40] {
            save(dir.path(), step, &t, &step, 2).unwrap();
        }
        std::fs::create_dir(dir.path().join("step-000000050.tmp")).unwrap();
        let names: Vec<String> =
            list(dir.path()).iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["step-000000030", "step-000000040"]);
        let (tensors, step): (_, u64) = load(&list(dir.path())[1]).unwrap();
        assert_eq!(step, 40);
        assert_eq!(Vec::<f32>::try_from(&tensors[0].1).unwrap(), [1.5, 2.0]);
    }
}
