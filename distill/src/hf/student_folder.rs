//! A trained student written as a Hugging Face model folder, `hf/` beside its
//! `student.safetensors` and `student.pt`, as `save_pretrained` lays one out, so that
//! `AutoModelForCausalLM.from_pretrained("OUT/hf")` loads it (and vLLM serves it, llama.cpp
//! converts it):
//!
//! * `config.json`: the architecture and its hyperparameters ([`super::llama_student`]);
//! * `model.safetensors`: the student's tensors under the architecture's names, fp32, with the
//!   `{"format": "pt"}` metadata transformers checks;
//! * `tokenizer.json`: the run's tokenizer (`data.tokenizer`, or the teacher folder's), with the
//!   `tokenizer_config.json` and `special_tokens_map.json` beside it when it has them (else a
//!   `tokenizer_config.json` naming `PreTrainedTokenizerFast`, which takes `tokenizer.json`
//!   as it is);
//! * `generation_config.json`: the special token ids (`bos_token_id`, `eos_token_id`,
//!   `pad_token_id`) found in the tokenizer's folder (a model folder's `generation_config.json`,
//!   else its `config.json`), none when it has neither.
//!
//! The folder is filled under `hf.tmp/`, flushed, and renamed to `hf/` ([`crate::durable`]), so
//! a reader never sees part of one. A student with no equivalent architecture gets no folder;
//! [`HfExport::not_written`] says why, for `report.json`.
use std::collections::HashMap;
use std::path::Path;

use estimator_wasm::schema::Config;
use serde_json::{json, Map, Value};
use tch::{Kind, Tensor};

use super::llama_student::{config_json, llama_spec, llama_tensors, ARCHITECTURE};
use crate::durable::{replace_via, sync_contents};
use crate::error::{DistillError, Result};
use crate::report::HfExport;

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
    let t = match llama_spec(spec) {
        Ok(t) => t,
        Err(why) => return Ok(HfExport { not_written: Some(why), ..HfExport::default() }),
    };
    let Some(tokenizer) = tokenizer else {
        let why = "the run has no tokenizer.json (data.tokenizer) to ship with the model".to_string();
        return Ok(HfExport { not_written: Some(why), ..HfExport::default() });
    };
    let file = dir.join("student.safetensors");
    let named = Tensor::read_safetensors(&file).map_err(|e| DistillError::Torch(format!("{}: {e}", file.display())))?;
    let tensors = llama_tensors(t, &named).map_err(|m| DistillError::Torch(format!("{}: {m}", file.display())))?;
    let seq = spec.data.input_shape.first().copied().unwrap_or(1);
    let tokens = special_tokens(tokenizer, t.vocab);
    let config = config_json(t, seq, &tokens);
    let (path, tmp) = (dir.join(FOLDER), dir.join(format!("{FOLDER}.tmp")));
    for stale in [&tmp, &path] {
        if stale.exists() {
            std::fs::remove_dir_all(stale).map_err(|e| DistillError::io(stale, e))?;
        }
    }
    replace_via(&path, &tmp, |tmp| {
        std::fs::create_dir(tmp).map_err(|e| DistillError::io(tmp, e))?;
        write_json(&tmp.join("config.json"), &config)?;
        write_json(&tmp.join("generation_config.json"), &Value::Object(tokens.clone()))?;
        write_safetensors(&tmp.join("model.safetensors"), &tensors)?;
        copy_tokenizer(tokenizer, tmp)?;
        sync_contents(tmp).map_err(|e| DistillError::io(tmp, e))
    })?;
    Ok(HfExport { folder: Some(FOLDER.into()), architecture: Some(ARCHITECTURE.into()), not_written: None })
}

/// The special token ids below `vocab` in the folder of `tokenizer`: from its
/// `generation_config.json`, else its `config.json` (a model folder's); empty elsewhere.
fn special_tokens(tokenizer: &Path, vocab: u64) -> Map<String, Value> {
    let folder = tokenizer.parent().unwrap_or(Path::new("."));
    let read = |name: &str| -> Option<Map<String, Value>> {
        let text = std::fs::read_to_string(folder.join(name)).ok()?;
        serde_json::from_str::<Value>(&text).ok()?.as_object().cloned()
    };
    let found = read("generation_config.json").or_else(|| read(super::CONFIG)).unwrap_or_default();
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
    copy(tokenizer, super::TOKENIZER)?;
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
