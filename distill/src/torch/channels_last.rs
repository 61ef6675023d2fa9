//! Channels-last strides for 4-D image tensors on the CPU, where libtorch's oneDNN
//! convolutions and the max-pool after them run fastest in that layout.

use tch::Tensor;

/// A copy of `t` [N, C, H, W] with channels-last strides, through autograd (any other rank is
/// returned as it is). Unlike `contiguous(channels_last)`, this also restrides a one-channel
/// tensor, whose NCHW strides libtorch counts as channels-last yet whose convolution it then
/// runs NCHW.
pub fn channels_last(t: &Tensor) -> Tensor {
    let [_, c, h, w] = t.size()[..] else { return t.shallow_clone() };
    let mut out = Tensor::empty_strided(t.size(), [h * w * c, 1, w * c, c], (t.kind(), t.device()));
    out.copy_(t);
    out
}
