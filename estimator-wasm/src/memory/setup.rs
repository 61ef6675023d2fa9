//! The settings of an estimate ([`Setup`]: runtime costs, GPU, target, batch) and the context
//! the compilation steps of a [`crate::memory::MemoryModel`] share ([`Compile`]).
use crate::memory::compiled::Setup;
use crate::memory::errors::EstimateError;
use crate::memory::inputs::Inputs;
use crate::memory::runtime::{self, Runtime, MIB};
use crate::memory::sizes::Ctx;
use crate::schema::catalogue::{self, Gpu};
use crate::schema::dtype::Recipe;
use crate::schema::{BatchSize, Config, Precision, Target};

impl Setup {
    /// The runtime costs of `config`'s device (`estimate.target`, `gpu`, reserves) and the
    /// micro-batch the caller or the config fixes.
    ///
    /// # Errors
    /// [`EstimateError::UnknownGpu`] for an `estimate.gpu` not in the catalogue.
    pub(crate) fn of(config: &Config, inputs: &Inputs) -> Result<Setup, EstimateError> {
        let est = &config.estimate;
        let cuda = est.target == Target::Cuda;
        let gpu = match (&inputs.device, &est.gpu) {
            (Some(device), _) => Some(*device),
            (None, Some(name)) => Some(*catalogue::gpu(name)?),
            (None, None) => None,
        };
        let parallel = est.data_parallel > 1 || est.tensor_parallel > 1 || est.pipeline_stages > 1;
        let runtime = Runtime {
            cuda,
            cuda_context: if cuda {
                est.cuda_context_mib
                    .map_or(gpu.map_or(catalogue::DEFAULT_CUDA_CONTEXT, |g| g.cuda_context), |m| m * MIB)
            } else {
                0
            },
            cublas_workspace: if cuda {
                gpu.map_or(catalogue::catalogue()[0].cublas_workspace, |g| g.cublas_workspace)
            } else {
                0
            },
            nccl: if cuda { est.nccl_mib.unwrap_or(if parallel { 512 } else { 0 }) * MIB } else { 0 },
            fragmentation_ppm: if cuda { runtime::ppm(est.fragmentation) } else { 0 },
        };
        let default_batch = match (inputs.batch, config.train.batch_size) {
            (Some(b), _) => Some(b),
            (None, BatchSize::Fixed(b)) => Some(b),
            (None, BatchSize::Auto) => None,
        };
        Ok(Setup {
            runtime,
            gpu,
            target: est.target,
            precision: config.train.precision,
            default_batch,
            eval_batch: config.train.eval_batch_size,
            safety_margin: est.safety_margin,
        })
    }
}

/// What every compilation step reads (the config, the caller's inputs, the runtime, the
/// student's precision recipe) and the notes the steps add to the plan, in order.
pub(crate) struct Compile<'a> {
    pub config: &'a Config,
    pub inputs: &'a Inputs,
    pub runtime: Runtime,
    pub cuda: bool,
    /// What the student's precision means (`train.precision`).
    pub recipe: Recipe,
    /// How the student runs: its recipe, the target and the tensor-parallel degree.
    pub ctx: Ctx,
    pub notes: Vec<String>,
}

impl<'a> Compile<'a> {
    /// The context for `config` on `setup`'s device, starting with the precision notes.
    pub(crate) fn new(config: &'a Config, inputs: &'a Inputs, setup: &Setup) -> Compile<'a> {
        let cuda = setup.runtime.cuda;
        let recipe = Recipe::student(config.train.precision);
        Compile {
            config,
            inputs,
            runtime: setup.runtime,
            cuda,
            recipe,
            ctx: Ctx { recipe, cuda, tp: config.estimate.tensor_parallel, text: config.data.tokenizer.is_some() },
            notes: precision_notes(config, setup.gpu.as_ref(), cuda),
        }
    }
}

/// How the note that prices every text batch at `data.input_shape` begins: a plan given the
/// data's padded widths (`crate::memory::text_widths::plan`) drops it.
pub(crate) const TEXT_AT_INPUT_SHAPE: &str = "text is priced at S = ";

/// Notes on the precision, the family and the target that the plan prices differently from
/// how `distill` trains (or cannot price exactly).
pub(crate) fn precision_notes(config: &Config, gpu: Option<&Gpu>, cuda: bool) -> Vec<String> {
    let mut notes = Vec::new();
    let p = config.train.precision;
    if let Some(why) = crate::schema::untrainable(config) {
        notes.push(format!("{why} (priced for planning)"));
    }
    let packed = config.student.is_language_model();
    if let (Some(_), Some(s), true) = (&config.data.tokenizer, config.data.input_shape.first(), packed) {
        notes.push(format!(
            "a language model's text is packed into full windows of S = {s} tokens; its teacher runs on every batch"
        ));
    } else if let (Some(_), Some(s)) = (&config.data.tokenizer, config.data.input_shape.first()) {
        notes.push(format!(
            "{TEXT_AT_INPUT_SHAPE}{s} tokens (data.input_shape); distill pads each batch to its longest \
             sentence, so most batches are shorter and need less"
        ));
    }
    if let Some(g) = gpu {
        let bf16 = matches!(p, Precision::Bf16 | Precision::PureBf16 | Precision::Bf16Master)
            || matches!(config.teacher.precision, Precision::Bf16 | Precision::PureBf16 | Precision::Bf16Master);
        if bf16 && !g.bf16 {
            notes.push(format!("{} has no native bfloat16: bf16 runs emulated or fails; prefer fp16", g.name));
        }
        if !cuda {
            notes.push("target = \"cpu\": the GPU is ignored (no allocator, context or cuBLAS workspace)".into());
        }
    }
    if let Some(t) = &config.student.transformer {
        if !cuda && t.attention == crate::schema::AttentionKernel::Flash && t.attention_dropout > 0.0 {
            notes.push("on CPU, SDPA with attention dropout runs the math kernel in fp32 (priced as such)".into());
        }
    }
    if config.estimate.zero_stage > 0 && config.estimate.data_parallel > 1 {
        notes.push("ZeRO communication buckets (DeepSpeed reduce/allgather buckets) are not priced".into());
    }
    notes
}
