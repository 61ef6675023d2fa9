//! A language model's teacher whose vocabulary is padded past its tokenizer's
//! (`lm/lm-teacher-padded.pt`: lm-teacher.pt with 128 spare embedding rows, 640 logits of which
//! the first 512 are lm-teacher.pt's): refused with both sizes and the slice named, and with
//! `teacher.vocab = 640` distilled over the 512 shared tokens exactly as the unpadded teacher is.
use std::path::Path;

use distill::config::WrittenCfg;
use distill::report::PaddedVocab;
use distill::run::load::Loaded;
use e2e::{fixture, lm_config, metrics_lines, serial, train};
use tch::Device;

const WITH_VOCAB: (&str, &str) = ("[kd]", "[teacher]\nvocab = 640\n[kd]");

#[test]
fn a_padded_teacher_is_refused_naming_both_sizes_and_the_slice() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = lm_config(dir.path(), &[]);
    let e = train(&fixture("lm/lm-teacher-padded.pt"), &cfg, &dir.path().join("a"), false).unwrap_err().to_string();
    assert!(
        e.contains(
            "the teacher outputs logits over 640 tokens but data.classes = student.transformer.vocab = 512 (data.tokenizer \
             has 512 tokens): if its last 128 columns pad its vocabulary past the tokenizer's, set teacher.vocab = 640"
        ),
        "{e}"
    );
    assert!(!dir.path().join("a/run").exists(), "nothing is written for a refused run");
}

/// The padded teacher with `teacher.vocab = 640` trains step for step as lm-teacher.pt does:
/// the same student initialisation (the first 512 rows of the padded table), the same soft
/// targets (its first 512 logits, renormalised over them), the same losses and perplexities.
#[test]
fn a_padded_teacher_distils_over_the_shared_vocabulary_as_the_unpadded_one() {
    let dir = tempfile::tempdir().unwrap();
    let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&a_dir).unwrap();
    std::fs::create_dir_all(&b_dir).unwrap();
    let plain = lm_config(&a_dir, &[("epochs = 2", "epochs = 1")]);
    let padded = lm_config(&b_dir, &[("epochs = 2", "epochs = 1"), WITH_VOCAB]);
    let a = train(&fixture("lm/lm-teacher.pt"), &plain, &dir.path().join("a"), false).unwrap();
    let b = train(&fixture("lm/lm-teacher-padded.pt"), &padded, &dir.path().join("b"), false).unwrap();
    let lines = |p: &Path| -> Vec<String> {
        metrics_lines(&p.join("run/metrics.jsonl"))
            .iter()
            .map(|v| format!("{} {} {} {} {}", v["step"], v["loss"], v["kd"], v["ce"], v["perplexity"]))
            .collect()
    };
    let (la, lb) = (lines(&dir.path().join("a")), lines(&dir.path().join("b")));
    assert!(la.len() > 3, "{la:?}");
    assert_eq!(la, lb);
    assert_eq!(a.teacher.test_perplexity, b.teacher.test_perplexity);
    assert_eq!(a.student.test_perplexity, b.student.test_perplexity);
    assert_eq!(
        (a.teacher.padded_vocab, b.teacher.padded_vocab),
        (None, Some(PaddedVocab { logits: 640, shared: 512 }))
    );
}

/// A student as wide as the padded teacher (640) over a tokenizer of 512 is warned about: it
/// would learn the teacher's probabilities for 128 tokens no text holds.
#[test]
fn a_student_wider_than_its_tokenizer_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = lm_config(
        dir.path(),
        &[("classes = 512", "classes = 640"), ("vocab = 512", "vocab = 640"), ("init_from_teacher = [1]\n", "")],
    );
    let loaded = {
        let _guard = serial();
        let cfg = WrittenCfg::load(&cfg, &[]).unwrap();
        let agreement = distill::train::objective::from_spec(&cfg.spec.kd).agreement();
        Loaded::load(&cfg, &fixture("lm/lm-teacher-padded.pt"), agreement, Device::Cpu).unwrap()
    };
    assert!(
        loaded
            .warnings
            .iter()
            .any(|w| w.contains("set data.classes = student.transformer.vocab = 512 and teacher.vocab = 640")),
        "{:?}",
        loaded.warnings
    );
}
