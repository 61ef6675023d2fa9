//! The explorer's form, shared by the browser site (`site/`) and the embeddable widget
//! (`wasm.rs`): a teacher scenario or a pasted cfg.toml, a student family scaled by width and
//! depth multipliers, and the training levers (micro-batch, precision, optimizer,
//! checkpointing, pruning, data parallelism, ZeRO stage, GPU).
//!
//! [`ExplorerForm::config`] turns the form into the [`Config`] that `distill plan` reads, so the page
//! prices exactly the cfg.toml it exports, but for a scenario's teacher folder: the file names the
//! user's copy (`teacher.hf`) where the page prices the published checkpoint by its preset
//! ([`ExplorerForm::export_config`]). Every field is a plain value, so the whole form
//! serialises to a URL query or to JSON. Pure: no I/O, no clock.
use serde::{Deserialize, Serialize};

use crate::explorer::form_field::{FormError, FormField};
use crate::explorer::scenarios::{
    scenario, InputKind, Scenario, CNN_SMALL, CUSTOM, IMAGENET_DATA, MLP_SMALL, SCENARIOS,
};
use crate::explorer::student_scaling::{base_input, scale_student, set_input};
use crate::explorer::teacher_folder::TeacherFolder;
use crate::memory::errors::EstimateError;
use crate::schema::catalogue;
use crate::schema::limits::MAX_BATCH;
use crate::schema::{toml_text, SpecError, StudentSpec, Target};
use crate::schema::{BatchSize, Checkpointing, Config, Family, OptimizerKind, Precision, PruneMethod, PruneSpec};

/// Smallest width and depth multiplier: below it every size rounds to one unit per layer.
pub const MIN_MULTIPLIER: f64 = 0.01;
/// Largest input size (pixels of image height, tokens, features), as `ExplorerForm::check` bounds it.
pub const MAX_INPUT: u64 = 1 << 20;
/// Most data-parallel GPUs (`estimate.data_parallel`'s bound).
pub const MAX_GPUS: u64 = 1 << 20;
/// Longest pasted cfg.toml, in bytes (4 MiB; a cfg.toml is a few KB): the page keeps the text
/// in its state and its link, so a larger one is refused before it is read.
pub const MAX_CFG_BYTES: usize = 4 << 20;

/// The explorer's whole state: what the URL query and the widget's attributes hold.
///
/// Numbers are plain: the micro-batch in samples per GPU, the input size in pixels (image
/// height) or tokens, multipliers and sparsity as fractions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ExplorerForm {
    /// A [`SCENARIOS`] key, or [`CUSTOM`] for the pasted cfg.toml in `cfg`.
    pub teacher: String,
    /// The pasted cfg.toml (with `teacher = "custom"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cfg: Option<String>,
    /// Student family; a family other than the base's starts from a generic base student.
    pub family: Family,
    /// Width multiplier: channels, hidden widths, or heads (at a fixed head size) and MLP width.
    pub width: f64,
    /// Depth multiplier: conv blocks (cnn), hidden blocks (mlp) or layers (transformer).
    pub depth: f64,
    /// Image height in pixels (the width keeps the aspect ratio), sequence length in tokens,
    /// or feature count.
    pub input: u64,
    /// Micro-batch per GPU, in samples.
    pub batch: u64,
    /// Evaluation batch per GPU, in samples (`train.eval_batch_size`): the per-epoch no-grad
    /// forward, which can be the peak.
    pub eval_batch: u64,
    /// Student precision (`train.precision`).
    pub precision: Precision,
    /// Teacher precision (`teacher.precision`).
    pub teacher_precision: Precision,
    pub optimizer: OptimizerKind,
    /// `"none"`, `"sqrt"` or a number of segments (`student.checkpointing`).
    pub checkpointing: String,
    /// Final pruning sparsity in [0, 1); 0 means no `[prune]` table.
    pub sparsity: f64,
    /// Pruning method when `sparsity > 0`.
    pub prune: PruneMethod,
    /// Data-parallel degree (GPUs).
    pub data_parallel: u64,
    /// ZeRO stage 0 to 3 (0: DDP replicas).
    pub zero_stage: u64,
    /// A catalogue GPU (`crate::schema::catalogue`).
    pub gpu: String,
}

impl ExplorerForm {
    /// The form the page opens on (a link without a teacher): the Fashion-MNIST scenario on an
    /// RTX-4090, which `distill` trains with the demo's own files (`scripts/demo`), so the
    /// first view is one a user can run.
    pub fn opening() -> ExplorerForm {
        ExplorerForm::for_scenario(
            scenario("fashion-mnist-cnn").expect("the fashion-mnist-cnn scenario exists"),
            "RTX-4090",
        )
    }
}

/// The reference form of the tests: GPT-2 small on an
/// RTX-4090 (the page opens on [`ExplorerForm::opening`]).
impl Default for ExplorerForm {
    fn default() -> ExplorerForm {
        ExplorerForm::for_scenario(scenario("gpt2").expect("the gpt2 scenario exists"), "RTX-4090")
    }
}

impl ExplorerForm {
    /// The form for `scenario` with its defaults, on `gpu`.
    pub fn for_scenario(s: &Scenario, gpu: &str) -> ExplorerForm {
        ExplorerForm {
            teacher: s.key.to_string(),
            cfg: None,
            family: s.families[0],
            width: 1.0,
            depth: 1.0,
            input: 0,
            batch: s.batch,
            eval_batch: 0,
            precision: s.precision,
            teacher_precision: s.precision,
            optimizer: OptimizerKind::Adamw,
            checkpointing: "none".into(),
            sparsity: 0.0,
            prune: PruneMethod::Magnitude,
            data_parallel: 1,
            zero_stage: 0,
            gpu: gpu.to_string(),
        }
        .with_base_input()
    }

    /// Switches to another teacher scenario: its task, default family, input size,
    /// micro-batch and precision; keeps the GPU and the parallel settings.
    pub fn with_teacher(&self, key: &str) -> Result<ExplorerForm, FormError> {
        let s = scenario(key).ok_or_else(|| unknown_teacher(key))?;
        let mut e = ExplorerForm::for_scenario(s, &self.gpu);
        e.data_parallel = self.data_parallel;
        e.zero_stage = self.zero_stage;
        Ok(e)
    }

    /// Sets `input` and `eval_batch` from the base config (its own input size and evaluation batch).
    fn with_base_input(mut self) -> ExplorerForm {
        if let Ok(base) = self.base() {
            self.input = base_input(&base);
            self.eval_batch = base.train.eval_batch_size;
        }
        self
    }

    /// The form filled from a pasted cfg.toml, on `gpu` unless the file names one.
    /// `batch_size = "auto"` becomes the largest batch that fits (32 without a GPU).
    ///
    /// # Errors
    /// The cfg.toml's parse or validation error, on the `cfg` field.
    pub fn from_cfg(text: &str, gpu: &str) -> Result<ExplorerForm, FormError> {
        let config = parse_cfg(text)?;
        let gpu = match &config.estimate.gpu {
            Some(name) => {
                catalogue::gpu(name).map(|g| g.name.to_string()).map_err(|e| cfg_error(text, "estimate.gpu", &e))?
            }
            None => gpu.to_string(),
        };
        let batch = match config.train.batch_size {
            BatchSize::Fixed(b) => b,
            BatchSize::Auto => {
                let mut c = config.clone();
                c.estimate.gpu = Some(gpu.clone());
                c.estimate.target = Target::Cuda;
                crate::estimate(&c, &crate::Inputs::default()).map_or(32, |p| p.batch)
            }
        };
        Ok(ExplorerForm {
            teacher: CUSTOM.into(),
            cfg: Some(text.to_string()),
            family: config.student.family,
            width: 1.0,
            depth: 1.0,
            input: base_input(&config),
            batch,
            eval_batch: config.train.eval_batch_size,
            precision: config.train.precision,
            teacher_precision: config.teacher.precision,
            optimizer: config.train.optimizer,
            checkpointing: match config.student.checkpointing {
                Checkpointing::None => "none".into(),
                Checkpointing::Sqrt => "sqrt".into(),
                Checkpointing::Segments(n) => n.to_string(),
            },
            sparsity: config.prune.as_ref().map_or(0.0, |p| p.sparsity),
            prune: config.prune.as_ref().map_or(PruneMethod::Magnitude, |p| p.method),
            data_parallel: config.estimate.data_parallel,
            zero_stage: config.estimate.zero_stage,
            gpu,
        })
    }

    /// The scenario, or `None` for a pasted cfg.toml.
    pub fn scenario(&self) -> Option<&'static Scenario> {
        scenario(&self.teacher)
    }

    /// The config before the form's settings: the scenario's tables with its base student for
    /// `family`, or the pasted cfg.toml.
    ///
    /// # Errors
    /// An unknown teacher, or a pasted cfg.toml that does not parse.
    pub fn base(&self) -> Result<Config, FormError> {
        if crate::schema::names::same(&self.teacher, CUSTOM) {
            let text = self.cfg.as_deref().ok_or_else(|| FormError::on(FormField::Cfg, "paste a cfg.toml first"))?;
            let mut config = parse_cfg(text)?;
            if config.student.family != self.family {
                config.student = generic_student(InputKind::of(&config), self.family)?;
            }
            return Ok(config);
        }
        let s = self.scenario().ok_or_else(|| unknown_teacher(&self.teacher))?;
        let i = s.families.iter().position(|&f| f == self.family).ok_or_else(|| {
            FormError::on(
                FormField::Family,
                format!("{} reads {:?} input: choose a {} student", s.name, s.input, family_list(s.families)),
            )
        })?;
        let data = if s.tables.starts_with("[data]") { "" } else { IMAGENET_DATA };
        Ok(Config::from_toml_str(&format!("{data}{}[student]\n{}", s.tables, s.students[i]))?)
    }

    /// Range checks of the form's own fields, before any estimate.
    ///
    /// # Errors
    /// The first field out of range, with the accepted values.
    pub fn check(&self) -> Result<(), FormError> {
        let within = |v: f64, lo: f64, hi: f64| v.is_finite() && v >= lo && v <= hi;
        if !within(self.width, MIN_MULTIPLIER, 64.0) {
            return Err(FormError::on(FormField::Width, "the width multiplier must be between 0.01 and 64"));
        }
        if !within(self.depth, MIN_MULTIPLIER, 16.0) {
            return Err(FormError::on(FormField::Depth, "the depth multiplier must be between 0.01 and 16"));
        }
        if !(1..=MAX_INPUT).contains(&self.input) {
            return Err(FormError::on(FormField::Input, "the input size must be between 1 and 1,048,576"));
        }
        if !(1..=MAX_BATCH).contains(&self.batch) {
            return Err(FormError::on(FormField::Batch, "the micro-batch must be between 1 and 1,099,511,627,776"));
        }
        if !(1..=MAX_BATCH).contains(&self.eval_batch) {
            return Err(FormError::on(
                FormField::EvalBatch,
                "the evaluation batch must be between 1 and 1,099,511,627,776",
            ));
        }
        if !(self.sparsity.is_finite() && (0.0..1.0).contains(&self.sparsity)) {
            return Err(FormError::on(FormField::Sparsity, "sparsity must be a fraction in [0, 1)"));
        }
        if !(1..=MAX_GPUS).contains(&self.data_parallel) {
            return Err(FormError::on(
                FormField::DataParallel,
                "data parallelism must be between 1 and 1,048,576 GPUs",
            ));
        }
        if self.zero_stage > 3 {
            return Err(FormError::on(FormField::ZeroStage, "the ZeRO stage is 0, 1, 2 or 3"));
        }
        self.checkpointing()?;
        catalogue::gpu(&self.gpu).map_err(EstimateError::from)?;
        Ok(())
    }

    fn checkpointing(&self) -> Result<Checkpointing, FormError> {
        match self.checkpointing.trim() {
            "none" | "" => Ok(Checkpointing::None),
            "sqrt" => Ok(Checkpointing::Sqrt),
            n => match n.parse::<u64>() {
                Ok(k) if k >= 1 => Ok(Checkpointing::Segments(k)),
                _ => Err(FormError::on(
                    FormField::Checkpointing,
                    "checkpointing is none, sqrt or a number of segments >= 1",
                )),
            },
        }
    }

    /// The cfg.toml of the chosen student (width multiplier as set).
    ///
    /// # Errors
    /// As [`ExplorerForm::config_at`].
    pub fn config(&self) -> Result<Config, FormError> {
        self.config_at(1.0)
    }

    /// The cfg.toml of the student `scale` times as wide as the chosen one, validated.
    ///
    /// # Errors
    /// A form field out of range, an unknown teacher, or the estimator's validation error on
    /// the resulting config (mapped to the form field that sets its key).
    pub fn config_at(&self, scale: f64) -> Result<Config, FormError> {
        self.config_from(self.base()?, scale)
    }

    /// [`ExplorerForm::config_at`] from a base config already made by [`ExplorerForm::base`] (a sweep
    /// makes it once for every size and lever; `base` must be this form's).
    ///
    /// # Errors
    /// As [`ExplorerForm::config_at`].
    pub fn config_from(&self, base: Config, scale: f64) -> Result<Config, FormError> {
        self.check()?;
        let mut c = base;
        set_input(&mut c, self.input);
        scale_student(&mut c.student, self.width * scale, self.depth);
        c.student.checkpointing = self.checkpointing()?;
        c.train.batch_size = BatchSize::Fixed(self.batch);
        c.train.eval_batch_size = self.eval_batch;
        c.train.precision = self.precision;
        c.train.optimizer = self.optimizer;
        c.teacher.precision = self.teacher_precision;
        c.prune = (self.sparsity > 0.0).then(|| {
            let mut p = c.prune.clone().unwrap_or(PruneSpec {
                method: self.prune,
                scope: None,
                sparsity: self.sparsity,
                initial_sparsity: 0.0,
                start_epoch: 0.0,
                end_epoch: None,
                every_steps: 100,
                l1: 0.0,
            });
            p.method = self.prune;
            p.sparsity = self.sparsity;
            p.initial_sparsity = p.initial_sparsity.min(self.sparsity);
            p
        });
        c.estimate.target = Target::Cuda;
        c.estimate.gpu = Some(catalogue::gpu(&self.gpu).map_err(EstimateError::from)?.name.to_string());
        c.estimate.data_parallel = self.data_parallel;
        c.estimate.zero_stage = self.zero_stage;
        c.validate()?;
        Ok(c)
    }

    /// What `distill plan` knows beyond `config` (this form's cfg.toml at some size) when it
    /// reads the scenario's files: their sizes ([`Scenario::dataset`]), so the page prices the
    /// resident data and the cached teacher logits as the plan does. Nothing for a pasted
    /// cfg.toml or a scenario without known files.
    pub fn inputs(&self, config: &Config) -> crate::Inputs {
        crate::Inputs { dataset: self.scenario().and_then(|s| s.dataset(config)), ..crate::Inputs::default() }
    }

    /// The chosen student's cfg.toml as a file `distill` reads (a comment header, then the
    /// tables).
    ///
    /// # Errors
    /// As [`ExplorerForm::config`].
    pub fn cfg_toml(&self) -> Result<String, FormError> {
        // the tables of export_config: the teacher's folder named where distill reads it
        let c = self.export_config()?;
        let (how, train) = self.folder().filter(TeacherFolder::trains).map_or((String::new(), ""), |f| {
            let how = format!(
                "# teacher.hf: your copy of {repo}'s Hugging Face folder, beside this file{access}:\n\
                 #   {download}\n\
                 # (or any {types} folder: set data.classes and student.transformer.vocab to its vocab_size)\n\
                 # data.train, data.test: your text, one passage a line.\n",
                repo = f.repo,
                access = f.access(),
                download = f.download(),
                types = crate::schema::HF_MODEL_TYPES.join(", "),
            );
            (how, "#   distill --student cfg.toml\n")
        });
        Ok(format!(
            "# cfg.toml from the distill explorer (teacher: {}). Paths in [data] are relative to this file.\n\
             {how}#   distill plan --student cfg.toml\n{train}\n{}",
            self.scenario().map_or("pasted cfg.toml", |s| s.name),
            c.to_toml_string()
        ))
    }

    /// The chosen student's cfg.toml as `distill` reads it: [`ExplorerForm::config`], with the
    /// scenario's teacher folder named in place of its preset where `distill` reads the folder
    /// ([`TeacherFolder::named_in`]): the page prices the published checkpoint by the preset,
    /// `distill plan` the user's copy by its `config.json`.
    ///
    /// # Errors
    /// As [`ExplorerForm::config`].
    pub fn export_config(&self) -> Result<Config, FormError> {
        let c = self.config()?;
        Ok(match self.folder() {
            Some(folder) => {
                let named = folder.named_in(c);
                named.validate()?;
                named
            }
            None => c,
        })
    }

    /// The scenario's teacher folder ([`Scenario::folder`]); `None` for a pasted cfg.toml.
    pub fn folder(&self) -> Option<TeacherFolder> {
        self.scenario().and_then(|s| s.folder)
    }
}

fn unknown_teacher(key: &str) -> FormError {
    let known: Vec<&str> = SCENARIOS.iter().map(|s| s.key).collect();
    let key = crate::schema::names::short(key);
    FormError::on(FormField::Teacher, format!("unknown teacher \"{key}\"; known: {}, custom", known.join(", ")))
}

/// A pasted cfg.toml read and validated; every error is on the `cfg` field, and one that names
/// a key says on which line of the text it is written (a parse error has its line already).
fn parse_cfg(text: &str) -> Result<Config, FormError> {
    if text.len() > MAX_CFG_BYTES {
        let mb = text.len() as f64 / (1 << 20) as f64;
        return Err(FormError::on(FormField::Cfg, format!("this cfg.toml is {mb:.1} MiB; at most 4 MiB")));
    }
    Config::from_toml_str(text).map_err(|e| match &e {
        SpecError::Invalid { key, message } => cfg_error(text, key, message),
        SpecError::Parse { .. } => FormError::on(FormField::Cfg, e.to_string()),
    })
}

/// `message` about `key` of the pasted `text`, on the `cfg` field: "key (line N): message".
fn cfg_error(text: &str, key: &str, message: &impl std::fmt::Display) -> FormError {
    let place = toml_text::line_of(text, key).map_or_else(String::new, |l| format!(" (line {l})"));
    FormError::on(FormField::Cfg, format!("{key}{place}: {message}"))
}

fn family_list(families: &[Family]) -> String {
    let names: Vec<String> = families.iter().map(|f| format!("{f:?}").to_ascii_lowercase()).collect();
    names.join(" or ")
}

/// A base student of `family` for inputs of `kind` (when a pasted cfg.toml's family changes).
fn generic_student(kind: InputKind, family: Family) -> Result<StudentSpec, FormError> {
    let body = match (kind, family) {
        (InputKind::Image, Family::Cnn) => CNN_SMALL,
        (InputKind::Image | InputKind::Features, Family::Mlp) => MLP_SMALL,
        _ => {
            return Err(FormError::on(
                FormField::Family,
                format!("a {family:?} student cannot read this cfg.toml's input; keep its own family"),
            ))
        }
    };
    // parsed as a whole cfg.toml (any valid [data] will do): the page then needs no second
    // TOML deserializer for a bare [student] table
    let text = format!("[data]\ninput_shape = [1, 28, 28]\nclasses = 10\n[student]\n{body}");
    Ok(Config::from_toml_str(&text).map_err(|e| FormError::on(FormField::Family, e.to_string()))?.student)
}

#[cfg(test)]
#[path = "form_tests.rs"]
mod tests;
