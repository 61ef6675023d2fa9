//! `distill plan`: the memory estimator's breakdown of a run before any training, and the largest
//! micro-batch per catalogue GPU. (Before a run, [`crate::memory_plan`] does the same on the
//! run's device.)
//!
//! `distill` adds to the cfg.toml what only it knows: the teacher's exact parameter count (read
//! from the TorchScript file) and the datasets it keeps on the device (from the .npz headers, or
//! the lines of .txt files).
use std::path::{Path, PathBuf};

use estimator_wasm::schema::{Config, Target};
use estimator_wasm::{
    estimate, max_batch_per_gpu, memory::render::human, DatasetSize, EstimateError, Inputs, Plan, TeacherModel,
    TextWidths,
};
use serde::Serialize;
use tch::Device;

use crate::config::{DataFiles, HeldOut};
use crate::error::{first_line, DistillError, Result};
use crate::memory_plan::{counted_teacher, text_widths, TextLengths};

/// `distill plan` flags.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    pub student: PathBuf,
    /// A TorchScript teacher: its exact parameter count replaces the cfg's `[teacher]` counts.
    pub teacher: Option<PathBuf>,
    /// A catalogue GPU overriding `[estimate] gpu`.
    pub gpu: Option<String>,
    /// Micro-batch overriding `train.batch_size`.
    pub batch: Option<u64>,
    pub json: bool,
    /// `key.path=value` overrides of the cfg.toml.
    pub sets: Vec<String>,
}

/// What `distill plan --json` prints.
#[derive(Serialize)]
struct PlanJson<'a> {
    plan: &'a Plan,
    max_batch: Vec<GpuBatch>,
    /// What the data files told the plan: the datasets' sizes, and for text the widths of the
    /// batches the run will cut.
    data: DataJson<'a>,
}

#[derive(Serialize)]
struct DataJson<'a> {
    dataset: Option<&'a DatasetSize>,
    text: Option<&'a TextWidths>,
}

#[derive(Serialize)]
struct GpuBatch {
    gpu: &'static str,
    memory: u64,
    batch: Option<u64>,
}

/// The text (or JSON) `distill plan` prints.
///
/// # Errors
/// [`DistillError::Config`] naming the cfg.toml when it is unreadable, invalid or cannot be
/// estimated; [`DistillError::Teacher`] for an unreadable teacher file.
pub fn plan(opts: &PlanOptions) -> Result<String> {
    plan_text(opts).map_err(|e| crate::overrides::pin_on_set(e, &opts.student, &opts.sets))
}

/// [`plan`], before its refusals are pinned on the `--set` they come from.
fn plan_text(opts: &PlanOptions) -> Result<String> {
    let path = &opts.student;
    let mut spec = crate::overrides::read_spec(path, &opts.sets)?;
    if let Some(gpu) = &opts.gpu {
        estimator_wasm::gpu(gpu).map_err(|e| DistillError::Usage(format!("--gpu {gpu}: {e}")))?;
        spec.estimate.gpu = Some(gpu.clone());
        spec.estimate.target = Target::Cuda;
    }
    if opts.batch == Some(0) {
        return Err(DistillError::Usage("--batch 0: the micro-batch is at least 1 sample".into()));
    }
    // the data files as the trainer resolves them: no held-out set is refused here too
    // a Hugging Face folder (--teacher DIR, or teacher.hf) is the teacher, its tokenizer the text's
    let teacher = opts.teacher.clone().or_else(|| crate::config::teacher_folder(path, &spec));
    let spec = crate::config::with_teacher_tokenizer(spec, path, teacher.as_deref())?;
    let files = DataFiles::of(path, &spec)?;
    let batch = opts.batch.or(match spec.train.batch_size {
        estimator_wasm::schema::BatchSize::Fixed(b) => Some(b),
        estimator_wasm::schema::BatchSize::Auto => None,
    });
    let inputs = Inputs {
        batch: opts.batch,
        teacher: teacher.as_deref().map(|t| teacher_model(t, &spec)).transpose()?,
        dataset: files.as_ref().and_then(|f| dataset(f, &spec)),
        device: None,
        text: files.as_ref().and_then(|f| text_lengths(f, &spec)).map(|l| text_widths(&l, &spec, batch)),
    };
    let bad = |e: EstimateError| match &e {
        EstimateError::Invalid { key, .. } if key == "teacher" && opts.teacher.is_none() => {
            DistillError::config(path, format!("{e}; or pass --teacher <t.pt> to distill plan"))
        }
        _ => DistillError::config(path, e.to_string()),
    };
    let plan = estimate(&spec, &inputs).map_err(bad)?;
    let per_gpu: Vec<GpuBatch> = max_batch_per_gpu(&spec, &inputs, spec.estimate.safety_margin)
        .map_err(bad)?
        .into_iter()
        .map(|(g, batch)| GpuBatch { gpu: g.name, memory: g.memory, batch })
        .collect();
    if opts.json {
        let data = DataJson { dataset: inputs.dataset.as_ref(), text: inputs.text.as_ref() };
        return Ok(serde_json::to_string_pretty(&PlanJson { plan: &plan, max_batch: per_gpu, data })
            .expect("plan serialises")
            + "\n");
    }
    let mut out = plan.to_table();
    if let Some(text) = &inputs.text {
        out.push_str(&text_note(text));
    }
    if let (Some(files), None) = (&files, &inputs.dataset) {
        out.push_str(&unread_data_note(files));
    }
    out.push_str(&format!(
        "\nlargest micro-batch per GPU (keeping {:.0}% free):\n",
        100.0 * spec.estimate.safety_margin
    ));
    for g in per_gpu {
        let batch = g.batch.map(|b| b.to_string()).unwrap_or_else(|| "does not fit".into());
        out.push_str(&format!("  {:<24} {:>10}  {batch}\n", g.gpu, human(g.memory)));
    }
    Ok(out)
}

/// The note of a text plan: the widths its data gives the batches (each padded to its longest
/// sentence), which it prices instead of `data.input_shape[0]`.
fn text_note(text: &TextWidths) -> String {
    let largest = |pairs: &[(u64, u64)]| match pairs.iter().max_by_key(|&&(rows, width)| rows * width) {
        Some((rows, width)) => format!("{rows} x {width} tokens"),
        None => "at data.input_shape[0]".into(),
    };
    format!(
        "text as the data pads it (largest batches): training {}, the teacher's pass {}, evaluation {}\n",
        largest(&text.train),
        largest(&text.teacher_pass),
        largest(&text.evaluation)
    )
}

/// The note of a plan made without the data files `files` name because one cannot be read: the
/// sizes the data decides (samples per epoch, the teacher's cached outputs) are left out.
fn unread_data_note(files: &DataFiles) -> String {
    let mut named = vec![files.train.display().to_string()];
    if let HeldOut::File(test) = &files.held_out {
        named.push(test.display().to_string());
    }
    format!(
        "\nnote: {} could not be read, so this plan leaves out what the data decides (samples per epoch, the \
         teacher's cached outputs); {}\n",
        named.join(" or "),
        crate::data::check_paths()
    )
}

/// The teacher as the estimator sees it: exact counts from the TorchScript file, and the layer
/// list of the cfg's `preset` or `arch` (for its inference working set) when given; or a Hugging
/// Face model folder's counts and layers ([`crate::hf::plan::teacher_model`]).
///
/// # Errors
/// [`DistillError::Teacher`] when the file is not TorchScript.
pub fn teacher_model(path: &Path, spec: &Config) -> Result<TeacherModel> {
    if crate::hf::is_model_folder(path) {
        return crate::hf::plan::teacher_model(path, spec);
    }
    let (_, params) = crate::teacher::load_torchscript(path, Device::Cpu)
        .map_err(|e| DistillError::teacher(path, format!("not a TorchScript file ({})", first_line(&e.to_string()))))?;
    Ok(counted_teacher(crate::teacher::params_or_declared(path, params, spec.teacher.params)?, spec))
}

/// Train and test sets as `distill` would keep them, from the .npz headers or the .txt lines
/// when the data files are readable ([`crate::data::file_summary`]; a held-out split takes
/// `round(n * holdout)` of the train file's `n` samples). A language model's samples are the
/// windows its text packs into, which only tokenising tells ([`language_model_windows`]).
pub fn dataset(files: &DataFiles, spec: &Config) -> Option<DatasetSize> {
    let count = |path: &Path| match spec.student.is_language_model() {
        true => language_model_windows(path, files.tokenizer.as_deref()?, spec),
        false => crate::data::file_summary(path, &spec.data).map(|(n, _)| n),
    };
    let (train_n, sample_bytes) = crate::data::file_summary(&files.train, &spec.data)?;
    let train_n = count(&files.train).unwrap_or(train_n);
    let (train_samples, test_samples) = match &files.held_out {
        HeldOut::File(test) => (train_n, count(test)?),
        HeldOut::Split(fraction) => {
            let test = (train_n as f64 * fraction).round() as u64;
            (train_n - test, test)
        }
    };
    Some(DatasetSize { train_samples, test_samples, sample_bytes })
}

/// The windows of `data.input_shape[0]` tokens that the text file `path` packs into, tokenised
/// with `tokenizer` as the trainer does; `None` when either cannot be read (the run then says why).
fn language_model_windows(path: &Path, tokenizer: &Path, spec: &Config) -> Option<u64> {
    use crate::data::{Dataset, TextLayout, TextTokenizer};
    let vocab = spec.student.transformer.as_ref().map(|t| t.vocab);
    let tokenizer = TextTokenizer::load(tokenizer, spec.data.input_shape[0], vocab, TextLayout::Packed).ok()?;
    Dataset::load(path, &spec.data, Some(&tokenizer)).ok().map(|d| d.len() as u64)
}

/// The sentences' token counts of a text run that pads per batch (not a language model), as the
/// trainer tokenises them; `None` for other data or when a file cannot be read. A held-out split
/// of the train file is priced with the train file's sentences (the split is drawn at run time).
fn text_lengths(files: &DataFiles, spec: &Config) -> Option<TextLengths> {
    use crate::data::{Dataset, TextLayout, TextTokenizer};
    if spec.student.is_language_model() {
        return None;
    }
    let vocab = spec.student.transformer.as_ref().map(|t| t.vocab);
    let tokenizer =
        TextTokenizer::load(files.tokenizer.as_deref()?, spec.data.input_shape[0], vocab, TextLayout::Sentences)
            .ok()?;
    let lengths = |path: &Path| -> Option<Vec<usize>> {
        let d = Dataset::load(path, &spec.data, Some(&tokenizer)).ok()?;
        let t = d.text()?;
        Some((0..t.len()).map(|i| t.sentence(i).len()).collect())
    };
    let train = lengths(&files.train)?;
    let test = match &files.held_out {
        HeldOut::File(test) => lengths(test)?,
        HeldOut::Split(_) => train.clone(),
    };
    Some(TextLengths { train, test })
}
