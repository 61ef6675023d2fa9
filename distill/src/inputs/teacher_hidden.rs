//! The teacher's hidden states for `[[kd.hidden]]`, from the same forward as its logits: a
//! TorchScript teacher's under `teacher.hidden_output` (a dict key or tuple index holding a list
//! or tuple of [B, S, d] tensors, Hugging Face's order: 0 the embeddings' output), a Hugging
//! Face folder's natively ([`crate::inputs::hf::HfDecoder::forward_keeping`]: `num_hidden_layers + 1`
//! states, the last after the final norm).
use estimator_wasm::schema::OutputSelector;
use tch::{IValue, Kind, Tensor};

use super::Teacher;
use crate::host::error::{DistillError, Result};
use crate::inputs::data::ModelInput;
use crate::inputs::teacher_module::{describe, describe_key, TeacherModule};

impl Teacher {
    /// This teacher, its hidden states read from its output under `selector`
    /// (`teacher.hidden_output`).
    pub fn with_hidden_output(mut self, selector: Option<OutputSelector>) -> Teacher {
        self.hidden_output = selector;
        self
    }

    /// The teacher's output as [`Teacher::output`] returns it (fp32) and its hidden states
    /// `layers` (pair order, `[[kd.hidden]] teacher_layer`), each [B, S, d] (or [B, d]) in the
    /// teacher's precision, without autograd.
    ///
    /// # Errors
    /// As [`Teacher::output`]; [`DistillError::Teacher`] when the teacher returns no hidden states
    /// (naming `teacher.hidden_output` and what it returns) or fewer than a pair asks for (how many
    /// it has, with the pair's key).
    pub fn output_and_hidden(&self, input: &ModelInput, layers: &[usize]) -> Result<(Tensor, Vec<Tensor>)> {
        let cast = |t: Tensor| IValue::Tensor(if t.is_floating_point() { t.to_kind(self.kind) } else { t });
        let (out, hidden) = match &self.module {
            TeacherModule::Hf(d) => {
                let n = d.hidden_states().ok_or_else(|| {
                    DistillError::teacher(
                        &self.path,
                        format!(
                            "kd.hidden: hidden states are read from a Llama-family folder (llama, mistral, qwen2) or a \
                             TorchScript teacher's teacher.hidden_output, and this folder is {}: remove [[kd.hidden]] \
                             or trace the teacher with its hidden states",
                            d.config.model_type()
                        ),
                    )
                })?;
                self.check_layers(layers, n, "the folder's decoder returns")?;
                let run = tch::no_grad(|| d.forward_keeping(&input.x, input.mask.as_ref(), layers));
                match run {
                    Ok((logits, hidden)) => (IValue::Tensor(logits), hidden),
                    Err(_) => return Err(self.failure(input)),
                }
            }
            TeacherModule::Script(m) => {
                let args: Vec<IValue> = input.tensors().into_iter().map(cast).collect();
                let out = tch::no_grad(|| m.forward_is(&args)).map_err(|_| self.failure(input))?;
                let hidden = self.script_hidden(&out, layers)?;
                (out, hidden)
            }
        };
        let output = crate::inputs::vocab_check::shared_vocab(self.select(out)?, self.padded_vocab);
        Ok((output.to_kind(Kind::Float), hidden))
    }

    /// The error of a forward that failed: [`Teacher::output`]'s, which says why.
    fn failure(&self, input: &ModelInput) -> DistillError {
        match self.output(input) {
            Err(e) => e,
            Ok(_) => DistillError::teacher(&self.path, "the forward that returns the hidden states failed"),
        }
    }

    /// Refuses a `layers` entry past the `n` hidden states the teacher returns (`how`).
    fn check_layers(&self, layers: &[usize], n: usize, how: &str) -> Result<()> {
        match layers.iter().position(|&j| j >= n) {
            Some(k) => Err(DistillError::teacher(
                &self.path,
                format!(
                    "kd.hidden[{k}].teacher_layer = {}, and {how} {n} hidden states (0 the embeddings' output): use 0 to {}",
                    layers[k],
                    n - 1
                ),
            )),
            None => Ok(()),
        }
    }

    /// The hidden states `layers` of a TorchScript output `out` under `teacher.hidden_output`.
    fn script_hidden(&self, out: &IValue, layers: &[usize]) -> Result<Vec<Tensor>> {
        let err = |m: String| DistillError::teacher(&self.path, m);
        let Some(selector) = &self.hidden_output else {
            return Err(err(format!(
                "[[kd.hidden]] needs the teacher's hidden states, and teacher.hidden_output is not set (the teacher returns {}): set it to the dict key or tuple index of its list of hidden states, e.g. teacher.hidden_output = \"hidden_states\"",
                describe(out)
            )));
        };
        let named = match selector {
            OutputSelector::Index(i) => format!("teacher.hidden_output = {i}"),
            OutputSelector::Key(k) => format!("teacher.hidden_output = \"{k}\""),
        };
        let entry = match (selector, out) {
            (OutputSelector::Index(i), IValue::Tuple(items) | IValue::GenericList(items)) => items.get(*i as usize),
            (OutputSelector::Key(k), IValue::GenericDict(entries)) => {
                let found = entries.iter().find(|(key, _)| matches!(key, IValue::String(s) if s == k));
                if found.is_none() {
                    let keys: Vec<String> = entries.iter().map(|(k, _)| describe_key(k)).collect();
                    return Err(err(format!("{named} but the teacher's dict has keys [{}]", keys.join(", "))));
                }
                found.map(|(_, v)| v)
            }
            _ => None,
        };
        let entry = entry.ok_or_else(|| {
            err(format!(
                "{named} does not fit an output of {}: set it to the dict key or tuple index of the teacher's list of hidden states",
                describe(out)
            ))
        })?;
        let states: Vec<&Tensor> = match entry {
            IValue::TensorList(v) => v.iter().collect(),
            IValue::Tuple(items) | IValue::GenericList(items) => items
                .iter()
                .map(|v| match v {
                    IValue::Tensor(t) => Some(t),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| err(format!("{named} holds {}, not a list of hidden-state tensors", describe(entry))))?,
            other => return Err(err(format!("{named} holds {}, not a list of hidden-state tensors", describe(other)))),
        };
        self.check_layers(layers, states.len(), &format!("the teacher returns under {named}"))?;
        Ok(layers.iter().map(|&j| states[j].shallow_clone()).collect())
    }
}
