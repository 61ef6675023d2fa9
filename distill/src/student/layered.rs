//! The layered student (`family = "mlp"` or `"cnn"`): a sequence of blocks built one per layer
//! of `estimator_wasm::schema::arch::layers`, so its parameter names (`conv1.weight`, `fc1_norm.bias`,
//! `head.weight`, ...) and shapes are exactly the ones the memory estimator prices and the
//! cfg.toml describes. Each layer is one block of [`Network`].
use std::ops::Range;

use estimator_wasm::schema::arch::{self, Layer, Op};
use estimator_wasm::schema::{Activation, Config, Pool};
use tch::nn::{self, Module};
use tch::{Device, Kind, Tensor};

use super::network::Network;
use crate::host::error::{DistillError, Result};
use crate::inputs::data::ModelInput;
use crate::torch::channels_last::channels_last;

/// One built layer: its description and the libtorch module that runs it.
#[derive(Debug)]
pub struct Block {
    pub layer: Layer,
    module: Built,
}

#[derive(Debug)]
enum Built {
    /// A convolution and its zero padding (stride 1).
    Conv(nn::Conv2D, i64),
    Linear(nn::Linear),
    BatchNorm(nn::BatchNorm),
    LayerNorm(nn::LayerNorm),
    Activation(Activation),
    Dropout(f64),
    Pool(Pool),
    Flatten,
}

/// A layered student: the ordered blocks whose variables live under `vs.root()`.
#[derive(Debug)]
pub struct Layered {
    pub blocks: Vec<Block>,
    /// Structured-pruning masks: `unit_masks[i]`, when set, multiplies block `i`'s output
    /// (0/1 per channel or neuron, shaped to broadcast), so pruned units feed exactly zero
    /// downstream and the physically shrunk student computes the same function.
    pub unit_masks: Vec<Option<Tensor>>,
    /// One sample's input shape (`data.input_shape`).
    input_shape: Vec<i64>,
}

impl Layered {
    /// Builds the student that `spec` describes under `root`; one subpath per layer id.
    ///
    /// # Errors
    /// [`DistillError::Usage`] for a layer kind the trainer cannot build.
    pub fn new(root: &nn::Path, spec: &Config) -> Result<Layered> {
        let layers = arch::layers(&spec.student, &spec.data).map_err(|e| DistillError::Usage(e.to_string()))?;
        let blocks = layers.into_iter().map(|layer| build(root, layer)).collect::<Result<Vec<_>>>()?;
        let unit_masks = blocks.iter().map(|_| None).collect();
        let input_shape = spec.data.input_shape.iter().map(|&d| d as i64).collect();
        Ok(Layered { blocks, unit_masks, input_shape })
    }

    /// Index of the block whose layer id is `id`.
    pub fn block_index(&self, id: &str) -> Option<usize> {
        self.blocks.iter().position(|b| b.layer.id == id)
    }
}

impl Network for Layered {
    fn block_count(&self) -> usize {
        self.blocks.len()
    }

    /// Blocks `blocks` on `h`, each block's output multiplied by its unit mask when set; the
    /// attention mask is unused (no layer attends).
    fn forward_blocks(&self, h: &Tensor, blocks: Range<usize>, _mask: Option<&Tensor>, train: bool) -> Tensor {
        let mut h = h.shallow_clone();
        for i in blocks {
            h = self.blocks[i].forward_t(&h, train);
            if let Some(mask) = &self.unit_masks[i] {
                // Out of place: the block may return a tensor autograd saved (ReLU's output, or
                // its input aliased by Dropout at p = 0 and by `pool = "none"`).
                h = &h * mask;
            }
        }
        h
    }

    /// Standard normal floats [batch, ...input_shape] on the CPU.
    fn example_input(&self, batch: i64) -> ModelInput {
        let dims: Vec<i64> = std::iter::once(batch).chain(self.input_shape.iter().copied()).collect();
        ModelInput::new(Tensor::randn(dims.as_slice(), (Kind::Float, Device::Cpu)))
    }

    /// The BatchNorm running statistics (mean, variance) of `blocks`.
    fn running_stats(&self, blocks: Range<usize>) -> Vec<Tensor> {
        self.blocks[blocks]
            .iter()
            .filter_map(|b| match &b.module {
                Built::BatchNorm(bn) => Some([bn.running_mean.shallow_clone(), bn.running_var.shallow_clone()]),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// Trainable parameter elements (weights and biases; BatchNorm running statistics excluded).
    fn params(&self) -> u64 {
        self.blocks.iter().map(|b| b.layer.op.params()).sum()
    }

    /// The block of the layer id that prefixes `name` (`conv1.weight` -> block `conv1`).
    fn block_of(&self, name: &str) -> Option<usize> {
        self.block_index(name.split('.').next().unwrap_or(name))
    }
}

impl Block {
    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        match &self.module {
            Built::Conv(m, padding) => convolve(m, *padding, x),
            Built::Linear(m) => m.forward(x),
            Built::BatchNorm(m) => batch_norm(m, x, train),
            Built::LayerNorm(m) => m.forward(x),
            Built::Activation(f) => activate(*f, x),
            Built::Dropout(p) => x.dropout(*p, train),
            Built::Pool(Pool::Max) => x.max_pool2d_default(2),
            Built::Pool(Pool::Avg) => x.avg_pool2d_default(2),
            Built::Pool(Pool::None) => x.shallow_clone(),
            Built::Flatten => x.flatten(1, -1),
        }
    }
}

/// A stride-1 convolution of `x` [B, C, H, W]. On the CPU its weight is laid out channels-last
/// (NHWC in memory), which makes libtorch run it, and write its output, channels-last, and so the
/// BatchNorm, activation and pooling that follow, up to the `flatten` (which copies back to
/// [B, C*H*W] order): PyTorch's CPU max-pool and BatchNorm kernels are vectorised over channels
/// only in that layout (its NCHW max-pool walks each plane element by element: a quarter of the
/// default student's step; a BatchNorm of few channels is the exception, see [`batch_norm`]).
/// The values are the same; the parameter stays NCHW (its gradient comes
/// back through the copy, a few KB).
fn convolve(m: &nn::Conv2D, padding: i64, x: &Tensor) -> Tensor {
    let w = match x.device() {
        Device::Cpu => channels_last(&m.ws),
        _ => m.ws.shallow_clone(),
    };
    x.conv2d(&w, m.bs.as_ref(), [1, 1], [padding, padding], [1, 1], 1)
}

/// Fewest channels for which the CPU BatchNorm runs channels-last: below it, libtorch's
/// channels-last kernels (vectorised over channels) are slower than its NCHW ones (vectorised over
/// each plane). On 2 cores of an AMD EPYC, torch 2.11, forward + backward of BatchNorm2d: at
/// [128, 8, 28, 28] 2.96 ms channels-last against 0.95 ms NCHW; at [128, 16, 14, 14] 0.31 against
/// 0.43 ms. (The max-pool after it stays channels-last: 0.47 against 1.86 ms at the first size.)
const CHANNELS_LAST_BATCH_NORM_MIN_CHANNELS: i64 = 16;

/// BatchNorm of `x` ([B, F] or [B, C, H, W]); a channels-last image batch with fewer than
/// [`CHANNELS_LAST_BATCH_NORM_MIN_CHANNELS`] channels on the CPU is normalised in NCHW and its
/// output restrided channels-last for the pooling that follows (the same values up to the
/// reduction order). The default Fashion-MNIST student's first block (8 channels, BatchNorm,
/// ReLU, max-pool at [128, 8, 28, 28]), forward + backward in fp32: 3.85 against 4.35 ms; its
/// whole training step ~14% shorter (7.3 against 8.5 s over 3 epochs under `perf record`). In
/// training two views that cancel out hand BatchNorm's backward an NCHW gradient: the
/// channels-last one that the restriding returns sent libtorch to its serial per-channel
/// fallback (28% of a bf16 training profile; BENCHMARKS.md, "Training throughput", has the
/// figures before and after).
fn batch_norm(m: &nn::BatchNorm, x: &Tensor, train: bool) -> Tensor {
    let small = x.dim() == 4 && x.size()[1] < CHANNELS_LAST_BATCH_NORM_MIN_CHANNELS;
    if small && x.device() == Device::Cpu && !x.is_contiguous() {
        // through a permute, not `channels_last`'s `empty_strided`: the export traces this
        // forward, and a traced `empty_strided` keeps the tracing batch's size
        let y = crate::data_parallel::sync_batch_norm::forward_t(m, &x.contiguous(), train);
        let y = if train && y.requires_grad() {
            // two views that cancel out: the backward of the second reshapes the channels-last
            // gradient to [N, C*H*W], which takes a contiguous copy, so BatchNorm's backward
            // gets its input and gradient in one layout (libtorch's vectorised kernel), not a
            // channels-last gradient (its serial per-channel fallback)
            let chw = y.size()[1..].to_vec();
            y.flatten(1, -1).unflatten(1, chw.as_slice())
        } else {
            y
        };
        y.permute([0, 2, 3, 1]).contiguous().permute([0, 3, 1, 2])
    } else {
        crate::data_parallel::sync_batch_norm::forward_t(m, x, train)
    }
}

/// The element-wise non-linearity, with PyTorch's defaults (exact GELU, LeakyReLU slope 0.01).
pub fn activate(f: Activation, x: &Tensor) -> Tensor {
    match f {
        Activation::Relu => x.relu(),
        Activation::Gelu => x.gelu("none"),
        Activation::Silu => x.silu(),
        Activation::Tanh => x.tanh(),
        Activation::Sigmoid => x.sigmoid(),
        Activation::LeakyRelu => x.leaky_relu(),
    }
}

fn build(root: &nn::Path, layer: Layer) -> Result<Block> {
    let p = root / layer.id.as_str();
    let module = match layer.op {
        Op::Conv2d { in_channels, out_channels, kernel, bias } => {
            let cfg = nn::ConvConfig { padding: (kernel / 2) as i64, bias, ..Default::default() };
            Built::Conv(nn::conv2d(&p, in_channels as i64, out_channels as i64, kernel as i64, cfg), cfg.padding)
        }
        Op::Linear { in_features, out_features } => {
            Built::Linear(nn::linear(&p, in_features as i64, out_features as i64, Default::default()))
        }
        Op::BatchNorm { features } => {
            // PyTorch initialises the affine weight to ones (tch's default is uniform).
            let cfg = nn::BatchNormConfig { ws_init: nn::Init::Const(1.0), ..Default::default() };
            let bn = if layer.input.len() == 3 {
                nn::batch_norm2d(&p, features as i64, cfg)
            } else {
                nn::batch_norm1d(&p, features as i64, cfg)
            };
            Built::BatchNorm(bn)
        }
        Op::LayerNorm { features } => Built::LayerNorm(nn::layer_norm(&p, vec![features as i64], Default::default())),
        Op::Activation { function } => Built::Activation(function),
        Op::Dropout { p } => Built::Dropout(p),
        Op::Pool2d { pool } => Built::Pool(pool),
        Op::Flatten => Built::Flatten,
        #[allow(unreachable_patterns)]
        other => {
            return Err(DistillError::Usage(format!(
                "layer {} ({other:?}) can be planned but not trained by distill",
                layer.id
            )))
        }
    };
    Ok(Block { layer, module })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU convolution runs channels-last from a one-input-channel image onwards (its output
    /// has NHWC strides), gives NCHW's values, and its weight's gradient stays NCHW-shaped.
    #[test]
    fn cpu_convolutions_run_channels_last_with_the_same_values() {
        let _guard = crate::torch::test_rng::lock();
        tch::manual_seed(2);
        let vs = nn::VarStore::new(Device::Cpu);
        let cfg = nn::ConvConfig { padding: 1, bias: false, ..Default::default() };
        let (first, second) = (nn::conv2d(vs.root() / "a", 1, 4, 3, cfg), nn::conv2d(vs.root() / "b", 4, 6, 3, cfg));
        let x = Tensor::randn([2, 1, 7, 7], (Kind::Float, Device::Cpu));
        let h = convolve(&first, 1, &x);
        assert_eq!(h.stride(), [196, 1, 28, 4], "NHWC strides after a 1-channel input");
        let y = convolve(&second, 1, &h);
        assert_eq!(y.stride(), [294, 1, 42, 6]);
        let reference = second.forward(&first.forward(&x));
        assert_eq!(reference.stride(), [294, 49, 7, 1], "tch's own convolution runs NCHW");
        let diff = (&y - &reference).abs().max().double_value(&[]);
        assert!(diff < 1e-5, "channels-last differs from NCHW by {diff}");
        let grads = Tensor::run_backward(&[y.sum(Kind::Float)], &[&first.ws, &second.ws], false, false);
        let want = Tensor::run_backward(&[reference.sum(Kind::Float)], &[&first.ws, &second.ws], false, false);
        for (g, w) in grads.iter().zip(&want) {
            assert_eq!(g.size(), w.size());
            assert!((g - w).abs().max().double_value(&[]) < 1e-4);
        }
    }

    /// A few-channel image batch is normalised in NCHW and handed on channels-last, with the
    /// values and gradients of BatchNorm on the channels-last input itself.
    #[test]
    fn few_channel_batch_norm_runs_nchw_and_returns_channels_last() {
        let _guard = crate::torch::test_rng::lock();
        tch::manual_seed(3);
        let vs = nn::VarStore::new(Device::Cpu);
        let bn = nn::batch_norm2d(vs.root() / "n", 4, Default::default());
        let x = channels_last(&(Tensor::randn([3, 4, 5, 5], (Kind::Float, Device::Cpu)) * 2.0 + 1.0));
        let x = x.detach().set_requires_grad(true);
        let y = batch_norm(&bn, &x, true);
        assert_eq!(y.stride(), [100, 1, 20, 4], "channels-last out");
        let reference = crate::data_parallel::sync_batch_norm::forward_t(&bn, &x, true);
        assert!((&y - &reference).abs().max().double_value(&[]) < 1e-5);
        // training-mode output has zero mean per channel
        let mean = y.mean_dim([0i64, 2, 3].as_slice(), false, Kind::Float).abs().max().double_value(&[]);
        assert!(mean < 1e-5, "{mean}");
        let w = Tensor::randn([3, 4, 5, 5], (Kind::Float, Device::Cpu));
        let g = Tensor::run_backward(&[(&y * &w).sum(Kind::Float)], &[&x], false, false);
        let want = Tensor::run_backward(&[(&reference * &w).sum(Kind::Float)], &[&x], false, false);
        assert!((&g[0] - &want[0]).abs().max().double_value(&[]) < 1e-4);
    }
}
