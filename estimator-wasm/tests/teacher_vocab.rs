//! A language model's teacher whose vocabulary is padded past its tokenizer's (`teacher.vocab`):
//! accepted only where it means something, and priced at the teacher's own logit width.
use estimator_wasm::{estimate, Cat, Config, Inputs, Moment, Plan};

/// A one-layer causal LM over 1,000 tokens, S = 64, batch 2, fp32 on CPU; `teacher` is the
/// `[teacher]` table's body.
fn lm(teacher: &str) -> String {
    format!(
        "[data]\ntokenizer = \"t.json\"\ninput_shape = [64]\nclasses = 1000\n[student]\nfamily = \"transformer\"\n\
         [student.transformer]\nvocab = 1000\nlayers = 1\nd_model = 32\nheads = 4\nrope_theta = 10000.0\n\
         tie_embeddings = true\nhead = \"lm\"\n[kd]\nobjective = \"logits\"\n[teacher]\ncache_logits = false\n{teacher}\
         [train]\nbatch_size = 2\neval_batch_size = 2\n[estimate]\ntarget = \"cpu\"\n"
    )
}

fn error(text: &str) -> String {
    Config::from_toml_str(text).unwrap_err().to_string()
}

fn logits_at_backward(plan: &Plan) -> u64 {
    let m = plan.moments.iter().find(|m| m.moment == Moment::Backward).unwrap();
    m.categories.get(Cat::Logits)
}

/// The teacher's logits [B, S, 1,280] are held whole (the shared 1,000 columns are a view of
/// them): 2 x 64 x 280 x 4 bytes more than a teacher of the student's width; nothing else moves.
#[test]
fn a_padded_teacher_is_priced_at_its_own_width() {
    let plain = Config::from_toml_str(&lm("params = 1000\n")).unwrap();
    let padded = Config::from_toml_str(&lm("params = 1000\nvocab = 1280\n")).unwrap();
    assert_eq!(padded.teacher.padded_vocab(1000), Some((1280, 1000)));
    assert_eq!(plain.teacher.padded_vocab(1000), None);
    let (plain, padded) =
        (estimate(&plain, &Inputs::default()).unwrap(), estimate(&padded, &Inputs::default()).unwrap());
    assert_eq!(logits_at_backward(&padded) - logits_at_backward(&plain), 2 * 64 * 280 * 4);
    let loss = |p: &Plan| p.layers.iter().find(|l| l.id == "loss").unwrap().saved_bytes;
    assert_eq!(loss(&padded), loss(&plain));
}

/// A teacher.arch of the padded width is read at that width; without teacher.vocab it is
/// refused (its vocabulary is not the data's), naming the fix.
#[test]
fn a_teacher_arch_is_read_at_the_teachers_width() {
    let arch = "[teacher.arch]\nfamily = \"transformer\"\n[teacher.arch.transformer]\nvocab = 1280\nlayers = 2\n\
                d_model = 32\nheads = 4\nrope_theta = 10000.0\ntie_embeddings = true\nhead = \"lm\"\n";
    let padded = Config::from_toml_str(&lm(&format!("vocab = 1280\n{arch}"))).unwrap();
    let plan = estimate(&padded, &Inputs::default()).unwrap();
    // embedding 1280 x 32 (tied head); 2 layers of attention (4 x 32^2 weights, 4 x 32
    // biases), a GELU MLP of 4 x 32 (2 x 32 x 128 weights, 128 + 32 biases) and two LayerNorms
    // (2 x 2 x 32); the final LayerNorm
    let layer = 4 * 32 * 32 + 4 * 32 + 2 * 32 * 128 + 128 + 32 + 2 * 2 * 32;
    assert_eq!(plan.params.teacher, 1280 * 32 + 2 * layer + 2 * 32);
    let e = error(&lm(arch));
    assert!(e.contains("data.classes") && e.contains("1280"), "{e}");
}

#[test]
fn teacher_vocab_is_refused_where_it_means_nothing() {
    let e = error(&lm("params = 1000\nvocab = 999\n"));
    assert!(e.starts_with("teacher.vocab: is 999, less than data.classes = 1000"), "{e}");
    let e = error(&lm("params = 1000\nvocab = 0\n"));
    assert!(e.starts_with("teacher.vocab:"), "{e}");
    let classifier = "[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\nhidden = [5]\n\
                      [teacher]\nparams = 10\nvocab = 4\n";
    let e = error(classifier);
    assert!(e.starts_with("teacher.vocab: only a language model's teacher"), "{e}");
}
