//! Validation of a parsed cfg.toml: every value range and cross-field rule, each error naming
//! its key and the accepted values. The shapes of the layers a student expands into are checked
//! by expanding it (`crate::schema::arch`), a preset teacher by its table
//! (`crate::schema::teacher_presets`), a GPU name by the catalogue.
use crate::schema::errors::SpecError;
use crate::schema::hidden_spec;
use crate::schema::limits::{self, MAX_BATCH, MAX_BLOCKS, MAX_EPOCHS, MAX_LAYERS, MAX_SIZE};
use crate::schema::spec::*;
use crate::schema::student_spec::*;

impl Config {
    /// Checks every value range and cross-field rule.
    ///
    /// # Errors
    /// [`SpecError::Invalid`] naming the offending key and the accepted values.
    pub fn validate(&self) -> Result<(), SpecError> {
        self.data.validate()?;
        self.student.validate(&self.data)?;
        self.kd.validate()?;
        self.train.validate()?;
        self.teacher.validate(&self.data, self.student.is_language_model())?;
        self.estimate.validate()?;
        if let Some(t) = &self.student.transformer {
            t.validate_parallel("student.transformer", self.estimate.tensor_parallel)?;
        }
        self.validate_outputs()?;
        self.validate_teacher_copy()?;
        self.validate_hidden()?;
        match &self.prune {
            Some(prune) => prune.validate(&self.train, &self.student),
            None => Ok(()),
        }
    }
}

impl Config {
    /// What the student outputs, what the data feeds it and what `[kd]` compares must agree.
    fn validate_outputs(&self) -> Result<(), SpecError> {
        let head = self.student.transformer.as_ref().map(|t| t.head);
        let embedding = head == Some(HeadKind::Embedding);
        if embedding && self.kd.objective == KdObjective::Logits {
            return invalid(
                "kd.objective",
                "the student outputs an embedding (head = \"embedding\"): set objective = \"embedding_mse\" or \"embedding_cosine\"",
            );
        }
        if head == Some(HeadKind::Lm)
            && self.student.family == Family::Transformer
            && self.kd.objective != KdObjective::Logits
        {
            return invalid("kd.objective", "a language model (head = \"lm\"): set objective = \"logits\"");
        }
        if self.kd.fused_head && !self.student.is_language_model() {
            return invalid("kd.fused_head", "fuses a language model's head with its loss, and this student has none (student.family = \"transformer\" with head = \"lm\"): remove kd.fused_head");
        }
        if self.kd.fused_head && self.kd.loss_chunk == 0 {
            return invalid(
                "kd.fused_head",
                "needs kd.loss_chunk > 0: the positions whose logits exist at once (e.g. 32)",
            );
        }
        if self.data.tokenizer.is_some() && self.student.family != Family::Transformer {
            return invalid("data.tokenizer", "token ids need a student with family = \"transformer\"");
        }
        Ok(())
    }
}

impl EstimateSpec {
    fn validate(&self) -> Result<(), SpecError> {
        for (key, v) in [
            ("estimate.data_parallel", self.data_parallel),
            ("estimate.tensor_parallel", self.tensor_parallel),
            ("estimate.pipeline_stages", self.pipeline_stages),
        ] {
            limits::within(key, v, 1, 1 << 20)?;
        }
        if self.zero_stage > 3 {
            return invalid("estimate.zero_stage", "must be 0 (DDP), 1, 2 or 3");
        }
        if !(self.fragmentation.is_finite() && (0.0..=4.0).contains(&self.fragmentation)) {
            return invalid("estimate.fragmentation", "must be a fraction between 0 and 4 (typical: 0.05 to 0.15)");
        }
        check_safety_margin(self.safety_margin)?;
        for (key, v) in [("estimate.cuda_context_mib", self.cuda_context_mib), ("estimate.nccl_mib", self.nccl_mib)] {
            if v.is_some_and(|v| v > 1 << 30) {
                return invalid(key, "is larger than any GPU (at most 2^30 MiB)");
            }
        }
        if let Some(name) = &self.gpu {
            crate::schema::catalogue::gpu(name)
                .map_err(|e| SpecError::Invalid { key: "estimate.gpu".into(), message: e.to_string() })?;
        }
        Ok(())
    }
}

impl DataSpec {
    fn validate(&self) -> Result<(), SpecError> {
        let shape = &self.input_shape;
        if !(shape.len() == 1 || shape.len() == 3) {
            return invalid("data.input_shape", "must be [C, H, W] or [D]");
        }
        limits::list("data.input_shape", shape, 3, 1, MAX_SIZE)?;
        limits::within("data.classes", self.classes, 2, MAX_SIZE)?;
        if !(self.scale.is_finite() && self.scale != 0.0) {
            return invalid("data.scale", "must be a finite non-zero number");
        }
        for (key, values) in [("data.mean", &self.mean), ("data.std", &self.std)] {
            if !(values.is_empty() || values.len() == 1 || values.len() as u64 == self.channels()) {
                return invalid(key, "must hold one value or one per input channel");
            }
            if values.iter().any(|v| !v.is_finite()) {
                return invalid(key, "must hold finite numbers");
            }
        }
        if self.std.iter().any(|&s| s <= 0.0) {
            return invalid("data.std", "must be positive");
        }
        if let Some(h) = self.holdout {
            if !(h > 0.0 && h < 1.0) {
                return invalid("data.holdout", "must be a fraction between 0 and 1");
            }
        }
        if self.bucket_by_length && self.tokenizer.is_none() {
            return invalid("data.bucket_by_length", "is for text (data.tokenizer); remove it");
        }
        if self.tokenizer.is_some() {
            if shape.len() != 1 {
                return invalid("data.input_shape", "text needs [max_tokens], e.g. [128]");
            }
            if self.scale != 1.0 || !self.mean.is_empty() || !self.std.is_empty() {
                return invalid("data.scale", "token ids are not normalised: remove scale, mean and std");
            }
        }
        Ok(())
    }
}

impl StudentSpec {
    fn validate(&self, data: &DataSpec) -> Result<(), SpecError> {
        self.validate_at("student", data)
    }

    /// Validates this architecture with error keys under `prefix` (`student` or `teacher.arch`).
    pub(crate) fn validate_at(&self, prefix: &str, data: &DataSpec) -> Result<(), SpecError> {
        let key = |k: &str| format!("{prefix}.{k}");
        match self.family {
            Family::Mlp if !self.channels.is_empty() => {
                return invalid(&key("channels"), "is only for family = \"cnn\"; remove it");
            }
            Family::Cnn if self.channels.is_empty() => {
                return invalid(&key("channels"), "family = \"cnn\" needs at least one conv block");
            }
            Family::Cnn if data.input_shape.len() != 3 => {
                return invalid("data.input_shape", "family = \"cnn\" needs [C, H, W]");
            }
            Family::Cnn if self.norm == Norm::Layer => {
                return invalid(&key("norm"), "\"layer\" is for mlp students; use \"batch\" or \"none\"");
            }
            _ => {}
        }
        match (self.family, &self.transformer) {
            (Family::Transformer, None) => {
                return invalid(&key("transformer"), "family = \"transformer\" needs a [transformer] table");
            }
            (Family::Mlp | Family::Cnn, Some(_)) => {
                return invalid(&key("transformer"), "is only for family = \"transformer\"; remove it");
            }
            (Family::Transformer, Some(t)) => {
                if !self.channels.is_empty() || !self.hidden.is_empty() {
                    return invalid(
                        &key("hidden"),
                        "a transformer takes its sizes from [transformer]; remove hidden/channels",
                    );
                }
                if self.norm != Norm::None {
                    return invalid(
                        &key("norm"),
                        "a transformer sets its norm in [transformer] norm = \"layer\" or \"rms\"",
                    );
                }
                t.validate(&key("transformer"), data)?;
            }
            _ => {}
        }
        limits::list(&key("channels"), &self.channels, MAX_BLOCKS, 1, MAX_SIZE)?;
        limits::list(&key("hidden"), &self.hidden, MAX_BLOCKS, 1, MAX_SIZE)?;
        limits::within(&key("kernel"), self.kernel, 1, MAX_SIZE)?;
        if self.kernel % 2 == 0 {
            return invalid(&key("kernel"), "must be odd");
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return invalid(&key("dropout"), "must be in [0, 1)");
        }
        if !self.init_from_teacher.is_empty() {
            let Some(t) = &self.transformer else {
                return invalid(&key("init_from_teacher"), "is only for family = \"transformer\"; remove it");
            };
            if self.init_from_teacher.len() as u64 != t.layers {
                let n = self.init_from_teacher.len();
                return invalid(
                    &key("init_from_teacher"),
                    &format!("lists {n} teacher layers for {} student layers: give one per student layer", t.layers),
                );
            }
            limits::list(&key("init_from_teacher"), &self.init_from_teacher, MAX_LAYERS as usize, 0, MAX_LAYERS - 1)?;
        }
        // Shapes must stay positive through every pooling stage.
        crate::schema::arch::layers(self, data)
            .map_err(|e| match e {
                SpecError::Invalid { key: k, message } if prefix != "student" => {
                    SpecError::Invalid { key: k.replacen("student", prefix, 1), message }
                }
                other => other,
            })
            .map(|_| ())
    }
}

impl TransformerSpec {
    fn validate(&self, prefix: &str, data: &DataSpec) -> Result<(), SpecError> {
        let key = |k: &str| format!("{prefix}.{k}");
        if data.input_shape.len() != 1 {
            return invalid("data.input_shape", "a transformer needs [sequence_length]");
        }
        for (name, v, min, max) in [
            ("layers", self.layers, 1, MAX_LAYERS),
            ("vocab", self.vocab, 1, MAX_SIZE),
            ("d_model", self.d_model, 1, MAX_SIZE),
            ("heads", self.heads, 1, MAX_SIZE),
            ("mlp_width", self.mlp_width(), 1, MAX_SIZE),
            // 0: no learned positions
            ("max_positions", self.max_positions, 0, MAX_SIZE),
        ] {
            limits::within(&key(name), v, min, max)?;
        }
        if self.d_model % self.heads != 0 {
            return invalid(&key("heads"), "must divide d_model");
        }
        let kv = self.kv_heads();
        if kv == 0 || self.heads % kv != 0 {
            return invalid(&key("kv_heads"), "must be >= 1 and divide heads");
        }
        if !(0.0..1.0).contains(&self.attention_dropout) {
            return invalid(&key("attention_dropout"), "must be in [0, 1)");
        }
        if !(self.norm_eps.is_finite() && self.norm_eps > 0.0 && self.norm_eps < 1.0) {
            return invalid(&key("norm_eps"), "must be a number in (0, 1) (PyTorch: 1e-5, BERT: 1e-12)");
        }
        limits::within(&key("token_types"), self.token_types, 0, MAX_SIZE)?;
        if self.normalize && self.head != HeadKind::Embedding {
            return invalid(&key("normalize"), "is only for head = \"embedding\"");
        }
        let seq = data.input_shape[0];
        if self.max_positions != 0 && self.max_positions < seq {
            return invalid(
                &key("max_positions"),
                &format!(
                    "{} positions cannot embed sequences of {seq} (data.input_shape); use 0 or >= {seq}",
                    self.max_positions
                ),
            );
        }
        if let Some(theta) = self.rope_theta {
            if !(theta.is_finite() && theta > 1.0) {
                return invalid(&key("rope_theta"), "must be > 1 (Llama: 10000)");
            }
            if self.max_positions != 0 {
                return invalid(&key("rope_theta"), "replaces learned positions: set max_positions = 0");
            }
            if (self.d_model / self.heads) % 2 != 0 {
                return invalid(&key("rope_theta"), "needs an even d_model / heads");
            }
        }
        if let Some(rank) = self.head_rank {
            if self.head != HeadKind::Lm {
                return invalid(&key("head_rank"), "factorises a language-model head: set head = \"lm\" or remove it");
            }
            if self.tie_embeddings {
                return invalid(
                    &key("head_rank"),
                    "factorises an untied head: set tie_embeddings = false (the token embedding stays whole)",
                );
            }
            // r (d + V) multiply-adds a token against d V whole: below d V / (d + V) it is cheaper
            let (d, v) = (u128::from(self.d_model), u128::from(self.vocab));
            let most = ((d * v).saturating_sub(1) / (d + v).max(1)) as u64;
            if rank == 0 || rank > most {
                return invalid(
                    &key("head_rank"),
                    &format!(
                        "must be 1 to {most}: a head of rank r costs r x (d_model + vocab) multiply-adds a token, the whole one d_model x vocab = {} x {}",
                        self.d_model, self.vocab
                    ),
                );
            }
        }
        match self.head {
            HeadKind::Lm if data.classes != self.vocab => invalid(
                "data.classes",
                &format!("a language-model head predicts the vocabulary: set data.classes = {}", self.vocab),
            ),
            HeadKind::Classifier if self.tie_embeddings => {
                invalid(&key("tie_embeddings"), "only a language-model head can share the embedding")
            }
            _ => Ok(()),
        }
    }

    /// Tensor parallelism splits heads (and key/value heads) across `t` GPUs.
    fn validate_parallel(&self, prefix: &str, t: u64) -> Result<(), SpecError> {
        if self.head_rank.is_some() && t > 1 {
            return invalid(
                "estimate.tensor_parallel",
                &format!("{prefix}.head_rank: a factorised head is not split across GPUs; set tensor_parallel = 1"),
            );
        }
        if self.heads % t != 0 || self.kv_heads() % t != 0 {
            return invalid(
                "estimate.tensor_parallel",
                &format!("must divide {prefix}.heads ({}) and kv_heads ({})", self.heads, self.kv_heads()),
            );
        }
        Ok(())
    }
}

impl KdSpec {
    fn validate(&self) -> Result<(), SpecError> {
        // measured on random logits in fp32 against fp64: T^2 KL is off by 3e-5 at T = 100, 1e-3
        // to 1e-2 at 1000, 10% at 1e4, of either sign at 1e5; at 1e-300, T^2 is 0 and z / T inf
        if !(0.01..=100.0).contains(&self.temperature) {
            return invalid(
                "kd.temperature",
                "must be between 0.01 and 100 (typical: 1 to 20): above 100 the soft term T^2 x KL of softmax(z / T) falls into fp32 rounding (10% off at 1e4, negative at 1e5) and trains on noise; below 0.01 softmax(z / T) is a hard argmax that teaches nothing a label does not, and far below z / T overflows to NaN",
            );
        }
        if !(0.0..=1.0).contains(&self.alpha) {
            return invalid("kd.alpha", "must be in [0, 1] (0 = labels only, 1 = soft targets only)");
        }
        // (with [[kd.hidden]] pairs, their terms alone train: TinyBERT's intermediate stage)
        if self.alpha == 0.0 && self.objective != KdObjective::Logits && self.hidden.is_empty() {
            let name = self.objective.name();
            return invalid("kd.alpha", &format!("is 0, which leaves only the label term, and objective = \"{name}\" has none: nothing would train; set alpha > 0 (1: the embedding distance alone) or add [[kd.hidden]] pairs"));
        }
        if self.beta.is_some_and(|b| !(0.0..=1.0).contains(&b)) {
            return invalid(
                "kd.beta",
                "must be in [0, 1]: the teacher's weight in divergence = \"jsd\"'s mixture M = beta p_teacher + (1 - beta) p_student (0: forward KL, 0.5: symmetric JSD, 1: reverse KL)",
            );
        }
        if self.objective != KdObjective::Logits {
            let name = self.objective.name();
            if self.divergence.is_some() {
                return invalid("kd.divergence", &format!("compares two distributions over classes, and objective = \"{name}\" compares vectors: remove kd.divergence, or use objective = \"logits\" with a teacher that outputs logits"));
            }
            if self.beta.is_some() {
                return invalid("kd.beta", &format!("weighs divergence = \"jsd\" on logits, and objective = \"{name}\" has no divergence: remove kd.beta"));
            }
        }
        Ok(())
    }
}

impl TrainSpec {
    fn validate(&self) -> Result<(), SpecError> {
        limits::within("train.epochs", self.epochs, 1, MAX_EPOCHS)?;
        if let BatchSize::Fixed(b) = self.batch_size {
            limits::within("train.batch_size", b, 1, MAX_BATCH)?;
        }
        limits::within("train.eval_batch_size", self.eval_batch_size, 1, MAX_BATCH)?;
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if !positive(self.lr) {
            return invalid("train.lr", "must be a finite number > 0");
        }
        if !(self.min_lr.is_finite() && (0.0..=self.lr).contains(&self.min_lr)) {
            return invalid("train.min_lr", "must be in [0, lr]");
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return invalid("train.weight_decay", "must be >= 0");
        }
        if !(0.0..1.0).contains(&self.momentum) {
            return invalid("train.momentum", "must be in [0, 1)");
        }
        if self.betas.iter().any(|b| !(0.0..1.0).contains(b)) {
            return invalid("train.betas", "both must be in [0, 1)");
        }
        if !positive(self.eps) {
            return invalid("train.eps", "must be > 0");
        }
        if self.log_every == 0 {
            return invalid("train.log_every", "must be >= 1");
        }
        Ok(())
    }
}

impl PruneSpec {
    fn validate(&self, train: &TrainSpec, student: &StudentSpec) -> Result<(), SpecError> {
        if self.method == PruneMethod::Structured {
            if self.scope == Some(PruneScope::Global) {
                return invalid(
                    "prune.scope",
                    "structured pruning ranks units within each layer: remove scope or set scope = \"layer\"",
                );
            }
            if student.norm == Norm::Layer && !student.hidden.is_empty() {
                let why = "its statistics span all units, so removing one changes the others";
                let fix = "use norm \"batch\" or \"none\", or method \"magnitude\"";
                return invalid(
                    "prune.method",
                    &format!("\"structured\" meets student.norm = \"layer\" ({why}): {fix}"),
                );
            }
        }
        if !(0.0..1.0).contains(&self.sparsity) {
            return invalid("prune.sparsity", "must be in [0, 1)");
        }
        if self.sparsity == 0.0 && self.l1 == 0.0 {
            let fix =
                "set sparsity in (0, 1), or l1 > 0 for the L1 penalty alone, or remove [prune] for a dense student";
            return invalid(
                "prune.sparsity",
                &format!("is 0 and prune.l1 is 0: this [prune] table does nothing; {fix}"),
            );
        }
        if !(0.0..=self.sparsity).contains(&self.initial_sparsity) {
            return invalid("prune.initial_sparsity", "must be in [0, sparsity]");
        }
        let end = self.end_epoch.unwrap_or(train.epochs as f64);
        if !(self.start_epoch >= 0.0 && self.start_epoch <= end && end <= train.epochs as f64) {
            return invalid("prune.end_epoch", "needs 0 <= start_epoch <= end_epoch <= train.epochs");
        }
        if self.every_steps == 0 {
            return invalid("prune.every_steps", "must be >= 1");
        }
        if !(self.l1.is_finite() && self.l1 >= 0.0) {
            return invalid("prune.l1", "must be >= 0");
        }
        Ok(())
    }
}

/// `estimate.safety_margin` (or a margin a caller passes): a fraction in [0, 1).
///
/// # Errors
/// [`SpecError::Invalid`] on `estimate.safety_margin` otherwise.
pub fn check_safety_margin(margin: f64) -> Result<(), SpecError> {
    if margin.is_finite() && (0.0..1.0).contains(&margin) {
        return Ok(());
    }
    invalid("estimate.safety_margin", "must be a fraction in [0, 1) (typical: 0.05)")
}

// hidden-state pairs ([[kd.hidden]], hidden_spec.rs)
impl Config {
    /// `[[kd.hidden]]` against the rest of the cfg: each pair's student layer exists and its
    /// weight is >= 0 ([`hidden_spec::check_pairs`]). Any `kd.alpha` goes (at 0 the loss is the
    /// labels' CE plus the pairs' terms, the teacher running for its hidden states alone), and
    /// so do `student.checkpointing` (a pair's term is recomputed with its segment) and
    /// `kd.loss_chunk` (the pairs read blocks before the head).
    ///
    /// # Errors
    /// [`SpecError::Invalid`] naming the key and the fix.
    pub(crate) fn validate_hidden(&self) -> Result<(), SpecError> {
        if self.kd.hidden.is_empty() {
            return Ok(());
        }
        let layers = crate::schema::arch::layers(&self.student, &self.data)?;
        let transformer = layers.iter().any(|l| matches!(l.op, crate::schema::layer_ops::Op::SelfAttention(_)));
        hidden_spec::check_pairs(&self.kd.hidden, &hidden_spec::student_hidden_states(&layers), transformer)
    }
}

pub(crate) fn invalid<T>(key: &str, message: &str) -> Result<T, SpecError> {
    Err(SpecError::Invalid { key: key.to_string(), message: message.to_string() })
}
