//! Hugging Face model folders as teachers (`--teacher DIR`, `[teacher] hf = "DIR"`): a folder
//! with `config.json`, `model.safetensors` (or shards and `model.safetensors.index.json`) and
//! `tokenizer.json`, as `save_pretrained` writes it. The Llama family (llama, mistral, qwen2) is
//! built natively from the config and the safetensors, with no Python at run time; the data's
//! tokenizer defaults to the folder's `tokenizer.json`.
//!
//! One job per file: `config` reads `config.json`, `weights` the safetensors headers and tensors,
//! `rope` the rotary frequencies, `llama` the decoder and its forward, `plan` what the memory
//! estimator needs of the folder (its exact parameter count and layer list). The other way,
//! the export stage's `student_folder` ([`crate::export::student_folder`]) writes a trained
//! student as such a folder, `llama_student` and `bert_student` saying which students are a
//! `LlamaForCausalLM` or a `BertModel` and under which names.
use std::path::{Path, PathBuf};

use tch::{Device, Kind};

use crate::config::TOKENIZER;
use crate::host::error::{DistillError, Result};

pub mod config;
pub mod llama;
pub mod plan;
pub mod rope;
pub mod weights;

pub use config::HfConfig;
pub use llama::HfDecoder;

/// The folder's config file (its tokenizer: [`crate::config::TOKENIZER`]).
pub const CONFIG: &str = "config.json";

/// The files that make the model of the folder `dir`, in name order: `config.json`, the
/// safetensors and their index (what a resumed run or the teacher cache must find unchanged;
/// not the tokenizer, which is the data's, nor a README).
pub fn model_files(dir: &Path) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path());
    let mut files: Vec<PathBuf> = entries
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            name == CONFIG || name.ends_with(".safetensors") || name == weights::INDEX
        })
        .collect();
    files.sort();
    files
}

/// Reads `dir/config.json`.
///
/// # Errors
/// [`DistillError::Teacher`]: the folder has no `config.json` (naming the folder), or the file
/// is not a config distill can build ([`HfConfig::parse`], naming the file).
pub fn read_config(dir: &Path) -> Result<HfConfig> {
    let path = dir.join(CONFIG);
    if !path.is_file() {
        return Err(DistillError::teacher(
            dir,
            format!(
                "no {CONFIG}: --teacher takes a TorchScript file or a Hugging Face model folder ({CONFIG}, model.safetensors or its \
                 shards, {TOKENIZER}), as save_pretrained writes it"
            ),
        ));
    }
    let text =
        std::fs::read_to_string(&path).map_err(|e| DistillError::teacher(&path, format!("cannot read it ({e})")))?;
    HfConfig::parse(&text).map_err(|m| DistillError::teacher(&path, m))
}

/// The decoder of the model folder `dir` on `device`, its weights in `kind`, and its parameter
/// elements (a tied head counted once).
///
/// # Errors
/// As [`read_config`], [`weights::Checkpoint::open`] and [`HfDecoder::load`].
pub fn load(dir: &Path, kind: Kind, device: Device) -> Result<(HfDecoder, u64)> {
    let config = read_config(dir)?;
    let checkpoint = weights::Checkpoint::open(dir)?;
    let decoder = HfDecoder::load(dir, config, &checkpoint, kind, device)?;
    let params = decoder.named_parameters().iter().map(|(_, t)| t.numel() as u64).sum();
    Ok((decoder, params))
}
