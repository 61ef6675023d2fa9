//! What a dataset hands the networks: the model input of a batch ([`ModelInput`]: inputs and,
//! for text, the attention mask) and a batch of examples ([`Batch`]: the input, its labels and
//! the file rows it came from), ready to use (images already normalised).
use tch::{Device, Tensor};

/// The input of a network (student or teacher) for a batch of B samples.
///
/// * images and vectors: `x` normalised floats [B, ...input_shape], `mask` `None`;
/// * text: `x` token ids [B, S] (Int64) and `mask` the attention mask [B, S] (1 = token,
///   0 = padding).
#[derive(Debug)]
pub struct ModelInput {
    pub x: Tensor,
    pub mask: Option<Tensor>,
}

impl ModelInput {
    /// An input without an attention mask (images and vectors).
    pub fn new(x: Tensor) -> ModelInput {
        ModelInput { x, mask: None }
    }

    /// Samples B in the batch.
    pub fn rows(&self) -> i64 {
        self.x.size()[0]
    }

    /// Samples `start..start + len` of the batch (sharing storage).
    pub fn narrow(&self, start: i64, len: i64) -> ModelInput {
        ModelInput { x: self.x.narrow(0, start, len), mask: self.mask.as_ref().map(|m| m.narrow(0, start, len)) }
    }

    /// The same input on `device`.
    pub fn to_device(&self, device: Device) -> ModelInput {
        ModelInput { x: self.x.to_device(device), mask: self.mask.as_ref().map(|m| m.to_device(device)) }
    }

    /// The tensors a TorchScript module takes, in order: `[x]`, or `[x, mask]` for text
    /// (`forward(input_ids, attention_mask)`).
    pub fn tensors(&self) -> Vec<Tensor> {
        std::iter::once(&self.x).chain(&self.mask).map(Tensor::shallow_clone).collect()
    }

    /// The names of [`ModelInput::tensors`] as an exported student's forward takes them:
    /// Hugging Face's `input_ids` and `attention_mask` for token ids, `input` for images and
    /// vectors (as `torch.nn.Module.forward(input)`).
    pub fn names(&self) -> Vec<&'static str> {
        let first = if self.x.kind() == tch::Kind::Int64 { "input_ids" } else { "input" };
        std::iter::once(first).chain(self.mask.as_ref().map(|_| "attention_mask")).collect()
    }

    /// The inverse of [`ModelInput::tensors`] (inside a trace).
    ///
    /// # Panics
    /// When `tensors` is empty.
    pub fn from_tensors(tensors: &[Tensor]) -> ModelInput {
        ModelInput { x: tensors[0].shallow_clone(), mask: tensors.get(1).map(Tensor::shallow_clone) }
    }
}

/// A batch of examples as a dataset returns it.
#[derive(Debug)]
pub struct Batch {
    /// The model input, ready for the networks.
    pub input: ModelInput,
    /// Class labels [B] (Int64); `None` for unlabelled data.
    pub labels: Option<Tensor>,
    /// The dataset's indices of the samples [B] (Int64); `Dataset::file_rows` maps them to the
    /// rows of the data file, only when a message needs them.
    pub index: Tensor,
}
