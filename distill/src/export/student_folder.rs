//! A trained student written as a Hugging Face model folder, `hf/` beside its
//! `student.safetensors` and `student.pt`, as `save_pretrained` lays one out, so that
//! `AutoModelForCausalLM.from_pretrained("OUT/hf")` loads a language model (and vLLM serves
//! it, llama.cpp converts it), `AutoModel` or sentence-transformers a sentence encoder:
//!
//! * `config.json`: the architecture and its hyperparameters: for a language model
//!   `LlamaForCausalLM` ([`super::llama_student`], an RMSNorm decoder with rotary positions) or
//!   `GPT2LMHeadModel` ([`super::gpt2_student`], a LayerNorm decoder with learned positions and
//!   biases), `BertModel` for a sentence encoder ([`super::bert_student`], which adds
//!   sentence-transformers' `modules.json` and modules);
//! * `model.safetensors`: the student's tensors under the architecture's names, fp32, with the
//!   `{"format": "pt"}` metadata transformers checks;
//! * `tokenizer.json`: the run's tokenizer (`data.tokenizer`, or the teacher folder's), with the
//!   `tokenizer_config.json` and `special_tokens_map.json` beside it when it has them (else a
//!   `tokenizer_config.json` naming `PreTrainedTokenizerFast`, which takes `tokenizer.json`
//!   as it is);
//! * `generation_config.json` (language models): the special token ids (`bos_token_id`, `eos_token_id`,
//!   `pad_token_id`) found in the tokenizer's folder (a model folder's `generation_config.json`,
//!   else its `config.json`), none when it has neither.
//!
//! The folder is filled under `hf.tmp/`, flushed, and renamed to `hf/` ([`crate::host::durable`]), so
//! a reader never sees part of one. A student with no equivalent architecture gets no folder;
//! [`HfExport::not_written`] says why, for `report.json`.
use std::collections::HashMap;
use std::path::Path;

use estimator_wasm::schema::{Config, Family, HeadKind, NormKind, TransformerSpec};
use serde_json::{json, Map, Value};
use tch::{Kind, Tensor};

use super::bert_student::{self, bert_spec, bert_tensors, sentence_modules, Tensors};
use super::gpt2_student::{self, gpt2_spec, gpt2_tensors};
use super::llama_student::{self, llama_spec, llama_tensors};
use crate::export::section::HfExport;
use crate::host::durable::{replace_via, sync_contents};
use crate::host::error::{DistillError, Result};
use crate::inputs::hf::weights::SINGLE;

/// The folder's name in the student's folder.
pub const FOLDER: &str = "hf";

/// The tokenizer's companions copied when they lie beside it.
const TOKENIZER_COMPANIONS: [&str; 2] = ["tokenizer_config.json", "special_tokens_map.json"];

/// The special token ids a model folder's configs carry.
const TOKEN_IDS: [&str; 3] = ["bos_token_id", "eos_token_id", "pad_token_id"];

/// Writes the student of `spec`, exported to `dir/student.safetensors`, as the model folder
/// `dir/hf/` with the tokenizer `tokenizer`; or, for a student with no Hugging Face equivalent,
/// writes nothing and says why.
///
/// # Errors
/// [`DistillError::Io`] naming the file that cannot be read or written (nothing is left under
/// `hf.tmp/`), [`DistillError::Torch`] for a student file that does not hold the student.
pub fn write_student_folder(spec: &Config, dir: &Path, tokenizer: Option<&Path>) -> Result<HfExport> {
    let not_written = |why: String| Ok(HfExport { not_written: Some(why), ..HfExport::default() });
    let arch = match architecture(spec) {
        Ok(arch) => arch,
        Err(why) => return not_written(why),
    };
    let Some(tokenizer) = tokenizer else {
        return not_written("the run has no tokenizer.json (data.tokenizer) to ship with the model".into());
    };
    let file = dir.join("student.safetensors");
    let named = Tensor::read_safetensors(&file).map_err(|e| DistillError::Torch(format!("{}: {e}", file.display())))?;
    let bad = |m: String| DistillError::Torch(format!("{}: {m}", file.display()));
    let seq = spec.data.input_shape.first().copied().unwrap_or(1);
    // (path in the folder, content)
    let mut files: Vec<(String, Value)> = Vec::new();
    let mut weights: Vec<(String, Tensors)> = Vec::new();
    let name = match arch {
        Arch::Llama(t) => {
            let tokens = special_tokens(tokenizer, t.vocab);
            files.push((crate::inputs::hf::CONFIG.into(), llama_student::config_json(t, seq, &tokens)));
            files.push(("generation_config.json".into(), Value::Object(tokens)));
            weights.push((SINGLE.into(), llama_tensors(t, &named).map_err(bad)?));
            llama_student::ARCHITECTURE
        }
        Arch::Gpt2(t) => {
            let tokens = special_tokens(tokenizer, t.vocab);
            let (activation, dropout) = (spec.student.activation.name(), spec.student.dropout);
            files.push((crate::inputs::hf::CONFIG.into(), gpt2_student::config_json(t, activation, dropout, &tokens)));
            files.push(("generation_config.json".into(), Value::Object(tokens)));
            weights.push((SINGLE.into(), gpt2_tensors(t, &named).map_err(bad)?));
            gpt2_student::ARCHITECTURE
        }
        Arch::Bert(t) => {
            let activation = spec.student.activation.name();
            files.push((
                crate::inputs::hf::CONFIG.into(),
                bert_student::config_json(t, activation, spec.student.dropout, seq),
            ));
            files.extend(sentence_modules(spec, t, seq));
            let (model, dense) = bert_tensors(t, &named, seq).map_err(bad)?;
            weights.push((SINGLE.into(), model));
            if !dense.is_empty() {
                weights.push(("2_Dense/model.safetensors".into(), dense));
            }
            bert_student::ARCHITECTURE
        }
    };
    let (path, tmp) = (dir.join(FOLDER), dir.join(format!("{FOLDER}.tmp")));
    for stale in [&tmp, &path] {
        if stale.exists() {
            std::fs::remove_dir_all(stale).map_err(|e| DistillError::io(stale, e))?;
        }
    }
    replace_via(&path, &tmp, |tmp| {
        std::fs::create_dir(tmp).map_err(|e| DistillError::io(tmp, e))?;
        for module in module_folders(&files) {
            std::fs::create_dir_all(tmp.join(&module)).map_err(|e| DistillError::io(&tmp.join(&module), e))?;
        }
        for (name, value) in &files {
            write_json(&tmp.join(name), value)?;
        }
        for (name, tensors) in &weights {
            write_safetensors(&tmp.join(name), tensors)?;
        }
        copy_tokenizer(tokenizer, tmp)?;
        sync_contents(tmp).map_err(|e| DistillError::io(tmp, e))
    })?;
    Ok(HfExport { folder: Some(FOLDER.into()), architecture: Some(name.into()), not_written: None })
}

/// The Hugging Face architecture a student has.
enum Arch<'a> {
    Llama(&'a TransformerSpec),
    Gpt2(&'a TransformerSpec),
    Bert(&'a TransformerSpec),
}

/// The architecture of the student of `spec`, by its head and norm: a language model with
/// LayerNorm is a GPT-2, one with RMSNorm a Llama, a sentence encoder a BERT ([`gpt2_spec`],
/// [`llama_spec`], [`bert_spec`]); a language model that is neither is refused with the reason
/// of the one its norm points to.
///
/// # Errors
/// One line saying why the student has no Hugging Face equivalent, for `report.json`.
fn architecture(spec: &Config) -> std::result::Result<Arch<'_>, String> {
    let t = match (spec.student.family, &spec.student.transformer) {
        (Family::Transformer, Some(t)) => t,
        (family, _) => {
            return Err(format!(
                "a student.family = \"{}\" student has no Hugging Face architecture (transformer students do)",
                family.name()
            ))
        }
    };
    match t.head {
        HeadKind::Lm if t.norm == NormKind::Layer => gpt2_spec(spec).map(Arch::Gpt2),
        HeadKind::Lm => llama_spec(spec).map(Arch::Llama),
        HeadKind::Embedding => bert_spec(spec).map(Arch::Bert),
        HeadKind::Classifier => {
            Err("a classifier head (student.transformer.head = \"classifier\": pooled tokens into one linear layer): \
             Hugging Face's BertForSequenceClassification has a tanh pooler before its classifier, so no equivalent"
                .into())
        }
    }
}

/// The sentence-transformers module folders named in `modules.json` among `files` (a module
/// without files, `Normalize`, still has its folder, as sentence-transformers saves it).
fn module_folders(files: &[(String, Value)]) -> Vec<String> {
    let modules = files.iter().filter(|(name, _)| name == "modules.json").filter_map(|(_, v)| v.as_array());
    modules.flatten().filter_map(|m| m["path"].as_str()).filter(|p| !p.is_empty()).map(String::from).collect()
}

/// The special token ids below `vocab` in the folder of `tokenizer`: from its
/// `generation_config.json`, else its `config.json` (a model folder's); empty elsewhere.
fn special_tokens(tokenizer: &Path, vocab: u64) -> Map<String, Value> {
    let folder = tokenizer.parent().unwrap_or(Path::new("."));
    let read = |name: &str| -> Option<Map<String, Value>> {
        let text = std::fs::read_to_string(folder.join(name)).ok()?;
        serde_json::from_str::<Value>(&text).ok()?.as_object().cloned()
    };
    let found = read("generation_config.json").or_else(|| read(crate::inputs::hf::CONFIG)).unwrap_or_default();
    let fits = |v: &Value| match v {
        Value::Array(ids) => ids.iter().all(|id| id.as_u64().is_some_and(|id| id < vocab)),
        id => id.as_u64().is_some_and(|id| id < vocab),
    };
    TOKEN_IDS.iter().filter_map(|&k| found.get(k).filter(|v| fits(v)).map(|v| (k.to_string(), v.clone()))).collect()
}

/// Copies `tokenizer` into `folder` as `tokenizer.json`, with its companions, or a
/// `tokenizer_config.json` that loads it as it is.
fn copy_tokenizer(tokenizer: &Path, folder: &Path) -> Result<()> {
    let copy = |from: &Path, name: &str| {
        std::fs::copy(from, folder.join(name)).map(|_| ()).map_err(|e| DistillError::io(from, e))
    };
    copy(tokenizer, crate::config::TOKENIZER)?;
    let beside = tokenizer.parent().unwrap_or(Path::new("."));
    let mut has_config = false;
    for name in TOKENIZER_COMPANIONS {
        if beside.join(name).is_file() {
            copy(&beside.join(name), name)?;
            has_config |= name == TOKENIZER_COMPANIONS[0];
        }
    }
    if !has_config {
        write_json(&folder.join(TOKENIZER_COMPANIONS[0]), &json!({"tokenizer_class": "PreTrainedTokenizerFast"}))?;
    }
    Ok(())
}

fn write_json(path: &Path, value: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value).expect("JSON serialises") + "\n";
    std::fs::write(path, text).map_err(|e| DistillError::io(path, e))
}

/// Writes `tensors` (fp32) to `path` as safetensors with `{"format": "pt"}` metadata.
fn write_safetensors(path: &Path, tensors: &[(String, Tensor)]) -> Result<()> {
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(name, t)| {
            let values = Vec::<f32>::try_from(t.to_kind(Kind::Float).contiguous().flatten(0, -1))
                .map_err(|e| DistillError::Torch(format!("{name}: {e}")))?;
            let shape = t.size().iter().map(|&n| n as usize).collect();
            Ok((name.clone(), shape, values.iter().flat_map(|v| v.to_le_bytes()).collect()))
        })
        .collect::<Result<_>>()?;
    let views = bytes
        .iter()
        .map(|(name, shape, data)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), data)
                .map(|view| (name.as_str(), view))
                .map_err(|e| DistillError::Torch(format!("{name}: {e:?}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let metadata = Some(HashMap::from([("format".to_string(), "pt".to_string())]));
    safetensors::tensor::serialize_to_file(views, &metadata, path)
        .map_err(|e| DistillError::io(path, std::io::Error::other(format!("{e:?}"))))
}
