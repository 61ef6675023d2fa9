//! Expansion of a `[student]` spec into the exact layer sequence `distill` builds.
//!
//! Both the trainer (which turns each [`Layer`] into a libtorch module) and the memory estimator
//! (which prices each one) walk this list, so layer ids, parameter names and shapes agree by
//! construction. Parameter names are `<layer id>.<leaf>` with PyTorch's leaves (`weight`,
//! `bias`, `running_mean`, `running_var`).
//!
//! Layout, for a CNN block `i` (1-based): `conv{i}`, `conv{i}_bn`, `conv{i}_act`, `conv{i}_pool`;
//! then `flatten`; for each hidden block `j`: `fc{j}`, `fc{j}_norm`, `fc{j}_act`, `fc{j}_drop`;
//! then `head`. Norm, pool and dropout layers appear only when configured.
//!
//! A transformer is `embed`, `embed_norm` (post-norm only), `embed_drop`, then per layer `i` the
//! blocks `blk{i}_attn` and `blk{i}_mlp` (each includes its norm, dropout and residual add),
//! `final_norm` (pre-norm only), then by head: `head` (language model); `pool`, `head`
//! (classifier); `pool`, `head` (only when `data.classes != d_model`), `normalize` (only when
//! `normalize`) for a sentence embedding.
//!
//! [`checkpoint_segments`] is the one definition of how gradient checkpointing splits this
//! list, shared by the trainer and the estimator.
use std::ops::Range;

use crate::schema::errors::SpecError;
pub use crate::schema::layer_ops::{numel, Attention, FeedForward, Layer, Op};
use crate::schema::spec::DataSpec;
use crate::schema::student_spec::{
    Checkpointing, Family, HeadKind, Norm, NormKind, NormPosition, Pool, Pooling, StudentSpec, TransformerSpec,
};

/// Expands `student` for inputs described by `data` into its layer sequence.
///
/// # Errors
/// [`SpecError::Invalid`] when pooling shrinks a feature map below 1x1 or a size overflows.
pub fn layers(student: &StudentSpec, data: &DataSpec) -> Result<Vec<Layer>, SpecError> {
    if let (Family::Transformer, Some(t)) = (student.family, &student.transformer) {
        return Ok(transformer_layers(t, student, data));
    }
    let mut b = Builder { layers: Vec::new(), shape: data.input_shape.clone() };
    if student.family == Family::Cnn {
        for (i, &out) in student.channels.iter().enumerate() {
            let id = format!("conv{}", i + 1);
            let in_channels = b.shape[0];
            let bias = student.norm != Norm::Batch;
            let (h, w) = (b.shape[1], b.shape[2]);
            b.push(&id, Op::Conv2d { in_channels, out_channels: out, kernel: student.kernel, bias }, vec![out, h, w]);
            if student.norm == Norm::Batch {
                b.same(&format!("{id}_bn"), Op::BatchNorm { features: out });
            }
            b.same(&format!("{id}_act"), Op::Activation { function: student.activation });
            if student.pool != Pool::None {
                if h < 2 || w < 2 {
                    return Err(SpecError::Invalid {
                        key: "student.channels".into(),
                        message: format!(
                            "block {} pools a {h}x{w} feature map below 1x1; use fewer conv blocks or pool = \"none\"",
                            i + 1
                        ),
                    });
                }
                b.push(&format!("{id}_pool"), Op::Pool2d { pool: student.pool }, vec![out, h / 2, w / 2]);
            }
        }
    }
    if b.shape.len() > 1 {
        let flat = checked_product(&b.shape)?;
        b.push("flatten", Op::Flatten, vec![flat]);
    }
    for (j, &out) in student.hidden.iter().enumerate() {
        let id = format!("fc{}", j + 1);
        b.push(&id, Op::Linear { in_features: b.shape[0], out_features: out }, vec![out]);
        match student.norm {
            Norm::Batch => b.same(&format!("{id}_norm"), Op::BatchNorm { features: out }),
            Norm::Layer => b.same(&format!("{id}_norm"), Op::LayerNorm { features: out }),
            Norm::None => {}
        }
        b.same(&format!("{id}_act"), Op::Activation { function: student.activation });
        if student.dropout > 0.0 {
            b.same(&format!("{id}_drop"), Op::Dropout { p: student.dropout });
        }
    }
    b.push("head", Op::Linear { in_features: b.shape[0], out_features: data.classes }, vec![data.classes]);
    Ok(b.layers)
}

/// The transformer layer list (see the module docs); `data.input_shape = [s]`.
fn transformer_layers(t: &TransformerSpec, student: &StudentSpec, data: &DataSpec) -> Vec<Layer> {
    let seq = data.input_shape.first().copied().unwrap_or(1);
    let h = t.d_model;
    let post_norm = t.norm_position == NormPosition::Post;
    let norm_op = match t.norm {
        NormKind::Layer => Op::LayerNorm { features: h },
        NormKind::Rms => Op::RmsNorm { features: h },
    };
    let mut b = Builder { layers: Vec::new(), shape: vec![seq] };
    let embed = Op::Embedding { vocab: t.vocab, dim: h, positions: t.max_positions, token_types: t.token_types };
    b.push("embed", embed, vec![seq, h]);
    if post_norm {
        b.same("embed_norm", norm_op);
    }
    if student.dropout > 0.0 {
        b.same("embed_drop", Op::Dropout { p: student.dropout });
    }
    for i in 1..=t.layers {
        let attention = Op::SelfAttention(Attention {
            dim: h,
            post_norm,
            heads: t.heads,
            kv_heads: t.kv_heads(),
            kernel: t.attention,
            norm: t.norm,
            attention_dropout: t.attention_dropout,
            dropout: student.dropout,
            bias: t.bias,
            causal: t.head == HeadKind::Lm,
            rope_theta: t.rope_theta,
        });
        b.same(&format!("blk{i}_attn"), attention);
        let mlp = Op::FeedForward(FeedForward {
            dim: h,
            post_norm,
            width: t.mlp_width(),
            mlp: t.mlp,
            activation: student.activation,
            norm: t.norm,
            dropout: student.dropout,
            bias: t.bias,
        });
        b.same(&format!("blk{i}_mlp"), mlp);
    }
    if !post_norm {
        b.same("final_norm", norm_op);
    }
    let pool = match t.pooling {
        Pooling::Mean => Op::MeanPool,
        Pooling::Cls => Op::ClsPool,
    };
    match t.head {
        HeadKind::Lm => {
            // a bias unless tied (GPT-2 ties and has none; Llama has no biases at all)
            let bias = t.bias && !t.tie_embeddings;
            let head = Op::LmHead {
                in_features: h,
                out_features: data.classes,
                bias,
                tied: t.tie_embeddings,
                rank: t.head_rank,
            };
            b.push("head", head, vec![seq, data.classes]);
        }
        HeadKind::Classifier => {
            b.push("pool", pool, vec![h]);
            let head = Op::LmHead { in_features: h, out_features: data.classes, bias: true, tied: false, rank: None };
            b.push("head", head, vec![data.classes]);
        }
        HeadKind::Embedding => {
            b.push("pool", pool, vec![h]);
            if data.classes != h {
                b.push("head", Op::Linear { in_features: h, out_features: data.classes }, vec![data.classes]);
            }
            if t.normalize {
                b.same("normalize", Op::L2Normalize);
            }
        }
    }
    b.layers
}

/// Total trainable parameters of a layer list, in elements (saturating).
pub fn param_count(layers: &[Layer]) -> u64 {
    layers.iter().fold(0u64, |acc, l| acc.saturating_add(l.op.params()))
}

/// Splits `n` layers into `k` contiguous segments of nearly equal length: the first `n % k`
/// segments get one layer more. `k` is clamped to `1..=n`; `n = 0` gives no segment.
pub fn split(n: usize, k: usize) -> Vec<Range<usize>> {
    if n == 0 {
        return Vec::new();
    }
    let k = k.clamp(1, n);
    let (base, extra) = (n / k, n % k);
    let mut start = 0;
    (0..k)
        .map(|i| {
            let len = base + usize::from(i < extra);
            let r = start..start + len;
            start += len;
            r
        })
        .collect()
}

/// The gradient-checkpointing segments of `n` layers (the list [`layers`] returns), or `None`
/// without checkpointing. `sqrt` gives `k = round(sqrt(n))` segments (at least 1, Chen et al.
/// 2016, arXiv:1604.06174); `Segments(k)` gives `min(k, n)`. The forward keeps only each
/// segment's input; the backward recomputes one segment at a time.
pub fn checkpoint_segments(n: usize, checkpointing: Checkpointing) -> Option<Vec<Range<usize>>> {
    let k = match checkpointing {
        Checkpointing::None => return None,
        Checkpointing::Sqrt => rounded_sqrt(n).max(1),
        Checkpointing::Segments(k) => usize::try_from(k).unwrap_or(usize::MAX),
    };
    Some(split(n, k))
}

/// `round(sqrt(n))` in integers (halves round up).
fn rounded_sqrt(n: usize) -> usize {
    let mut r = (n as f64).sqrt() as usize;
    while r.saturating_mul(r) > n {
        r -= 1;
    }
    while (r + 1).saturating_mul(r + 1) <= n {
        r += 1;
    }
    // round up when n > r^2 + r, i.e. sqrt(n) > r + 1/2
    if n > r * r + r {
        r + 1
    } else {
        r
    }
}

/// Neurons or channels that structured pruning at `sparsity` keeps out of `width`:
/// `width - floor(width * sparsity)`, at least 1.
pub fn kept_units(width: u64, sparsity: f64) -> u64 {
    let removed = (width as f64 * sparsity.clamp(0.0, 1.0)).floor() as u64;
    width.saturating_sub(removed).max(1)
}

/// The student after structured pruning at `sparsity`: every conv block's channels and every
/// hidden width shrunk by [`kept_units`] (the head keeps its classes); a transformer's
/// feed-forward width (`mlp_width`, the neurons between `fc1` and `fc2` of every layer) shrunk
/// the same way, its attention and model width untouched.
pub fn structured(student: &StudentSpec, sparsity: f64) -> StudentSpec {
    let mut s = student.clone();
    if s.family == Family::Transformer {
        if let Some(t) = s.transformer.as_mut() {
            t.mlp_width = Some(kept_units(t.mlp_width(), sparsity));
        }
    } else {
        s.channels = s.channels.iter().map(|&c| kept_units(c, sparsity)).collect();
        s.hidden = s.hidden.iter().map(|&w| kept_units(w, sparsity)).collect();
    }
    s
}

struct Builder {
    layers: Vec<Layer>,
    shape: Vec<u64>,
}

impl Builder {
    fn push(&mut self, id: &str, op: Op, output: Vec<u64>) {
        let input = std::mem::replace(&mut self.shape, output.clone());
        self.layers.push(Layer { id: id.to_string(), op, input, output });
    }

    fn same(&mut self, id: &str, op: Op) {
        self.push(id, op, self.shape.clone());
    }
}

fn checked_product(shape: &[u64]) -> Result<u64, SpecError> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)).ok_or_else(|| SpecError::Invalid {
        key: "data.input_shape".into(),
        message: "the flattened input size overflows 64 bits".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::spec::Config;

    fn config(student: &str) -> Config {
        Config::from_toml_str(&format!("[data]\ninput_shape = [1, 28, 28]\nclasses = 10\n[student]\n{student}"))
            .unwrap()
    }

    #[test]
    fn cnn_layers_have_pytorch_shapes_and_counts() {
        let c = config("family = \"cnn\"\nchannels = [8, 16]\nhidden = [32]\nnorm = \"batch\"");
        let l = layers(&c.student, &c.data).unwrap();
        let ids: Vec<&str> = l.iter().map(|l| l.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "conv1",
                "conv1_bn",
                "conv1_act",
                "conv1_pool",
                "conv2",
                "conv2_bn",
                "conv2_act",
                "conv2_pool",
                "flatten",
                "fc1",
                "fc1_norm",
                "fc1_act",
                "head"
            ]
        );
        assert_eq!(l[8].output, vec![16 * 7 * 7]);
        // conv1 72 (no bias under BN) + bn 16 + conv2 1152 + bn 32 + fc1 784*32+32 + bn 64 + head 330
        assert_eq!(param_count(&l), 72 + 16 + 1152 + 32 + 25_120 + 64 + 330);
    }

    #[test]
    fn mlp_flattens_images_first() {
        let c = config("family = \"mlp\"\nhidden = [100]\ndropout = 0.2\nnorm = \"layer\"");
        let l = layers(&c.student, &c.data).unwrap();
        assert_eq!(l[0].op, Op::Flatten);
        assert_eq!(l[1].op, Op::Linear { in_features: 784, out_features: 100 });
        assert_eq!(l.iter().map(|l| l.id.as_str()).next_back(), Some("head"));
        assert_eq!(param_count(&l), 78_500 + 200 + 1010);
    }

    #[test]
    fn pooling_below_one_pixel_is_an_error() {
        let e = Config::from_toml_str(
            "[data]\ninput_shape = [1, 4, 4]\nclasses = 2\n[student]\nfamily = \"cnn\"\nchannels = [2, 2, 2]",
        )
        .unwrap_err();
        assert!(e.to_string().contains("student.channels"), "{e}");
    }

    const ENCODER: &str = "[data]\ntokenizer = \"tokenizer.json\"\ninput_shape = [128]\nclasses = 384\n\
        [student]\nfamily = \"transformer\"\nactivation = \"gelu\"\n\
        [student.transformer]\nvocab = 30522\nlayers = 2\nd_model = 192\nheads = 6\nmax_positions = 512\n\
        token_types = 2\nnorm_position = \"post\"\nnorm_eps = 1e-12\nhead = \"embedding\"\nnormalize = true\n\
        [kd]\nobjective = \"embedding_mse\"\n";

    #[test]
    fn post_norm_sentence_encoder_layers() {
        let c = Config::from_toml_str(ENCODER).unwrap();
        let l = layers(&c.student, &c.data).unwrap();
        let ids: Vec<&str> = l.iter().map(|l| l.id.as_str()).collect();
        assert_eq!(
            ids,
            ["embed", "embed_norm", "blk1_attn", "blk1_mlp", "blk2_attn", "blk2_mlp", "pool", "head", "normalize"]
        );
        assert_eq!(l[7].output, vec![384], "projected to the teacher's width");
        // embed (30522 + 512 + 2) * 192; embed_norm 384; per layer: attn 4*192^2 + 4*192 + norm 384,
        // mlp 2*192*768 + 768 + 192 + norm 384; head 192*384 + 384
        let per_layer = (4 * 192 * 192 + 4 * 192 + 384) + (2 * 192 * 768 + 768 + 192 + 384);
        assert_eq!(param_count(&l), (30522 + 512 + 2) * 192 + 384 + 2 * per_layer + 192 * 384 + 384);
        // same width as the output: no projection; pre-norm: a final norm, no embed_norm
        let c = Config::from_toml_str(
            &ENCODER.replace("classes = 384", "classes = 192").replace("norm_position = \"post\"", ""),
        )
        .unwrap();
        let ids: Vec<String> = layers(&c.student, &c.data).unwrap().into_iter().map(|l| l.id).collect();
        assert_eq!(ids, ["embed", "blk1_attn", "blk1_mlp", "blk2_attn", "blk2_mlp", "final_norm", "pool", "normalize"]);
    }

    #[test]
    fn encoder_rules_name_their_key() {
        let err = |text: String| Config::from_toml_str(&text).unwrap_err().to_string();
        assert!(err(ENCODER.replace("embedding_mse", "logits")).contains("kd.objective"));
        let e = err(ENCODER.replace("[student]\n", "[student]\ninit_from_teacher = [0, 2, 4]\n"));
        assert!(e.contains("student.init_from_teacher") && e.contains("3 teacher layers for 2"), "{e}");
        assert!(
            Config::from_toml_str(&ENCODER.replace("[student]\n", "[student]\ninit_from_teacher = [0, 5]\n")).is_ok()
        );
        assert!(err(ENCODER.replace("input_shape = [128]", "input_shape = [128]\nscale = 0.5")).contains("data.scale"));
        assert!(err(ENCODER.replace("norm_eps = 1e-12", "norm_eps = 0.0")).contains("norm_eps"));
        assert!(err(ENCODER.replace("head = \"embedding\"", "head = \"classifier\"")).contains("normalize"));
        assert!(Config::from_toml_str(&format!("{ENCODER}[prune]\nmethod = \"structured\"\nsparsity = 0.5\n")).is_ok());
    }

    /// An embedding objective has no label term: at `kd.alpha = 0` nothing would train (the
    /// trainer crashed in libtorch's backward, exit 139), so the schema refuses it for the
    /// trainer, `distill plan` and the page alike; the logit objective trains its labels.
    #[test]
    fn alpha_zero_without_a_label_term_is_refused() {
        for objective in ["embedding_mse", "embedding_cosine"] {
            let text = ENCODER.replace("\"embedding_mse\"", &format!("\"{objective}\"\nalpha = 0.0"));
            assert_eq!(
                Config::from_toml_str(&text).unwrap_err().to_string(),
                format!("kd.alpha: is 0, which leaves only the label term, and objective = \"{objective}\" has none: nothing would train; set alpha > 0 (1: the embedding distance alone) or add [[kd.hidden]] pairs")
            );
            assert!(Config::from_toml_str(&text.replace("alpha = 0.0", "alpha = 0.1")).is_ok());
        }
        let logits =
            "[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\nhidden = [8]\n[kd]\nalpha = 0.0\n";
        Config::from_toml_str(logits).expect("alpha 0 trains on the labels");
    }

    /// The soft term in fp32 is sound for temperatures 0.01 to 100: 1e6 trained on rounding
    /// noise (a negative KD term, exit 0), 1e-300 made the loss NaN and was blamed on train.lr.
    #[test]
    fn temperature_outside_its_sound_range_is_refused_with_the_reason() {
        let cfg = |t: &str| {
            format!("[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\n[kd]\ntemperature = {t}\n")
        };
        for bad in ["1e-300", "0.009", "100.5", "1e6"] {
            let e = Config::from_toml_str(&cfg(bad)).unwrap_err().to_string();
            assert!(e.starts_with("kd.temperature: must be between 0.01 and 100 (typical: 1 to 20): above 100 the soft term T^2 x KL of softmax(z / T) falls into fp32 rounding"), "{bad}: {e}");
        }
        for good in ["0.01", "1.0", "20", "100"] {
            Config::from_toml_str(&cfg(good)).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
    }

    /// A `[prune]` table that prunes nothing (sparsity 0, no L1) was accepted silently; sparsity
    /// 0 with an L1 penalty is the penalty alone, and stays.
    #[test]
    fn a_prune_table_that_does_nothing_is_refused() {
        let cfg = |p: &str| {
            format!("[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\nhidden = [8]\n[prune]\n{p}\n")
        };
        assert_eq!(
            Config::from_toml_str(&cfg("sparsity = 0.0")).unwrap_err().to_string(),
            "prune.sparsity: is 0 and prune.l1 is 0: this [prune] table does nothing; set sparsity in (0, 1), or l1 > 0 for the L1 penalty alone, or remove [prune] for a dense student"
        );
        Config::from_toml_str(&cfg("sparsity = 0.0\nl1 = 0.01")).unwrap();
        Config::from_toml_str(&cfg("sparsity = 0.05")).unwrap();
    }

    /// A head split is in no teacher parameter: a student copying layers of the teacher that
    /// `[teacher]` describes must split attention as it does (a MiniLM student of 8 heads trained
    /// silently as another function before). Every example cfg that copies a teacher passes.
    #[test]
    fn a_copying_student_splits_attention_as_the_described_teacher() {
        let minilm = |heads: u64| {
            ENCODER
                .replace("classes = 384\n", "classes = 384\n[teacher]\npreset = \"all-minilm-l6-v2\"\n")
                .replace("[student]\n", "[student]\ninit_from_teacher = [0, 5]\n")
                .replace("d_model = 192\nheads = 6", &format!("d_model = 384\nheads = {heads}"))
        };
        assert_eq!(
            Config::from_toml_str(&minilm(8)).unwrap_err().to_string(),
            "student.transformer.heads: is 8, but the all-minilm-l6-v2 teacher has 12, and a layer copied by \
             student.init_from_teacher splits its attention as the teacher's does: set heads to the teacher's"
        );
        assert!(Config::from_toml_str(&minilm(12)).is_ok());
        // a student that copies nothing splits as it likes; a teacher given by arch is checked too
        assert!(Config::from_toml_str(&minilm(8).replace("init_from_teacher = [0, 5]\n", "")).is_ok());
        let arch = ENCODER.replace("classes = 384\n", "classes = 384\n[teacher.arch]\nfamily = \"transformer\"\nactivation = \"gelu\"\n[teacher.arch.transformer]\nvocab = 30522\nlayers = 4\nd_model = 192\nheads = 4\nmax_positions = 512\ntoken_types = 2\nnorm_position = \"post\"\nhead = \"embedding\"\n");
        let e =
            Config::from_toml_str(&arch.replace("[student]\n", "[student]\ninit_from_teacher = [0, 3]\n")).unwrap_err();
        assert!(e.to_string().starts_with("student.transformer.heads: is 6, but teacher.arch has 4"), "{e}");

        let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
        let mut copying = 0;
        for dir in ["minilm", "smollm2"] {
            for entry in std::fs::read_dir(examples.join(dir)).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "toml") {
                    let c = Config::from_toml_str(&std::fs::read_to_string(&path).unwrap())
                        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                    copying += usize::from(!c.student.init_from_teacher.is_empty() && c.teacher.preset.is_some());
                }
            }
        }
        assert!(copying >= 7, "{copying} example cfgs copy a preset's teacher");
    }

    #[test]
    fn structured_pruning_narrows_a_transformers_feed_forward_only() {
        let c = Config::from_toml_str(ENCODER).unwrap();
        // mlp_width unset: 4 x 192 = 768 neurons; floor(768 * 0.3) = 230 removed, 538 kept
        let t = structured(&c.student, 0.3).transformer.unwrap();
        assert_eq!((t.mlp_width, t.d_model, t.heads, t.layers), (Some(538), 192, 6, 2));
        let fc1 = |s: &StudentSpec| {
            let l = layers(s, &c.data).unwrap();
            l.iter().find(|l| l.id == "blk1_mlp").map(|l| l.op.params()).unwrap()
        };
        // fc1 192 x 538 + 538, fc2 538 x 192 + 192, the layer norm 2 x 192
        assert_eq!(fc1(&structured(&c.student, 0.3)), 192 * 538 + 538 + 538 * 192 + 192 + 2 * 192);
        assert_eq!(fc1(&c.student), 192 * 768 + 768 + 768 * 192 + 192 + 2 * 192);
    }
}
