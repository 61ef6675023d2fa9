//! Text as the run pads it ([`TextWidths`]): `distill` pads each batch to its longest sentence,
//! so a step holds memory for its batch's rows x width, not for `data.input_shape[0]` tokens per
//! row. A model compiled at each width the run's batches have prices their steps; the
//! evaluation and the teacher's pass come from models compiled at their own widths.
//!
//! Measured on an H200 (2026-12-04): a MiniLM-shaped student at batch 4,096 over 20,000 WordNet
//! sentences (13 tokens on average, 117 at most, `data.input_shape = [128]`) peaked at 29.2 GiB;
//! priced at 4,096 x 128 tokens the plan said 37.2 GiB. Its widest step is the epoch's last,
//! partial batch (3,616 rows of the longest sentences, 117 tokens), 0.81x the tokens.
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

use crate::memory::alloc_trace::Run;
use crate::memory::breakdown::Plan;
use crate::memory::compiled::EvalPlan;
use crate::memory::errors::EstimateError;
use crate::memory::inputs::{Inputs, TextWidths};
use crate::memory::memory_model::MemoryModel;
use crate::memory::runtime::AllocatorPool;
use crate::schema::Config;

/// `config`'s model compiled at training width `width` (tokens), with the evaluation and the
/// teacher's pass priced at the batches `text` gives them (the one of each that holds the most);
/// `inputs.text` is not read.
///
/// # Errors
/// As [`MemoryModel::new`].
pub(crate) fn model_at(
    config: &Config,
    inputs: &Inputs,
    text: &TextWidths,
    width: u64,
) -> Result<MemoryModel, EstimateError> {
    let plain = Inputs { text: None, ..inputs.clone() };
    let compile = |rows: u64, w: u64| {
        let mut c = at_width(config, w);
        c.train.eval_batch_size = rows.max(1);
        MemoryModel::new(&c, &plain)
    };
    let mut model = compile(config.train.eval_batch_size, width)?;
    let eval_b = config.train.eval_batch_size;
    let full = full_width(config);
    let or_full = |pairs: &[(u64, u64)]| if pairs.is_empty() { vec![(eval_b, full)] } else { pairs.to_vec() };
    let cuda = model.setup.runtime.cuda;
    // the pass of `pairs` whose `held` pools need the most segments
    let largest = |pairs: &[(u64, u64)], held: fn(&EvalPlan) -> AllocatorPool| -> Result<EvalPlan, EstimateError> {
        let mut best: Option<(u64, EvalPlan)> = None;
        for (rows, w) in or_full(pairs) {
            let eval = compile(rows.min(eval_b), w)?.eval;
            let bytes = held(&eval).reserved(cuda);
            if best.as_ref().is_none_or(|(b, _)| bytes > *b) {
                best = Some((bytes, eval));
            }
        }
        Ok(best.expect("or_full gives at least one batch").1)
    };
    let evaluation = largest(&text.evaluation, |e| e.live.1.plus(&e.batch))?;
    let teacher_pass = largest(&text.teacher_pass, |e| e.teacher_live.1)?;
    (model.eval.live, model.eval.batch) = (evaluation.live, evaluation.batch);
    model.eval.teacher_live = teacher_pass.teacher_live;
    model.layout = crate::memory::compiled::ScanLayout::of(&model.student, model.teacher.as_ref(), &model.eval);
    Ok(model)
}

/// The plan at micro-batch `b` of a text run whose batches `text` describes: the step of the
/// training shape that needs the most device memory (of `text.train`), reported at micro-batch
/// `b`, with the allocator's replay of the run (of `text.steps` where known: `run_reserved`).
///
/// # Errors
/// As [`MemoryModel::plan`].
pub(crate) fn plan(config: &Config, inputs: &Inputs, text: &TextWidths, b: u64) -> Result<Plan, EstimateError> {
    let full = full_width(config);
    let shapes: Vec<(u64, u64)> = match text.train.is_empty() {
        true => vec![(b, full)],
        false => text.train.clone(),
    };
    let mut best: Option<Plan> = None;
    for &(rows, width) in &shapes {
        let plan = model_at(config, inputs, text, width)?.plan(rows.clamp(1, b))?;
        if best.as_ref().is_none_or(|p| plan.totals.total > p.totals.total) {
            best = Some(plan);
        }
    }
    let mut plan = best.ok_or_else(|| EstimateError::overflow("an empty plan"))?;
    plan.batch = b;
    if !text.train.is_empty() {
        // priced at the data's own widths, not data.input_shape's
        plan.notes.retain(|n| !n.starts_with(crate::memory::setup::TEXT_AT_INPUT_SHAPE));
    }
    // the replay over the run, and at least the blocks any moment of the chosen plan holds
    let most_allocated = plan.peak_allocated();
    // not in the browser build: see `MemoryModel::reserved_replay`
    if !cfg!(target_arch = "wasm32") {
        plan.reserved_replay = run_reserved(config, inputs, text, &shapes, b)?.map(|r| r.max(most_allocated));
    }
    // FLOPs: an upper bound, all `b` rows at the widest batch's width (the batches' own widths
    // vary from step to step)
    plan.flops = model_at(config, inputs, text, widest(config, text))?.flops(b);
    Ok(plan)
}

/// The caching allocator's peak reserved bytes over the run `text` describes at micro-batch
/// `b` (`crate::memory::alloc_trace`), each pass priced at its own width; `None` on the CPU.
/// With the run's steps known (`text.steps`), its first epoch in the trainer's order then the
/// evaluation, once; otherwise each training shape of `shapes` (the batches that can peak) then
/// each evaluation batch, twice. One model is compiled per distinct (evaluation rows, width),
/// however many steps share it: a MiniLM epoch of 313 steps meets about a hundred widths.
///
/// # Errors
/// As [`MemoryModel::new`].
fn run_reserved(
    config: &Config,
    inputs: &Inputs,
    text: &TextWidths,
    shapes: &[(u64, u64)],
    b: u64,
) -> Result<Option<u64>, EstimateError> {
    let plain = Inputs { text: None, ..inputs.clone() };
    let eval_b = config.train.eval_batch_size;
    let full = full_width(config);
    let width = |w: u64| w.clamp(1, full);
    let or_full = |pairs: &[(u64, u64)]| if pairs.is_empty() { vec![(eval_b, full)] } else { pairs.to_vec() };
    let (steps, walks) = match text.steps.is_empty() {
        true => (shapes, 2),
        false => (text.steps.as_slice(), 1),
    };
    // each pass as ((the model's evaluation rows, width), the rows it requests)
    type Keyed = Vec<((u64, u64), u64)>;
    let steps: Keyed = steps.iter().map(|&(rows, w)| ((eval_b, width(w)), rows.clamp(1, b))).collect();
    let pass = |pairs: &[(u64, u64)]| -> Keyed {
        or_full(pairs).into_iter().map(|(rows, w)| ((rows.clamp(1, eval_b), width(w)), rows.clamp(1, eval_b))).collect()
    };
    let (teacher, evaluation) = (pass(&text.teacher_pass), pass(&text.evaluation));
    let mut models: BTreeMap<(u64, u64), MemoryModel> = BTreeMap::new();
    for &(key, _) in steps.iter().chain(&teacher).chain(&evaluation) {
        if let Entry::Vacant(slot) = models.entry(key) {
            let mut c = at_width(config, key.1);
            c.train.eval_batch_size = key.0;
            slot.insert(MemoryModel::new(&c, &plain)?);
        }
    }
    let Some(main) = steps.first().map(|(key, _)| &models[key]) else { return Ok(None) };
    if !main.setup.runtime.cuda {
        return Ok(None);
    }
    let refs = |passes: &Keyed| passes.iter().map(|(key, rows)| (&models[key], *rows)).collect();
    let run = Run { main, teacher_pass: refs(&teacher), steps: refs(&steps), evaluation: refs(&evaluation), walks };
    Ok(Some(run.peak_reserved()))
}

/// The widest training batch `text` has, in tokens (`data.input_shape[0]` without any).
pub(crate) fn widest(config: &Config, text: &TextWidths) -> u64 {
    text.train.iter().map(|&(_, w)| w).max().unwrap_or_else(|| full_width(config))
}

/// `data.input_shape[0]`: the most tokens a row holds.
fn full_width(config: &Config) -> u64 {
    config.data.input_shape.first().copied().unwrap_or(1)
}

/// `config` with its rows `width` tokens wide (at least 1, at most `data.input_shape[0]`), as
/// a text batch padded to `width` is priced (`distill` prices a text run's FLOPs per width
/// with it).
pub fn at_width(config: &Config, width: u64) -> Config {
    let mut c = config.clone();
    let w = width.clamp(1, full_width(config));
    if let Some(s) = c.data.input_shape.first_mut() {
        *s = w;
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::catalogue::gpu;

    fn encoder() -> Config {
        Config::from_toml_str(
            "[data]\ntokenizer = \"t.json\"\ninput_shape = [128]\nclasses = 64\n\
             [teacher]\nparams = 1000000\ncache_logits = false\n\
             [student]\nfamily = \"transformer\"\nactivation = \"gelu\"\n\
             [student.transformer]\nvocab = 1000\nlayers = 2\nd_model = 64\nheads = 4\nmlp_width = 256\n\
             max_positions = 128\nhead = \"embedding\"\npooling = \"mean\"\n\
             [kd]\nobjective = \"embedding_mse\"\nalpha = 1.0\n[train]\nbatch_size = 256\neval_batch_size = 64\n\
             [estimate]\ntarget = \"cuda\"\n",
        )
        .unwrap()
    }

    fn inputs() -> Inputs {
        Inputs { device: Some(*gpu("H200").unwrap()), ..Inputs::default() }
    }

    #[test]
    fn a_step_is_priced_at_its_batch_width_not_the_cfg_width() {
        let c = encoder();
        let full = crate::memory::estimate::estimate(&c, &inputs()).unwrap();
        let text = TextWidths {
            train: vec![(256, 128)],
            teacher_pass: vec![(64, 128)],
            evaluation: vec![(64, 128)],
            ..TextWidths::default()
        };
        let same = plan(&c, &inputs(), &text, 256).unwrap();
        assert_eq!(same.totals, full.totals, "every batch at the full width is the plain plan");
        // a run whose widest batch is 32 tokens: exactly the plan of a cfg 32 tokens wide
        let narrow = TextWidths {
            train: vec![(256, 32)],
            teacher_pass: vec![(64, 32)],
            evaluation: vec![(64, 32)],
            ..TextWidths::default()
        };
        let mut c32 = c.clone();
        c32.data.input_shape = vec![32];
        let expected = crate::memory::estimate::estimate(&c32, &inputs()).unwrap();
        assert_eq!(plan(&c, &inputs(), &narrow, 256).unwrap().totals, expected.totals);
        assert!(expected.totals.allocated < full.totals.allocated);
    }

    #[test]
    fn the_peak_is_the_shape_that_needs_most_and_reports_the_micro_batch() {
        let c = encoder();
        // a partial last batch of long sentences against full batches of short ones
        let text = TextWidths {
            train: vec![(256, 20), (100, 120)],
            teacher_pass: vec![(64, 120)],
            evaluation: vec![(64, 60)],
            steps: Vec::new(),
        };
        let p = plan(&c, &inputs(), &text, 256).unwrap();
        assert_eq!(p.batch, 256);
        let one = |rows, w| plan(&c, &inputs(), &TextWidths { train: vec![(rows, w)], ..text.clone() }, 256).unwrap();
        let (short, long) = (one(256, 20), one(100, 120));
        assert_eq!(p.totals.total, short.totals.total.max(long.totals.total));
        assert!(long.totals.total > short.totals.total);
        // the replayed reserved bytes are the allocator's over the run, which replays both
        // shapes: at least the long batch's allocated bytes
        let replay = p.reserved_replay.expect("a CUDA plan replays the allocator");
        assert!(replay >= long.peak_allocated(), "{replay} < {}", long.peak_allocated());
        assert_eq!(widest(&c, &text), 120);
        assert_eq!(widest(&c, &TextWidths::default()), 128);
        // priced at the data's widths, the plan does not say it priced data.input_shape's
        let input_shape = "text is priced at S = 128 tokens (data.input_shape)";
        assert!(!p.notes.iter().any(|n| n.starts_with(input_shape)), "{:?}", p.notes);
        let unknown = plan(&c, &inputs(), &TextWidths::default(), 256).unwrap();
        assert!(unknown.notes.iter().any(|n| n.starts_with(input_shape)), "{:?}", unknown.notes);
    }

    #[test]
    fn a_known_epoch_is_replayed_step_by_step_in_its_order() {
        let c = encoder();
        let text = |steps: Vec<(u64, u64)>| TextWidths {
            train: vec![(256, 120)],
            teacher_pass: vec![(64, 120)],
            evaluation: vec![(64, 120)],
            steps,
        };
        let replay = |steps| plan(&c, &inputs(), &text(steps), 256).unwrap().reserved_replay.unwrap();
        // widest first: the later steps' blocks fit in those the widest cached (566 MiB; one
        // small-pool segment more, 2 MiB)
        let widest = replay(vec![(256, 120)]);
        let shrinking = replay(vec![(256, 120), (256, 110), (256, 100)]);
        assert_eq!((widest >> 20, shrinking - widest), (566, 2 << 20));
        // widest last: the attention scores of 100 and 110 tokens ([256, 4, w, w] fp32, 39.1 and
        // 47.3 MiB, segments of 40 and 48 MiB) and the steps' other tensors hold segments that
        // the next, wider step cannot use: 860 MiB
        let growing = replay(vec![(256, 100), (256, 110), (256, 120)]);
        assert!(growing >= widest + (88 << 20), "{growing} vs {widest}");
        assert_eq!(growing >> 20, 860);
        // the allocated peak is the frontier's either way
        let p = plan(&c, &inputs(), &text(vec![(256, 100), (256, 110), (256, 120)]), 256).unwrap();
        assert_eq!(p.totals, plan(&c, &inputs(), &text(Vec::new()), 256).unwrap().totals);
    }
}
