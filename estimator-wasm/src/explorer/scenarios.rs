//! The teachers the explorer starts from ([`SCENARIOS`]): each with its task (`[data]` and
//! `[teacher]` tables), its input kind and a base student per family that the form scales.
use serde::Serialize;

use crate::explorer::teacher_folder::TeacherFolder;
use crate::memory::DatasetSize;
use crate::schema::{Config, Family, Precision};

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
    /// The Hugging Face folder of a published checkpoint the exported cfg.toml names as its
    /// teacher (the page prices it by the preset in `tables`); `None` for a teacher the file
    /// describes by itself.
    pub folder: Option<TeacherFolder>,
    /// Default micro-batch per GPU.
    pub batch: u64,
    /// Default student precision.
    pub precision: Precision,
    /// Samples in the training set of the scenario's data, where its files are known (the demo's
    /// Fashion-MNIST, the WordNet sentences of examples/minilm): the largest micro-batch a run
    /// can cut. `None` for a task described without its data.
    pub train_samples: Option<u64>,
    /// Samples in the test set of those files (`None` with `train_samples`).
    pub test_samples: Option<u64>,
    /// Bytes of one stored image in those files (the demo's `.npz` holds uint8 pixels,
    /// `examples/fashion-mnist/prepare_data.py`); 0 for text, whose sample `distill` counts from
    /// the cfg's sequence length ([`Scenario::dataset`]).
    pub image_bytes: u64,
    /// `[data]` and `[teacher]` tables.
    #[serde(skip)]
    pub(crate) tables: &'static str,
    /// The body of `[student]` for each family in `families`, in the same order.
    #[serde(skip)]
    pub(crate) students: &'static [&'static str],
}

pub(crate) const IMAGENET_DATA: &str =
    "[data]\ntrain = \"train.npz\"\nholdout = 0.1\ninput_shape = [3, 224, 224]\nclasses = 1000\n\
     scale = 0.00392156862745098\nmean = [0.485, 0.456, 0.406]\nstd = [0.229, 0.224, 0.225]\n";
pub(crate) const CNN_SMALL: &str =
    "family = \"cnn\"\nchannels = [8, 16]\nkernel = 3\npool = \"max\"\nhidden = [32]\nactivation = \"relu\"\nnorm = \"batch\"\n";
pub(crate) const MLP_SMALL: &str = "family = \"mlp\"\nhidden = [256, 128]\nactivation = \"relu\"\n";
pub(crate) const CNN_IMAGENET: &str =
    "family = \"cnn\"\nchannels = [32, 64, 128, 256, 512]\nkernel = 3\npool = \"max\"\nhidden = [512]\nnorm = \"batch\"\n";
pub(crate) const MLP_IMAGENET: &str = "family = \"mlp\"\nhidden = [2048, 1024]\n";

/// The example of `examples/minilm/student.toml` as the explorer writes it: its data (paths
/// relative to the repository root, where the setup builds them), its `[kd]` and `[train]`
/// (but the micro-batch, precision and optimiser, which the form sets), and its student.
pub(crate) const MINILM_TABLES: &str = "[data]\ntrain = \"data/minilm/train.txt\"\ntest = \"data/minilm/test.txt\"\n\
     tokenizer = \"data/minilm/tokenizer.json\"\ninput_shape = [128]\nbucket_by_length = true\nclasses = 384\n\
     [teacher]\npreset = \"all-minilm-l6-v2\"\n[kd]\nobjective = \"embedding_mse\"\nalpha = 1.0\n\
     [train]\nepochs = 1\nlr = 0.0005\nmin_lr = 0.0\nwarmup_steps = 100\nweight_decay = 0.01\nseed = 0\n";
pub(crate) const MINILM_STUDENT: &str =
    "family = \"transformer\"\nactivation = \"gelu\"\ninit_from_teacher = [0, 4, 5]\n\
     [student.transformer]\nvocab = 30522\nlayers = 3\nd_model = 384\nheads = 12\nmlp_width = 1536\n\
     max_positions = 512\ntoken_types = 2\nnorm_position = \"post\"\nnorm_eps = 1e-12\nhead = \"embedding\"\n\
     pooling = \"mean\"\nnormalize = true\n";

/// The example of `examples/smollm2/student.toml` as the explorer writes it (as
/// [`MINILM_TABLES`]: the micro-batch, precision and optimiser are the form's).
pub(crate) const SMOLLM2_TABLES: &str = "[data]\ntrain = \"data/smollm2/train.txt\"\ntest = \"data/smollm2/test.txt\"\n\
     tokenizer = \"data/smollm2/tokenizer.json\"\ninput_shape = [128]\nclasses = 49152\n\
     [teacher]\npreset = \"smollm2-135m\"\nprecision = \"bf16\"\n[kd]\nobjective = \"logits\"\ntemperature = 1.0\nalpha = 0.5\n\
     loss_chunk = 32\n[train]\nepochs = 1\neval_batch_size = 8\nlr = 0.0003\nwarmup_steps = 30\nweight_decay = 0.01\nseed = 0\n\
     log_every = 10\n";
pub(crate) const SMOLLM2_STUDENT: &str =
    "family = \"transformer\"\nactivation = \"silu\"\ninit_from_teacher = [0, 9, 19, 29]\n\
     [student.transformer]\nvocab = 49152\nlayers = 4\nd_model = 576\nheads = 9\nkv_heads = 3\nmlp_width = 1536\n\
     mlp = \"swiglu\"\nnorm = \"rms\"\nnorm_eps = 1e-5\nrope_theta = 100000.0\nattention = \"flash\"\nbias = false\n\
     tie_embeddings = true\nhead = \"lm\"\n";

/// The teachers the explorer offers, each with its task.
pub static SCENARIOS: [Scenario; 9] = [
    Scenario {
        key: "fashion-mnist-cnn",
        name: "Fashion-MNIST CNN (0.42M)",
        description: "the example teacher of examples/fashion-mnist (preset fashion-mnist-cnn); 28x28 grey images, 10 classes",
        input: InputKind::Image,
        families: &[Family::Cnn, Family::Mlp],
        folder: None,
        batch: 128,
        train_samples: Some(60_000),
        test_samples: Some(10_000),
        image_bytes: 28 * 28,
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
        folder: None,
        batch: 64,
        train_samples: None,
        test_samples: None,
        image_bytes: 0,
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
        folder: None,
        batch: 64,
        train_samples: None,
        test_samples: None,
        image_bytes: 0,
        precision: Precision::Bf16,
        tables: "[teacher]\nparams = 86567656\n[train]\neval_batch_size = 256\n",
        students: &[CNN_IMAGENET, MLP_IMAGENET],
    },
    Scenario {
        key: "all-minilm-l6-v2",
        name: "MiniLM to a small encoder (22.6M)",
        description: "sentence-transformers all-MiniLM-L6-v2 (preset all-minilm-l6-v2: BERT, 6 layers, d 384, \
                      mean-pooled, L2-normalised 384-d embeddings) on English text, one sentence per line; the \
                      student is the 3-layer encoder of examples/minilm, initialised from teacher layers 0, 2 \
                      and 4, trained on the embedding MSE",
        input: InputKind::Tokens,
        families: &[Family::Transformer],
        folder: None,
        batch: 64,
        train_samples: Some(152_373),
        test_samples: Some(2_620),
        image_bytes: 0,
        precision: Precision::Fp32,
        tables: MINILM_TABLES,
        students: &[MINILM_STUDENT],
    },
    Scenario {
        key: "bert-base",
        name: "BERT-base (110M)",
        description: "a BERT-base encoder (12 layers, d 768, 12 heads, 512 positions, vocab 30522) with a \
                      2-class head, as [teacher.arch]; the student is a DistilBERT-sized encoder",
        input: InputKind::Tokens,
        families: &[Family::Transformer],
        folder: None,
        batch: 32,
        train_samples: None,
        test_samples: None,
        image_bytes: 0,
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
        description: "GPT-2 small (preset gpt2: 12 layers, d 768, 1024 positions, vocab 50257), trained from \
                      its Hugging Face folder; the student is a DistilGPT-2-sized decoder (6 layers) of GPT-2's \
                      layout (pre-norm LayerNorm, learned positions, biases, tied head) but with the exact GELU \
                      where GPT-2 uses the tanh approximation, written as student.safetensors, student.pt and a \
                      Hugging Face GPT2LMHeadModel folder (hf/, activation_function \"gelu\")",
        input: InputKind::Tokens,
        families: &[Family::Transformer],
        folder: Some(TeacherFolder {
            repo: "openai-community/gpt2",
            dir: "gpt2",
            model_type: "gpt2",
            gated: false,
        }),
        batch: 8,
        train_samples: None,
        test_samples: None,
        image_bytes: 0,
        precision: Precision::Bf16,
        tables: "[data]\ntrain = \"train.txt\"\ntest = \"test.txt\"\ntokenizer = \"gpt2/tokenizer.json\"\n\
                 input_shape = [1024]\nclasses = 50257\n\
                 [teacher]\npreset = \"gpt2\"\nprecision = \"bf16\"\ncache_logits = false\n[train]\nepochs = 1\neval_batch_size = 8\n",
        students: &["family = \"transformer\"\nactivation = \"gelu\"\ndropout = 0.1\n[student.transformer]\n\
                     vocab = 50257\nlayers = 6\nd_model = 768\nheads = 12\nmax_positions = 1024\nattention = \"flash\"\n\
                     tie_embeddings = true\n"],
    },
    Scenario {
        key: "smollm2-135m",
        name: "SmolLM2 to a small decoder (135M)",
        description: "SmolLM2-135M-Instruct (preset smollm2-135m) on KJV text in windows of 128 tokens; the \
                      student is the 4-layer decoder of examples/smollm2 (from teacher layers 0, 9, 19, 29)",
        input: InputKind::Tokens,
        families: &[Family::Transformer],
        folder: None,
        batch: 8,
        train_samples: None,
        test_samples: None,
        image_bytes: 0,
        precision: Precision::Bf16,
        tables: SMOLLM2_TABLES,
        students: &[SMOLLM2_STUDENT],
    },
    Scenario {
        key: "llama-2-7b",
        name: "Llama 2 7B (6.7B)",
        description: "Llama 2 7B (preset llama-2-7b) in bf16; the student is a TinyLlama-sized decoder \
                      (22 layers, d 2048, 4 key/value heads, SwiGLU)",
        input: InputKind::Tokens,
        families: &[Family::Transformer],
        folder: Some(TeacherFolder {
            repo: "meta-llama/Llama-2-7b-hf",
            dir: "Llama-2-7b-hf",
            model_type: "llama",
            gated: true,
        }),
        batch: 4,
        train_samples: None,
        test_samples: None,
        image_bytes: 0,
        precision: Precision::Bf16,
        tables: "[data]\ntrain = \"train.txt\"\ntest = \"test.txt\"\ntokenizer = \"Llama-2-7b-hf/tokenizer.json\"\n\
                 input_shape = [2048]\nclasses = 32000\n\
                 [teacher]\npreset = \"llama-2-7b\"\nprecision = \"bf16\"\ncache_logits = false\n[train]\nepochs = 1\neval_batch_size = 4\n",
        students: &["family = \"transformer\"\nactivation = \"silu\"\n[student.transformer]\nvocab = 32000\n\
                     layers = 22\nd_model = 2048\nheads = 32\nkv_heads = 4\nmlp = \"swiglu\"\nmlp_width = 5632\n\
                     norm = \"rms\"\nrope_theta = 10000.0\nattention = \"flash\"\nbias = false\n"],
    },
    Scenario {
        key: "llama-3-8b",
        name: "Llama 3 8B (8.0B)",
        description: "Llama 3 8B (preset llama-3-8b) in bf16; the student is a Llama-3.2-1B-sized decoder \
                      (16 layers, d 2048, 8 key/value heads, tied head)",
        input: InputKind::Tokens,
        families: &[Family::Transformer],
        folder: Some(TeacherFolder {
            repo: "meta-llama/Meta-Llama-3-8B",
            dir: "Meta-Llama-3-8B",
            model_type: "llama",
            gated: true,
        }),
        batch: 2,
        train_samples: None,
        test_samples: None,
        image_bytes: 0,
        precision: Precision::Bf16,
        tables: "[data]\ntrain = \"train.txt\"\ntest = \"test.txt\"\ntokenizer = \"Meta-Llama-3-8B/tokenizer.json\"\n\
                 input_shape = [2048]\nclasses = 128256\n\
                 [teacher]\npreset = \"llama-3-8b\"\nprecision = \"bf16\"\ncache_logits = false\n[train]\nepochs = 1\neval_batch_size = 2\n",
        students: &["family = \"transformer\"\nactivation = \"silu\"\n[student.transformer]\nvocab = 128256\n\
                     layers = 16\nd_model = 2048\nheads = 32\nkv_heads = 8\nmlp = \"swiglu\"\nmlp_width = 8192\n\
                     norm = \"rms\"\nrope_theta = 500000.0\nattention = \"flash\"\nbias = false\ntie_embeddings = true\n"],
    },
];

impl Scenario {
    /// The scenario's data as `distill plan` reads it from its files, for `config` (the form's
    /// cfg.toml of this scenario): the train and test samples, and the bytes of one stored
    /// sample as `distill`'s `data::file_summary` counts them: the file's own image
    /// ([`Scenario::image_bytes`], whatever input size the form sets), or a text line's token
    /// ids and mask (2 x 8 bytes per token of `data.input_shape[0]`). `None` where the files are
    /// not known: the plan then leaves the resident data and the cached teacher logits out.
    pub fn dataset(&self, config: &Config) -> Option<DatasetSize> {
        let (train_samples, test_samples) = (self.train_samples?, self.test_samples?);
        let sample_bytes = match config.data.tokenizer {
            Some(_) => 2 * 8 * config.data.input_shape.first().copied().unwrap_or(1),
            None => self.image_bytes,
        };
        Some(DatasetSize { train_samples, test_samples, sample_bytes })
    }
}

/// The scenario called `key` (matched as every name is, `crate::schema::names`).
pub fn scenario(key: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| crate::schema::names::same(key, s.key))
}
