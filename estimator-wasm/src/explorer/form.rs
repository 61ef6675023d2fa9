//! The explorer's form, shared by the browser site (`site/`) and the embeddable widget
//! (`wasm.rs`): a teacher scenario or a pasted cfg.toml, a student family scaled by width and
//! depth multipliers, and the training levers (micro-batch, precision, optimizer,
//! checkpointing, pruning, data parallelism, ZeRO stage, GPU).
//!
//! [`ExplorerForm::config`] turns the form into the [`Config`] that `distill plan` reads, so the page
//! prices exactly the cfg.toml it exports. Every field is a plain value, so the whole form
//! serialises to a URL query or to JSON. Pure: no I/O, no clock.
use serde::{Deserialize, Serialize};

use crate::schema::catalogue;
use crate::schema::errors::{EstimateError, SpecError};
use crate::schema::limits::MAX_BATCH;
use crate::schema::limits::MAX_BLOCKS;
use crate::schema::{BatchSize, Checkpointing, Config, Family, OptimizerKind, Precision, PruneMethod, PruneSpec};
use crate::schema::{StudentSpec, Target};

/// The `teacher` value that means "the pasted cfg.toml in `cfg`".
pub const CUSTOM: &str = "custom";

/// What one sample of the student's input is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    /// `[C, H, W]` pixels; the form's input size is the height H in pixels.
    Image,
    /// `[s]` token ids; the form's input size is the sequence length s in tokens.
    Tokens,
    /// `[D]` features; the form's input size is D.
    Features,
}

impl InputKind {
    /// The kind of `data.input_shape`.
    pub fn of(config: &Config) -> InputKind {
        match (config.data.input_shape.len(), config.student.family) {
            (3, _) => InputKind::Image,
            (_, Family::Transformer) => InputKind::Tokens,
            _ => InputKind::Features,
        }
    }
}

/// A teacher with the task it was trained for: the `[data]` and `[teacher]` tables of a
/// cfg.toml, and a base student per family that the width and depth multipliers scale.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Scenario {
    pub key: &'static str,
    pub name: &'static str,
    pub description: &'static str,
    pub input: InputKind,
    /// Student families the input allows; the first is the default.
    pub families: &'static [Family],
    /// Default micro-batch per GPU.
    pub batch: u64,
    /// Default student precision.
    pub precision: Precision,
    /// `[data]` and `[teacher]` tables.
    #[serde(skip)]
    tables: &'static str,
    /// The body of `[student]` for each family in `families`, in the same order.
    #[serde(skip)]
    students: &'static [&'static str],
}

const IMAGENET_DATA: &str =
    "[data]\ntrain = \"train.npz\"\nholdout = 0.1\ninput_shape = [3, 224, 224]\nclasses = 1000\n\
     scale = 0.00392156862745098\nmean = [0.485, 0.456, 0.406]\nstd = [0.229, 0.224, 0.225]\n";
const CNN_SMALL: &str =
    "family = \"cnn\"\nchannels = [8, 16]\nkernel = 3\npool = \"max\"\nhidden = [32]\nactivation = \"relu\"\nnorm = \"batch\"\n";
const MLP_SMALL: &str = "family = \"mlp\"\nhidden = [256, 128]\nactivation = \"relu\"\n";
const CNN_IMAGENET: &str =
    "family = \"cnn\"\nchannels = [32, 64, 128, 256, 512]\nkernel = 3\npool = \"max\"\nhidden = [512]\nnorm = \"batch\"\n";
const MLP_IMAGENET: &str = "family = \"mlp\"\nhidden = [2048, 1024]\n";

/// The teachers the explorer offers, each with its task.
pub static SCENARIOS: [Scenario; 7] = [
    Scenario {
        key: "fashion-mnist-cnn",
        name: "Fashion-MNIST CNN (0.42M)",
        description: "the example teacher of examples/fashion-mnist (preset fashion-mnist-cnn); 28x28 grey images, 10 classes",
        input: InputKind::Image,
        families: &[Family::Cnn, Family::Mlp],
        batch: 128,
        precision: Precision::Fp32,
        tables: "[data]\ntrain = \"data/fashion-mnist/train.npz\"\ntest = \"data/fashion-mnist/test.npz\"\n\
                 input_shape = [1, 28, 28]\nclasses = 10\nscale = 0.00392156862745098\nmean = [0.2860]\nstd = [0.3530]\n\
                 [teacher]\npreset = \"fashion-mnist-cnn\"\n",
        students: &[CNN_SMALL, MLP_SMALL],
    },
    Scenario {
        key: "resnet50",
        name: "ResNet-50 (25.6M)",
        description: "torchvision ResNet-50 on ImageNet (224x224, 1000 classes), priced by its exact size \
                      (25,557,032 parameters, 53,120 BatchNorm statistics); its working set is a lower bound",
        input: InputKind::Image,
        families: &[Family::Cnn, Family::Mlp],
        batch: 64,
        precision: Precision::Bf16,
        tables: "[teacher]\nparams = 25557032\nbuffers = 53120\n[train]\neval_batch_size = 256\n",
        students: &[CNN_IMAGENET, MLP_IMAGENET],
    },
    Scenario {
        key: "vit-b16",
        name: "ViT-B/16 (86.6M)",
        description: "ViT-B/16 on ImageNet (224x224, 1000 classes), priced by its exact size (86,567,656 \
                      parameters); its working set is a lower bound",
        input: InputKind::Image,
        families: &[Family::Cnn, Family::Mlp],
        batch: 64,
        precision: Precision::Bf16,
        tables: "[teacher]\nparams = 86567656\n[train]\neval_batch_size = 256\n",
        students: &[CNN_IMAGENET, MLP_IMAGENET],
    },
    Scenario {
        key: "bert-base",
        name: "BERT-base (110M)",
        description: "a BERT-base encoder (12 layers, d 768, 12 heads, 512 positions, vocab 30522) with a \
                      2-class head, as [teacher.arch]; the student is a DistilBERT-sized encoder",
        input: InputKind::Tokens,
        families: &[Family::Transformer],
        batch: 32,
        precision: Precision::Bf16,
        tables: "[data]\ntrain = \"train.npz\"\nholdout = 0.1\ninput_shape = [128]\nclasses = 2\n[teacher]\ncache_logits = false\n\
                 [teacher.arch]\nfamily = \"transformer\"\nactivation = \"gelu\"\n[teacher.arch.transformer]\n\
                 vocab = 30522\nlayers = 12\nd_model = 768\nheads = 12\nmax_positions = 512\nattention = \"flash\"\n\
                 head = \"classifier\"\n[train]\neval_batch_size = 64\n",
        students: &["family = \"transformer\"\nactivation = \"gelu\"\ndropout = 0.1\n[student.transformer]\n\
                     vocab = 30522\nlayers = 6\nd_model = 768\nheads = 12\nmax_positions = 512\nattention = \"flash\"\n\
                     head = \"classifier\"\n"],
    },
    Scenario {
        key: "gpt2",
        name: "GPT-2 small (124M)",
        description: "GPT-2 small (preset gpt2: 12 layers, d 768, 1024 positions, vocab 50257); the student is \
                      a DistilGPT-2-sized decoder (6 layers) with a tied head",
        input: InputKind::Tokens,
        families: &[Family::Transformer],
        batch: 8,
        precision: Precision::Bf16,
        tables: "[data]\ntrain = \"train.npz\"\nholdout = 0.1\ninput_shape = [1024]\nclasses = 50257\n\
                 [teacher]\npreset = \"gpt2\"\nprecision = \"bf16\"\ncache_logits = false\n[train]\neval_batch_size = 8\n",
        students: &["family = \"transformer\"\nactivation = \"gelu\"\ndropout = 0.1\n[student.transformer]\n\
                     vocab = 50257\nlayers = 6\nd_model = 768\nheads = 12\nmax_positions = 1024\nattention = \"flash\"\n\
                     tie_embeddings = true\n"],
    },
    Scenario {
        key: "llama-2-7b",
        name: "Llama 2 7B (6.7B)",
        description: "Llama 2 7B (preset llama-2-7b) in bf16; the student is a TinyLlama-sized decoder \
                      (22 layers, d 2048, 4 key/value heads, SwiGLU)",
        input: InputKind::Tokens,
        families: &[Family::Transformer],
        batch: 4,
        precision: Precision::Bf16,
        tables: "[data]\ntrain = \"train.npz\"\nholdout = 0.1\ninput_shape = [2048]\nclasses = 32000\n\
                 [teacher]\npreset = \"llama-2-7b\"\nprecision = \"bf16\"\ncache_logits = false\n[train]\neval_batch_size = 4\n",
        students: &["family = \"transformer\"\nactivation = \"silu\"\n[student.transformer]\nvocab = 32000\n\
                     layers = 22\nd_model = 2048\nheads = 32\nkv_heads = 4\nmlp = \"swiglu\"\nmlp_width = 5632\n\
                     norm = \"rms\"\nattention = \"flash\"\nbias = false\n"],
    },
    Scenario {
        key: "llama-3-8b",
        name: "Llama 3 8B (8.0B)",
        description: "Llama 3 8B (preset llama-3-8b) in bf16; the student is a Llama-3.2-1B-sized decoder \
                      (16 layers, d 2048, 8 key/value heads, tied head)",
        input: InputKind::Tokens,
        families: &[Family::Transformer],
        batch: 2,
        precision: Precision::Bf16,
        tables: "[data]\ntrain = \"train.npz\"\nholdout = 0.1\ninput_shape = [2048]\nclasses = 128256\n\
                 [teacher]\npreset = \"llama-3-8b\"\nprecision = \"bf16\"\ncache_logits = false\n[train]\neval_batch_size = 2\n",
        students: &["family = \"transformer\"\nactivation = \"silu\"\n[student.transformer]\nvocab = 128256\n\
                     layers = 16\nd_model = 2048\nheads = 32\nkv_heads = 8\nmlp = \"swiglu\"\nmlp_width = 8192\n\
                     norm = \"rms\"\nattention = \"flash\"\nbias = false\ntie_embeddings = true\n"],
    },
];

/// The scenario called `key` (matched as every name is, `crate::schema::names`).
pub fn scenario(key: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| crate::schema::names::same(key, s.key))
}

/// Why the form cannot be priced: the form field to mark (`None`: the form as a whole) and a
/// one-line message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FormError {
    pub field: Option<&'static str>,
    pub message: String,
}

impl std::fmt::Display for FormError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FormError {}

impl FormError {
    fn on(field: &'static str, message: impl Into<String>) -> FormError {
        FormError { field: Some(field), message: message.into() }
    }
}

impl From<EstimateError> for FormError {
    fn from(e: EstimateError) -> FormError {
        let field = match &e {
            EstimateError::Spec(SpecError::Invalid { key, .. }) | EstimateError::Invalid { key, .. } => field_of(key),
            EstimateError::Spec(SpecError::Parse { .. }) => Some("cfg"),
            EstimateError::UnknownGpu { .. } => Some("gpu"),
            EstimateError::Overflow { .. } => None,
        };
        FormError { field, message: e.to_string() }
    }
}

impl From<SpecError> for FormError {
    fn from(e: SpecError) -> FormError {
        EstimateError::Spec(e).into()
    }
}

/// The form field that sets the cfg.toml key `key` (as named in estimator errors).
pub fn field_of(key: &str) -> Option<&'static str> {
    Some(match key {
        "train.batch_size" => "batch",
        "train.precision" => "precision",
        "teacher.precision" => "teacher_precision",
        "data.input_shape" | "student.transformer.max_positions" | "teacher.preset" => "input",
        "student.channels" | "student.transformer.layers" => "depth",
        "student.checkpointing" => "checkpointing",
        "teacher" => "teacher",
        "estimate.gpu" => "gpu",
        "estimate.data_parallel" => "data_parallel",
        "estimate.zero_stage" => "zero_stage",
        "estimate.tensor_parallel" => "width",
        k if k.starts_with("prune.") => "sparsity",
        k if k.starts_with("student.") => "width",
        _ => return None,
    })
}

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

    /// Sets `input` from the base config (0 means "the base's own input size").
    fn with_base_input(mut self) -> ExplorerForm {
        if let Ok(base) = self.base() {
            self.input = base_input(&base);
        }
        self
    }

    /// The form filled from a pasted cfg.toml, on `gpu` unless the file names one.
    /// `batch_size = "auto"` becomes the largest batch that fits (32 without a GPU).
    ///
    /// # Errors
    /// The cfg.toml's parse or validation error, on the `cfg` field.
    pub fn from_cfg(text: &str, gpu: &str) -> Result<ExplorerForm, FormError> {
        let config =
            Config::from_toml_str(text).map_err(|e| FormError { field: Some("cfg"), message: e.to_string() })?;
        let gpu = match &config.estimate.gpu {
            Some(name) => catalogue::gpu(name).map(|g| g.name.to_string()).map_err(FormError::from)?,
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
            let text = self.cfg.as_deref().ok_or_else(|| FormError::on("cfg", "paste a cfg.toml first"))?;
            let mut config =
                Config::from_toml_str(text).map_err(|e| FormError { field: Some("cfg"), message: e.to_string() })?;
            if config.student.family != self.family {
                config.student = generic_student(InputKind::of(&config), self.family)?;
            }
            return Ok(config);
        }
        let s = self.scenario().ok_or_else(|| unknown_teacher(&self.teacher))?;
        let i = s.families.iter().position(|&f| f == self.family).ok_or_else(|| {
            FormError::on(
                "family",
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
        let within = |v: f64, lo: f64, hi: f64| v.is_finite() && v > lo && v <= hi;
        if !within(self.width, 0.0, 64.0) {
            return Err(FormError::on("width", "the width multiplier must be > 0 and at most 64"));
        }
        if !within(self.depth, 0.0, 16.0) {
            return Err(FormError::on("depth", "the depth multiplier must be > 0 and at most 16"));
        }
        if !(1..=1 << 20).contains(&self.input) {
            return Err(FormError::on("input", "the input size must be between 1 and 1048576"));
        }
        if !(1..=MAX_BATCH).contains(&self.batch) {
            return Err(FormError::on("batch", format!("the micro-batch must be between 1 and {MAX_BATCH}")));
        }
        if !(self.sparsity.is_finite() && (0.0..1.0).contains(&self.sparsity)) {
            return Err(FormError::on("sparsity", "sparsity must be a fraction in [0, 1)"));
        }
        if !(1..=1 << 20).contains(&self.data_parallel) {
            return Err(FormError::on("data_parallel", "data parallelism must be between 1 and 1048576 GPUs"));
        }
        if self.zero_stage > 3 {
            return Err(FormError::on("zero_stage", "the ZeRO stage is 0, 1, 2 or 3"));
        }
        self.checkpointing()?;
        catalogue::gpu(&self.gpu)?;
        Ok(())
    }

    fn checkpointing(&self) -> Result<Checkpointing, FormError> {
        match self.checkpointing.trim() {
            "none" | "" => Ok(Checkpointing::None),
            "sqrt" => Ok(Checkpointing::Sqrt),
            n => match n.parse::<u64>() {
                Ok(k) if k >= 1 => Ok(Checkpointing::Segments(k)),
                _ => Err(FormError::on("checkpointing", "checkpointing is none, sqrt or a number of segments >= 1")),
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
        c.estimate.gpu = Some(catalogue::gpu(&self.gpu)?.name.to_string());
        c.estimate.data_parallel = self.data_parallel;
        c.estimate.zero_stage = self.zero_stage;
        c.validate()?;
        Ok(c)
    }

    /// The chosen student's cfg.toml as a file `distill` reads (a comment header, then the
    /// tables).
    ///
    /// # Errors
    /// As [`ExplorerForm::config`].
    pub fn cfg_toml(&self) -> Result<String, FormError> {
        let c = self.config()?;
        Ok(format!(
            "# cfg.toml from the distill explorer (teacher: {}). Paths in [data] are relative to this file.\n\
             #   distill plan --student cfg.toml\n\n{}",
            self.scenario().map_or("pasted cfg.toml", |s| s.name),
            c.to_toml_string()
        ))
    }
}

fn unknown_teacher(key: &str) -> FormError {
    let known: Vec<&str> = SCENARIOS.iter().map(|s| s.key).collect();
    FormError::on("teacher", format!("unknown teacher \"{key}\"; known: {}, custom", known.join(", ")))
}

fn family_list(families: &[Family]) -> String {
    let names: Vec<String> = families.iter().map(|f| format!("{f:?}").to_ascii_lowercase()).collect();
    names.join(" or ")
}

/// The form's input size for `config`: image height, sequence length or feature count.
fn base_input(config: &Config) -> u64 {
    match config.data.input_shape.as_slice() {
        [_, h, _] => *h,
        [d] => *d,
        _ => 1,
    }
}

/// Sets the input size: `[C, H, W]` becomes `[C, n, W * n / H]` (aspect kept), `[d]` becomes `[n]`.
fn set_input(config: &mut Config, n: u64) {
    let shape = &mut config.data.input_shape;
    match shape.as_mut_slice() {
        [_, h, w] if *h != n => {
            *w = scaled(*w, n as f64 / *h as f64);
            *h = n;
        }
        [d] => *d = n,
        _ => {}
    }
}

/// A base student of `family` for inputs of `kind` (when a pasted cfg.toml's family changes).
fn generic_student(kind: InputKind, family: Family) -> Result<StudentSpec, FormError> {
    let body = match (kind, family) {
        (InputKind::Image, Family::Cnn) => CNN_SMALL,
        (InputKind::Image | InputKind::Features, Family::Mlp) => MLP_SMALL,
        _ => {
            return Err(FormError::on(
                "family",
                format!("a {family:?} student cannot read this cfg.toml's input; keep its own family"),
            ))
        }
    };
    // parsed as a whole cfg.toml (any valid [data] will do): the page then needs no second
    // TOML deserializer for a bare [student] table
    let text = format!("[data]\ninput_shape = [1, 28, 28]\nclasses = 10\n[student]\n{body}");
    Ok(Config::from_toml_str(&text).map_err(|e| FormError::on("family", e.to_string()))?.student)
}

/// `v * f` rounded, at least 1 (saturating far beyond any real size).
fn scaled(v: u64, f: f64) -> u64 {
    ((v as f64) * f).round().clamp(1.0, 1e15) as u64
}

/// Resizes a list of widths to `round(n * depth)` entries (at least 1 when it had any, at
/// most [`MAX_BLOCKS`]), growing with `grow(last)`.
fn resize(list: &mut Vec<u64>, depth: f64, grow: impl Fn(u64) -> u64) {
    if list.is_empty() {
        return;
    }
    let n = scaled(list.len() as u64, depth).min(MAX_BLOCKS as u64) as usize;
    while list.len() < n {
        let next = grow(*list.last().unwrap_or(&1));
        list.push(next);
    }
    list.truncate(n);
}

/// Scales a student: widths by `width`, block or layer counts by `depth`. A transformer keeps
/// its head size and its query-to-key/value head ratio; its MLP width follows the width.
pub fn scale_student(s: &mut StudentSpec, width: f64, depth: f64) {
    match s.family {
        Family::Cnn => resize(&mut s.channels, depth, |c| c.saturating_mul(2).min(1 << 16)),
        Family::Mlp => resize(&mut s.hidden, depth, |w| w),
        Family::Transformer => {}
    }
    for w in s.channels.iter_mut().chain(s.hidden.iter_mut()) {
        *w = scaled(*w, width);
    }
    if let Some(t) = &mut s.transformer {
        let head_dim = (t.d_model / t.heads.max(1)).max(1);
        let ratio = (t.heads / t.kv_heads().max(1)).max(1);
        let heads = scaled(t.heads, width);
        t.d_model = heads.saturating_mul(head_dim);
        if t.kv_heads.is_some() {
            // the largest divisor of `heads` not above heads / ratio
            let target = (heads / ratio).max(1);
            t.kv_heads = (1..=target).rev().find(|k| heads % k == 0);
        }
        t.heads = heads;
        t.mlp_width = t.mlp_width.map(|m| scaled(m, width));
        t.layers = scaled(t.layers, depth);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_and_family_gives_a_valid_config() {
        for s in &SCENARIOS {
            for &family in s.families {
                let mut e = ExplorerForm::for_scenario(s, "A100-80GB");
                e.family = family;
                let c = e.config().unwrap_or_else(|err| panic!("{} {family:?}: {err}", s.key));
                assert_eq!(InputKind::of(&c), s.input, "{}", s.key);
                assert_eq!(c.train.batch_size, BatchSize::Fixed(s.batch));
                assert_eq!(c.estimate.gpu.as_deref(), Some("A100-80GB"));
                let text = e.cfg_toml().unwrap();
                assert_eq!(Config::from_toml_str(&text).unwrap(), c, "{}: the cfg.toml parses back equal", s.key);
            }
        }
    }

    #[test]
    fn scenario_teachers_have_their_published_sizes() {
        let params = |key: &str| {
            let c = ExplorerForm::for_scenario(scenario(key).unwrap(), "H200").config().unwrap();
            crate::estimate(&c, &crate::Inputs::default()).unwrap().params.teacher
        };
        assert_eq!(params("resnet50"), 25_557_032);
        assert_eq!(params("vit-b16"), 86_567_656);
        assert_eq!(params("gpt2"), 124_439_808);
        assert_eq!(params("fashion-mnist-cnn"), 421_738);
        // BERT-base less its token-type embeddings and pooler (the published count is 109.5M)
        assert_eq!(params("bert-base"), 108_891_650);
    }

    #[test]
    fn unit_multipliers_keep_the_base_student() {
        let e = ExplorerForm::for_scenario(scenario("fashion-mnist-cnn").unwrap(), "T4");
        let text = include_str!("../../../examples/fashion-mnist/student.toml");
        let example = Config::from_toml_str(text).unwrap();
        let c = e.config().unwrap();
        assert_eq!(c.student, example.student);
        assert_eq!(c.data.input_shape, vec![1, 28, 28]);
    }

    #[test]
    fn width_and_depth_scale_the_student() {
        let mut e = ExplorerForm::for_scenario(scenario("fashion-mnist-cnn").unwrap(), "T4");
        e.width = 2.0;
        e.depth = 1.5;
        let c = e.config().unwrap();
        assert_eq!(c.student.channels, vec![16, 32, 64]);
        assert_eq!(c.student.hidden, vec![64]);
        let small = e.config_at(0.25).unwrap();
        assert_eq!(small.student.channels, vec![4, 8, 16]);

        let mut e = ExplorerForm::for_scenario(scenario("llama-2-7b").unwrap(), "H200");
        e.width = 0.5;
        e.depth = 0.5;
        let t = e.config().unwrap().student.transformer.unwrap();
        assert_eq!((t.d_model, t.heads, t.kv_heads, t.mlp_width, t.layers), (1024, 16, Some(2), Some(2816), 11));
        // 3 heads cannot keep the 8:1 ratio: one key/value head
        let t = e.config_at(0.375).unwrap().student.transformer.unwrap();
        assert_eq!((t.heads, t.kv_heads), (6, Some(1)));
    }

    #[test]
    fn input_size_sets_the_shape() {
        let mut e = ExplorerForm::for_scenario(scenario("resnet50").unwrap(), "A100-80GB");
        assert_eq!(e.input, 224);
        e.input = 112;
        assert_eq!(e.config().unwrap().data.input_shape, vec![3, 112, 112]);
        let mut e = ExplorerForm { input: 512, ..ExplorerForm::default() };
        assert_eq!(e.config().unwrap().data.input_shape, vec![512]);
        e.input = 2048;
        let err = e.config().unwrap_err();
        assert_eq!(err.field, Some("input"), "{err}");
        assert!(err.message.contains("1024"), "{err}");
    }

    #[test]
    fn levers_reach_the_config() {
        let e = ExplorerForm {
            batch: 3,
            precision: Precision::Fp16,
            optimizer: OptimizerKind::Sgd,
            checkpointing: "4".into(),
            sparsity: 0.5,
            prune: PruneMethod::Structured,
            data_parallel: 8,
            zero_stage: 2,
            gpu: "h200".into(),
            ..ExplorerForm::default()
        };
        let c = e.config().unwrap();
        assert_eq!(c.train.batch_size, BatchSize::Fixed(3));
        assert_eq!((c.train.precision, c.train.optimizer), (Precision::Fp16, OptimizerKind::Sgd));
        assert_eq!(c.student.checkpointing, Checkpointing::Segments(4));
        let p = c.prune.unwrap();
        assert_eq!((p.sparsity, p.method), (0.5, PruneMethod::Structured));
        assert_eq!((c.estimate.data_parallel, c.estimate.zero_stage), (8, 2));
        assert_eq!(c.estimate.gpu.as_deref(), Some("H200"));
    }

    #[test]
    fn bad_fields_are_named() {
        type Case = (fn(&mut ExplorerForm), &'static str);
        let cases: [Case; 9] = [
            (|e| e.batch = 0, "batch"),
            (|e| e.width = -1.0, "width"),
            (|e| e.width = f64::NAN, "width"),
            (|e| e.depth = 1e9, "depth"),
            (|e| e.input = 0, "input"),
            (|e| e.sparsity = 1.0, "sparsity"),
            (|e| e.zero_stage = 4, "zero_stage"),
            (|e| e.checkpointing = "often".into(), "checkpointing"),
            (|e| e.gpu = "A100".into(), "gpu"),
        ];
        for (set, field) in cases {
            let mut e = ExplorerForm::default();
            set(&mut e);
            assert_eq!(e.config().unwrap_err().field, Some(field));
        }
        let e = ExplorerForm { teacher: "gpt-5".into(), ..ExplorerForm::default() };
        assert_eq!(e.config().unwrap_err().field, Some("teacher"));
        let e = ExplorerForm { family: Family::Cnn, ..ExplorerForm::default() };
        assert_eq!(e.config().unwrap_err().field, Some("family"));
    }

    #[test]
    fn a_pasted_cfg_fills_the_form_and_prices_the_same_file() {
        // without [teacher], distill reads the teacher's size from t.pt but the page needs a preset
        let text = include_str!("../../../examples/fashion-mnist/student.toml");
        let preset = "[teacher]\npreset = \"fashion-mnist-cnn\"";
        assert!(text.contains(preset), "the example names its teacher preset");
        let bare = text.lines().filter(|l| !preset.lines().any(|p| l.starts_with(p))).collect::<Vec<_>>().join("\n");
        let e = ExplorerForm::from_cfg(&bare, "T4").unwrap();
        assert_eq!(crate::explorer::sweep::sweep(&e).unwrap_err().field, Some("teacher"));
        let e = ExplorerForm::from_cfg(text, "T4").unwrap();
        assert_eq!((e.teacher.as_str(), e.family, e.input, e.batch), (CUSTOM, Family::Cnn, 28, 128));
        let mut expected = Config::from_toml_str(text).unwrap();
        expected.estimate.gpu = Some("T4".into());
        assert_eq!(e.config().unwrap(), expected);
        // a cfg.toml that names its GPU keeps it; "auto" becomes the largest batch that fits
        let auto =
            format!("{text}\n[estimate]\ngpu = \"rtx3090\"\n").replace("batch_size = 128", "batch_size = \"auto\"");
        let e = ExplorerForm::from_cfg(&auto, "T4").unwrap();
        assert_eq!(e.gpu, "RTX-3090");
        let c = Config::from_toml_str(&auto).unwrap();
        assert_eq!(
            Some(e.batch),
            crate::max_batch(&c, &crate::Inputs::default(), catalogue::gpu("RTX-3090").unwrap(), 0.05).unwrap()
        );
        // another family starts from a generic base student; a transformer cannot read images
        let mlp = ExplorerForm { family: Family::Mlp, ..ExplorerForm::from_cfg(text, "T4").unwrap() };
        assert_eq!(mlp.config().unwrap().student.hidden, vec![256, 128]);
        let transformer = ExplorerForm { family: Family::Transformer, ..mlp };
        assert_eq!(transformer.config().unwrap_err().field, Some("family"));
        let err = ExplorerForm::from_cfg("[data]\ninput_shape = [0]\n", "T4").unwrap_err();
        assert_eq!(err.field, Some("cfg"));
    }

    #[test]
    fn absurd_sizes_are_errors_not_panics() {
        // a million tokens: the student's 1024 learned positions cannot embed them
        let e = ExplorerForm { width: 64.0, depth: 16.0, input: 1 << 20, batch: MAX_BATCH, ..ExplorerForm::default() };
        let positions = "student.transformer.max_positions: 1024 positions cannot embed sequences of 1048576 \
                         (data.input_shape); use 0 or >= 1048576";
        for scale in [0.25, 1.0, 4.0] {
            let err = e.config_at(scale).unwrap_err();
            assert_eq!((err.field, err.message.as_str()), (Some("input"), positions), "scale {scale}");
        }
        // within them, 2^40 samples of the widest and deepest student: an overflow, on no field
        let e = ExplorerForm { input: 1024, ..e };
        let overflow = "the step at micro-batch 1099511627776 overflows 64-bit bytes (more than 16 EiB): the plan \
                        is too large to price";
        for scale in [0.25, 1.0, 4.0] {
            let c = e.config_at(scale).unwrap();
            let t = c.student.transformer.as_ref().unwrap();
            // 6 layers x 16; 12 heads x 64 x scale, of 64 dimensions each
            assert_eq!((t.layers, t.heads, t.d_model), (96, (768.0 * scale) as u64, (768.0 * scale) as u64 * 64));
            let err = FormError::from(crate::estimate(&c, &crate::Inputs::default()).unwrap_err());
            assert_eq!((err.field, err.message.as_str()), (None, overflow), "scale {scale}");
        }
    }
}
