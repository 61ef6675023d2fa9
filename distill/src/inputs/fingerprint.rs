//! The content of a run's input files (teacher, data, tokenizer, `student.init`) when it started, recorded
//! in `run.json` so that `--resume` refuses a file that changed since: continuing with another teacher or
//! other data would silently mix two runs.
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::host::error::{DistillError, Result};

/// One input file: its role (`teacher`, `data.train`, `data.test`, `data.tokenizer`,
/// `student.init`), its size in bytes and the
/// CRC-32 (IEEE, as zip/gzip use) of its bytes. The role, not the path, identifies it, so a
/// teacher moved elsewhere (`--resume DIR --teacher NEW`) still matches when its bytes do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    pub role: String,
    pub bytes: u64,
    pub crc32: u32,
}

impl Fingerprint {
    /// Reads `path` once, in 1 MiB blocks; a Hugging Face model folder as the files that make
    /// its model, one after the other ([`crate::inputs::hf::model_files`]).
    ///
    /// # Errors
    /// [`DistillError::Io`] when it cannot be read.
    pub fn of(role: &str, path: &Path) -> Result<Fingerprint> {
        let files = if path.is_dir() { crate::inputs::hf::model_files(path) } else { vec![path.to_path_buf()] };
        let (mut hasher, mut bytes, mut buf) = (crc32fast::Hasher::new(), 0u64, vec![0u8; 1 << 20]);
        for path in &files {
            let mut file = std::fs::File::open(path).map_err(|e| DistillError::io(path, e))?;
            loop {
                let n = file.read(&mut buf).map_err(|e| DistillError::io(path, e))?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                bytes += n as u64;
            }
        }
        Ok(Fingerprint { role: role.to_string(), bytes, crc32: hasher.finalize() })
    }
}

/// Fingerprints of `files` (role, path).
///
/// # Errors
/// As [`Fingerprint::of`].
pub fn all(files: &[(&str, &Path)]) -> Result<Vec<Fingerprint>> {
    files.iter().map(|(role, path)| Fingerprint::of(role, path)).collect()
}

/// Refuses to resume the run under `out` when a file of `now` differs from the fingerprint of
/// its role in `recorded` (a role not recorded, as in a run.json of an older distill, passes; a
/// missing file is left to the loader, whose error says how to point at it).
///
/// # Errors
/// [`DistillError::Usage`] naming the first changed file, its role, and the fix.
pub fn check_unchanged(out: &Path, recorded: &[Fingerprint], now: &[(&str, PathBuf)]) -> Result<()> {
    for (role, path) in now {
        let Some(was) = recorded.iter().find(|f| f.role == *role).filter(|_| path.exists()) else { continue };
        let is = Fingerprint::of(role, path)?;
        if is != *was {
            let fix = if *role == "teacher" {
                "pass the run's own teacher with --teacher FILE"
            } else {
                "put the run's own file back"
            };
            return Err(DistillError::Usage(format!(
                "--resume {}: {role} {} is not the file the run started with ({} bytes, CRC-32 {:08x}; now {} bytes, CRC-32 {:08x}): {fix}, or start a new run",
                out.display(),
                path.display(),
                was.bytes,
                was.crc32,
                is.bytes,
                is.crc32
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_is_the_ieee_one_and_a_changed_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t.pt");
        std::fs::write(&file, b"123456789").unwrap();
        // the CRC-32 check value of "123456789" (IEEE 802.3 polynomial)
        let was = Fingerprint::of("teacher", &file).unwrap();
        assert_eq!(was, Fingerprint { role: "teacher".into(), bytes: 9, crc32: 0xcbf4_3926 });
        let now = [("teacher", file.clone())];
        check_unchanged(Path::new("q"), std::slice::from_ref(&was), &now).unwrap();
        std::fs::write(&file, b"987654321").unwrap();
        let e = check_unchanged(Path::new("q"), &[was], &now).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "--resume q: teacher {} is not the file the run started with (9 bytes, CRC-32 cbf43926; now 9 bytes",
                file.display()
            )),
            "{e}"
        );
        assert!(e.ends_with("pass the run's own teacher with --teacher FILE, or start a new run"), "{e}");
    }
}
