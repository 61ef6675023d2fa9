//! FLOPs of one training step (`estimator_wasm::memory::flops`), hand-computed for each family
//! the estimator prices: 2 FLOPs per multiply-accumulate of every product, backward 2 x forward
//! except the first layer's (no input gradient), attention's `4 s^2 h d_head` forward, the
//! loss elementwise per logit, the teacher only when it runs online.
use estimator_wasm::{Config, Inputs, MemoryModel, StepFlops};

fn flops(toml: &str, b: u64) -> (StepFlops, Vec<String>) {
    let config = Config::from_toml_str(toml).unwrap();
    let plan = MemoryModel::new(&config, &Inputs::default()).unwrap().plan(b).unwrap();
    (plan.flops, plan.notes)
}

const MLP: &str = "[data]\ninput_shape = [784]\nclasses = 10\n[student]\nfamily = \"mlp\"\nhidden = [256]\n\
                   [teacher]\nparams = 1000\n[estimate]\ntarget = \"cpu\"\n";

#[test]
fn mlp_step_counts_both_products_and_the_first_layers_weight_gradient_only() {
    let (f, _) = flops(MLP, 32);
    // fc1 784 x 256 and head 256 x 10: 2 x (200704 + 2560) = 406528 per sample
    assert_eq!(f.student_forward, 32 * 406_528);
    // fc1's input is the data (no gradient): 401408; the head's weight and input: 2 x 5120
    assert_eq!(f.student_backward, 32 * (401_408 + 10_240));
    // KD + CE over 10 logits, 44 FLOPs each
    assert_eq!(f.loss, 32 * 440);
    // the teacher's logits are cached by default: no teacher FLOPs per step
    assert_eq!((f.teacher_forward, f.recompute), (0, 0));
    assert_eq!(f.model, 32 * (406_528 + 411_648 + 440));
    assert_eq!(f.hardware, f.model);
}

#[test]
fn an_online_teacher_adds_its_forward_by_layer_or_two_flops_per_parameter() {
    let online = MLP.replace("params = 1000\n", "params = 1000\ncache_logits = false\n");
    let (f, notes) = flops(&online, 4);
    assert_eq!(f.teacher_forward, 4 * 2000);
    assert!(notes.iter().any(|n| n.contains("2 x params per token")), "{notes:?}");
    let arch =
        MLP.replace("params = 1000\n", "cache_logits = false\n[teacher.arch]\nfamily = \"mlp\"\nhidden = [512, 512]\n");
    let (f, notes) = flops(&arch, 4);
    // 784 x 512 + 512 x 512 + 512 x 10 multiply-accumulates, 2 FLOPs each
    assert_eq!(f.teacher_forward, 4 * 2 * (401_408 + 262_144 + 5_120));
    assert!(!notes.iter().any(|n| n.contains("2 x params per token")), "{notes:?}");
    // labels only (alpha = 0): no teacher, cross-entropy's 12 FLOPs per logit
    let (f, _) = flops(&format!("{online}[kd]\nalpha = 0.0\n"), 4);
    assert_eq!((f.teacher_forward, f.loss), (0, 4 * 120));
}

#[test]
fn cnn_counts_each_output_position() {
    let cnn = "[data]\ninput_shape = [1, 28, 28]\nclasses = 10\n[student]\nfamily = \"cnn\"\nchannels = [8]\n\
               [teacher]\nparams = 1000\n[estimate]\ntarget = \"cpu\"\n";
    let (f, _) = flops(cnn, 2);
    // conv 8 x 1 x 3 x 3 at 28 x 28: 2 x 56448 = 112896; head over 8 x 14 x 14 = 1568: 31360
    assert_eq!(f.student_forward, 2 * (112_896 + 31_360));
    assert_eq!(f.student_backward, 2 * (112_896 + 2 * 31_360));
}

#[test]
fn checkpointing_recomputes_every_segment_but_the_last() {
    // fc1..fc3 and head in 3 segments {fc1, act, fc2} {act, fc3} {act, head}: the first two again
    let text = "[data]\ninput_shape = [50]\nclasses = 8\n[student]\nfamily = \"mlp\"\nhidden = [64, 64, 64]\n\
                checkpointing = 3\n[teacher]\nparams = 1000\n[estimate]\ntarget = \"cpu\"\n";
    let (f, _) = flops(text, 16);
    assert_eq!(f.recompute, 16 * (2 * 50 * 64 + 2 * 2 * 64 * 64));
    assert_eq!(f.hardware - f.model, f.recompute);
}

const LM: &str = "[data]\ninput_shape = [16]\nclasses = 40\n[student]\nfamily = \"transformer\"\ndropout = 0.1\n\
                  [student.transformer]\nvocab = 40\nlayers = 2\nd_model = 32\nheads = 4\nkv_heads = 2\n\
                  mlp = \"swiglu\"\nmlp_width = 48\nnorm = \"rms\"\nattention = \"flash\"\ntie_embeddings = true\n\
                  bias = false\n[train]\nbatch_size = 4\n[teacher]\nparams = 1000\n[estimate]\ntarget = \"cpu\"\n";

#[test]
fn decoder_counts_projections_attention_and_the_flash_backwards_scores() {
    let (f, _) = flops(LM, 4);
    // per block, s = 16, d = 32: qkv 32 -> 64 (4 query + 2 x 2 kv heads of 8): 65536;
    // q k^T and probs v over 4 heads: 4 x 16^2 x 32 = 32768; proj 32768; SwiGLU fc1 32 -> 96:
    // 98304; fc2 48 -> 32: 49152. Tied head 32 -> 40 over 16 rows: 40960
    let block = 65_536 + 32_768 + 32_768 + 98_304 + 49_152;
    assert_eq!(f.student_forward, 4 * (2 * block + 40_960));
    // every product's input needs a gradient after the embedding
    assert_eq!(f.student_backward, 2 * f.student_forward);
    // the flash backward computes q k^T again: 2 x 16^2 x 32 per block
    assert_eq!(f.recompute, 4 * 2 * 16_384);
    // a language model's teacher runs on every batch: 2 x 1000 params x 16 tokens
    assert_eq!(f.teacher_forward, 4 * 32_000);
    assert_eq!(f.loss, 4 * 16 * 40 * 44);
    // the math kernel (and flash on CPU with attention dropout) recomputes nothing
    let (math, _) = flops(&LM.replace("\"flash\"", "\"math\""), 4);
    let (fallback, _) = flops(&LM.replace("bias = false", "bias = false\nattention_dropout = 0.1"), 4);
    assert_eq!((math.recompute, fallback.recompute, math.student_forward), (0, 0, f.student_forward));
    let cuda = LM.replace("bias = false", "bias = false\nattention_dropout = 0.1").replace("\"cpu\"", "\"cuda\"");
    assert_eq!(flops(&cuda, 4).0.recompute, f.recompute);
}

#[test]
fn encoder_counts_its_projection_head_and_embedding_loss() {
    let enc = "[data]\ninput_shape = [8]\nclasses = 16\ntokenizer = \"t.json\"\n[student]\nfamily = \"transformer\"\n\
               [student.transformer]\nvocab = 50\nlayers = 1\nd_model = 32\nheads = 2\nhead = \"embedding\"\n\
               attention = \"math\"\n[kd]\nobjective = \"embedding_mse\"\nalpha = 1.0\n[teacher]\nparams = 1000\n\
               [estimate]\ntarget = \"cpu\"\n";
    let (f, _) = flops(enc, 3);
    // s = 8, d = 32, width 128: qkv 2 x 8 x 32 x 96 = 49152, scores 4 x 64 x 32 = 8192,
    // proj 16384, fc1 and fc2 65536 each; mean pool, then the 32 -> 16 projection: 1024
    assert_eq!(f.student_forward, 3 * (49_152 + 8_192 + 16_384 + 2 * 65_536 + 1_024));
    assert_eq!(f.student_backward, 2 * f.student_forward);
    assert_eq!(f.loss, 3 * 16 * 12);
}
