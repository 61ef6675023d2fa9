//! The run's configuration, as written and as resolved. The schema and its validation live in
//! `estimator_wasm::schema`; reading a cfg.toml with its `--set` overrides in `overrides`.
//!
//! * [`WrittenCfg`]: the cfg.toml as written, with what only the trainer needs resolved once: the
//!   files it names (relative to its folder) and the held-out set (a file, or a split of the
//!   train file). The written `Config` is never changed afterwards.
//! * [`RunSettings`] (`settings`): the run as resolved on its device
//!   ([`crate::train::memory_plan::resolve`]): the `[train]` section as [`TrainSettings`], its
//!   micro-batch a number (`batch_size = "auto"` becomes the largest that fits, by the device's
//!   memory plan), the estimator's target, the device. It takes the `WrittenCfg` in and keeps no
//!   copy of the cfg as written: every stage after the memory plan reads resolved values only.

pub mod overrides;
pub mod settings;
use std::path::{Path, PathBuf};

use estimator_wasm::schema::{BatchSize, Config, Target};
use tch::Device;

use crate::host::error::{DistillError, Result};
pub use settings::{RunSettings, TrainSettings};

/// The held-out set a run measures its students on.
#[derive(Debug, Clone, PartialEq)]
pub enum HeldOutSet {
    /// `[data].test`, relative to the cfg.toml's folder.
    File(PathBuf),
    /// `[data].holdout`: this fraction of the train file, split off with `train.seed`.
    Split(f64),
}

/// The data files a cfg.toml names, resolved against its folder.
#[derive(Debug, Clone, PartialEq)]
pub struct DataFiles {
    /// `[data].train`.
    pub train: PathBuf,
    pub held_out: HeldOutSet,
    /// `[data].tokenizer`: the `tokenizer.json` of text data.
    pub tokenizer: Option<PathBuf>,
}

impl DataFiles {
    /// The data files of `spec` read from `path`; `None` when `[data].train` is not set.
    ///
    /// # Errors
    /// [`DistillError::Config`] when `[data].train` is set but neither `test` nor `holdout`
    /// gives a held-out set.
    pub fn of(path: &Path, spec: &Config) -> Result<Option<DataFiles>> {
        let Some(train) = &spec.data.train else {
            return Ok(None);
        };
        let held_out =
            match (&spec.data.test, spec.data.holdout) {
                (Some(test), _) => HeldOutSet::File(relative(path, test)),
                (None, Some(fraction)) => HeldOutSet::Split(fraction),
                (None, None) => return Err(DistillError::config(
                    path,
                    "data.test is missing: set it to a held-out file (.npz, or .txt for text), or set data.holdout = 0.1 to split data.train",
                )),
            };
        let tokenizer = spec.data.tokenizer.as_ref().map(|t| relative(path, t));
        Ok(Some(DataFiles { train: relative(path, train), held_out, tokenizer }))
    }
}

/// `spec` (read from `cfg_path`) with `data.tokenizer`, when it does not set one, the
/// `tokenizer.json` of the Hugging Face model folder `teacher` (`--teacher DIR`, or
/// `teacher.hf` when `teacher` is `None`), as an absolute path; validated again, as the
/// tokenizer makes the data text.
///
/// # Errors
/// [`DistillError::Config`] naming the key when the cfg does not fit text data.
pub fn with_teacher_tokenizer(mut spec: Config, cfg_path: &Path, teacher: Option<&Path>) -> Result<Config> {
    let folder = teacher.map(Path::to_path_buf).or_else(|| teacher_folder(cfg_path, &spec));
    let found = folder.filter(|f| is_model_folder(f)).and_then(|f| tokenizer(&f));
    if let (Some(tokenizer), None) = (found, &spec.data.tokenizer) {
        let path = std::path::absolute(&tokenizer).unwrap_or(tokenizer);
        spec.data.tokenizer = Some(path.to_string_lossy().into_owned());
        spec.validate().map_err(|e| {
            DistillError::config(cfg_path, format!("{e} (data.tokenizer is the teacher folder's {})", path.display()))
        })?;
    }
    Ok(spec)
}

/// A Hugging Face model folder's tokenizer file.
pub const TOKENIZER: &str = "tokenizer.json";

/// Whether the teacher path `path` is a Hugging Face model folder rather than a TorchScript file.
pub fn is_model_folder(path: &Path) -> bool {
    path.is_dir()
}

/// The model folder's `tokenizer.json`, when it has one.
pub fn tokenizer(dir: &Path) -> Option<PathBuf> {
    Some(dir.join(TOKENIZER)).filter(|p| p.is_file())
}

/// The cfg's `teacher.hf` model folder (of `spec`, read from `cfg_path`), resolved.
pub fn teacher_folder(cfg_path: &Path, spec: &Config) -> Option<PathBuf> {
    spec.teacher.hf.as_ref().map(|folder| relative(cfg_path, folder))
}

/// `file` as named in the cfg.toml at `cfg_path`: relative paths start from the cfg's folder,
/// `~/` from the home folder ([`crate::config::overrides::expand_home`]); tidied ([`tidy`]), so that
/// messages name `data/x.npz`, not `examples/a/../../data/x.npz`.
fn relative(cfg_path: &Path, file: &str) -> PathBuf {
    tidy(&cfg_path.parent().unwrap_or(Path::new(".")).join(crate::config::overrides::expand_home(file)))
}

/// `path` without its `.` components and with each `..` cancelling the folder before it, where
/// that folder is not a symbolic link (through a link, `..` leads out of the link's target, so
/// it stays); the same file as `path` for every path the OS resolves.
pub fn tidy(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    let mut cancellable = 0; // trailing components of `out` that a `..` may remove
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir if cancellable > 0 && !out.is_symlink() => {
                out.pop();
                cancellable -= 1;
            }
            Component::Normal(_) => {
                out.push(part);
                cancellable += 1;
            }
            // the root's parent is the root
            Component::ParentDir if cancellable == 0 && out.has_root() && out.parent().is_none() => {}
            _ => {
                out.push(part);
                cancellable = 0;
            }
        }
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out
}

/// `spec` (read from `cfg_path`) with every file it names made absolute (`data.train`,
/// `data.test`, `data.tokenizer`, `student.init`, `teacher.hf`): the form of its copies in a run folder
/// (`config.toml`, a shrunk student's `student.toml`), which then run from anywhere.
pub fn with_absolute_files(spec: &Config, cfg_path: &Path) -> Config {
    let absolute = |file: &String| {
        let path = relative(cfg_path, file);
        let path = path.canonicalize().or_else(|_| std::path::absolute(&path)).unwrap_or(path);
        path.to_string_lossy().into_owned()
    };
    let mut spec = spec.clone();
    let files = [
        &mut spec.data.train,
        &mut spec.data.test,
        &mut spec.data.tokenizer,
        &mut spec.student.init,
        &mut spec.teacher.hf,
    ];
    for file in files {
        *file = file.as_ref().map(absolute);
    }
    spec
}

/// A validated cfg.toml as written, plus the files it names, resolved.
#[derive(Debug, Clone)]
pub struct WrittenCfg {
    /// The cfg.toml as given on the command line.
    pub path: PathBuf,
    /// The cfg as written (with `--set` overrides).
    pub spec: Config,
    pub data: DataFiles,
    /// `student.init`, the safetensors file the student starts from.
    pub init: Option<PathBuf>,
}

impl WrittenCfg {
    /// Loads, overrides (`--set`), parses and validates `path`.
    ///
    /// # Errors
    /// [`DistillError::Config`] naming the file with the line/column or key at fault.
    pub fn load(path: &Path, sets: &[String]) -> Result<WrittenCfg> {
        let spec = crate::config::overrides::read_spec(path, sets)?;
        WrittenCfg::from_spec(path, spec)
    }

    /// Resolves the files of an already parsed `spec` read from `path`.
    ///
    /// # Errors
    /// [`DistillError::Config`] when `[data].train` is missing or neither `test` nor `holdout`
    /// gives a held-out set.
    pub fn from_spec(path: &Path, spec: Config) -> Result<WrittenCfg> {
        let data = DataFiles::of(path, &spec)?.ok_or_else(|| {
            DistillError::config(path, "data.train is missing: set it to an .npz with arrays x and y")
        })?;
        let init = spec.student.init.as_ref().map(|init| relative(path, init));
        Ok(WrittenCfg { path: path.to_path_buf(), spec, data, init })
    }

    /// The teacher of the run: `given` (`--teacher`), or when that is empty the cfg's
    /// `teacher.hf` folder; and this run with the folder's tokenizer when the cfg names none
    /// ([`with_teacher_tokenizer`]).
    ///
    /// # Errors
    /// [`DistillError::Usage`] when neither names a teacher; as [`with_teacher_tokenizer`].
    pub fn with_teacher(self, given: &Path) -> Result<(WrittenCfg, PathBuf)> {
        let teacher = self.teacher(given)?;
        let spec = with_teacher_tokenizer(self.spec, &self.path, Some(&teacher))?;
        Ok((WrittenCfg::from_spec(&self.path, spec)?, teacher))
    }

    fn teacher(&self, given: &Path) -> Result<PathBuf> {
        match (teacher_folder(&self.path, &self.spec), given.as_os_str().is_empty()) {
            (_, false) => Ok(given.to_path_buf()),
            (Some(folder), true) => Ok(folder),
            (None, true) => Err(DistillError::Usage(
                "no teacher: pass --teacher FILE (TorchScript) or DIR (a Hugging Face model folder), or set teacher.hf in the cfg.toml".into(),
            )),
        }
    }

    /// The run with its micro-batch decided: `batch_size` (`auto_batch`: `train.batch_size` was
    /// `"auto"`), the estimator's `target` and the `device`. The memory plan decides them
    /// ([`crate::train::memory_plan::resolve`]); [`WrittenCfg::unplanned`] without one.
    pub fn settle(self, batch_size: usize, auto_batch: bool, target: Target, device: Device) -> RunSettings {
        RunSettings::new(self, batch_size, auto_batch, target, device)
    }

    /// Notes on keys that are set but change nothing in this run, for the log: `kd.loss_chunk`
    /// outside a language model, or as long as its window (one chunk is the whole loss);
    /// `kd.beta` with a divergence other than JSD.
    pub fn idle_keys(&self) -> Vec<String> {
        let kd = &self.spec.kd;
        let (chunk, seq) = (kd.loss_chunk, self.spec.data.input_shape.first().copied().unwrap_or(0));
        let mut notes = match (chunk, self.spec.student.is_language_model()) {
            (0, _) => vec![],
            (_, false) => vec![format!("note: kd.loss_chunk = {chunk} applies to language models (head = \"lm\"): ignored")],
            (c, true) if c >= seq => vec![format!(
                "note: kd.loss_chunk = {c} is not below the window of data.input_shape[0] = {seq} positions: the loss runs in one piece"
            )],
            _ => vec![],
        };
        let divergence = kd.soft_divergence();
        if let (Some(beta), false) = (kd.beta, divergence == estimator_wasm::schema::KdDivergence::Jsd) {
            notes.push(format!(
                "note: kd.beta = {beta} weighs divergence = \"jsd\" only, and this run's is \"{}\": ignored",
                divergence.name()
            ));
        }
        notes
    }

    /// The run on `device` without a memory plan (tests, tools): `train.batch_size` and
    /// `estimate.target` as written.
    ///
    /// # Errors
    /// [`DistillError::Config`] when `train.batch_size` is `"auto"`: only a device whose memory
    /// is known resolves it.
    pub fn unplanned(self, device: Device) -> Result<RunSettings> {
        let BatchSize::Fixed(n) = self.spec.train.batch_size else {
            return Err(self.auto_unplanned());
        };
        let target = self.spec.estimate.target;
        Ok(RunSettings::new(self, n as usize, false, target, device))
    }

    /// The error for `train.batch_size = "auto"` where the device's memory is unknown.
    pub fn auto_unplanned(&self) -> DistillError {
        DistillError::config(
            &self.path,
            "train.batch_size = \"auto\": the device's memory is unknown here; set a number",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(data: &str) -> Config {
        Config::from_toml_str(&format!("[data]\ninput_shape = [4]\nclasses = 3\n{data}[student]\nfamily = \"mlp\"\n"))
            .unwrap()
    }

    #[test]
    fn files_are_resolved_once_against_the_cfg_folder() {
        let path = Path::new("runs/cfg/c.toml");
        let cfg = WrittenCfg::from_spec(path, spec("train = \"t.npz\"\ntest = \"../v.npz\"\n")).unwrap();
        assert_eq!(cfg.data.train, Path::new("runs/cfg/t.npz"));
        assert_eq!(cfg.data.held_out, HeldOutSet::File("runs/v.npz".into()), "tidied");
        assert_eq!(cfg.data.tokenizer, None);
        let split = WrittenCfg::from_spec(path, spec("train = \"t.npz\"\nholdout = 0.25\n")).unwrap();
        assert_eq!(split.data.held_out, HeldOutSet::Split(0.25));
        // no held-out set: refused, also where only the files are asked for (`distill plan`)
        let e = WrittenCfg::from_spec(path, spec("train = \"t.npz\"\n")).unwrap_err().to_string();
        assert!(e.contains("data.test is missing"), "{e}");
        assert!(DataFiles::of(path, &spec("train = \"t.npz\"\n")).is_err());
        // no train file: the trainer refuses, the plan goes without data
        let e = WrittenCfg::from_spec(path, spec("")).unwrap_err().to_string();
        assert!(e.contains("data.train is missing"), "{e}");
        assert_eq!(DataFiles::of(path, &spec("")).unwrap(), None);
        // `~/` is the home folder, as with --set, wherever the cfg is
        if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from) {
            let cfg = WrittenCfg::from_spec(path, spec("train = \"~/t.npz\"\ntest = \"~/v.npz\"\n")).unwrap();
            assert_eq!(cfg.data.train, home.join("t.npz"));
            assert_eq!(cfg.data.held_out, HeldOutSet::File(home.join("v.npz")));
        }
    }

    #[test]
    fn a_tidy_path_names_the_same_file() {
        assert_eq!(tidy(Path::new("examples/minilm/../../data/minilm/train.txt")), Path::new("data/minilm/train.txt"));
        assert_eq!(tidy(Path::new("./a/./b/..")), Path::new("a"));
        assert_eq!(tidy(Path::new("a/..")), Path::new("."));
        assert_eq!(tidy(Path::new("../../x")), Path::new("../../x"));
        assert_eq!(tidy(Path::new("/a/../../x")), Path::new("/x"), "above the root is the root");
        // through a symbolic link `..` leaves the link's target: kept, and the file is found
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("real/inner")).unwrap();
        std::fs::write(dir.path().join("real/data.txt"), "x").unwrap();
        std::os::unix::fs::symlink(dir.path().join("real/inner"), dir.path().join("link")).unwrap();
        let through = dir.path().join("link/../data.txt");
        assert_eq!(tidy(&through), through);
        assert!(tidy(&through).exists());
    }

    #[test]
    fn resolving_leaves_the_written_cfg_as_written() {
        let path = Path::new("c.toml");
        let cfg = WrittenCfg::from_spec(path, spec("train = \"t.npz\"\nholdout = 0.5\n")).unwrap();
        let written = cfg.spec.clone();
        let settings = cfg.clone().settle(7, true, Target::Cpu, Device::Cpu);
        assert_eq!(cfg.spec, written, "the written cfg is not changed");
        let resolved = settings.resolved_spec();
        assert_eq!(resolved.train.batch_size, BatchSize::Fixed(7));
        assert_eq!(resolved.estimate.target, Target::Cpu);
        // the rest of it as written
        let mut expected = written.clone();
        (expected.train.batch_size, expected.estimate.target) = (BatchSize::Fixed(7), Target::Cpu);
        assert_eq!(resolved, &expected);
        assert_eq!(settings.train(), &TrainSettings::resolved(&written.train, 7));
        assert_eq!(settings.train().batch_size, 7);
        assert!(settings.auto_batch());
        assert!(settings.to_toml().contains("batch_size = 7"), "{}", settings.to_toml());
        assert_eq!(settings.labels_only().kd().alpha, 0.0);
        assert_eq!(settings.labels_only().train().batch_size, 7);
        // without a plan: as written, and "auto" refused
        let unplanned = cfg.clone().unplanned(Device::Cpu).unwrap();
        assert_eq!(unplanned.resolved_spec(), &written);
        let mut auto = cfg;
        auto.spec.train.batch_size = BatchSize::Auto;
        let e = auto.unplanned(Device::Cpu).unwrap_err().to_string();
        assert!(e.ends_with("train.batch_size = \"auto\": the device's memory is unknown here; set a number"), "{e}");
    }

    #[test]
    fn a_loss_chunk_that_changes_nothing_is_noted() {
        let lm = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/lm/lm-student.toml");
        let notes =
            |path: &Path, chunk: u64| WrittenCfg::load(path, &[format!("kd.loss_chunk={chunk}")]).unwrap().idle_keys();
        assert_eq!(notes(&lm, 16), Vec::<String>::new(), "16 of a 64-token window: chunked");
        assert_eq!(
            notes(&lm, 64),
            ["note: kd.loss_chunk = 64 is not below the window of data.input_shape[0] = 64 positions: the loss runs in one piece"]
        );
        let digits = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/digits-student.toml");
        assert_eq!(notes(&digits, 8), ["note: kd.loss_chunk = 8 applies to language models (head = \"lm\"): ignored"]);
        assert!(notes(&digits, 0).is_empty());
    }

    #[test]
    fn a_beta_without_jsd_is_noted() {
        let digits = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/digits-student.toml");
        let notes = |sets: &[&str]| {
            WrittenCfg::load(&digits, &sets.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap().idle_keys()
        };
        assert_eq!(
            notes(&["kd.beta=0.3"]),
            ["note: kd.beta = 0.3 weighs divergence = \"jsd\" only, and this run's is \"forward_kl\": ignored"]
        );
        assert_eq!(
            notes(&["kd.beta=0.3", "kd.divergence=\"tvd\""]),
            ["note: kd.beta = 0.3 weighs divergence = \"jsd\" only, and this run's is \"tvd\": ignored"]
        );
        assert!(notes(&["kd.beta=0.3", "kd.divergence=\"jsd\""]).is_empty());
    }
}
