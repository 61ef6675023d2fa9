//! What a [`crate::inputs::teacher::Teacher`] runs: a TorchScript module, or the native model of a
//! Hugging Face model folder ([`crate::inputs::hf`]), behind the few calls the teacher makes of it (the
//! forward on its inputs, its named parameters, eval mode, the CPU's channels-last weights).
use tch::{CModule, IValue, TchError, Tensor};

use crate::host::error::Result;
use crate::inputs::hf::HfModel;
use crate::torch::channels_last::channels_last;

/// A TorchScript module or a Hugging Face model.
#[derive(Debug)]
pub enum TeacherModule {
    Script(CModule),
    Hf(Box<HfModel>),
}

impl TeacherModule {
    /// The forward on `args` (the model input, then the attention mask for text): the module's
    /// own output, or the folder model's logits [B, S, vocab] or sentence embedding [B, E] as a
    /// tensor.
    ///
    /// # Errors
    /// libtorch's, when the forward fails on these inputs.
    pub fn forward_is(&self, args: &[IValue]) -> std::result::Result<IValue, TchError> {
        match self {
            TeacherModule::Script(m) => m.forward_is(args),
            TeacherModule::Hf(d) => {
                fn tensor(v: Option<&IValue>) -> Option<&Tensor> {
                    match v {
                        Some(IValue::Tensor(t)) => Some(t),
                        _ => None,
                    }
                }
                let ids = tensor(args.first())
                    .ok_or_else(|| TchError::Torch("a model folder's model takes token ids".into()))?;
                d.forward(ids, tensor(args.get(1))).map(IValue::Tensor)
            }
        }
    }

    /// The parameters by name: the module's, or the folder model's Hugging Face names.
    ///
    /// # Errors
    /// libtorch's, when it cannot list a module's.
    pub fn named_parameters(&self) -> std::result::Result<Vec<(String, Tensor)>, TchError> {
        match self {
            TeacherModule::Script(m) => m.named_parameters(),
            TeacherModule::Hf(d) => Ok(d.named_parameters()),
        }
    }

    /// Eval mode (a folder's model has no dropout or batch statistics: nothing to switch).
    ///
    /// # Errors
    /// libtorch's.
    pub fn set_eval(&mut self) -> std::result::Result<(), TchError> {
        match self {
            TeacherModule::Script(m) => m.f_set_eval(),
            TeacherModule::Hf(_) => Ok(()),
        }
    }

    /// Restrides every 4-D floating parameter of a module (a convolution's weight) channels-last
    /// in place, so that on the CPU its convolutions, and the pooling after them, run in
    /// libtorch's faster channels-last kernels whatever the input's layout; whether it restrided
    /// any. The same values up to rounding: the Fashion-MNIST example's teacher at batch 256 on 2
    /// cores of an AMD EPYC (torch 2.11) took 11 ms a batch against 43 ms, its logits within 3e-6
    /// of the NCHW ones. [`TeacherModule::contiguous_weights`] undoes it.
    pub fn channels_last_weights(&self) -> Result<bool> {
        let mut any = false;
        for (_, mut p) in self.named_parameters()? {
            if p.dim() == 4 && p.is_floating_point() {
                let restrided = tch::no_grad(|| channels_last(&p));
                p.set_data(&restrided);
                any = true;
            }
        }
        Ok(any)
    }

    /// Gives every 4-D parameter contiguous (NCHW) strides again.
    pub fn contiguous_weights(&self) -> Result<()> {
        for (_, mut p) in self.named_parameters()? {
            if p.dim() == 4 && !p.is_contiguous() {
                let contiguous = tch::no_grad(|| p.contiguous());
                p.set_data(&contiguous);
            }
        }
        Ok(())
    }
}

/// What a module returned, for a message: `a tensor [8, 10]`, `a dict with keys ["logits"]`, ...
pub fn describe(v: &IValue) -> String {
    match v {
        IValue::Tensor(t) => format!("a tensor {:?}", t.size()),
        IValue::Tuple(items) => format!("a tuple of {}", items.len()),
        IValue::GenericList(items) => format!("a list of {}", items.len()),
        IValue::TensorList(items) => format!("a list of {} tensors", items.len()),
        IValue::GenericDict(entries) => {
            let keys: Vec<String> = entries.iter().map(|(k, _)| describe_key(k)).collect();
            format!("a dict with keys [{}]", keys.join(", "))
        }
        IValue::None => "None".into(),
        _ => "a non-tensor value".into(),
    }
}

/// A dict key for a message: `"logits"`, `0`, or `?`.
pub fn describe_key(k: &IValue) -> String {
    match k {
        IValue::String(s) => format!("\"{s}\""),
        IValue::Int(i) => i.to_string(),
        _ => "?".into(),
    }
}
