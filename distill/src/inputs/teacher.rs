//! The frozen teacher: any TorchScript module (scripted or traced) or a Hugging Face model
//! folder of the Llama family, GPT-2 or a BERT-style encoder ([`crate::inputs::hf`]), kept in eval mode and run
//! under `no_grad`, never in the student's VarStore, so the optimiser cannot touch it. It takes
//! the model input of a batch (`forward(x)`, or `forward(input_ids, attention_mask)` for text)
//! and returns the output the objective compares with the student's (class logits [B, C], or an
//! embedding [B, E]), checked finite wherever it is computed ([`Teacher::finite_output`]), so a
//! bad row fails with a message that names the file, the row and the cause that was checked.
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use estimator_wasm::schema::{OutputSelector, Precision};
use tch::{CModule, Device, IValue, Kind, Tensor};

use crate::host::error::{first_line, DistillError, Result};
use crate::inputs::data::{Batch, Dataset, ModelInput};
use crate::inputs::teacher_module::{describe, describe_key, TeacherModule};
use crate::torch::precision::teacher_kind;

pub struct Teacher {
    pub path: PathBuf,
    module: TeacherModule,
    output: Option<OutputSelector>,
    /// Parameter elements of the TorchScript module (exact), and what counted them.
    pub params: u64,
    pub params_source: ParamsSource,
    pub file_bytes: u64,
    /// dtype of the teacher's weights, hence of its inputs.
    kind: Kind,
    precision: Precision,
    /// Its convolution weights restrided channels-last ([`channels_last_weights`]); cleared
    /// when a forward needs the file's strides.
    restrided: AtomicBool,
    /// `(its logits' width, the vocabulary shared with the student)` when its vocabulary is
    /// padded past the tokenizer's (`teacher.vocab`): [`Teacher::output`] cuts to the shared.
    pub padded_vocab: Option<(u64, u64)>,
    /// `teacher.hidden_output`: where its hidden states are in its output ([`hidden`]).
    hidden_output: Option<OutputSelector>,
}

#[path = "teacher_hidden.rs"]
mod hidden;

impl Teacher {
    /// Loads a TorchScript file, or a Hugging Face model folder ([`crate::inputs::hf`]), onto `device` in
    /// eval mode, its weights cast once to `precision` (fp16/bf16 halve the teacher's memory;
    /// its logits are cast back to fp32).
    ///
    /// # Errors
    /// [`DistillError::Teacher`] when the file is missing or is not TorchScript, or the folder
    /// is not a model distill can build (see [`crate::inputs::hf::load`]).
    pub fn load(path: &Path, output: Option<OutputSelector>, precision: Precision, device: Device) -> Result<Teacher> {
        let err = |m: String| DistillError::teacher(path, m);
        let kind = teacher_kind(precision);
        let (module, params, params_source, file_bytes) = if crate::config::is_model_folder(path) {
            let (model, params) = crate::inputs::hf::load(path, kind, device)?;
            let module = TeacherModule::Hf(Box::new(model));
            (module, params, ParamsSource::Parameters, crate::inputs::hf::weights::Checkpoint::file_bytes(path))
        } else {
            let file_bytes = std::fs::metadata(path)
                .map_err(|e| err(format!("cannot read the teacher ({e}); pass --teacher <file.pt>")))?
                .len();
            let (mut module, params, params_source) = load_counted(path, device).map_err(|e| {
                err(format!(
                    "not a TorchScript file ({}); save the teacher with torch.jit.script(model).save(path) or torch.jit.trace",
                    first_line(&e.to_string())
                ))
            })?;
            // torch.jit.load returns modules in training mode (pytorch #26884): dropout and
            // batch-norm statistics would silently corrupt the soft targets.
            module.f_set_eval()?;
            if kind != Kind::Float {
                // Casts every floating parameter and buffer (also integer buffers such as
                // num_batches_tracked, which eval mode never reads).
                module.to(device, kind, false);
            }
            (TeacherModule::Script(module), params, params_source, file_bytes)
        };
        let restrided = device == Device::Cpu && module.channels_last_weights()?;
        let restrided = AtomicBool::new(restrided);
        let path = path.to_path_buf();
        Ok(Teacher {
            path,
            module,
            output,
            params,
            params_source,
            file_bytes,
            kind,
            precision,
            restrided,
            padded_vocab: None,
            hidden_output: None,
        })
    }

    /// This teacher, its logits cut to their first `shared` columns when they are `full` wide
    /// (`padded` = `(full, shared)`, `TeacherSpec::padded_vocab`; [`crate::inputs::vocab_check::shared_vocab`]).
    pub fn with_padded_vocab(mut self, padded: Option<(u64, u64)>) -> Teacher {
        self.padded_vocab = padded;
        self
    }

    /// This teacher, its parameter count taken from the cfg's `teacher.params` (`declared`)
    /// when the module holds no tensor that could be counted.
    ///
    /// # Errors
    /// [`DistillError::Teacher`] when it holds none and the cfg gives no count.
    pub fn counted_or(mut self, declared: Option<u64>) -> Result<Teacher> {
        if self.params == 0 {
            (self.params, self.params_source) = (params_or_declared(&self.path, 0, declared)?, ParamsSource::Cfg);
        }
        Ok(self)
    }

    /// `N parameters`, and what counted them when it was not the module's parameters.
    pub fn params_text(&self) -> String {
        let how = match self.params_source {
            ParamsSource::Parameters => "",
            ParamsSource::Constants => " (counted from its constants: a frozen or traced module)",
            ParamsSource::Cfg => " (teacher.params of the cfg.toml: the module holds no tensor to count)",
        };
        format!("{} parameters{how}", self.params)
    }

    /// The teacher's output (logits [B, classes], or an embedding [B, E]) in fp32 for the model
    /// input `input` (floating inputs cast to the teacher's precision; token ids and the
    /// attention mask passed as they are), without autograd.
    ///
    /// # Errors
    /// [`DistillError::Teacher`] when the forward fails or the output has no tensor at the
    /// configured `teacher.output`.
    pub fn output(&self, input: &ModelInput) -> Result<Tensor> {
        let x = &input.x;
        let cast = |t: Tensor| IValue::Tensor(if t.is_floating_point() { t.to_kind(self.kind) } else { t });
        let args: Vec<IValue> = input.tensors().into_iter().map(cast).collect();
        let forward = || tch::no_grad(|| self.module.forward_is(&args));
        let out = match forward() {
            // a forward that views a weight (weight standardisation: `w.view(out, -1)`) needs
            // the file's strides: put them back, and run the teacher so from now on
            Err(_) if self.restrided.swap(false, Ordering::Relaxed) => {
                self.module.contiguous_weights()?;
                forward()
            }
            out => out,
        };
        let out = out.map_err(|e| {
            let reason = first_line(&e.to_string());
            // A 16-bit teacher may fail for want of a 16-bit kernel, not for the input's shape.
            if self.kind != Kind::Float && self.in_fp32(x.device()).and_then(|t| t.output(input)).is_ok() {
                let p = self.precision();
                return DistillError::teacher(
                    &self.path,
                    format!("forward fails with teacher.precision = \"{p}\" but works in fp32 ({reason}): set teacher.precision = \"fp32\""),
                );
            }
            let fix = match (x.is_floating_point(), input.mask.is_some()) {
                (true, _) => format!(
                    "forward failed on input {:?}: check data.input_shape against the input the teacher was made for",
                    x.size()
                ),
                // text: the shape comes from the text; the teacher may be no text model at all
                (false, mask) => self.explain_text_failure(input).unwrap_or_else(|| {
                    format!(
                        "forward failed on token ids {:?}{}: a text run's teacher takes int64 token ids [B, S]{}; is --teacher a model of text?",
                        x.size(),
                        if mask { " and their attention mask" } else { "" },
                        if mask { " and an attention mask [B, S]" } else { "" }
                    )
                }),
            };
            DistillError::teacher(&self.path, format!("{fix} ({reason})"))
        })?;
        let output = crate::inputs::vocab_check::shared_vocab(self.select(out)?, self.padded_vocab);
        Ok(output.to_kind(Kind::Float))
    }

    /// Why a text teacher that takes token ids fails on `input` ([B, S] ids and mask), found by
    /// running it again on changed copies: with every id set to the batch's smallest, it runs
    /// at S tokens (then an id is beyond its vocabulary: the largest id that runs is searched
    /// for) or only at fewer (then S is beyond its position table: the longest length that runs
    /// is searched for). `None` when neither runs: the inputs themselves are wrong.
    fn explain_text_failure(&self, input: &ModelInput) -> Option<String> {
        let (ids, s) = (&input.x, input.x.size()[1]);
        let runs = |ids: &Tensor, len: i64| {
            let cut = ModelInput { x: ids.narrow(1, 0, len), mask: input.mask.as_ref().map(|m| m.narrow(1, 0, len)) };
            let args: Vec<IValue> = cut.tensors().into_iter().map(IValue::Tensor).collect();
            tch::no_grad(|| self.module.forward_is(&args)).is_ok()
        };
        // the largest value in lo..hi for which `ok` holds, given ok(lo) and not ok(hi)
        let largest = |mut lo: i64, mut hi: i64, ok: &dyn Fn(i64) -> bool| {
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if ok(mid) {
                    lo = mid
                } else {
                    hi = mid
                }
            }
            lo
        };
        let (lowest, highest) = (ids.min().int64_value(&[]), ids.max().int64_value(&[]));
        let uniform = ids.full_like(lowest);
        if runs(&uniform, s) {
            let top = largest(lowest, highest, &|k| runs(&ids.clamp_max(k), s));
            return Some(format!(
                "forward fails on token id {highest} but runs with ids up to {top}: the teacher's vocabulary is smaller than \
                 data.tokenizer's; set data.tokenizer to the teacher's own tokenizer.json"
            ));
        }
        if s > 1 && runs(&uniform, 1) {
            let most = largest(1, s, &|len| runs(&uniform, len));
            return Some(format!(
                "forward fails on sequences of {s} tokens but runs on {most}: the teacher has {most} positions; set \
                 data.input_shape = [{most}] (longer sentences are truncated)"
            ));
        }
        None
    }

    /// The teacher's fp32 output [B, ...] for `batch`, refused when it holds NaN or inf.
    ///
    /// # Errors
    /// As [`Teacher::output`]; [`DistillError::Teacher`] (or [`DistillError::Data`]) when an
    /// output value is NaN or inf, naming the first such row of the data file of `data` (the
    /// dataset `batch` came from) and the cause that was checked (see
    /// [`Teacher::explain_nonfinite`]).
    pub fn finite_output(&self, batch: &Batch, data: &Dataset) -> Result<Tensor> {
        let output = self.output(&batch.input)?;
        self.check_finite(&output, batch, data)?;
        Ok(output)
    }

    /// Refuses teacher outputs `output` [B, ...] for `batch` (of `data`) that hold NaN or inf;
    /// see [`Teacher::finite_output`]. The file row is looked up only for the message.
    ///
    /// # Errors
    /// As [`Teacher::finite_output`].
    pub fn check_finite(&self, output: &Tensor, batch: &Batch, data: &Dataset) -> Result<()> {
        let bad = output.isfinite().logical_not().reshape([output.size()[0], -1]).any_dim(1, false);
        if !bool::try_from(bad.any()).unwrap_or(true) {
            return Ok(());
        }
        let i = bad.nonzero().int64_value(&[0, 0]);
        let row = data.file_rows(&batch.index).int64_value(&[i]);
        Err(self.explain_nonfinite(&batch.input.narrow(i, 1), &output.get(i), row, data.path()))
    }

    /// Why the teacher's logits `logits` [C] for row `row` of `data` (model input `input`, one
    /// sample) are not finite, blaming, in this order and only after checking: the normalisation
    /// (the input itself is not finite), the teacher's 16-bit precision (the fp32 teacher is
    /// finite on the row), data.scale/mean/std (the input lies far outside [-100, 100]; not for
    /// token ids), or else the teacher.
    pub fn explain_nonfinite(&self, input: &ModelInput, logits: &Tensor, row: i64, data: &Path) -> DistillError {
        let x = &input.x;
        let what = if bool::try_from(logits.isnan().any()).unwrap_or(false) { "NaN" } else { "inf" };
        let file = data.display();
        if !bool::try_from(x.isfinite().all()).unwrap_or(false) {
            return DistillError::data(
                data,
                format!("row {row} becomes NaN or inf once normalised as (x * data.scale - data.mean) / data.std: check those keys"),
            );
        }
        let (lo, hi) = (x.min().double_value(&[]), x.max().double_value(&[]));
        let p = self.precision();
        if p != "fp32" {
            let fp32 = self.in_fp32(x.device()).and_then(|t| t.output(input));
            if let Ok(l) = fp32.as_ref().map(|l| l.to_kind(Kind::Double)) {
                if bool::try_from(l.isfinite().all()).unwrap_or(false) {
                    let peak = l.abs().max().double_value(&[]);
                    let range = if p == "fp16" { " (fp16 holds at most 65504)" } else { "" };
                    return DistillError::teacher(
                        &self.path,
                        format!(
                            "with teacher.precision = \"{p}\" the teacher's logits for row {row} of {file} are {what}, but in \
                             fp32 they are finite (largest |logit| {peak:.6}){range}: set teacher.precision = \"fp32\""
                        ),
                    );
                }
            }
        }
        if !x.is_floating_point() {
            // token ids: no normalisation to blame
            return DistillError::teacher(
                &self.path,
                format!(
                    "the teacher returns {what} outputs for sentence {row} of {file} (0-based, blank lines not \
                     counted; token ids [{lo:.0}, {hi:.0}]): the fault is in the teacher; run it on that sentence in PyTorch"
                ),
            );
        }
        if lo.abs().max(hi.abs()) > 100.0 {
            return DistillError::teacher(
                &self.path,
                format!(
                    "the teacher's logits for row {row} of {file} are {what}, and that row's normalised input spans \
                     [{lo:.4}, {hi:.4}], far from the usual few units around 0: check data.scale/mean/std"
                ),
            );
        }
        DistillError::teacher(
            &self.path,
            format!(
                "the teacher returns {what} logits for row {row} of {file}, whose normalised input is finite and in \
                 [{lo:.4}, {hi:.4}]: the fault is in the teacher; run it on that row in PyTorch"
            ),
        )
    }

    /// The teacher's weight precision as the cfg.toml spells it (`teacher.precision`).
    pub fn precision(&self) -> &'static str {
        self.precision.name()
    }

    /// The same file loaded again in fp32 on `device` (to tell a 16-bit overflow from a fault of
    /// the teacher itself).
    ///
    /// # Errors
    /// As [`Teacher::load`].
    pub fn in_fp32(&self, device: Device) -> Result<Teacher> {
        Ok(Teacher::load(&self.path, self.output.clone(), Precision::Fp32, device)?
            .with_hidden_output(self.hidden_output.clone())
            .with_padded_vocab(self.padded_vocab))
    }

    /// The teacher's parameters with its file's values, for copying into a student: its own
    /// tensors (in its precision, on its device, sharing storage) where they hold those values
    /// exactly (an fp32 teacher, or a Hugging Face folder stored in the precision it runs in,
    /// [`crate::inputs::hf::stored_in`]), so a 16-bit checkpoint is not loaded again whole in
    /// fp32 beside it; otherwise the file loaded again in fp32 on the CPU ([`Teacher::in_fp32`]).
    ///
    /// # Errors
    /// As [`Teacher::in_fp32`] and [`Teacher::named_parameters`].
    pub fn file_parameters(&self) -> Result<Vec<(String, Tensor)>> {
        let exact = match &self.module {
            TeacherModule::Hf(_) => crate::inputs::hf::stored_in(&self.path, self.kind)?,
            TeacherModule::Script(_) => self.kind == Kind::Float,
        };
        match exact {
            true => self.named_parameters(),
            false => self.in_fp32(Device::Cpu)?.named_parameters(),
        }
    }

    /// The teacher's parameters by their TorchScript names (for a Hugging Face BERT,
    /// `embeddings.word_embeddings.weight`, `encoder.layer.0.attention.self.query.weight`, ...),
    /// in the teacher's precision and on its device, sharing storage with it.
    ///
    /// # Errors
    /// [`DistillError::Torch`] when libtorch cannot list them.
    pub fn named_parameters(&self) -> Result<Vec<(String, Tensor)>> {
        Ok(self.module.named_parameters()?)
    }

    /// The `config.json` of a Hugging Face teacher; `None` for TorchScript.
    pub fn hf_config(&self) -> Option<&crate::inputs::hf::ModelConfig> {
        match &self.module {
            TeacherModule::Hf(d) => Some(&d.config),
            TeacherModule::Script(_) => None,
        }
    }

    /// Re-asserts eval mode (docs/kd-pitfalls.md T3: a teacher must not slip back into training mode).
    pub fn ensure_eval(&mut self) -> Result<()> {
        Ok(self.module.set_eval()?)
    }

    fn select(&self, out: IValue) -> Result<Tensor> {
        let err = |m: String| DistillError::teacher(&self.path, m);
        let entry = match (&self.output, out) {
            (None, IValue::Tensor(t)) => return Ok(t),
            (None, other) => {
                return Err(err(format!(
                    "the teacher returns {}, not a tensor: set teacher.output to the key or index of its logits",
                    describe(&other)
                )))
            }
            (Some(OutputSelector::Index(i)), IValue::Tuple(items) | IValue::GenericList(items)) => {
                let n = items.len();
                items
                    .into_iter()
                    .nth(*i as usize)
                    .ok_or_else(|| err(format!("teacher.output = {i} but the teacher returns {n} outputs")))?
            }
            (Some(OutputSelector::Index(i)), IValue::TensorList(items)) => {
                let n = items.len();
                return items
                    .into_iter()
                    .nth(*i as usize)
                    .ok_or_else(|| err(format!("teacher.output = {i} but the teacher returns {n} tensors")));
            }
            (Some(OutputSelector::Key(k)), IValue::GenericDict(entries)) => {
                let keys: Vec<String> = entries.iter().map(|(k, _)| describe_key(k)).collect();
                entries
                    .into_iter()
                    .find(|(key, _)| matches!(key, IValue::String(s) if s == k))
                    .map(|(_, v)| v)
                    .ok_or_else(|| {
                        err(format!("teacher.output = \"{k}\" but the teacher's dict has keys [{}]", keys.join(", ")))
                    })?
            }
            (Some(sel), other) => {
                let sel = match sel {
                    OutputSelector::Index(i) => i.to_string(),
                    OutputSelector::Key(k) => format!("\"{k}\""),
                };
                return Err(err(format!(
                    "teacher.output = {sel} does not fit an output of {}: set teacher.output to a key of a dict output or an index of a tuple output",
                    describe(&other)
                )));
            }
        };
        match entry {
            IValue::Tensor(t) => Ok(t),
            other => Err(err(format!("the selected teacher output is {}, not a logits tensor", describe(&other)))),
        }
    }
}

/// What a teacher's parameter count (`report.json` `teacher.params`) counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamsSource {
    /// The module's parameters (buffers such as BatchNorm statistics excluded).
    Parameters,
    /// A module without parameters (`torch.jit.freeze`d, or traced with its weights baked in,
    /// as distill's own `student.pt`): every distinct tensor it holds, its attributes and the
    /// constants of its code.
    Constants,
    /// `teacher.params` of the cfg.toml: the module holds no tensor to count.
    Cfg,
}

/// Loads the TorchScript file `path` onto `device` and counts its parameter elements (exact;
/// for a module without parameters, the tensors it holds as constants: [`ParamsSource`]): the
/// one loader of `distill` and `distill plan`.
///
/// # Errors
/// libtorch's error when the file is missing or not TorchScript; callers word it for the user.
pub fn load_torchscript(path: &Path, device: Device) -> std::result::Result<(CModule, u64), tch::TchError> {
    load_counted(path, device).map(|(module, params, _)| (module, params))
}

fn load_counted(path: &Path, device: Device) -> std::result::Result<(CModule, u64, ParamsSource), tch::TchError> {
    let module = CModule::load_on_device(path, device)?;
    let params: u64 = module.named_parameters()?.iter().map(|(_, t)| t.numel() as u64).sum();
    if params > 0 {
        return Ok((module, params, ParamsSource::Parameters));
    }
    // a module the shim cannot walk counts 0: the cfg's teacher.params then, or a line asking for it
    Ok((module, count_tensors(path).unwrap_or(0), ParamsSource::Constants))
}

/// The parameter count `counted` of the teacher at `path`, or the cfg's `teacher.params`
/// (`declared`) when the module holds no tensor to count (`counted` 0).
///
/// # Errors
/// [`DistillError::Teacher`] when it holds none and the cfg gives no count.
pub fn params_or_declared(path: &Path, counted: u64, declared: Option<u64>) -> Result<u64> {
    match (counted, declared) {
        (0, Some(n)) => Ok(n),
        (0, None) => Err(DistillError::teacher(
            path,
            "holds no parameters, buffers or tensor constants that distill can count: give its parameter count as teacher.params in the cfg.toml (for the memory plan)",
        )),
        (n, _) => Ok(n),
    }
}

/// The elements of every distinct tensor the TorchScript file at `path` holds
/// (`csrc/script_names.cpp`: loads it a second time, on the CPU, which only a module without
/// parameters needs).
fn count_tensors(path: &Path) -> std::result::Result<u64, tch::TchError> {
    use std::os::unix::ffi::OsStrExt;
    extern "C" {
        fn distill_count_tensors(path: *const std::ffi::c_char, out: *mut i64) -> *mut std::ffi::c_char;
    }
    let text = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|e| tch::TchError::Torch(e.to_string()))?;
    let mut total = 0i64;
    // SAFETY: a NUL-terminated path that outlives the call, and an i64 the shim writes.
    match crate::torch::shim::take_message(unsafe { distill_count_tensors(text.as_ptr(), &mut total) }) {
        Some(message) => Err(tch::TchError::Torch(message)),
        None => Ok(total as u64),
    }
}
