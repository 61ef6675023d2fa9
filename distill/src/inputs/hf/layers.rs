//! What the native models of a Hugging Face folder share: a linear layer as transformers'
//! `nn.Linear` (weight [out, in]) or GPT-2's `Conv1D` (weight [in, out]) computes it, a
//! LayerNorm, the loader that takes tensors from a [`Checkpoint`] by name and shape (recording
//! them for [`crate::inputs::teacher::Teacher::named_parameters`]), the activations transformers names in
//! `hidden_act` (`activations.py`), and the value its masks put on a hidden key's score; and
//! the blocks GPT-2 and BERT compute alike (`modeling_gpt2.py`, `modeling_bert.py`): token plus
//! learned position embeddings, eager multi-head attention and the two-layer feed-forward.
use tch::{Device, Kind, TchError, Tensor};

use super::weights::Checkpoint;
use crate::host::error::Result;

/// `x W^T + b` with the weight [out, in] (`nn.Linear`), or `x W + b` with the weight [in, out]
/// when `conv1d` (GPT-2's `Conv1D`, `pytorch_utils.py`).
#[derive(Debug)]
pub struct Linear {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
    pub conv1d: bool,
}

impl Linear {
    /// `x` [..., in] to [..., out].
    pub fn forward(&self, x: &Tensor) -> Tensor {
        match self.conv1d {
            false => x.linear(&self.weight, self.bias.as_ref()),
            true => {
                let y = x.matmul(&self.weight);
                match &self.bias {
                    Some(b) => y + b,
                    None => y,
                }
            }
        }
    }
}

/// `nn.LayerNorm(d, eps)`: `(x - mean) / sqrt(var + eps) * weight + bias` over the last
/// dimension, in the weights' kind.
#[derive(Debug)]
pub struct LayerNorm {
    pub weight: Tensor,
    pub bias: Tensor,
    pub eps: f64,
}

impl LayerNorm {
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let d = self.weight.size();
        x.layer_norm(d.as_slice(), Some(&self.weight), Some(&self.bias), self.eps, false)
    }
}

/// A feed-forward activation by transformers' name (`ACT2FN`, `activations.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// `gelu`: the exact one, `x Phi(x)` (erf).
    Gelu,
    /// `gelu_new`, `gelu_pytorch_tanh`, `gelu_fast`: the tanh approximation
    /// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))` (Hendrycks & Gimpel 2016).
    GeluTanh,
    Relu,
}

impl Act {
    /// The names [`Act::from_name`] takes, for a refusal.
    pub const NAMES: &'static str = "gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, relu";

    /// The activation transformers calls `name`; `None` for one distill does not compute.
    pub fn from_name(name: &str) -> Option<Act> {
        match name {
            "gelu" => Some(Act::Gelu),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Some(Act::GeluTanh),
            "relu" => Some(Act::Relu),
            _ => None,
        }
    }

    pub fn forward(self, x: &Tensor) -> Tensor {
        match self {
            Act::Gelu => x.gelu("none"),
            Act::GeluTanh => x.gelu("tanh"),
            Act::Relu => x.relu(),
        }
    }
}

/// Takes tensors from a checkpoint in one kind, on one device, recording their names.
pub struct Loader<'a> {
    pub checkpoint: &'a Checkpoint,
    pub kind: Kind,
    pub device: Device,
    pub named: Vec<(String, Tensor)>,
}

impl<'a> Loader<'a> {
    pub fn new(checkpoint: &'a Checkpoint, kind: Kind, device: Device) -> Loader<'a> {
        Loader { checkpoint, kind, device, named: Vec::new() }
    }

    /// The tensor `name` of shape `shape`.
    ///
    /// # Errors
    /// As [`Checkpoint::tensor`]: it is missing or of another shape (named, with both shapes).
    pub fn take(&mut self, name: String, shape: &[i64]) -> Result<Tensor> {
        let t = self.checkpoint.tensor(&name, shape, self.kind, self.device)?;
        self.named.push((name, t.shallow_clone()));
        Ok(t)
    }

    /// `{prefix}.weight` [out, inp], and `{prefix}.bias` [out] when `bias`.
    pub fn linear(&mut self, prefix: &str, out: i64, inp: i64, bias: bool) -> Result<Linear> {
        let weight = self.take(format!("{prefix}.weight"), &[out, inp])?;
        let bias = if bias { Some(self.take(format!("{prefix}.bias"), &[out])?) } else { None };
        Ok(Linear { weight, bias, conv1d: false })
    }

    /// GPT-2's `Conv1D`: `{prefix}.weight` [inp, out] and `{prefix}.bias` [out].
    pub fn conv1d(&mut self, prefix: &str, inp: i64, out: i64) -> Result<Linear> {
        let weight = self.take(format!("{prefix}.weight"), &[inp, out])?;
        let bias = Some(self.take(format!("{prefix}.bias"), &[out])?);
        Ok(Linear { weight, bias, conv1d: true })
    }

    /// `{prefix}.weight` and `{prefix}.bias` [d]; older BERT checkpoints name them `gamma` and
    /// `beta` (transformers renames them on load).
    pub fn layer_norm(&mut self, prefix: &str, d: i64, eps: f64) -> Result<LayerNorm> {
        let old = self.checkpoint.has(&format!("{prefix}.gamma")) && !self.checkpoint.has(&format!("{prefix}.weight"));
        let (w, b) = if old { ("gamma", "beta") } else { ("weight", "bias") };
        let weight = self.take(format!("{prefix}.{w}"), &[d])?;
        let bias = self.take(format!("{prefix}.{b}"), &[d])?;
        Ok(LayerNorm { weight, bias, eps })
    }
}

/// `tokens[ids] + positions[0..S]` [B, S, hidden] for token ids `ids` int64 [B, S], the two
/// tables [rows, hidden]; `what` names the position table's size as `config.json` does (`GPT-2's
/// n_positions`), for the refusal.
///
/// # Errors
/// `"{S} tokens but {what} is {rows}: set data.input_shape = [{rows}] or less"` for a sequence
/// past the position table; libtorch's for ids out of the vocabulary.
pub fn embed_with_positions(tokens: &Tensor, positions: &Tensor, ids: &Tensor, what: &str) -> Result<Tensor, TchError> {
    let (seq, rows) = (ids.size()[1], positions.size()[0]);
    if seq > rows {
        return Err(TchError::Torch(format!(
            "{seq} tokens but {what} is {rows}: set data.input_shape = [{rows}] or less"
        )));
    }
    let at = Tensor::arange(seq, (Kind::Int64, ids.device()));
    Ok(Tensor::f_embedding(tokens, ids, -1, false, false)? + Tensor::f_embedding(positions, &at, -1, false, false)?)
}

/// Eager multi-head attention of `q`, `k`, `v` [B, S, hidden] in `heads` heads of
/// `hidden / heads`: `softmax(q k^T * scale) v` per head, the scores of the keys `blocked`
/// (bool, broadcast to [B, heads, S, S]) set to the kind's [`lowest`] first, the softmax computed
/// in fp32 and cast back to `q`'s kind, as transformers' eager attention does; the heads joined
/// again, [B, S, hidden].
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, heads: i64, scale: f64, blocked: Option<&Tensor>) -> Tensor {
    let kind = q.kind();
    let d_head = q.size().last().copied().unwrap_or(0) / heads;
    let split = |t: &Tensor| t.unflatten(-1, [heads, d_head]).transpose(1, 2);
    let mut scores = split(q).matmul(&split(k).transpose(-2, -1)) * scale;
    if let Some(b) = blocked {
        scores = scores.masked_fill(b, lowest(kind));
    }
    let p = scores.softmax(-1, Kind::Float).to_kind(kind);
    p.matmul(&split(v)).transpose(1, 2).flatten(2, -1)
}

/// The two-layer feed-forward `fc2(act(fc1(x)))`, `x` [..., hidden] to [..., hidden].
pub fn feed_forward(fc1: &Linear, act: Act, fc2: &Linear, x: &Tensor) -> Tensor {
    fc2.forward(&act.forward(&fc1.forward(x)))
}

/// `torch.finfo(kind).min`: what transformers' masks add to a hidden key's score.
pub fn lowest(kind: Kind) -> f64 {
    match kind {
        Kind::Half => -65504.0,
        Kind::BFloat16 => -3.389_531_389_251_535_5e38,
        _ => f64::from(f32::MIN),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conv1d_multiplies_by_its_weight_untransposed() {
        // x [1, 2] = [1, 2]; W [2, 3] = [[1, 2, 3], [4, 5, 6]]; b = [0.5, 0, -1]
        let w = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).reshape([2, 3]);
        let b = Tensor::from_slice(&[0.5f32, 0.0, -1.0]);
        let conv = Linear { weight: w.shallow_clone(), bias: Some(b.shallow_clone()), conv1d: true };
        let y = conv.forward(&Tensor::from_slice(&[1.0f32, 2.0]).reshape([1, 2]));
        assert_eq!(Vec::<f32>::try_from(y.flatten(0, -1)).unwrap(), [9.5, 12.0, 14.0]);
        let linear = Linear { weight: w.tr(), bias: Some(b), conv1d: false };
        let y2 = linear.forward(&Tensor::from_slice(&[1.0f32, 2.0]).reshape([1, 2]));
        assert_eq!(Vec::<f32>::try_from(y2.flatten(0, -1)).unwrap(), [9.5, 12.0, 14.0]);
    }

    #[test]
    fn attention_averages_the_values_its_keys_allow() {
        // one head of width 1, q = k = 0 everywhere: every allowed key scores alike, so each
        // query takes the mean of the values it sees; v = [1, 2, 3], key 2 hidden from all
        let zeros = Tensor::zeros([1, 3, 1], (Kind::Float, Device::Cpu));
        let v = Tensor::from_slice(&[1.0f32, 2.0, 3.0]).reshape([1, 3, 1]);
        let blocked = Tensor::from_slice(&[false, false, true]).reshape([1, 1, 1, 3]);
        let out = attention(&zeros, &zeros, &v, 1, 1.0, Some(&blocked));
        assert_eq!(Vec::<f32>::try_from(out.flatten(0, -1)).unwrap(), [1.5, 1.5, 1.5]);
        let all = Vec::<f32>::try_from(attention(&zeros, &zeros, &v, 1, 1.0, None).flatten(0, -1)).unwrap();
        assert!(all.iter().all(|x| (x - 2.0).abs() < 1e-6), "{all:?}");
    }

    #[test]
    fn a_sequence_past_the_position_table_is_refused_naming_the_shape_to_set() {
        let table = Tensor::zeros([4, 2], (Kind::Float, Device::Cpu));
        let ids = Tensor::zeros([1, 5], (Kind::Int64, Device::Cpu));
        let err = embed_with_positions(&table, &table, &ids, "GPT-2's n_positions").unwrap_err().to_string();
        assert!(err.contains("5 tokens but GPT-2's n_positions is 4: set data.input_shape = [4] or less"), "{err}");
        let fits = embed_with_positions(&table, &table, &ids.narrow(1, 0, 4), "n").unwrap();
        assert_eq!(fits.size(), [1, 4, 2]);
    }

    #[test]
    fn the_activations_are_transformers_by_name() {
        let x = Tensor::from_slice(&[1.0f64]);
        // gelu(1) = Phi(1) = 0.841344746; tanh form: 0.5 (1 + tanh(0.7978845608 * 1.044715)) = 0.841191990
        let exact = Act::from_name("gelu").unwrap().forward(&x).double_value(&[0]);
        let tanh = Act::from_name("gelu_new").unwrap().forward(&x).double_value(&[0]);
        assert!((exact - 0.841_344_746).abs() < 1e-9, "{exact}");
        assert!((tanh - 0.841_191_990).abs() < 1e-9, "{tanh}");
        assert_eq!(Act::from_name("gelu_pytorch_tanh"), Some(Act::GeluTanh));
        assert_eq!(Act::from_name("swish"), None);
    }
}
