//! `distill plan`: the memory estimator's breakdown of a run before any training, and the largest
//! micro-batch per catalogue GPU. (Before a run, [`crate::train::memory_plan`] does the same on the
//! run's device.)
//!
//! `distill` adds to the cfg.toml what only it knows: the teacher's exact parameter count (read
//! from the TorchScript file) and the datasets it keeps on the device (from the .npz headers, or
//! the lines of .txt files).
use std::path::{Path, PathBuf};

use estimator_wasm::schema::{Config, Target};
use estimator_wasm::{
    estimate, max_batch, max_batch_per_gpu, memory::render::human, DatasetSize, EstimateError, Inputs, Plan,
    TeacherModel, TextWidths,
};
use serde::Serialize;
use tch::Device;

use crate::config::{DataFiles, HeldOutSet};
use crate::host::error::{first_line, DistillError, Result};
use crate::train::memory_plan::{counted_teacher, device_capacity, text_widths, Capacity, TextLengths};

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
    /// Samples in `data.train` (a language model's: windows), overriding what its file says: for
    /// a plan without the data files.
    pub train_samples: Option<u64>,
    /// Samples in `data.test`, likewise.
    pub test_samples: Option<u64>,
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
    /// This machine's device when the plan is made for it (no `--gpu`, no `[estimate] gpu`).
    #[serde(skip_serializing_if = "Option::is_none")]
    device: Option<DeviceJson>,
}

#[derive(Serialize)]
struct DeviceJson {
    /// `cuda:0` or `cpu`.
    name: String,
    /// Its memory (CUDA total, or the RAM available), bytes.
    memory: u64,
    fits: bool,
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
    plan_text(opts).map_err(|e| crate::config::overrides::pin_on_set(e, &opts.student, &opts.sets))
}

/// [`plan`], before its refusals are pinned on the `--set` they come from.
fn plan_text(opts: &PlanOptions) -> Result<String> {
    let path = &opts.student;
    let mut spec = crate::config::overrides::read_spec(path, &opts.sets)?;
    if let Some(gpu) = &opts.gpu {
        estimator_wasm::gpu(gpu).map_err(|e| DistillError::Usage(format!("--gpu {gpu}: {e}")))?;
        spec.estimate.gpu = Some(gpu.clone());
        spec.estimate.target = Target::Cuda;
    }
    if opts.batch == Some(0) {
        return Err(DistillError::Usage("--batch 0: the micro-batch is at least 1 sample".into()));
    }
    for (flag, n) in [("--train-samples", opts.train_samples), ("--test-samples", opts.test_samples)] {
        if n == Some(0) {
            return Err(DistillError::Usage(format!("{flag} 0: a data set holds at least 1 sample")));
        }
    }
    // no GPU named: plan for this machine, as `distill --device auto` would run there
    let machine = match spec.estimate.gpu {
        None => machine_device(),
        Some(_) => None,
    };
    if let Some(m) = &machine {
        spec.estimate.target = if m.name == "cpu" { Target::Cpu } else { Target::Cuda };
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
    let mut inputs = Inputs {
        batch: opts.batch,
        teacher: teacher.as_deref().map(|t| teacher_model(t, &spec)).transpose()?,
        dataset: dataset_with_flags(files.as_ref(), &spec, opts.train_samples, opts.test_samples),
        device: None,
        text: files.as_ref().and_then(|f| text_lengths(f, &spec)).map(|l| text_widths(&l, &spec, batch)),
    };
    // a job with a rank that has no samples cannot train: the trainer refuses it (`Batches::sharded`)
    let ranks = spec.estimate.data_parallel;
    if let Some(d) = inputs.dataset.filter(|d| d.train_samples < ranks) {
        return Err(DistillError::config(
            path,
            format!(
                "estimate.data_parallel = {ranks}, but the training set holds {} samples: a rank would have none and distill refuses such a job; plan at most {} ranks",
                d.train_samples, d.train_samples
            ),
        ));
    }
    let bad = |e: EstimateError| match &e {
        EstimateError::Invalid { key, .. } if key == "teacher" && opts.teacher.is_none() => {
            DistillError::config(path, format!("{e}; or pass --teacher <t.pt> to distill plan"))
        }
        _ => DistillError::config(path, e.to_string()),
    };
    // the catalogue's GPUs priced as the cfg says, whatever this machine holds
    let per_gpu: Vec<GpuBatch> = max_batch_per_gpu(&spec, &inputs, spec.estimate.safety_margin)
        .map_err(bad)?
        .into_iter()
        .map(|(g, batch)| GpuBatch { gpu: g.name, memory: g.memory, batch })
        .collect();
    match &machine {
        // a CUDA device is priced as the run prices it (its context, its cuBLAS workspace)
        Some(m) if m.name != "cpu" => inputs.device = Some(m.gpu),
        // the CPU has no runtime to price; "auto" takes the largest batch its RAM holds, at most
        // the train set, as the trainer does (`crate::train::memory_plan::MemoryPlanner::largest_batch`)
        Some(m) if batch.is_none() => {
            let fit = max_batch(&spec, &inputs, &m.gpu, spec.estimate.safety_margin).map_err(bad)?;
            let b = fit.ok_or_else(|| {
                let why = format!(
                    "train.batch_size = \"auto\": not even a batch of 1 fits the cpu ({} available)",
                    human(m.gpu.memory)
                );
                DistillError::config(path, why)
            })?;
            inputs.batch = Some(inputs.dataset.map_or(b, |d| b.min(d.train_samples.max(1))));
        }
        _ => {}
    }
    let plan = estimate(&spec, &inputs).map_err(bad)?;
    if opts.json {
        let data = DataJson { dataset: inputs.dataset.as_ref(), text: inputs.text.as_ref() };
        let device = machine.as_ref().map(|m| DeviceJson {
            name: m.name.clone(),
            memory: m.gpu.memory,
            fits: plan.fit_total() <= m.gpu.memory,
        });
        return Ok(serde_json::to_string_pretty(&PlanJson { plan: &plan, max_batch: per_gpu, data, device })
            .expect("plan serialises")
            + "\n");
    }
    let mut out = plan.to_table();
    if let Some(m) = machine.as_ref().filter(|m| m.name == "cpu") {
        // the estimator checks a fit on CUDA devices only; on the CPU it is the RAM available
        let mut lines: Vec<&str> = out.lines().collect();
        let fit = cpu_fit_line(plan.totals.total, m.gpu.memory);
        lines.insert(2.min(lines.len()), &fit);
        out = lines.join("\n") + "\n";
    }
    if let Some(text) = &inputs.text {
        out.push_str(&text_note(text));
    }
    match (&files, &inputs.dataset) {
        (Some(files), None) => out.push_str(&unread_data_note(files)),
        (Some(files), Some(d)) if d.test_samples == 0 && opts.test_samples.is_none() => {
            if let HeldOutSet::File(test) = &files.held_out {
                out.push_str(&format!(
                    "\nnote: {} could not be read, so this plan leaves out the test set; pass --test-samples N to price it\n",
                    test.display()
                ));
            }
        }
        (None, None) => out.push_str(&format!("\nnote: the cfg names no data files, so {LEFT_OUT}; {SIZE_FLAGS}\n")),
        _ => {}
    }
    if let Some(m) = &machine {
        out.push_str(&format!(
            "\nnote: planned for this machine's {} (no --gpu, no [estimate] gpu); --gpu NAME plans for a catalogue GPU\n",
            if m.name == "cpu" { "CPU (no CUDA device): the RAM available" } else { "first CUDA device" }
        ));
    }
    let train_samples = inputs.dataset.map(|d| d.train_samples);
    out.push_str(&format!(
        "\nlargest micro-batch per GPU (keeping {:.0}% free{}; by the fast bound with its {:.0}% fragmentation \
         reserve: train.batch_size = \"auto\" on a GPU replays the run's memory requests instead, and may differ):\n",
        100.0 * spec.estimate.safety_margin,
        if train_samples.is_some() { "; at most the train set" } else { "" },
        100.0 * spec.estimate.fragmentation
    ));
    for g in per_gpu {
        let batch = match (g.batch, train_samples) {
            (None, _) => "does not fit".into(),
            (Some(b), Some(n)) if b >= n => format!("{n} (the whole train set)"),
            (Some(b), _) => b.to_string(),
        };
        out.push_str(&format!("  {:<24} {:>10}  {batch}\n", g.gpu, human(g.memory)));
    }
    Ok(out)
}

/// What a plan without the data's size leaves out.
const LEFT_OUT: &str = "this plan leaves out what the data decides (samples per epoch, the teacher's cached outputs)";

/// The flags that give the data's size.
const SIZE_FLAGS: &str = "pass --train-samples N (and --test-samples N) to price them";

/// The memory this machine's device holds for a plan made without a named GPU: the first CUDA
/// device, else the CPU with the RAM the OS reports available (as `distill --device auto` runs).
fn machine_device() -> Option<Capacity> {
    let device = if tch::Cuda::is_available() { Device::Cuda(0) } else { Device::Cpu };
    device_capacity(device)
}

/// The fit line of a plan of `total` bytes on the CPU, against `available` bytes of RAM.
fn cpu_fit_line(total: u64, available: u64) -> String {
    let verdict = match total <= available {
        true => format!("fits ({} free)", human(available - total)),
        false => format!("DOES NOT FIT ({} short)", human(total - available)),
    };
    format!("cpu (RAM available): {} -> {verdict}", human(available))
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
    if let HeldOutSet::File(test) = &files.held_out {
        named.push(test.display().to_string());
    }
    format!(
        "\nnote: {} could not be read, so {LEFT_OUT}; {}, or {SIZE_FLAGS}\n",
        named.join(" or "),
        crate::inputs::data::check_paths()
    )
}

/// The teacher as the estimator sees it: exact counts from the TorchScript file, and the layer
/// list of the cfg's `preset` or `arch` (for its inference working set) when given; or a Hugging
/// Face model folder's counts and layers ([`crate::inputs::hf::plan::teacher_model`]).
///
/// # Errors
/// [`DistillError::Teacher`] when the file is not TorchScript.
pub fn teacher_model(path: &Path, spec: &Config) -> Result<TeacherModel> {
    if crate::config::is_model_folder(path) {
        return crate::inputs::hf::plan::teacher_model(path, spec);
    }
    let (_, params) = crate::inputs::teacher::load_torchscript(path, Device::Cpu)
        .map_err(|e| DistillError::teacher(path, format!("not a TorchScript file ({})", first_line(&e.to_string()))))?;
    Ok(counted_teacher(crate::inputs::teacher::params_or_declared(path, params, spec.teacher.params)?, spec))
}

/// Train and test sets as `distill` would keep them, from the .npz headers or the .txt lines
/// when the data files are readable ([`crate::inputs::data::file_summary`]; a held-out split takes
/// `round(n * holdout)` of the train file's `n` samples). A language model's samples are the
/// windows its text packs into, which only tokenising tells ([`language_model_windows`]).
pub fn dataset(files: &DataFiles, spec: &Config) -> Option<DatasetSize> {
    dataset_with_flags(Some(files), spec, None, None)
}

/// [`dataset`] with `--train-samples` and `--test-samples` (`train`, `test`: the samples of
/// `data.train` and `data.test`) in place of what a file says or cannot say. A train file that
/// cannot be read gives its sample size as the cfg declares it ([`declared_sample_bytes`]);
/// a held-out split takes `round(train * holdout)` of `train`; with `train`, a held-out file
/// that cannot be read and no `test` hold no samples. `None` when a size is still unknown.
fn dataset_with_flags(
    files: Option<&DataFiles>,
    spec: &Config,
    train: Option<u64>,
    test: Option<u64>,
) -> Option<DatasetSize> {
    let count = |path: &Path| match spec.student.is_language_model() {
        true => language_model_windows(path, files?.tokenizer.as_deref()?, spec),
        false => crate::inputs::data::file_summary(path, &spec.data).map(|(n, _)| n),
    };
    let summary = files.and_then(|f| crate::inputs::data::file_summary(&f.train, &spec.data));
    let sample_bytes = match (summary, train) {
        (Some((_, bytes)), _) => bytes,
        (None, Some(_)) => declared_sample_bytes(spec),
        (None, None) => return None,
    };
    let train_n = train.or_else(|| files.and_then(|f| count(&f.train)).or(summary.map(|(n, _)| n)))?;
    let (train_samples, test_samples) = match files.map(|f| &f.held_out) {
        // with --train-samples, a held-out file that says nothing is left out ([`unread_test_note`])
        Some(HeldOutSet::File(path)) => (train_n, test.or_else(|| count(path)).or(train.map(|_| 0))?),
        Some(HeldOutSet::Split(fraction)) => {
            let held = ((train_n as f64 * fraction).round() as u64).min(train_n);
            (train_n - held, test.unwrap_or(held))
        }
        None => (train_n, test?),
    };
    Some(DatasetSize { train_samples, test_samples, sample_bytes })
}

/// Bytes of one stored sample as the cfg declares it, for data not read: text's token ids and
/// mask (as [`crate::inputs::data::file_summary`] counts a .txt file's), else `data.input_shape` values
/// in fp32 (an uint8 image file stores a quarter of that).
fn declared_sample_bytes(spec: &Config) -> u64 {
    match spec.data.tokenizer {
        Some(_) => 2 * 8 * spec.data.input_shape.first().copied().unwrap_or(1),
        None => 4 * spec.data.input_shape.iter().product::<u64>().max(1),
    }
}

/// The windows of `data.input_shape[0]` tokens that the text file `path` packs into, tokenised
/// with `tokenizer` as the trainer does; `None` when either cannot be read (the run then says why).
fn language_model_windows(path: &Path, tokenizer: &Path, spec: &Config) -> Option<u64> {
    use crate::inputs::data::{Dataset, TextLayout, TextTokenizer};
    let vocab = spec.student.transformer.as_ref().map(|t| t.vocab);
    let tokenizer = TextTokenizer::load(tokenizer, spec.data.input_shape[0], vocab, TextLayout::Packed).ok()?;
    Dataset::load(path, &spec.data, Some(&tokenizer)).ok().map(|d| d.len() as u64)
}

/// The sentences' token counts of a text run that pads per batch (not a language model), as the
/// trainer tokenises them; `None` for other data or when a file cannot be read. A held-out split
/// of the train file is priced with the train file's sentences (the split is drawn at run time).
fn text_lengths(files: &DataFiles, spec: &Config) -> Option<TextLengths> {
    use crate::inputs::data::{Dataset, TextLayout, TextTokenizer};
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
        HeldOutSet::File(test) => lengths(test)?,
        HeldOutSet::Split(_) => train.clone(),
    };
    Some(TextLengths { train, test })
}
