//! Expansion of a `[student]` spec into the exact layer sequence `distill` builds.
//!
//! Both the trainer (which turns each [`Layer`] into a libtorch module) and the memory estimator
//! (which prices each one) walk this list, so layer ids, parameter names and shapes agree by
//! construction. Parameter names are `<layer id>.<leaf>` with PyTorch's leaves (`weight`,
//! `bias`, `running_mean`, `running_var`).
//!
//! Layout, for a CNN block `i` (1-based): `conv{i}`, `conv{i}_bn`, `conv{i}_act`, `conv{i}_pool`;
//! then `flatten`; for each hidden block `j`: `fc{j}`, `fc{j}_norm`, `fc{j}_act`, `fc{j}_drop`;
//! then `head`. Norm, pool and dropout layers appear only when configured.
use serde::Serialize;

use crate::error::SpecError;
use crate::spec::{Activation, DataSpec, Family, Norm, Pool, StudentSpec};

/// One operation of the student, with its input and output shapes per sample (batch excluded).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Layer {
    /// Unique id; also the prefix of this layer's parameter names.
    pub id: String,
    pub op: Op,
    /// Shape of one input sample, e.g. `[C, H, W]` or `[D]`.
    pub input: Vec<u64>,
    /// Shape of one output sample.
    pub output: Vec<u64>,
}

/// The operation a [`Layer`] performs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Op {
    /// `nn.Conv2d(in, out, kernel, stride=1, padding=kernel/2, bias=bias)`.
    Conv2d { in_channels: u64, out_channels: u64, kernel: u64, bias: bool },
    /// `nn.Linear(in, out, bias=True)`.
    Linear { in_features: u64, out_features: u64 },
    /// `nn.BatchNorm1d/2d(features)`: affine weight and bias plus running statistics.
    BatchNorm { features: u64 },
    /// `nn.LayerNorm(features)`.
    LayerNorm { features: u64 },
    Activation { function: Activation },
    Dropout { p: f64 },
    /// 2x2 pooling with stride 2 (`max` or `avg`), flooring odd sizes as PyTorch does.
    Pool2d { pool: Pool },
    /// `[C, H, W]` to `[C * H * W]`.
    Flatten,
}

impl Op {
    /// Trainable parameters (weights and biases), in elements.
    pub fn params(&self) -> u64 {
        match *self {
            Op::Conv2d { in_channels, out_channels, kernel, bias } => {
                out_channels * in_channels * kernel * kernel + if bias { out_channels } else { 0 }
            }
            Op::Linear { in_features, out_features } => out_features * in_features + out_features,
            Op::BatchNorm { features } | Op::LayerNorm { features } => 2 * features,
            _ => 0,
        }
    }

    /// Non-trainable buffers (BatchNorm running mean and variance), in elements.
    pub fn buffers(&self) -> u64 {
        match *self {
            Op::BatchNorm { features } => 2 * features,
            _ => 0,
        }
    }

    /// Parameter names and shapes, in the order `distill` creates and exports them.
    pub fn param_shapes(&self) -> Vec<(&'static str, Vec<u64>)> {
        match *self {
            Op::Conv2d { in_channels, out_channels, kernel, bias } => {
                let mut v = vec![("weight", vec![out_channels, in_channels, kernel, kernel])];
                if bias {
                    v.push(("bias", vec![out_channels]));
                }
                v
            }
            Op::Linear { in_features, out_features } => {
                vec![("weight", vec![out_features, in_features]), ("bias", vec![out_features])]
            }
            Op::BatchNorm { features } | Op::LayerNorm { features } => {
                vec![("weight", vec![features]), ("bias", vec![features])]
            }
            _ => Vec::new(),
        }
    }
}

/// Expands `student` for inputs described by `data` into its layer sequence.
///
/// # Errors
/// [`SpecError::Invalid`] when pooling shrinks a feature map below 1x1 or a size overflows.
pub fn layers(student: &StudentSpec, data: &DataSpec) -> Result<Vec<Layer>, SpecError> {
    let mut b = Builder { layers: Vec::new(), shape: data.input_shape.clone() };
    if student.family == Family::Cnn {
        for (i, &out) in student.channels.iter().enumerate() {
            let id = format!("conv{}", i + 1);
            let in_channels = b.shape[0];
            let bias = student.norm != Norm::Batch;
            let (h, w) = (b.shape[1], b.shape[2]);
            b.push(&id, Op::Conv2d { in_channels, out_channels: out, kernel: student.kernel, bias }, vec![out, h, w]);
            if student.norm == Norm::Batch {
                b.same(&format!("{id}_bn"), Op::BatchNorm { features: out });
            }
            b.same(&format!("{id}_act"), Op::Activation { function: student.activation });
            if student.pool != Pool::None {
                if h < 2 || w < 2 {
                    return Err(SpecError::Invalid {
                        key: "student.channels".into(),
                        message: format!(
                            "block {} pools a {h}x{w} feature map below 1x1; use fewer conv blocks or pool = \"none\"",
                            i + 1
                        ),
                    });
                }
                b.push(&format!("{id}_pool"), Op::Pool2d { pool: student.pool }, vec![out, h / 2, w / 2]);
            }
        }
    }
    if b.shape.len() > 1 {
        let flat = checked_product(&b.shape)?;
        b.push("flatten", Op::Flatten, vec![flat]);
    }
    for (j, &out) in student.hidden.iter().enumerate() {
        let id = format!("fc{}", j + 1);
        b.push(&id, Op::Linear { in_features: b.shape[0], out_features: out }, vec![out]);
        match student.norm {
            Norm::Batch => b.same(&format!("{id}_norm"), Op::BatchNorm { features: out }),
            Norm::Layer => b.same(&format!("{id}_norm"), Op::LayerNorm { features: out }),
            Norm::None => {}
        }
        b.same(&format!("{id}_act"), Op::Activation { function: student.activation });
        if student.dropout > 0.0 {
            b.same(&format!("{id}_drop"), Op::Dropout { p: student.dropout });
        }
    }
    b.push("head", Op::Linear { in_features: b.shape[0], out_features: data.classes }, vec![data.classes]);
    Ok(b.layers)
}

/// Total trainable parameters of a layer list, in elements.
pub fn param_count(layers: &[Layer]) -> u64 {
    layers.iter().map(|l| l.op.params()).sum()
}

struct Builder {
    layers: Vec<Layer>,
    shape: Vec<u64>,
}

impl Builder {
    fn push(&mut self, id: &str, op: Op, output: Vec<u64>) {
        let input = std::mem::replace(&mut self.shape, output.clone());
        self.layers.push(Layer { id: id.to_string(), op, input, output });
    }

    fn same(&mut self, id: &str, op: Op) {
        self.push(id, op, self.shape.clone());
    }
}

fn checked_product(shape: &[u64]) -> Result<u64, SpecError> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)).ok_or_else(|| SpecError::Invalid {
        key: "data.input_shape".into(),
        message: "the flattened input size overflows 64 bits".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Config;

    fn config(student: &str) -> Config {
        Config::from_toml_str(&format!(
            "[data]\ninput_shape = [1, 28, 28]\nclasses = 10\n[student]\n{student}"
        ))
        .unwrap()
    }

    #[test]
    fn cnn_layers_have_pytorch_shapes_and_counts() {
        let c = config("family = \"cnn\"\nchannels = [8, 16]\nhidden = [32]\nnorm = \"batch\"");
        let l = layers(&c.student, &c.data).unwrap();
        let ids: Vec<&str> = l.iter().map(|l| l.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "conv1", "conv1_bn", "conv1_act", "conv1_pool", "conv2", "conv2_bn", "conv2_act",
                "conv2_pool", "flatten", "fc1", "fc1_norm", "fc1_act", "head"
            ]
        );
        assert_eq!(l[8].output, vec![16 * 7 * 7]);
        // conv1 72 (no bias under BN) + bn 16 + conv2 1152 + bn 32 + fc1 784*32+32 + bn 64 + head 330
        assert_eq!(param_count(&l), 72 + 16 + 1152 + 32 + 25_120 + 64 + 330);
    }

    #[test]
    fn mlp_flattens_images_first() {
        let c = config("family = \"mlp\"\nhidden = [100]\ndropout = 0.2\nnorm = \"layer\"");
        let l = layers(&c.student, &c.data).unwrap();
        assert_eq!(l[0].op, Op::Flatten);
        assert_eq!(l[1].op, Op::Linear { in_features: 784, out_features: 100 });
        assert_eq!(l.iter().map(|l| l.id.as_str()).last(), Some("head"));
        assert_eq!(param_count(&l), 78_500 + 200 + 1010);
    }

    #[test]
    fn pooling_below_one_pixel_is_an_error() {
        let e = Config::from_toml_str(
            "[data]\ninput_shape = [1, 4, 4]\nclasses = 2\n[student]\nfamily = \"cnn\"\nchannels = [2, 2, 2]",
        )
        .unwrap_err();
        assert!(e.to_string().contains("student.channels"), "{e}");
    }
}
