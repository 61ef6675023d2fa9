//! The per-step tensors outside the student's layers: the loss (logits: CE always, KD when
//! alpha > 0 and a teacher exists; an embedding objective: MSE or cosine distance to the
//! teacher's embedding, no CE) and the batch tensors `distill` makes each step (raw and
//! normalised inputs or token ids and attention mask, labels, indices).
use crate::memory::compiled::LossPlan;
use crate::memory::errors::EstimateError;
use crate::memory::runtime::mul;
use crate::memory::setup::Compile;
use crate::memory::sizes::Size;
use crate::memory::student_chain::Forward;
use crate::schema::arch::Op;
use crate::schema::dtype::DType;
use crate::schema::{KdDivergence, KdObjective, KdSpec};

impl Compile<'_> {
    /// The loss on the student's logits; `kd` adds the soft-target term's tensors.
    ///
    /// # Errors
    /// [`EstimateError::Overflow`] on sizes past 2^64 bytes.
    pub(crate) fn loss(&self, forward: &Forward, kd: bool) -> Result<LossPlan, EstimateError> {
        let (config, logits) = (self.config, forward.logits);
        // a transformer head is vocab-parallel under tensor parallelism; an mlp/cnn head is not
        let vocab_parallel = matches!(forward.layers.last().map(|l| &l.op), Some(Op::LmHead { .. }));
        let classes = if vocab_parallel {
            config.data.classes.div_ceil(config.estimate.tensor_parallel)
        } else {
            config.data.classes
        };
        let rows = logits.elems / classes.max(1);
        let teacher_classes = match config.teacher.padded_vocab(config.data.classes) {
            Some((width, _)) if vocab_parallel => width.div_ceil(config.estimate.tensor_parallel),
            _ => classes,
        };
        if config.kd.objective != KdObjective::Logits {
            let fp32_logits = Size::per(mul(mul(rows, classes, "loss")?, 4, "loss")?);
            return Ok(embedding_loss(fp32_logits, logits.size()?, logits.dtype, config.kd.objective, rows, kd));
        }
        if let (true, Some(head)) = (config.kd.fused_head && vocab_parallel, forward.layers.last()) {
            let weight = self.recipe.weight;
            return crate::memory::fused_loss::fused_loss(
                config,
                &head.op,
                (rows, classes, teacher_classes),
                weight,
                kd,
            );
        }
        // a language model's loss in chunks of positions (kd.loss_chunk, distill's
        // chunked_loss.rs): the loss tensors and the student's logits exist for one chunk at a
        // time, beside the gradient of the final hidden states [S, d] (accumulated, and a chunk's)
        let chunk = config.kd.loss_chunk;
        let chunked = vocab_parallel && chunk > 0 && chunk < rows;
        let loss_rows = if chunked { chunk } else { rows };
        let fp32_logits = Size::per(mul(mul(loss_rows, classes, "loss")?, 4, "loss")?);
        let student_logits = match chunked {
            true => Size::per(mul(mul(loss_rows, classes, "loss")?, logits.dtype.bytes(), "loss")?),
            false => logits.size()?,
        };
        // (distill/src/train/objective/logit_kd.rs; the peak over the loss measured on an H200 for a
        // causal LM's [8 x 128, 49152] logits in bf16: 8.44 x the fp32 [rows, V] bytes, as
        // listed here, over the held logits; docs/memory-model.md section 7)
        let mut saved: Vec<Size> = vec![fp32_logits, Size::per(mul(rows, 8, "labels")?), Size::fixed(4)];
        let mut transient = Vec::new();
        if vocab_parallel {
            // token logits: the predicting rows are picked with index_select, copies of the
            // student's (in its dtype) and the teacher's (fp32) rows alive through the loss
            transient.push(Size::per(mul(mul(loss_rows, classes, "loss")?, logits.dtype.bytes(), "loss")?));
            if kd {
                transient.push(fp32_logits);
            }
        }
        if logits.dtype != DType::F32 {
            transient.push(fp32_logits); // student.to_kind(Float), alive through the loss
        }
        // the soft term's tensors, and the gradients beside the saved set at the backward's peak
        // (measured on CPU, docs/memory-model.md section 7b): CE alone holds two; with a soft
        // term, autograd runs the soft term's nodes first (they were made last), while CE's
        // log-probs are still saved, and that is the peak: CE's part runs once the soft term's
        // saved tensors are freed, at its own two beside the soft term's gradient of the rows
        let (kept, peak, backward) = if kd { soft_term_tensors(&config.kd) } else { (0, 0, 2) };
        saved.extend(std::iter::repeat_n(fp32_logits, kept));
        transient.extend(std::iter::repeat_n(fp32_logits, peak));
        let mut grads = vec![fp32_logits; backward];
        if chunked {
            let hidden = match forward.layers.last().map(|l| &l.op) {
                Some(Op::LmHead { in_features, .. }) => mul(mul(rows, *in_features, "loss")?, 4, "loss")?,
                _ => 0,
            };
            grads.extend([Size::per(hidden), Size::per(hidden)]);
        }
        Ok(LossPlan {
            saved,
            transient,
            grads,
            student_logits,
            // the teacher's logits are whole: its module returns every position at once, at
            // its own width (`teacher.vocab`: a padded vocabulary is cut by a view of them)
            teacher_logits: kd.then_some(Size::per(mul(mul(rows, teacher_classes, "loss")?, 4, "loss")?)),
            rows,
        })
    }

    /// The batch's tensors not in the saved set (first stage); `x0_saved`: the input batch is
    /// saved (or kept by checkpointing) already.
    ///
    /// # Errors
    /// [`EstimateError::Overflow`] on sizes past 2^64 bytes.
    pub(crate) fn batch_tensors(&self, forward: &Forward, x0_saved: bool) -> Result<Vec<Size>, EstimateError> {
        let (input_elems, x0) = (forward.input_elems, forward.x0);
        let sample_bytes = match self.inputs.dataset {
            Some(d) => d.sample_bytes,
            None if forward.transformer => mul(input_elems, 8, "input")?,
            None => mul(input_elems, 4, "input")?,
        };
        let mut batch = vec![Size::per(8)]; // the batch's indices
        if forward.transformer {
            if !x0_saved {
                batch.push(x0.size()?); // token ids
            }
            if self.ctx.text {
                let seq = x0.elems;
                batch.push(Size::per(mul(seq, 8, "attention mask")?)); // the attention mask, int64 [B, S]
                                                                       // the additive attention bias (1 - mask)[:, None, None, :] * min, [B, 1, 1, S]: an
                                                                       // int64 tensor times a float scalar is fp32; made once, alive through the forward
                batch.push(Size::per(mul(seq, 4, "attention bias")?));
            }
        } else {
            batch.push(Size::per(sample_bytes)); // index_select of the stored inputs
            let normalised = Size::per(mul(input_elems, 4, "input")?);
            if self.recipe.weight != DType::F32 || !x0_saved {
                batch.push(normalised);
            }
            if self.recipe.weight != DType::F32 && !x0_saved {
                batch.push(x0.size()?); // the 16-bit copy fed to a pure-bf16 student
            }
        }
        Ok(batch)
    }
}

/// How many fp32 [rows, V] tensors the soft term on logits (distill's `objective/divergence.rs`)
/// adds to the loss: (saved for backward; besides them, alive at the forward's peak; besides
/// them, alive at the backward's peak), as measured on CPU with torch 2.11
/// (`fidelity/divergences.py`: saved_tensors_hooks for the saved set, a dispatch mode's live
/// storages for the peaks; `tests/divergences.rs` checks them; docs/memory-model.md section 7b):
/// * forward KL, `kl_div(log_q, log_p) = sum exp(log_p) (log_p - log_q)`: 2 saved (log_q and
///   p = exp(log_p)), 3 besides at the forward's peak (log_p, the difference, the product), 1
///   at the backward's (one gradient at a time: each node frees its saved tensors as it runs);
/// * reverse KL, `kl_div(log_p, log_q)`: 3 saved (log_q, q = exp(log_q), log_q - log_p), 2, 2;
/// * JSD: 6 saved (log_q, the two shifted log-probabilities logaddexp keeps, p, q,
///   log_q - log_M), 3, 3;
/// * TVD: 2 saved (softmax(s/T), and q - p, which abs keeps), 2, 2.
///
/// JSD at beta = 0 or 1 computes forward or reverse KL, and is priced as them.
fn soft_term_tensors(kd: &KdSpec) -> (usize, usize, usize) {
    match (kd.soft_divergence(), kd.jsd_beta()) {
        (KdDivergence::ForwardKl, _) => (2, 3, 1),
        (KdDivergence::Jsd, beta) if beta <= 0.0 => (2, 3, 1),
        (KdDivergence::ReverseKl, _) => (3, 2, 2),
        (KdDivergence::Jsd, beta) if beta >= 1.0 => (3, 2, 2),
        (KdDivergence::Jsd, _) => (6, 3, 3),
        (KdDivergence::Tvd, _) => (2, 2, 2),
    }
}

/// The loss of an embedding objective on the student's embedding `[rows, E]` (`fp32`: its bytes
/// as fp32; `student`: as the student returns it, in `dtype`): `z = student.to(f32)`, then
/// `mse_loss(z, t)` saves `z` and the teacher's rows `t`; `1 - cosine_similarity(z, t)` saves
/// both and two `[rows]` norms (measured, torch 2.11 CPU). No labels: text is unlabelled.
fn embedding_loss(fp32: Size, student: Size, dtype: DType, objective: KdObjective, rows: u64, kd: bool) -> LossPlan {
    let mut saved = vec![fp32, fp32];
    if objective == KdObjective::EmbeddingCosine {
        saved.extend([Size::per(rows * 4), Size::per(rows * 4)]);
    }
    let mut transient = vec![fp32];
    if dtype != DType::F32 {
        transient.push(fp32);
    }
    LossPlan {
        saved,
        transient,
        grads: vec![fp32, fp32],
        student_logits: student,
        teacher_logits: kd.then_some(fp32),
        rows,
    }
}
