//! The sizes the memory model prices: tensors of the forward chain ([`Chain`]), byte counts
//! at any micro-batch ([`Size`]), what a layer saves for backward ([`Save`]), its parameters
//! ([`ParamTensor`]) and everything priced for one layer ([`Priced`]), under a [`Ctx`].
use serde::Serialize;

use crate::memory::errors::EstimateError;
use crate::memory::runtime::AllocatorPool;
use crate::schema::dtype::{DType, Recipe};

/// Identity of one storage of the forward chain.
pub type StorageId = u32;

/// A tensor of the forward chain, per sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chain {
    pub id: StorageId,
    /// Elements per sample.
    pub elems: u64,
    pub dtype: DType,
    pub requires_grad: bool,
}

impl Chain {
    /// Bytes per sample.
    pub fn size(&self) -> Result<Size, EstimateError> {
        Ok(Size::per(mul(self.elems, self.dtype.bytes())?))
    }
}

/// Bytes of one tensor for a micro-batch of `b`: `per_sample * b + fixed`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Size {
    pub per_sample: u64,
    pub fixed: u64,
}

impl Size {
    /// A tensor that grows with the batch.
    pub const fn per(per_sample: u64) -> Size {
        Size { per_sample, fixed: 0 }
    }

    /// A tensor of constant size (weight copies, BatchNorm statistics, position ids).
    pub const fn fixed(fixed: u64) -> Size {
        Size { per_sample: 0, fixed }
    }

    /// Bytes at micro-batch `b`, saturating at `u64::MAX` (see `runtime::AllocatorPool::check`).
    #[inline]
    pub fn at_saturating(&self, b: u64) -> u64 {
        self.per_sample.saturating_mul(b).saturating_add(self.fixed)
    }

    /// Bytes at micro-batch `b`.
    #[inline]
    pub fn at(&self, b: u64) -> Result<u64, EstimateError> {
        self.per_sample.checked_mul(b).and_then(|v| v.checked_add(self.fixed)).ok_or_else(|| {
            EstimateError::overflow(format!("a tensor of {} bytes per sample at batch {b}", self.per_sample))
        })
    }
}

/// One tensor autograd keeps for backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Save {
    /// A storage of the forward chain (shared by every layer that saves it).
    Chain(StorageId, Size),
    /// A storage only this layer saves.
    Own(Size),
}

/// One parameter tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamTensor {
    /// `<leaf>` as in `arch::Op::param_shapes`.
    pub name: &'static str,
    /// Elements on one GPU (after tensor-parallel splitting).
    pub elems: u64,
    /// Cast to the compute dtype by autocast (matmul and convolution weights and biases).
    pub autocast: bool,
    /// A conv or linear weight that magnitude pruning masks.
    pub prunable: bool,
}

/// Everything the estimator needs from one layer.
#[derive(Debug, Clone, PartialEq)]
pub struct Priced {
    pub output: Chain,
    pub saves: Vec<Save>,
    pub params: Vec<ParamTensor>,
    /// Non-trainable buffers, in elements (BatchNorm running statistics).
    pub buffers: u64,
    /// Temporaries alive during this layer's forward besides its input and output.
    pub forward_scratch: Vec<Size>,
    /// Temporaries of its backward: gradients of output and input and internal gradients, at
    /// the backward's largest moment.
    pub backward_scratch: Vec<Size>,
    /// This layer's own saved tensors already freed at that moment (a composite block's backward
    /// releases the saves of the ops it has passed).
    pub backward_release: Vec<Size>,
    /// Temporaries of a no-grad forward besides input and output (the teacher's working set).
    pub inference_scratch: Vec<Size>,
    /// Autocast cast-cache copies of weights that are not also saved for backward, in bytes.
    pub cast_cache: u64,
}

/// How a network runs: its precision recipe, the target and the tensor-parallel degree.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ctx {
    pub recipe: Recipe,
    pub cuda: bool,
    /// Tensor-parallel degree t (1: no splitting).
    pub tp: u64,
    /// Text inputs (`data.tokenizer`): each batch carries an attention mask `[B, S]`, which
    /// masks padded keys and which mean pooling weighs tokens by.
    pub text: bool,
}

pub(crate) fn mul(a: u64, b: u64) -> Result<u64, EstimateError> {
    a.checked_mul(b).ok_or_else(|| EstimateError::overflow("a layer's tensor sizes"))
}

/// Elements per sample times the bytes of `dtype`, as a per-sample [`Size`].
pub(crate) fn per(elems: u64, dtype: DType) -> Result<Size, EstimateError> {
    Ok(Size::per(mul(elems, dtype.bytes())?))
}

/// Elements times the bytes of `dtype`, as a fixed [`Size`].
pub(crate) fn fixed(elems: u64, dtype: DType) -> Result<Size, EstimateError> {
    Ok(Size::fixed(mul(elems, dtype.bytes())?))
}

/// `sizes` at micro-batch `b` allocated as one pool (saturating: see `AllocatorPool::check`).
pub(crate) fn pool_of(sizes: &[Size], b: u64, cuda: bool) -> AllocatorPool {
    let mut p = AllocatorPool::default();
    for s in sizes {
        p.tensor(s.at_saturating(b), cuda);
    }
    p
}

/// The layer whose live set at batch `b` is largest (by reserved memory), and that set.
pub(crate) fn largest_live<'a>(
    layers: impl Iterator<Item = (&'a str, &'a [Size])>,
    b: u64,
    cuda: bool,
) -> (Option<&'a str>, AllocatorPool) {
    let mut best: (Option<&str>, AllocatorPool, u64) = (None, AllocatorPool::default(), 0);
    for (id, sizes) in layers {
        let pool = pool_of(sizes, b, cuda);
        let r = pool.reserved(cuda);
        if best.0.is_none() || r > best.2 {
            best = (Some(id), pool, r);
        }
    }
    (best.0, best.1)
}
