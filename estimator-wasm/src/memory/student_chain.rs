//! The student priced along its forward chain ([`Forward`]) and compiled into one
//! [`LayerPlan`] per layer: each saved storage is attributed to the first layer that saves it
//! (a storage saved by several layers is freed after the backward of that first layer, so the
//! attribution is also its lifetime); checkpoint segments (`arch::checkpoint_segments`, the
//! trainer's definition) keep their inputs; and the live sets of the forward and of the no-grad
//! forward are listed per layer.
use std::ops::Range;

use crate::memory::compiled::LayerPlan;
use crate::memory::errors::EstimateError;
use crate::memory::layer;
use crate::memory::sizes::{Chain, Ctx, Priced, Save, Size, StorageId};
use crate::memory::states::ModelStates;
use crate::schema::arch::{self, numel, Layer, Op};
use crate::schema::dtype::DType;
use crate::schema::{Checkpointing, Config, Family};

/// The student's layers priced one after the other along the forward chain.
pub(crate) struct Forward {
    pub layers: Vec<Layer>,
    pub priced: Vec<Priced>,
    /// The chain tensor entering each layer.
    pub inputs_of: Vec<Chain>,
    /// The input batch (storage 0): token ids for a transformer, else the normalised input.
    pub x0: Chain,
    /// The last layer's output.
    pub logits: Chain,
    /// Elements of one input sample.
    pub input_elems: u64,
    pub transformer: bool,
    /// The last storage id handed out.
    pub next_id: StorageId,
    /// A language model's head run inside its loss: fused with it (`kd.fused_head`: the last
    /// layer saves nothing, `crate::memory::fused_loss`) or in chunks of positions
    /// (`kd.loss_chunk`: it saves its input); either way it makes no whole logits in the
    /// training step.
    pub fused_head: bool,
}

impl Forward {
    /// Expands `config`'s student into layers and prices them under `ctx`.
    ///
    /// # Errors
    /// [`EstimateError::Spec`] from the expansion; [`EstimateError::Invalid`] on the key that
    /// sizes a layer past 2^64 bytes; [`EstimateError::Overflow`] on the input size.
    pub(crate) fn price(config: &Config, ctx: &Ctx) -> Result<Forward, EstimateError> {
        let layers = arch::layers(&config.student, &config.data)?;
        let transformer = config.student.family == Family::Transformer;
        let input_elems = numel(&config.data.input_shape).ok_or_else(|| EstimateError::overflow("the input size"))?;
        let x0 = Chain {
            id: 0,
            elems: input_elems,
            dtype: if transformer { DType::I64 } else { ctx.recipe.weight },
            requires_grad: false,
        };
        let mut next_id: StorageId = 0;
        let mut chain = x0;
        let mut priced: Vec<Priced> = Vec::with_capacity(layers.len());
        let mut inputs_of: Vec<Chain> = Vec::with_capacity(layers.len());
        for l in &layers {
            let p = price(l, chain, &mut next_id, ctx).map_err(|e| layer_error(e, sizing_key("student", &l.id), l))?;
            inputs_of.push(chain);
            chain = p.output;
            priced.push(p);
        }
        // a language model's head run inside its loss, fused with it or a chunk of positions at
        // a time (distill's `chunked_loss.rs`: the head runs on each chunk of the final hidden
        // states, whose storage it keeps as its saved input): its [B, S, V] logits and their
        // gradient never exist whole, the loss prices a chunk's (`crate::memory::step_tensors`)
        let seq = config.data.input_shape.first().copied().unwrap_or(0);
        let chunked = !config.kd.fused_head && config.kd.loss_chunk > 0 && config.kd.loss_chunk < seq;
        let fused_head = (config.kd.fused_head || chunked) && config.student.is_language_model();
        if let Some(head) = priced.last_mut().filter(|_| fused_head) {
            // its no-grad forward (evaluation) still makes the whole logits: inference scratch kept
            if !chunked {
                head.saves.clear();
            }
            head.forward_scratch.clear();
            head.backward_scratch.clear();
            head.backward_release.clear();
        }
        // CLS pooling's chain is a view that keeps its storage's elements; as the output, its own
        if let Some(l) = layers.last().filter(|l| l.op == Op::ClsPool) {
            chain.elems = numel(&l.output).ok_or_else(|| EstimateError::overflow("the output size"))?;
        }
        Ok(Forward { layers, priced, inputs_of, x0, logits: chain, input_elems, transformer, next_id, fused_head })
    }

    /// One [`LayerPlan`] per layer, its saved storages attributed within each pipeline stage
    /// of `stage_ranges` (and, with `checkpointing`, within each segment), with the live sets
    /// of its forward; and whether the input batch (storage 0) is among the saved storages.
    /// Model states are left at zero (the stages fill them in).
    ///
    /// # Errors
    /// [`EstimateError::Overflow`] on a size past 2^64 bytes.
    pub(crate) fn layer_plans(
        &self,
        stage_ranges: &[Range<usize>],
        checkpointing: Checkpointing,
    ) -> Result<(Vec<LayerPlan>, bool), EstimateError> {
        let (priced, inputs_of) = (&self.priced, &self.inputs_of);
        let mut plans: Vec<LayerPlan> = self
            .layers
            .iter()
            .zip(priced)
            .map(|(l, pr)| LayerPlan {
                id: l.id.clone(),
                kind: kind_name(&l.op),
                output_shape: l.output.clone(),
                params: pr.params.iter().fold(0u64, |a, t| a.saturating_add(t.elems)),
                states: ModelStates::default(),
                saved: Vec::new(),
                recompute: Vec::new(),
                kept: None,
                forward_live: Vec::new(),
                inference_live: Vec::new(),
                checkpoint_forward_live: Vec::new(),
                segment_start: false,
                backward_scratch: pr.backward_scratch.clone(),
                backward_release: pr.backward_release.clone(),
            })
            .collect();
        let mut seen = Seen::new(self.next_id);
        let mut x0_saved = false;
        for range in stage_ranges {
            // attribution without checkpointing
            x0_saved |= attribute(priced, range.clone(), None, &mut plans, |lp| &mut lp.saved, &mut seen);
            if let Some(segments) = arch::checkpoint_segments(range.len(), checkpointing) {
                // chain ids grow along the forward: a segment input kept already is the last one
                let mut last_kept: Option<StorageId> = None;
                for seg in segments {
                    let seg = range.start + seg.start..range.start + seg.end;
                    let input = inputs_of[seg.start];
                    plans[seg.start].segment_start = true;
                    if last_kept != Some(input.id) {
                        last_kept = Some(input.id);
                        plans[seg.start].kept = Some(input.size()?);
                    }
                    attribute(priced, seg, Some(input.id), &mut plans, |lp| &mut lp.recompute, &mut seen);
                }
            }
        }
        // live sets during forward and no-grad forward
        let mut saved_so_far = Seen::new(self.next_id);
        for (i, lp) in plans.iter_mut().enumerate() {
            let (x, out) = (inputs_of[i], priced[i].output);
            // a fused head's logits exist in the loss, a chunk at a time (priced there)
            let makes_out = !(self.fused_head && i + 1 == priced.len());
            for s in &priced[i].saves {
                if let Save::Chain(id, _) = s {
                    saved_so_far.insert(*id);
                }
            }
            if x.id != out.id {
                if !saved_so_far.contains(x.id) {
                    lp.forward_live.push(x.size()?);
                }
                if !saves(&priced[i], out.id) && makes_out {
                    lp.forward_live.push(out.size()?);
                }
                lp.inference_live.push(x.size()?);
                lp.inference_live.push(out.size()?);
                if !lp.segment_start {
                    lp.checkpoint_forward_live.push(x.size()?);
                }
                if makes_out {
                    lp.checkpoint_forward_live.push(out.size()?);
                }
            }
            lp.forward_live.extend(priced[i].forward_scratch.iter().copied());
            lp.inference_live.extend(priced[i].inference_scratch.iter().copied());
            lp.checkpoint_forward_live.extend(priced[i].inference_scratch.iter().copied());
        }
        Ok((plans, x0_saved))
    }
}

impl Forward {
    /// Each layer's live set in a no-grad forward as this pricing runs it: its input and output
    /// (when it makes a new tensor) and its inference scratch.
    ///
    /// # Errors
    /// [`EstimateError::Overflow`] on sizes past 2^64 bytes.
    pub(crate) fn inference_lives(&self) -> Result<Vec<Vec<Size>>, EstimateError> {
        let mut lives = Vec::with_capacity(self.priced.len());
        for (p, x) in self.priced.iter().zip(&self.inputs_of) {
            let mut live = Vec::new();
            if x.id != p.output.id {
                live.push(x.size()?);
                live.push(p.output.size()?);
            }
            live.extend(p.inference_scratch.iter().copied());
            lives.push(live);
        }
        Ok(lives)
    }
}

/// [`layer::price`] with the layer's output size checked too (every later per-layer size is
/// then exact).
pub(crate) fn price(l: &Layer, x: Chain, next: &mut StorageId, ctx: &Ctx) -> Result<Priced, EstimateError> {
    let p = layer::price(l, x, next, ctx)?;
    p.output.size()?;
    Ok(p)
}

/// The key of an architecture under `prefix` (`student`, `teacher.arch`) whose entry made
/// layer `id` (`arch`'s ids): `conv{i}*` -> `channels`, `fc{j}*` -> `hidden`, a transformer's
/// `embed*` and `blk{i}*` -> `transformer`, `head` -> `data.classes`; else `data.input_shape`.
pub(crate) fn sizing_key(prefix: &str, id: &str) -> String {
    let list = [("conv", ".channels"), ("fc", ".hidden"), ("blk", ".transformer"), ("embed", ".transformer")];
    match list.iter().find(|(start, _)| id.starts_with(start)) {
        Some((_, k)) => format!("{prefix}{k}"),
        None if id == "head" => "data.classes".to_string(),
        None => "data.input_shape".to_string(),
    }
}

/// An overflow while pricing layer `l` as an error on `key` naming the layer.
pub(crate) fn layer_error(e: EstimateError, key: String, l: &Layer) -> EstimateError {
    let EstimateError::Overflow { .. } = e else { return e };
    let message = format!("layer {} needs more than 16 EiB (2^64 bytes); make it smaller", l.id);
    EstimateError::Invalid { key, message }
}

/// A set of storage ids emptied in constant time: `clear` starts a new generation.
struct Seen {
    stamp: Vec<u32>,
    generation: u32,
}

impl Seen {
    /// An empty set for ids below `ids`.
    fn new(ids: StorageId) -> Seen {
        Seen { stamp: vec![0; ids as usize + 1], generation: 1 }
    }

    fn clear(&mut self) {
        self.generation += 1;
    }

    /// Adds `id`; whether it was not in the set.
    fn insert(&mut self, id: StorageId) -> bool {
        let new = !self.contains(id);
        self.stamp[id as usize] = self.generation;
        new
    }

    fn contains(&self, id: StorageId) -> bool {
        self.stamp[id as usize] == self.generation
    }
}

/// Attributes each saved storage of `range` to the first layer that saves it (`skip`: a
/// storage counted elsewhere), appending to `field`; returns whether the input (storage 0) is
/// among them. `seen` is cleared first.
fn attribute(
    priced: &[Priced],
    range: Range<usize>,
    skip: Option<StorageId>,
    plans: &mut [LayerPlan],
    field: impl Fn(&mut LayerPlan) -> &mut Vec<Size>,
    seen: &mut Seen,
) -> bool {
    seen.clear();
    if let Some(id) = skip {
        seen.insert(id);
    }
    for i in range {
        for s in &priced[i].saves {
            match *s {
                Save::Chain(id, size) => {
                    if seen.insert(id) {
                        field(&mut plans[i]).push(size);
                    }
                }
                Save::Own(size) => field(&mut plans[i]).push(size),
            }
        }
    }
    skip != Some(0) && seen.contains(0)
}

fn saves(p: &Priced, id: StorageId) -> bool {
    p.saves.iter().any(|s| matches!(s, Save::Chain(i, _) if *i == id))
}

/// The `arch::Op` kind as in its JSON tag.
pub(crate) fn kind_name(op: &Op) -> &'static str {
    match op {
        Op::Conv2d { .. } => "conv2d",
        Op::Linear { .. } => "linear",
        Op::BatchNorm { .. } => "batch_norm",
        Op::LayerNorm { .. } => "layer_norm",
        Op::Activation { .. } => "activation",
        Op::Dropout { .. } => "dropout",
        Op::Pool2d { .. } => "pool2d",
        Op::Flatten => "flatten",
        Op::Embedding { .. } => "embedding",
        Op::SelfAttention(_) => "self_attention",
        Op::FeedForward(_) => "feed_forward",
        Op::RmsNorm { .. } => "rms_norm",
        Op::MeanPool => "mean_pool",
        Op::ClsPool => "cls_pool",
        Op::L2Normalize => "l2_normalize",
        Op::LmHead { .. } => "lm_head",
    }
}
