//! Builds the [`Priced`] of one layer: fresh chain storages, saved tensors, parameters, cast
//! copies and temporaries, with the dtype rules of the target (see `crate::memory::layer`).
use crate::memory::errors::EstimateError;
use crate::memory::sizes::{fixed, mul, per, Chain, Ctx, ParamTensor, Priced, Save, Size, StorageId};
use crate::schema::dtype::DType;
use crate::schema::NormKind;

/// One layer being priced: its context, the next free storage id and what is priced so far.
pub(crate) struct Builder<'a> {
    pub ctx: &'a Ctx,
    pub next_id: &'a mut StorageId,
    pub p: Priced,
}

impl Builder<'_> {
    pub(crate) fn fresh(&mut self, elems: u64, dtype: DType, requires_grad: bool) -> Chain {
        *self.next_id += 1;
        Chain { id: *self.next_id, elems, dtype, requires_grad }
    }

    pub(crate) fn save_chain(&mut self, t: &Chain) -> Result<(), EstimateError> {
        self.p.saves.push(Save::Chain(t.id, t.size()?));
        Ok(())
    }

    pub(crate) fn save(&mut self, s: Size) {
        if s != Size::default() {
            self.p.saves.push(Save::Own(s));
        }
    }

    /// Saves a fresh tensor that the block's backward frees before its largest moment.
    pub(crate) fn save_released(&mut self, s: Size) {
        if s != Size::default() {
            self.p.saves.push(Save::Own(s));
            self.p.backward_release.push(s);
        }
    }

    /// Saves `x` as `to`: the storage itself, or a fresh cast copy.
    pub(crate) fn save_as(&mut self, x: &Chain, to: DType) -> Result<(), EstimateError> {
        if x.dtype == to {
            self.save_chain(x)
        } else {
            self.save(per(x.elems, to)?);
            Ok(())
        }
    }

    /// A parameter of `elems` (all ranks), as `role` says tensor parallelism, autocast and
    /// pruning treat it.
    pub(crate) fn param(&mut self, name: &'static str, elems: u64, role: ParamRole) {
        let ParamRole { split, autocast, prunable } = role;
        let elems = if split { elems.div_ceil(self.ctx.tp) } else { elems };
        self.p.params.push(ParamTensor { name, elems, autocast, prunable });
    }

    /// A matmul's or convolution's parameters and their autocast copies: the weight copy saved
    /// for backward when `w.weight_saved`, else only in the cast cache; the bias copy only in
    /// the cast cache. Tensor parallelism splits the weight, and the bias of a column-parallel
    /// layer (Shoeybi et al. 2019, arXiv:1909.08053, section 3).
    pub(crate) fn weights(&mut self, w: &Weights) -> Result<(), EstimateError> {
        let tp = self.ctx.tp;
        self.weight_copy(w.weight_elems.div_ceil(tp), w.weight_saved)?;
        if let Some(name) = w.weight {
            self.param(name, w.weight_elems, ParamRole::WEIGHT);
        }
        if let Some((name, elems)) = w.bias {
            match w.parallel {
                Parallel::Column => {
                    self.param(name, elems, ParamRole::SPLIT_BIAS);
                    self.bias_copy(elems.div_ceil(tp))?;
                }
                Parallel::Row => {
                    self.param(name, elems, ParamRole::REPLICATED_BIAS);
                    self.bias_copy(elems)?;
                }
            }
        }
        Ok(())
    }

    /// The dtype a matmul or convolution computes in for an input of `dtype`.
    pub(crate) fn mm_dtype(&self, dtype: DType) -> DType {
        if self.ctx.recipe.autocast {
            self.ctx.recipe.compute
        } else {
            dtype
        }
    }

    /// Autocast copy of a weight of `elems`: saved when `saved`, else only in the cast cache.
    pub(crate) fn weight_copy(&mut self, elems: u64, saved: bool) -> Result<(), EstimateError> {
        if !self.ctx.recipe.autocast {
            return Ok(());
        }
        let copy = fixed(elems, self.ctx.recipe.compute)?;
        if saved {
            self.save(copy);
        } else {
            self.p.cast_cache = self.p.cast_cache.saturating_add(copy.fixed);
        }
        Ok(())
    }

    pub(crate) fn bias_copy(&mut self, elems: u64) -> Result<(), EstimateError> {
        self.weight_copy(elems, false)
    }

    pub(crate) fn scratch(&mut self, which: Scratch, s: Size) {
        if s == Size::default() {
            return;
        }
        match which {
            Scratch::Forward => self.p.forward_scratch.push(s),
            Scratch::Backward => self.p.backward_scratch.push(s),
            Scratch::Inference => self.p.inference_scratch.push(s),
        }
    }

    /// Dtype of norm statistics (mean, rstd): fp32 on CUDA, the weight dtype on CPU.
    pub(crate) fn stat_dtype(&self) -> DType {
        if self.ctx.cuda {
            DType::F32
        } else {
            self.ctx.recipe.weight
        }
    }

    /// Element bytes of a dropout mask over a tensor of `dtype`.
    pub(crate) fn mask_dtype(&self, dtype: DType) -> DType {
        if self.ctx.cuda {
            DType::Bool
        } else {
            dtype
        }
    }

    /// A LayerNorm or RMSNorm over the last `features` of `x`; returns its output.
    pub(crate) fn norm(&mut self, kind: NormKind, x: &Chain, features: u64) -> Result<Chain, EstimateError> {
        let rows = x.elems / features.max(1);
        let cuda_fp32 = self.ctx.cuda && self.ctx.recipe.autocast;
        let out_dtype = if cuda_fp32 { DType::F32 } else { x.dtype };
        match (kind, self.ctx.cuda) {
            (NormKind::Layer, _) => {
                if cuda_fp32 {
                    self.save_as(x, DType::F32)?;
                } else {
                    self.save_chain(x)?;
                }
                let stats = if cuda_fp32 { DType::F32 } else { self.stat_dtype() };
                self.save(per(mul(rows, 2)?, stats)?);
            }
            // CPU `nn.RMSNorm` (2.11) is composite and upcasts: input as fp32, rstd, normalized x.
            (NormKind::Rms, false) => {
                self.save_as(x, DType::F32)?;
                self.save(per(x.elems, DType::F32)?);
                self.save(per(rows, DType::F32)?);
            }
            // CUDA `_fused_rms_norm`: input (fp32 under autocast) and rstd [derived].
            (NormKind::Rms, true) => {
                if cuda_fp32 {
                    self.save_as(x, DType::F32)?;
                } else {
                    self.save_chain(x)?;
                }
                self.save(per(rows, DType::F32)?);
            }
        }
        Ok(self.fresh(x.elems, out_dtype, x.requires_grad))
    }

    /// A dropout on a tensor of `elems` of `dtype` (saves its mask).
    pub(crate) fn dropout(&mut self, elems: u64, dtype: DType) -> Result<(), EstimateError> {
        let mask = self.mask_dtype(dtype);
        self.save(per(elems, mask)?);
        Ok(())
    }

    /// The residual-branch dropout of a block, whose mask is freed first in its backward.
    pub(crate) fn block_dropout(&mut self, elems: u64, dtype: DType) -> Result<(), EstimateError> {
        let mask = self.mask_dtype(dtype);
        self.save_released(per(elems, mask)?);
        Ok(())
    }

    pub(crate) fn norm_params(&mut self, kind: NormKind, features: u64) {
        self.param("norm.weight", features, ParamRole::PLAIN);
        if kind == NormKind::Layer {
            self.param("norm.bias", features, ParamRole::PLAIN);
        }
    }
}

/// How tensor parallelism, autocast and pruning treat a parameter.
#[derive(Clone, Copy)]
pub(crate) struct ParamRole {
    /// Split across the tensor-parallel ranks.
    pub split: bool,
    /// Cast to the compute dtype by autocast.
    pub autocast: bool,
    /// Masked by pruning.
    pub prunable: bool,
}

impl ParamRole {
    /// A matmul or convolution weight: split, cast, pruned.
    pub const WEIGHT: ParamRole = ParamRole { split: true, autocast: true, prunable: true };
    /// The bias of a column-parallel matmul or a convolution: split, cast.
    pub const SPLIT_BIAS: ParamRole = ParamRole { split: true, autocast: true, prunable: false };
    /// The bias of a row-parallel matmul: replicated, cast.
    pub const REPLICATED_BIAS: ParamRole = ParamRole { split: false, autocast: true, prunable: false };
    /// The token embedding: split by vocabulary, never cast (a lookup, not a matmul).
    pub const EMBEDDING: ParamRole = ParamRole { split: true, autocast: false, prunable: false };
    /// Norm weights and biases, learned positions: replicated, in the weight dtype.
    pub const PLAIN: ParamRole = ParamRole { split: false, autocast: false, prunable: false };
}

/// How tensor parallelism splits a matmul: by output features (column-parallel: weight and bias
/// split) or by input features (row-parallel: the bias replicated).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Parallel {
    Column,
    Row,
}

/// The parameters of one matmul or convolution, for [`Builder::weights`].
pub(crate) struct Weights {
    /// The weight's name; `None` when it is tied to the embedding (no parameter of its own, but
    /// still an autocast copy).
    pub weight: Option<&'static str>,
    /// Weight elements on all ranks (`out * in`, times the kernel area for a convolution).
    pub weight_elems: u64,
    /// The bias's name and elements (`out`), if the layer has one.
    pub bias: Option<(&'static str, u64)>,
    pub parallel: Parallel,
    /// Whether backward saves the weight's autocast copy (`addmm` saves `mat2` only when its
    /// input requires grad; convolution always), or it lives only in the cast cache.
    pub weight_saved: bool,
}

/// Which temporaries a size joins.
#[derive(Clone, Copy)]
pub(crate) enum Scratch {
    Forward,
    Backward,
    Inference,
}
