//! The teacher's outputs on the train set, kept on disk: in the unfinished run's folder (so a
//! resumed run reads them back) and, with `--teacher-cache DIR`, in a folder shared by runs, so
//! that students distilled from the same teacher on the same data (a sweep over student sizes,
//! the benchmark's students) compute them once.
//!
//! A file is a safetensors with `outputs` ([N, ...] float, the train set's rows in order), `key`
//! (u8 [K]): the text [`CacheKey`] that names what produced the outputs, and `crc32` (int64 [1]):
//! the CRC-32 of the outputs' bytes. A file is used only when its key equals the run's, its row
//! count the train set's and its outputs their CRC; anything else (another teacher, other data, a
//! torn, damaged or foreign file) is computed again, never trusted.
use std::path::{Path, PathBuf};

use estimator_wasm::schema::Config;
use tch::{Kind, Tensor};

use crate::host::durable::{create_dir_all, replace_via};
use crate::host::error::{DistillError, Result};
use crate::inputs::fingerprint::Fingerprint;

/// What determines the teacher's outputs on the train set: the content (size, CRC-32) of the
/// teacher, train and tokenizer files (not their paths), and the rest of the `[data]` and
/// `[teacher]` tables (input shape and truncation, normalisation, holdout, the teacher's
/// precision and output selector; `train.seed` too when a holdout split draws from it). Two runs with equal keys feed
/// the frozen teacher the same inputs in the same order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheKey(pub String);

impl CacheKey {
    /// The key of a run whose input files are `inputs` (the roles `teacher`, `data.train` and
    /// `data.tokenizer` count; the test set and `student.init` do not feed the cache).
    pub fn new(inputs: &[Fingerprint], spec: &Config) -> CacheKey {
        let files: Vec<String> = inputs
            .iter()
            .filter(|f| matches!(f.role.as_str(), "teacher" | "data.train" | "data.tokenizer"))
            .map(|f| format!("{}={}:{:08x}", f.role, f.bytes, f.crc32))
            .collect();
        // the files count by content (above), not by path; the held-out file and the order of the
        // training batches do not change the train set's outputs
        // (a test file given or not does: without one, `holdout` splits the train file)
        let mut data = spec.data.clone();
        let test = data.test.as_ref().map(|_| "given".to_string());
        (data.train, data.test, data.tokenizer, data.bucket_by_length) = (None, test, None, false);
        let mut teacher = spec.teacher.clone();
        (teacher.params, teacher.buffers, teacher.preset, teacher.arch) = (None, None, None, None);
        teacher.hf = None; // a folder's content is in the teacher's fingerprint, not its path
        let seed = data.holdout.map(|_| format!(" seed={}", spec.train.seed)).unwrap_or_default();
        CacheKey(format!("v1 {} data={data:?} teacher={teacher:?}{seed}", files.join(" ")))
    }

    /// The shared cache's file for this key in `dir`: `teacher-<CRC-32 of the key>.safetensors`
    /// (the full key inside decides; the name only spreads the files).
    pub fn file_in(&self, dir: &Path) -> PathBuf {
        dir.join(format!("teacher-{:08x}.safetensors", crc32fast::hash(self.0.as_bytes())))
    }
}

/// Refuses, before any work, a `--teacher-cache` folder that is a file, or that is the run's
/// output folder `out` or lies inside it (`out` and `out.partial` are renamed and replaced).
///
/// # Errors
/// [`DistillError::Usage`] naming the folder and what to give instead.
pub fn check_folder(cache: &Path, out: &Path) -> Result<()> {
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let (cache_abs, out_abs) = (abs(cache), abs(out));
    let mut partial = out_abs.clone().into_os_string();
    partial.push(".partial");
    if cache.is_file() {
        return Err(DistillError::Usage(format!(
            "--teacher-cache {} is a file: give a folder (it is created if missing)",
            cache.display()
        )));
    }
    if cache_abs.starts_with(&out_abs) || cache_abs.starts_with(PathBuf::from(partial)) {
        return Err(DistillError::Usage(format!(
            "--teacher-cache {} is inside the run's folder {}, which is renamed when the run ends: give a folder outside it (e.g. runs/teacher-cache)",
            cache.display(),
            out.display()
        )));
    }
    Ok(())
}

/// Whether a file without a `key` is used: in a run's own folder it is (distill before 0.x wrote
/// none there, and `--resume` has checked that run's input files), in a shared folder never.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keyless {
    Trusted,
    Refused,
}

/// The outputs in `path` when it holds this `key` (or none, where `keyless` trusts that) and
/// `rows` rows; `None` otherwise (missing, unreadable, another key or length).
pub fn read(path: &Path, key: &CacheKey, rows: usize, keyless: Keyless) -> Option<Tensor> {
    let tensors = Tensor::read_safetensors(path).ok()?;
    let find = |name: &str| tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t);
    let key_matches = match find("key") {
        Some(stored) => Vec::<u8>::try_from(stored).ok()? == key.0.as_bytes(),
        None => keyless == Keyless::Trusted,
    };
    let outputs = find("outputs")?;
    let intact = match find("crc32") {
        Some(stored) => stored.int64_value(&[0]) == i64::from(crc_of(outputs)),
        None => find("key").is_none() && keyless == Keyless::Trusted,
    };
    (key_matches && intact && outputs.size().first() == Some(&(rows as i64))).then(|| outputs.shallow_clone())
}

/// The CRC-32 of a CPU tensor's bytes in row-major order, hashed 4 Mi elements at a time, so
/// that hashing the train set's outputs (495 MB for the text benchmark) adds no copy of them.
fn crc_of(t: &Tensor) -> u32 {
    const CHUNK: i64 = 1 << 22;
    let flat = t.contiguous().view(-1);
    let numel = flat.size()[0];
    let mut buf = vec![0u8; CHUNK.min(numel.max(1)) as usize * t.kind().elt_size_in_bytes()];
    let mut hasher = crc32fast::Hasher::new();
    for start in (0..numel).step_by(CHUNK as usize) {
        let len = CHUNK.min(numel - start);
        let part = flat.narrow(0, start, len).contiguous();
        let bytes = len as usize * t.kind().elt_size_in_bytes();
        part.copy_data_u8(&mut buf[..bytes], len as usize);
        hasher.update(&buf[..bytes]);
    }
    hasher.finalize()
}

/// Writes `outputs` (on the CPU), `key` and the outputs' CRC-32 to `path` atomically, creating
/// its folder; the temp file carries the process id, so runs sharing a cache folder never write
/// the same temp file.
///
/// # Errors
/// [`DistillError::Io`] naming `path`.
pub fn write(path: &Path, key: &CacheKey, outputs: &Tensor) -> Result<()> {
    let io = |e: String| DistillError::io(path, std::io::Error::other(e));
    if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_dir_all(dir).map_err(|e| DistillError::io(dir, e))?;
    }
    let key_tensor = Tensor::from_slice(key.0.as_bytes()).to_kind(Kind::Uint8);
    let crc = Tensor::from_slice(&[i64::from(crc_of(outputs))]);
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!("{stem}.tmp-{}.safetensors", std::process::id()));
    replace_via(path, &tmp, |tmp| {
        Tensor::write_safetensors(&[("outputs", outputs), ("key", &key_tensor), ("crc32", &crc)], tmp)
            .map_err(|e| io(e.to_string()))
    })
}

#[cfg(test)]
mod tests {
    use estimator_wasm::schema::{DataSpec, TeacherSpec};

    use super::*;

    fn spec(extra: &str) -> Config {
        let text = format!(
            "[data]\ntrain = \"t.txt\"\ntest = \"v.txt\"\ninput_shape = [16]\nclasses = 8\n{extra}\n[student]\nfamily = \"mlp\"\nhidden = [4]\n"
        );
        Config::from_toml_str(&text).unwrap()
    }

    fn files(teacher_crc: u32) -> Vec<Fingerprint> {
        let fp = |role: &str, crc32| Fingerprint { role: role.into(), bytes: 10, crc32 };
        vec![fp("teacher", teacher_crc), fp("data.train", 2), fp("data.test", 3), fp("student.init", 4)]
    }

    #[test]
    fn the_key_follows_what_feeds_the_teacher_and_nothing_else() {
        let base = CacheKey::new(&files(1), &spec(""));
        let mut data = spec("").data;
        (data.train, data.test, data.tokenizer) = (None, Some("given".into()), None);
        let teacher = spec("").teacher;
        assert_eq!(base.0, format!("v1 teacher=10:00000001 data.train=10:00000002 data={data:?} teacher={teacher:?}"));
        // the test file, student.init, the paths, batch order and the teacher's size description do not count
        let mut other = files(1);
        (other[2].crc32, other[3].crc32) = (99, 98);
        assert_eq!(CacheKey::new(&other, &spec("")), base);
        let bucketed = Config { data: DataSpec { bucket_by_length: true, ..spec("").data }, ..spec("") };
        assert_eq!(CacheKey::new(&files(1), &bucketed), base);
        let moved = spec("").data.train.map(|t| format!("/elsewhere/{t}"));
        assert_eq!(
            CacheKey::new(&files(1), &Config { data: DataSpec { train: moved, ..spec("").data }, ..spec("") }),
            base
        );
        let described = TeacherSpec { preset: Some("gpt2".into()), params: Some(5), ..spec("").teacher };
        assert_eq!(CacheKey::new(&files(1), &Config { teacher: described, ..spec("") }), base);
        // another teacher, another truncation, another teacher precision or a holdout is another key
        assert_ne!(CacheKey::new(&files(7), &spec("")), base);
        let shorter = Config { data: DataSpec { input_shape: vec![12], ..spec("").data }, ..spec("") };
        assert_ne!(CacheKey::new(&files(1), &shorter), base);
        assert_ne!(CacheKey::new(&files(1), &spec("[teacher]\nprecision = \"bf16\"")), base);
        let split = Config { data: DataSpec { test: None, holdout: Some(0.1), ..spec("").data }, ..spec("") };
        assert!(CacheKey::new(&files(1), &split).0.ends_with(" seed=0"), "{:?}", CacheKey::new(&files(1), &split));
        // a holdout beside a test file is not applied: not the same train rows as the split
        let both = Config { data: DataSpec { holdout: Some(0.1), ..spec("").data }, ..spec("") };
        assert_ne!(CacheKey::new(&files(1), &both), CacheKey::new(&files(1), &split));
    }

    #[test]
    fn the_crc_is_that_of_the_bytes_across_chunks() {
        let n = (1 << 22) + 6; // one whole chunk and a part, 2 columns
        let t = Tensor::arange(n, (Kind::Float, tch::Device::Cpu));
        let bytes: Vec<u8> = Vec::<f32>::try_from(&t).unwrap().iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(crc_of(&t.view([-1, 2])), crc32fast::hash(&bytes));
        assert_eq!(crc_of(&Tensor::from_slice(b"123456789")), 0xcbf4_3926);
    }

    #[test]
    fn a_cache_folder_inside_the_run_folder_or_a_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run");
        check_folder(&dir.path().join("cache"), &out).unwrap();
        check_folder(&dir.path().join("run-cache"), &out).unwrap();
        for inside in [out.clone(), out.join("cache"), dir.path().join("run.partial/c")] {
            let e = check_folder(&inside, &out).unwrap_err().to_string();
            assert!(e.contains("is inside the run's folder") && e.ends_with("(e.g. runs/teacher-cache)"), "{e}");
        }
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let e = check_folder(&file, &out).unwrap_err().to_string();
        assert_eq!(
            e,
            format!("--teacher-cache {} is a file: give a folder (it is created if missing)", file.display())
        );
    }

    #[test]
    fn a_file_is_used_only_with_its_own_key_and_row_count() {
        let dir = tempfile::tempdir().unwrap();
        let key = CacheKey::new(&files(1), &spec(""));
        let path = key.file_in(&dir.path().join("cache"));
        let outputs = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).view([3, 2]);
        write(&path, &key, &outputs).unwrap();
        let back = read(&path, &key, 3, Keyless::Refused).expect("the file it wrote");
        assert_eq!(Vec::<f32>::try_from(back.flatten(0, 1)).unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert!(read(&path, &key, 4, Keyless::Trusted).is_none(), "another row count");
        assert!(read(&path, &CacheKey::new(&files(2), &spec("")), 3, Keyless::Trusted).is_none(), "another key");
        let names: Vec<_> =
            std::fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "no temp file left: {names:?}");
        // damaged outputs under an intact header: their CRC no longer matches
        let mut tensors = Tensor::read_safetensors(&path).unwrap();
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        let damaged = outputs.copy();
        let _ = damaged.get(0).fill_(9.0);
        Tensor::write_safetensors(&[("outputs", &damaged), ("key", &tensors[1].1), ("crc32", &tensors[0].1)], &path)
            .unwrap();
        assert!(read(&path, &key, 3, Keyless::Trusted).is_none(), "damaged outputs");
        // a run folder's file from before the key: used there, never from a shared folder
        Tensor::write_safetensors(&[("outputs", &outputs)], &path).unwrap();
        assert!(read(&path, &key, 3, Keyless::Trusted).is_some());
        assert!(read(&path, &key, 3, Keyless::Refused).is_none());
        std::fs::write(&path, b"not a safetensors file").unwrap();
        assert!(read(&path, &key, 3, Keyless::Trusted).is_none(), "a torn file");
    }
}
