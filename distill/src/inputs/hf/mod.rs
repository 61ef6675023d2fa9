//! Hugging Face model folders as teachers (`--teacher DIR`, `[teacher] hf = "DIR"`): a folder
//! with `config.json`, `model.safetensors` (or shards and `model.safetensors.index.json`) and
//! `tokenizer.json`, as `save_pretrained` writes it. The Llama family (llama, mistral, qwen2),
//! GPT-2 and BERT-style encoders (bert, pooled to a sentence embedding as the folder's
//! sentence-transformers `modules.json` says, else by the mean of the tokens) are built natively
//! from the config and the safetensors, with no Python at run time; the data's tokenizer
//! defaults to the folder's `tokenizer.json`.
//!
//! One job per file: `model_config` reads `config.json` by its `model_type` (`keys` its typed
//! keys and the supported types), `config` the Llama family's, `weights` the safetensors headers
//! and tensors, `layers` what the models share (linear layers, LayerNorm, activations, the
//! loader, and GPT-2's and BERT's embeddings, attention and feed-forward), `rope` the rotary frequencies, `llama` the decoder and its forward, `gpt2` GPT-2,
//! `bert` the encoder, `pooling` its sentence embedding, `model` the one of them a folder holds,
//! `plan` what the memory estimator needs of the folder (its exact parameter count and layer
//! list). The other way, the export stage's `student_folder` ([`crate::export::student_folder`])
//! writes a trained student as such a folder, `llama_student` and `bert_student` saying which
//! students are a `LlamaForCausalLM` or a `BertModel` and under which names.
use std::path::{Path, PathBuf};

use tch::{Device, Kind};

use crate::config::TOKENIZER;
use crate::host::error::{DistillError, Result};

pub mod bert;
pub mod config;
pub mod gpt2;
pub mod keys;
pub mod layers;
pub mod llama;
pub mod model;
pub mod model_config;
pub mod plan;
pub mod pooling;
pub mod rope;
pub mod weights;

pub use config::HfConfig;
pub use llama::HfDecoder;
pub use model::HfModel;
pub use model_config::ModelConfig;

/// The folder's config file (its tokenizer: [`crate::config::TOKENIZER`]).
pub const CONFIG: &str = "config.json";

/// The files that make the model of the folder `dir`, in name order: `config.json`, the
/// safetensors and their index, and a sentence encoder's `modules.json` with its modules'
/// `config.json` and safetensors (`1_Pooling/config.json`, `2_Dense/model.safetensors`): what a
/// resumed run or the teacher cache must find unchanged; not the tokenizer, which is the
/// data's, nor a README.
pub fn model_files(dir: &Path) -> Vec<PathBuf> {
    let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let entries = std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path());
    let mut files: Vec<PathBuf> = Vec::new();
    for p in entries {
        let n = name(&p);
        if p.is_dir() {
            let module = ["config.json", weights::SINGLE].map(|f| p.join(f));
            files.extend(module.into_iter().filter(|f| f.is_file()));
        } else if n == CONFIG || n.ends_with(".safetensors") || n == weights::INDEX || n == pooling::MODULES {
            files.push(p);
        }
    }
    files.sort();
    files
}

/// Reads `dir/config.json`, and a BERT's pooling from the folder ([`pooling::SentencePooling::read`]).
///
/// # Errors
/// [`DistillError::Teacher`]: the folder has no `config.json` (naming the folder), the file
/// is not a config distill can build ([`ModelConfig::parse`], naming the file), or a BERT's
/// `modules.json` is not one distill runs.
pub fn read_config(dir: &Path) -> Result<ModelConfig> {
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
    let mut config = ModelConfig::parse(&text).map_err(|m| DistillError::teacher(&path, m))?;
    if let ModelConfig::Bert(c) = &mut config {
        c.pooling = pooling::SentencePooling::read(dir)?;
    }
    Ok(config)
}

/// The model of the folder `dir` on `device`, its weights in `kind`, and its parameter elements
/// (a tied head counted once; a BERT's pooler, which no sentence embedding runs, not counted).
///
/// # Errors
/// As [`read_config`], [`weights::Checkpoint::open`], [`HfDecoder::load`],
/// [`gpt2::Gpt2::load`] and [`bert::BertEncoder::load`].
pub fn load(dir: &Path, kind: Kind, device: Device) -> Result<(HfModel, u64)> {
    let config = read_config(dir)?;
    let checkpoint = weights::Checkpoint::open(dir)?;
    let model: HfModel = match config {
        ModelConfig::Llama(c) => HfDecoder::load(dir, c, &checkpoint, kind, device)?.into(),
        ModelConfig::Gpt2(c) => gpt2::Gpt2::load(c, &checkpoint, kind, device)?.into(),
        ModelConfig::Bert(c) => bert::BertEncoder::load(dir, c, &checkpoint, kind, device)?.into(),
    };
    let params = model.named_parameters().iter().map(|(_, t)| t.numel() as u64).sum();
    Ok((model, params))
}

/// Whether every safetensors file of the model folder `dir` (its checkpoint, and a sentence
/// encoder's `Dense` modules) stores its tensors in `kind`, so that the model [`load`]ed in
/// `kind` holds the files' values exactly (always true of fp32, which widens any of them).
///
/// # Errors
/// As [`weights::Checkpoint::open`], for a header that cannot be read.
pub fn stored_in(dir: &Path, kind: Kind) -> Result<bool> {
    let mut folders: Vec<PathBuf> = model_files(dir)
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "safetensors"))
        .filter_map(|f| f.parent().map(Path::to_path_buf))
        .collect();
    folders.dedup();
    for folder in folders {
        if !weights::Checkpoint::open(&folder)?.stored_in(kind) {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentence_encoders_modules_are_among_its_model_files() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/hf/bert");
        let names: Vec<String> =
            model_files(&dir).iter().map(|p| p.strip_prefix(&dir).unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["1_Pooling/config.json", "config.json", "model.safetensors", "modules.json"]);
    }

    #[test]
    fn a_folder_is_stored_in_the_kinds_its_safetensors_hold() {
        // the BERT fixture is saved in fp16 (make_hf_fixtures.py), the GPT-2 one in fp32
        let fixture = |name: &str| Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/hf").join(name);
        let kinds = |dir: &Path| [Kind::Half, Kind::BFloat16, Kind::Float].map(|k| stored_in(dir, k).unwrap());
        assert_eq!(kinds(&fixture("bert")), [true, false, true]);
        assert_eq!(kinds(&fixture("gpt2")), [false, false, true]);
    }
}
