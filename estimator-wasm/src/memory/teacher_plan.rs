//! The teacher as the step sees it: its counts (the caller's exact ones, `[teacher]` params,
//! a preset or an arch) and, per layer, what its no-grad forward holds (the working set of live
//! soft targets and of the logit cache).
use crate::memory::compiled::LiveSets;
use crate::memory::errors::EstimateError;
use crate::memory::inputs::TeacherModel;
use crate::memory::runtime::mul;
use crate::memory::setup::Compile;
use crate::memory::sizes::{Chain, Ctx, Size};
use crate::memory::student_chain::{layer_error, price, sizing_key};
use crate::schema::arch::{self, numel, Layer, Op};
use crate::schema::dtype::{DType, Recipe};
use crate::schema::teacher_presets;
use crate::schema::Target;

impl Compile<'_> {
    /// The teacher's counts and its layers' no-grad live sets; `None` when there is no teacher.
    ///
    /// # Errors
    /// [`EstimateError::Invalid`] on `teacher` when KD needs a teacher of unknown size;
    /// errors of the preset or arch expansion; a layer past 2^64 bytes on the key sizing it.
    pub(crate) fn teacher(&mut self) -> Result<Option<(TeacherModel, LiveSets)>, EstimateError> {
        let (config, inputs, notes) = (self.config, self.inputs, &mut self.notes);
        let spec = &config.teacher;
        let data = spec.logit_data(&config.data);
        let layers: Option<Vec<Layer>> = match (&inputs.teacher, &spec.preset, &spec.arch) {
            (Some(TeacherModel { layers: Some(l), .. }), _, _) => Some(l.clone()),
            (_, Some(name), _) => Some(teacher_presets::preset_layers(name, &data)?),
            (_, _, Some(arch)) => Some(arch::layers(arch, &data)?),
            _ => None,
        };
        let from_layers = layers
            .as_ref()
            .map(|l| (arch::param_count(l), l.iter().fold(0u64, |a, l| a.saturating_add(l.op.buffers()))));
        let (params, buffers) = match (&inputs.teacher, spec.params, from_layers) {
            (Some(t), _, _) => (t.params, t.buffers),
            (None, Some(p), _) => (p, spec.buffers.unwrap_or(0)),
            (None, None, Some((p, b))) => (p, spec.buffers.unwrap_or(b)),
            (None, None, None) => {
                if config.kd.alpha > 0.0 {
                    return Err(EstimateError::invalid(
                        "teacher",
                        "the teacher's size is unknown: set [teacher] params, preset or arch (distill passes the exact count)",
                    ));
                }
                notes.push("no teacher is priced (kd.alpha = 0 and no [teacher] size given)".into());
                return Ok(None);
            }
        };
        let dtype = Recipe::teacher_dtype(spec.precision);
        let ctx = Ctx {
            recipe: Recipe {
                weight: dtype,
                compute: dtype,
                autocast: false,
                optimizer_state: dtype,
                master_copy: false,
                loss_scaling: false,
            },
            cuda: config.estimate.target == Target::Cuda,
            tp: 1,
            text: config.data.tokenizer.is_some(),
        };
        let input_elems = numel(&config.data.input_shape).ok_or_else(|| EstimateError::overflow("the input size"))?;
        let mut live: LiveSets = Vec::new();
        match &layers {
            Some(layers) => {
                let tokens = matches!(layers.first().map(|l| &l.op), Some(Op::Embedding { .. }));
                let mut chain = Chain {
                    id: 0,
                    elems: input_elems,
                    dtype: if tokens { DType::I64 } else { dtype },
                    requires_grad: false,
                };
                let mut next = 0;
                // the key that sizes a teacher layer: the caller's list, the input of a preset, or the arch
                let key = |id: &str| match (&inputs.teacher, &spec.preset) {
                    (Some(_), _) => "teacher".to_string(),
                    (None, Some(_)) => "data.input_shape".to_string(),
                    (None, None) => sizing_key("teacher.arch", id),
                };
                for (i, l) in layers.iter().enumerate() {
                    let p = price(l, chain, &mut next, &ctx).map_err(|e| layer_error(e, key(&l.id), l))?;
                    let mut sizes = Vec::new();
                    if p.output.id != chain.id {
                        sizes.push(chain.size()?);
                        sizes.push(p.output.size()?);
                    }
                    sizes.extend(p.inference_scratch.iter().copied());
                    // the fp32 copy of the logits the teacher returns
                    if i + 1 == layers.len() {
                        sizes.push(Size::per(mul(p.output.elems, 4, "teacher logits")?));
                    }
                    live.push((l.id.clone(), sizes));
                    chain = p.output;
                }
            }
            None => {
                notes.push(
                    "the teacher's working set is a lower bound (input and logits only): give [teacher] preset or arch"
                        .into(),
                );
                let logits = mul(data.classes, 4, "teacher logits")?;
                let input = Size::per(mul(input_elems, dtype.bytes(), "teacher input")?);
                live.push(("teacher".into(), vec![input, Size::per(logits), Size::per(logits)]));
            }
        }
        Ok(Some((TeacherModel { params, buffers, layers }, live)))
    }
}
