//! A scenario whose teacher is a published Hugging Face checkpoint ([`TeacherFolder`]): the page
//! prices it by the preset that describes the checkpoint's `config.json`, and the cfg.toml it
//! exports names the user's copy of the folder instead (`teacher.hf`), so that `distill` trains
//! from it and `distill plan` prices it from the folder's own `config.json`, where `distill`
//! reads that folder's `model_type` ([`crate::schema::HF_MODEL_TYPES`]).
use serde::Serialize;

use crate::schema::{Config, HF_MODEL_TYPES};

/// The Hugging Face model folder a scenario's cfg.toml names as its teacher.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TeacherFolder {
    /// The Hub repository whose `config.json` the scenario's preset describes, e.g.
    /// `"meta-llama/Llama-2-7b-hf"`.
    pub repo: &'static str,
    /// The folder the cfg.toml names (`teacher.hf`, and its `tokenizer.json` as
    /// `data.tokenizer`), relative to the cfg.toml: where [`TeacherFolder::download`] puts it.
    pub dir: &'static str,
    /// The `model_type` of the repository's `config.json`.
    pub model_type: &'static str,
    /// Whether the repository is gated: the Hub serves it once its licence is accepted and
    /// `hf auth login` has run.
    pub gated: bool,
}

impl TeacherFolder {
    /// Whether `distill` reads a folder of this `model_type` as a teacher.
    pub fn trains(&self) -> bool {
        HF_MODEL_TYPES.contains(&self.model_type)
    }

    /// The command that fetches the folder beside the cfg.toml (the `hf` CLI of
    /// `huggingface_hub`, which replaced `huggingface-cli`).
    pub fn download(&self) -> String {
        format!("hf download {} --local-dir {}", self.repo, self.dir)
    }

    /// What the Hub asks before it serves the folder, as a parenthesis to follow
    /// [`TeacherFolder::download`] (empty for an open repository).
    pub fn access(&self) -> &'static str {
        if self.gated {
            " (gated: accept its licence on the Hub, then hf auth login)"
        } else {
            ""
        }
    }

    /// Why `distill` cannot train from this folder yet, without the "cannot train" prefix;
    /// `None` when it reads the folder's `model_type`.
    pub fn unread(&self) -> Option<String> {
        (!self.trains()).then(|| {
            format!(
                "a {} model folder as the teacher (teacher.hf; it reads {} folders)",
                self.model_type,
                HF_MODEL_TYPES.join(", ")
            )
        })
    }

    /// `config` as the cfg.toml names this folder: `teacher.hf` in place of the preset (the
    /// folder's `config.json` describes the teacher), where `distill` reads the folder;
    /// otherwise `config` unchanged.
    pub fn named_in(&self, mut config: Config) -> Config {
        if self.trains() {
            config.teacher.preset = None;
            config.teacher.hf = Some(self.dir.to_string());
        }
        config
    }
}

/// `untrainable` (the schema's line, [`crate::schema::untrainable`]) with the reason `folder`
/// adds, in the same form: `"distill cannot train this yet: a; b"`.
pub fn untrainable_with(untrainable: Option<String>, folder: Option<&TeacherFolder>) -> Option<String> {
    match (untrainable, folder.and_then(TeacherFolder::unread)) {
        (Some(line), Some(why)) => Some(format!("{line}; {why}")),
        (None, Some(why)) => Some(format!("distill cannot train this yet: {why}")),
        (line, None) => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LLAMA: TeacherFolder =
        TeacherFolder { repo: "meta-llama/Llama-2-7b-hf", dir: "Llama-2-7b-hf", model_type: "llama", gated: true };
    /// A `model_type` distill does not read (it reads no encoder-decoder).
    const T5: TeacherFolder =
        TeacherFolder { repo: "google-t5/t5-small", dir: "t5-small", model_type: "t5", gated: false };

    #[test]
    fn a_folder_distill_reads_replaces_the_preset() {
        let text = "[data]\ntokenizer = \"Llama-2-7b-hf/tokenizer.json\"\ninput_shape = [16]\nclasses = 32000\n\
                    [student]\nfamily = \"transformer\"\n[student.transformer]\nvocab = 32000\nlayers = 1\n\
                    d_model = 8\nheads = 2\n[teacher]\npreset = \"llama-2-7b\"\n";
        let config = Config::from_toml_str(text).unwrap();
        let named = LLAMA.named_in(config.clone());
        assert_eq!((named.teacher.preset.as_deref(), named.teacher.hf.as_deref()), (None, Some("Llama-2-7b-hf")));
        // the file it writes reads back: no preset beside the folder
        assert_eq!(
            Config::from_toml_str(&named.to_toml_string()).unwrap().teacher.hf.as_deref(),
            Some("Llama-2-7b-hf")
        );
        // a folder distill cannot read keeps the preset the page prices
        assert_eq!(T5.named_in(config.clone()), config);
        assert_eq!(LLAMA.download(), "hf download meta-llama/Llama-2-7b-hf --local-dir Llama-2-7b-hf");
    }

    #[test]
    fn a_folder_distill_cannot_read_is_named_after_the_schema_reasons() {
        assert_eq!(untrainable_with(None, Some(&LLAMA)), None);
        assert_eq!(untrainable_with(None, None), None);
        let t5 =
            format!("a t5 model folder as the teacher (teacher.hf; it reads {} folders)", HF_MODEL_TYPES.join(", "));
        assert_eq!(untrainable_with(None, Some(&T5)), Some(format!("distill cannot train this yet: {t5}")));
        let schema = "distill cannot train this yet: estimate.tensor_parallel = 2 (it splits no model across devices)";
        assert_eq!(untrainable_with(Some(schema.into()), Some(&T5)), Some(format!("{schema}; {t5}")));
        assert_eq!(untrainable_with(Some(schema.into()), Some(&LLAMA)).as_deref(), Some(schema));
    }
}
