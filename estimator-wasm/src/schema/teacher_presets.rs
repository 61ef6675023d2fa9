//! The teacher presets (`[teacher] preset = "..."`): named architectures and the layers that give
//! their inference working set. (The teacher as the estimator takes it, exact counts from
//! `distill` included, is `crate::memory::inputs::TeacherModel`.)
//!
//! A teacher runs under `no_grad`: it saves nothing for backward. Its memory is its weights in
//! its own precision, plus, while it runs, the largest live set of one layer (input, output and
//! internal temporaries; `docs/memory-model.md` section 5).
use crate::schema::arch::{self, Layer, Op};
use crate::schema::errors::SpecError;
use crate::schema::spec::DataSpec;
use crate::schema::student_spec::{
    Activation, AttentionKernel, Checkpointing, Family, HeadKind, MlpKind, Norm, NormKind, NormPosition, Pool, Pooling,
    StudentSpec, TransformerSpec,
};

/// A named teacher architecture.
#[derive(Debug, Clone, Copy)]
pub struct Preset {
    pub name: &'static str,
    pub description: &'static str,
    /// Parameter count of the published model, for reference and tests.
    pub params: u64,
    build: fn(&DataSpec) -> Result<Vec<Layer>, SpecError>,
}

/// The presets `[teacher] preset = "..."` accepts.
pub static PRESETS: [Preset; 7] = [
    Preset {
        name: "fashion-mnist-cnn",
        description: "the example teacher of examples/fashion-mnist/train_teacher.py: conv32-BN-ReLU-pool, conv64-BN-ReLU-pool, fc128, dropout, fc",
        params: 421_738,
        build: fashion_cnn,
    },
    Preset {
        name: "all-minilm-l6-v2",
        description: "sentence-transformers all-MiniLM-L6-v2: post-norm BERT, 6 layers, d 384, 12 heads, FFN 1536, mean-pooled L2-normalised 384-d embedding (vocab 30522)",
        params: 22_565_376,
        build: minilm,
    },
    Preset {
        name: "gpt2",
        description: "GPT-2 small: 12 layers, d 768, 12 heads, 1024 positions, tied head (vocab 50257)",
        params: 124_439_808,
        build: |d| lm(d, &Lm::gpt2(12, 768, 12)),
    },
    Preset {
        name: "gpt2-medium",
        description: "GPT-2 medium: 24 layers, d 1024, 16 heads, 1024 positions, tied head (vocab 50257)",
        params: 354_823_168,
        build: |d| lm(d, &Lm::gpt2(24, 1024, 16)),
    },
    Preset {
        name: "smollm2-135m",
        description: "SmolLM2-135M (Llama): 30 layers, d 576, 3 key/value heads, tied head (vocab 49152)",
        params: 134_515_008,
        build: |d| lm(d, &Lm::smollm2_135m()),
    },
    Preset {
        name: "llama-2-7b",
        description: "Llama 2 7B: 32 layers, d 4096, 32 heads, SwiGLU 11008, RMSNorm, no biases (vocab 32000)",
        params: 6_738_415_616,
        build: |d| lm(d, &Lm::llama_7b_shape(32_000, 32, 11_008)),
    },
    Preset {
        name: "llama-3-8b",
        description: "Llama 3 8B: 32 layers, d 4096, 32 heads, 8 key/value heads, SwiGLU 14336 (vocab 128256)",
        params: 8_030_261_248,
        build: |d| lm(d, &Lm::llama_7b_shape(128_256, 8, 14_336)),
    },
];

/// The layers of preset `name` for inputs described by `data`.
///
/// # Errors
/// [`SpecError::Invalid`] on `teacher.preset` for an unknown name (listing the known ones) or
/// on the data keys when the preset cannot read that input.
pub fn preset_layers(name: &str, data: &DataSpec) -> Result<Vec<Layer>, SpecError> {
    let preset = preset(name).ok_or_else(|| SpecError::Invalid {
        key: "teacher.preset".into(),
        message: format!(
            "unknown preset \"{name}\"; known: {}",
            PRESETS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
        ),
    })?;
    (preset.build)(data)
}

/// The preset `name` matches (`crate::schema::names`: case, white space and separators ignored).
pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| crate::schema::names::same(name, p.name))
}

fn fashion_cnn(data: &DataSpec) -> Result<Vec<Layer>, SpecError> {
    if data.input_shape.len() != 3 || data.input_shape[1] < 4 || data.input_shape[2] < 4 {
        return Err(SpecError::Invalid {
            key: "teacher.preset".into(),
            message: "fashion-mnist-cnn reads images [C, H, W] of at least 4x4".into(),
        });
    }
    let (c, h, w) = (data.input_shape[0], data.input_shape[1], data.input_shape[2]);
    let mut layers = Vec::new();
    let mut push = |id: &str, op: Op, input: Vec<u64>, output: Vec<u64>| {
        layers.push(Layer { id: id.into(), op, input, output });
    };
    let relu = Op::Activation { function: Activation::Relu };
    let max = Op::Pool2d { pool: Pool::Max };
    push(
        "conv1",
        Op::Conv2d { in_channels: c, out_channels: 32, kernel: 3, bias: false },
        vec![c, h, w],
        vec![32, h, w],
    );
    push("bn1", Op::BatchNorm { features: 32 }, vec![32, h, w], vec![32, h, w]);
    push("relu1", relu, vec![32, h, w], vec![32, h, w]);
    push("pool1", max, vec![32, h, w], vec![32, h / 2, w / 2]);
    let (h2, w2) = (h / 2, w / 2);
    push(
        "conv2",
        Op::Conv2d { in_channels: 32, out_channels: 64, kernel: 3, bias: false },
        vec![32, h2, w2],
        vec![64, h2, w2],
    );
    push("bn2", Op::BatchNorm { features: 64 }, vec![64, h2, w2], vec![64, h2, w2]);
    push("relu2", relu, vec![64, h2, w2], vec![64, h2, w2]);
    push("pool2", max, vec![64, h2, w2], vec![64, h2 / 2, w2 / 2]);
    let flat = 64 * (h2 / 2) * (w2 / 2);
    push("flatten", Op::Flatten, vec![64, h2 / 2, w2 / 2], vec![flat]);
    push("fc1", Op::Linear { in_features: flat, out_features: 128 }, vec![flat], vec![128]);
    push("relu3", relu, vec![128], vec![128]);
    push("drop", Op::Dropout { p: 0.3 }, vec![128], vec![128]);
    push("fc2", Op::Linear { in_features: 128, out_features: data.classes }, vec![128], vec![data.classes]);
    Ok(layers)
}

/// all-MiniLM-L6-v2 (BERT: Devlin et al. 2019; Wang et al. 2020, arXiv:2002.10957) reading
/// token ids `[s]` (s <= 512) and returning its 384-d sentence embedding (`data.classes = 384`).
/// 22,565,376 parameters: the file's 22,713,216 floats less BERT's pooler (384 x 384 + 384),
/// which sentence embeddings never run.
fn minilm(data: &DataSpec) -> Result<Vec<Layer>, SpecError> {
    if !matches!(data.input_shape.as_slice(), [s] if *s <= 512) {
        return Err(invalid_data("all-minilm-l6-v2 reads token ids: data.input_shape = [s] with s <= 512"));
    }
    if data.classes != 384 {
        return Err(SpecError::Invalid {
            key: "data.classes".into(),
            message: "all-minilm-l6-v2 returns a 384-d embedding: set data.classes = 384".into(),
        });
    }
    let text = "family = \"transformer\"\nactivation = \"gelu\"\n[transformer]\nvocab = 30522\nlayers = 6\n\
        d_model = 384\nheads = 12\nmlp_width = 1536\nmax_positions = 512\ntoken_types = 2\n\
        norm_position = \"post\"\nnorm_eps = 1e-12\nhead = \"embedding\"\nnormalize = true\n";
    // read as toml_text::parse reads a cfg (one deserializer: no second copy of the visitors)
    let spec: StudentSpec = match crate::schema::reader::read(text) {
        Ok(spec) => spec,
        Err(_) => panic!("the MiniLM description parses"),
    };
    arch::layers(&spec, data)
}

/// The shape of a published language model, in `[student.transformer]` terms.
struct Lm {
    vocab: u64,
    layers: u64,
    d_model: u64,
    heads: u64,
    kv_heads: u64,
    /// Feed-forward width.
    width: u64,
    mlp: MlpKind,
    norm: NormKind,
    /// Learned positions (0: none, rotary).
    max_positions: u64,
    /// Rotary positions' base (`None`: learned positions).
    rope_theta: Option<f64>,
    bias: bool,
    /// The head shares the token embedding.
    tied: bool,
}

impl Lm {
    /// GPT-2 (Radford et al. 2019): vocabulary 50,257, `heads` full heads, feed-forward 4 x
    /// `d_model`, LayerNorm, 1,024 learned positions, biases, the head tied to the embedding.
    const fn gpt2(layers: u64, d_model: u64, heads: u64) -> Lm {
        Lm {
            vocab: 50_257,
            layers,
            d_model,
            heads,
            kv_heads: heads,
            width: 4 * d_model,
            mlp: MlpKind::Standard,
            norm: NormKind::Layer,
            max_positions: 1024,
            rope_theta: None,
            bias: true,
            tied: true,
        }
    }

    /// SmolLM2-135M (Hugging Face 2024; the Llama architecture at a small scale): 30 layers,
    /// d 576, 9 heads of 64 with 3 key/value heads, SwiGLU 1536, RMSNorm, rotary positions of base
    /// 100000, no biases, the head tied to the embedding, vocabulary 49,152.
    const fn smollm2_135m() -> Lm {
        Lm {
            vocab: 49_152,
            layers: 30,
            d_model: 576,
            heads: 9,
            kv_heads: 3,
            width: 1536,
            mlp: MlpKind::Swiglu,
            norm: NormKind::Rms,
            max_positions: 0,
            rope_theta: Some(100_000.0),
            bias: false,
            tied: true,
        }
    }

    /// The Llama 7B/8B shape (Touvron et al. 2023; Llama 3): 32 layers, d 4096, 32 heads
    /// (`kv_heads` of them for keys and values), SwiGLU of `width`, RMSNorm, rotary positions
    /// (none learned), no biases, an untied head.
    const fn llama_7b_shape(vocab: u64, kv_heads: u64, width: u64) -> Lm {
        Lm {
            vocab,
            layers: 32,
            d_model: 4096,
            heads: 32,
            kv_heads,
            width,
            mlp: MlpKind::Swiglu,
            norm: NormKind::Rms,
            max_positions: 0,
            rope_theta: Some(10_000.0),
            bias: false,
            tied: false,
        }
    }
}

/// The layers of language model `m` reading `data` (token ids `[s]`, `data.classes` = vocab).
fn lm(data: &DataSpec, m: &Lm) -> Result<Vec<Layer>, SpecError> {
    let Lm { vocab, layers, d_model, heads, kv_heads, width, mlp, norm, max_positions, rope_theta, bias, tied } = *m;
    let seq = match data.input_shape.as_slice() {
        [s] => *s,
        _ => {
            return Err(invalid_data("a language-model teacher reads token ids: data.input_shape = [sequence_length]"))
        }
    };
    if data.classes != vocab {
        return Err(SpecError::Invalid {
            key: "data.classes".into(),
            message: format!("this teacher predicts {vocab} tokens: set data.classes = {vocab}"),
        });
    }
    if max_positions > 0 && seq > max_positions {
        return Err(invalid_data(&format!("this teacher embeds at most {max_positions} positions")));
    }
    let spec = StudentSpec {
        family: Family::Transformer,
        channels: Vec::new(),
        kernel: 3,
        pool: Pool::None,
        hidden: Vec::new(),
        activation: if mlp == MlpKind::Swiglu { Activation::Silu } else { Activation::Gelu },
        norm: Norm::None,
        dropout: 0.0,
        checkpointing: Checkpointing::None,
        init: None,
        init_from_teacher: Vec::new(),
        transformer: Some(TransformerSpec {
            vocab,
            layers,
            d_model,
            heads,
            kv_heads: Some(kv_heads),
            mlp_width: Some(width),
            mlp,
            norm,
            norm_position: NormPosition::Pre,
            norm_eps: 1e-5,
            attention: AttentionKernel::Flash,
            attention_dropout: 0.0,
            max_positions,
            rope_theta,
            token_types: 0,
            head: HeadKind::Lm,
            pooling: Pooling::Mean,
            normalize: false,
            tie_embeddings: tied,
            head_rank: None,
            bias,
        }),
    };
    arch::layers(&spec, data)
}

fn invalid_data(message: &str) -> SpecError {
    SpecError::Invalid { key: "data.input_shape".into(), message: message.into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(shape: Vec<u64>, classes: u64) -> DataSpec {
        DataSpec {
            train: None,
            test: None,
            tokenizer: None,
            bucket_by_length: false,
            holdout: None,
            input_shape: shape,
            classes,
            scale: 1.0,
            mean: Vec::new(),
            std: Vec::new(),
        }
    }

    #[test]
    fn presets_have_their_published_parameter_counts() {
        for p in &PRESETS {
            let d = match p.name {
                "fashion-mnist-cnn" => data(vec![1, 28, 28], 10),
                "all-minilm-l6-v2" => data(vec![128], 384),
                "gpt2" | "gpt2-medium" => data(vec![128], 50_257),
                "llama-2-7b" => data(vec![128], 32_000),
                "smollm2-135m" => data(vec![128], 49_152),
                _ => data(vec![128], 128_256),
            };
            let layers = preset_layers(p.name, &d).unwrap();
            assert_eq!(arch::param_count(&layers), p.params, "{}", p.name);
        }
    }

    #[test]
    fn a_preset_checks_the_data_it_reads() {
        let e = preset_layers("gpt2", &data(vec![128], 10)).unwrap_err();
        assert!(e.to_string().contains("data.classes = 50257"), "{e}");
        let e = preset_layers("gpt-5", &data(vec![128], 10)).unwrap_err();
        assert!(e.to_string().contains("known: fashion-mnist-cnn, all-minilm-l6-v2, gpt2"), "{e}");
        let e = preset_layers("all-minilm-l6-v2", &data(vec![128], 10)).unwrap_err();
        assert!(e.to_string().contains("data.classes = 384"), "{e}");
    }
}
