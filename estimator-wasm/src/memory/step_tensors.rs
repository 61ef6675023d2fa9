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
use crate::schema::KdObjective;

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
        // (distill/src/objective/logit_kd.rs; the peak over the loss measured on an H200 for a
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
        let mut grads = vec![fp32_logits, fp32_logits];
        if chunked {
            let hidden = match forward.layers.last().map(|l| &l.op) {
                Some(Op::LmHead { in_features, .. }) => mul(mul(rows, *in_features, "loss")?, 4, "loss")?,
                _ => 0,
            };
            grads.extend([Size::per(hidden), Size::per(hidden)]);
        }
        if kd {
            // saved: log_softmax(s/T) and exp(log_softmax(t/T)), which kl_div(log_target)'s
            // product keeps; at its peak log_softmax(t/T), (t - s) and the product are alive
            // too (s/T and t/T are gone by then)
            saved.extend([fp32_logits, fp32_logits]);
            transient.extend([fp32_logits, fp32_logits, fp32_logits]);
            grads.extend([fp32_logits, fp32_logits]);
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
