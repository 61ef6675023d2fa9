//! What `distill` can train of a valid cfg.toml ([`untrainable`]): the estimator plans more than
//! the trainer runs (transformer classifiers, bf16-weight recipes, several GPUs), and the explorer says so next to every cfg.toml it writes.
use crate::schema::{Config, Family, HeadKind, Precision, Target};

/// The `model_type`s (`config.json`) of the Hugging Face model folders whose scenarios the
/// explorer exports as folder teachers (`teacher.hf`): the causal decoders distill trains a
/// language-model student from, the Llama family and GPT-2, as
/// `distill::inputs::hf::keys::LANGUAGE_MODELS` lists them (the end-to-end test
/// `explorer_folder` holds the two lists equal). distill also reads bert folders, which teach
/// sentence encoders; the explorer names a scenario's folder in its cfg.toml only for these.
pub const HF_MODEL_TYPES: [&str; 4] = ["llama", "mistral", "qwen2", "gpt2"];

/// Why `distill` cannot train `config` yet, as one line naming the keys, or `None` when it
/// trains it (given its data files and teacher). What it trains: mlp and cnn students on
/// image or feature data; transformer students as sentence encoders (`head = "embedding"`) and
/// causal language models (`head = "lm"`) on text (`data.tokenizer`); precisions fp32, fp16 and bf16; one device, or data-parallel
/// replicas on CPUs (`estimate.target = "cpu"`).
pub fn untrainable(config: &Config) -> Option<String> {
    let mut reasons = Vec::new();
    if let Some(t) = config.student.transformer.as_ref().filter(|_| config.student.family == Family::Transformer) {
        match t.head {
            HeadKind::Lm if config.data.tokenizer.is_none() => {
                reasons.push("a language model without text (set data.tokenizer)".to_string());
            }
            HeadKind::Classifier => reasons.push(
                "transformer classifiers (head = \"classifier\"); it trains sentence encoders (head = \"embedding\")"
                    .to_string(),
            ),
            HeadKind::Embedding if config.data.tokenizer.is_none() => {
                reasons.push("a sentence encoder without text (set data.tokenizer)".to_string());
            }
            HeadKind::Embedding | HeadKind::Lm => {}
        }
    }
    for (key, p) in [("train.precision", config.train.precision), ("teacher.precision", config.teacher.precision)] {
        if matches!(p, Precision::PureBf16 | Precision::Bf16Master) {
            reasons.push(format!("{key} = \"{}\" (it trains fp32, fp16 and bf16)", p.name()));
        }
    }
    let e = &config.estimate;
    let split = [("tensor_parallel", e.tensor_parallel), ("pipeline_stages", e.pipeline_stages)];
    for (key, n) in split {
        if n > 1 {
            reasons.push(format!("estimate.{key} = {n} (it splits no model across devices)"));
        }
    }
    if e.data_parallel > 1 && (e.target == Target::Cuda || e.zero_stage > 0) {
        reasons.push(format!(
            "estimate.data_parallel = {} on {} (it trains data-parallel DDP replicas on CPUs, over Gloo, launched by torchrun)",
            e.data_parallel,
            if e.zero_stage > 0 { format!("ZeRO stage {}", e.zero_stage) } else { "GPUs".to_string() }
        ));
    }
    (!reasons.is_empty()).then(|| format!("distill cannot train this yet: {}", reasons.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        Config::from_toml_str(text).unwrap()
    }

    const ENCODER: &str = "[data]\ntokenizer = \"tokenizer.json\"\ninput_shape = [128]\nclasses = 384\n\
        [student]\nfamily = \"transformer\"\n[student.transformer]\nvocab = 30522\nlayers = 3\nd_model = 384\n\
        heads = 12\nhead = \"embedding\"\n[kd]\nobjective = \"embedding_mse\"\n[teacher]\nparams = 1000\n";

    #[test]
    fn images_and_sentence_encoders_train() {
        assert_eq!(
            untrainable(&config(
                "[data]\ninput_shape = [1, 28, 28]\nclasses = 10\n[student]\nfamily = \"cnn\"\nchannels = [8]\n[teacher]\nparams = 1\n"
            )),
            None
        );
        assert_eq!(untrainable(&config(ENCODER)), None);
        assert_eq!(
            untrainable(&config(&ENCODER.replace("[teacher]", "[train]\nprecision = \"bf16\"\n[teacher]"))),
            None
        );
    }

    #[test]
    fn what_distill_cannot_train_is_named_by_key() {
        let lm = "[data]\ninput_shape = [16]\nclasses = 50\n[student]\nfamily = \"transformer\"\n\
                  [student.transformer]\nvocab = 50\nlayers = 1\nd_model = 8\nheads = 2\n[teacher]\nparams = 1\n";
        assert_eq!(
            untrainable(&config(lm)).as_deref(),
            Some("distill cannot train this yet: a language model without text (set data.tokenizer)")
        );
        let with_text = lm.replace("[data]\n", "[data]\ntokenizer = \"tokenizer.json\"\n");
        assert_eq!(untrainable(&config(&with_text)), None);
        let pure = ENCODER
            .replace("[teacher]", "[train]\nprecision = \"pure_bf16\"\n[estimate]\ndata_parallel = 2\n[teacher]");
        assert_eq!(
            untrainable(&config(&pure)).as_deref(),
            Some(
                "distill cannot train this yet: train.precision = \"pure_bf16\" (it trains fp32, fp16 and bf16); \
                 estimate.data_parallel = 2 on GPUs (it trains data-parallel DDP replicas on CPUs, over Gloo, launched \
                 by torchrun)"
            )
        );
        // the same replicas on CPUs train (torchrun --nproc-per-node=2)
        let cpu = ENCODER.replace("[teacher]", "[estimate]\ndata_parallel = 2\ntarget = \"cpu\"\n[teacher]");
        assert_eq!(untrainable(&config(&cpu)), None);
        let zero = cpu.replace("target = \"cpu\"", "target = \"cpu\"\nzero_stage = 1");
        assert!(untrainable(&config(&zero)).unwrap().contains("estimate.data_parallel = 2 on ZeRO stage 1"));
        let no_text = ENCODER.replace("tokenizer = \"tokenizer.json\"\n", "");
        assert!(untrainable(&config(&no_text)).unwrap().contains("data.tokenizer"));
        // structured pruning narrows a sentence encoder's feed-forward
        let structured = format!("{ENCODER}[prune]\nmethod = \"structured\"\nsparsity = 0.5\n");
        assert_eq!(untrainable(&config(&structured)), None);
    }
}
