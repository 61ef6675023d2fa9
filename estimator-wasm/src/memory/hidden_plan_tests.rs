//! The plan with a `[[kd.hidden]]` pair against the same plan without it: the difference is
//! the bytes counted by hand from the list in `hidden_plan.rs`.
use crate::memory::{Inputs, MemoryModel};
use crate::schema::arch;
use crate::schema::hidden_spec::student_hidden_states;
use crate::schema::Config;

/// A transformer student (d_model 8) and a transformer teacher of width 16 described by
/// `[teacher.arch]`, 16 tokens, fp32 AdamW on the CPU, teacher logits cached by default.
const TRANSFORMER: &str = "[data]\ninput_shape = [16]\nclasses = 32\ntokenizer = \"t.json\"\n\
[student]\nfamily = \"transformer\"\n[student.transformer]\nvocab = 32\nlayers = 2\nd_model = 8\nheads = 2\nhead = \"lm\"\n\
[teacher]\n[teacher.arch]\nfamily = \"transformer\"\n[teacher.arch.transformer]\nvocab = 32\nlayers = 3\nd_model = 16\nheads = 2\nhead = \"lm\"\n\
[kd]\nalpha = 0.5\n[train]\nbatch_size = 4\n[estimate]\ntarget = \"cpu\"\n";

fn model(text: &str) -> MemoryModel {
    MemoryModel::new(&Config::from_toml_str(text).unwrap(), &Inputs::default()).unwrap()
}

fn with_pair(student: u64, teacher: u64, loss: &str) -> String {
    format!("{TRANSFORMER}[[kd.hidden]]\nstudent_layer = {student}\nteacher_layer = {teacher}\nloss = \"{loss}\"\nweight = 0.5\n")
}

#[test]
fn the_student_and_teacher_hidden_states_are_numbered_as_hugging_face_does() {
    let config = Config::from_toml_str(TRANSFORMER).unwrap();
    let layers = arch::layers(&config.student, &config.data).unwrap();
    let states = student_hidden_states(&layers);
    let named: Vec<(&str, u64, bool)> =
        states.iter().map(|s| (layers[s.layer].id.as_str(), s.width, s.tokens)).collect();
    // 0: the embeddings' output (the layer before the first attention), then each block
    assert_eq!(named.len(), 3, "{named:?}");
    assert_eq!((named[1].0, named[2].0), ("blk1_mlp", "blk2_mlp"));
    assert_eq!(layers[states[0].layer + 1].id, "blk1_attn");
    assert!(named.iter().all(|&(_, w, t)| w == 8 && t));
    // an mlp: one per layer, flattened, no tokens
    let mlp =
        Config::from_toml_str("[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\nhidden = [6]\n")
            .unwrap();
    let layers = arch::layers(&mlp.student, &mlp.data).unwrap();
    let states = student_hidden_states(&layers);
    assert_eq!(states.len(), layers.len());
    assert_eq!((states[0].width, states[0].tokens), (6, false));
    assert_eq!(states.last().unwrap().width, 3);
}

#[test]
fn a_pair_adds_the_hand_counted_bytes_to_the_plan() {
    let b = 4u64;
    let (rows, s, t) = (16u64, 8u64, 16u64);
    let base = model(TRANSFORMER);
    for (loss, own_saved) in [("mse", rows * t * 4), ("cosine", rows * t * 4 + 2 * rows * 4)] {
        let paired = model(&with_pair(1, 2, loss));
        // saved for the backward: the loss's tensors and the fp32 mask [S] once
        let saved = paired.saved_bytes(b).unwrap() - base.saved_bytes(b).unwrap();
        assert_eq!(saved, b * (own_saved + rows * 4), "{loss}");
        // the projection [16, 8] in the model states: fp32 AdamW, 4 + 4 + 8 bytes a parameter
        let (p, q) = (paired.plan(b).unwrap(), base.plan(b).unwrap());
        assert_eq!(p.model_states.weights - q.model_states.weights, s * t * 4, "{loss}");
        assert_eq!(p.model_states.grads - q.model_states.grads, s * t * 4, "{loss}");
        assert_eq!(p.model_states.optimizer - q.model_states.optimizer, s * t * 8, "{loss}");
        // priced on the layer whose state it projects (blk1_mlp for hidden state 1)
        let row = |plan: &crate::memory::Plan| plan.layers.iter().find(|l| l.id == "blk1_mlp").unwrap().weight_bytes;
        assert_eq!(row(&p) - row(&q), s * t * 4);
        // a language model's teacher runs live, now keeping its state [S, 16] fp32 too
        assert!(paired.teacher.as_ref().unwrap().live && !paired.teacher.as_ref().unwrap().cache);
        let logits = |m: &MemoryModel| m.student.loss.teacher_logits.unwrap().at(b).unwrap();
        assert_eq!(logits(&paired), b * (rows * 32 * 4 + rows * t * 4), "{loss}");
    }
    // equal widths (student state 1 and a teacher of width 8): no projection
    let narrow = TRANSFORMER.replace("layers = 3\nd_model = 16", "layers = 3\nd_model = 8");
    let (p, q) = (model(&format!("{narrow}[[kd.hidden]]\nstudent_layer = 1\nteacher_layer = 3\n")), model(&narrow));
    assert_eq!(p.plan(b).unwrap().model_states, q.plan(b).unwrap().model_states);
    assert_eq!(p.saved_bytes(b).unwrap() - q.saved_bytes(b).unwrap(), b * (rows * 8 * 4 + rows * 4));
    // an mlp (8 wide) from an mlp teacher (16 wide) whose logits were cached: one row a
    // sample, no mask; the teacher now runs on every batch
    let mlp = "[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\nhidden = [8]\n\
        [teacher]\n[teacher.arch]\nfamily = \"mlp\"\nhidden = [16]\n[train]\nbatch_size = 4\n[estimate]\ntarget = \"cpu\"\n";
    let (p, q) = (model(&format!("{mlp}[[kd.hidden]]\nstudent_layer = 0\nteacher_layer = 0\n")), model(mlp));
    assert!(q.teacher.as_ref().unwrap().cache && !q.teacher.as_ref().unwrap().live);
    assert!(p.teacher.as_ref().unwrap().live && !p.teacher.as_ref().unwrap().cache);
    assert_eq!(p.saved_bytes(b).unwrap() - q.saved_bytes(b).unwrap(), b * 16 * 4);
    let (pp, qp) = (p.plan(b).unwrap(), q.plan(b).unwrap());
    assert_eq!(pp.model_states.weights - qp.model_states.weights, 8 * 16 * 4);
}

#[test]
fn a_teacher_layer_the_described_teacher_lacks_is_refused_with_its_count() {
    let err =
        MemoryModel::new(&Config::from_toml_str(&with_pair(1, 4, "mse")).unwrap(), &Inputs::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "kd.hidden[0].teacher_layer: is 4, and the teacher has 4 hidden states (0 the embeddings' output): use 0 to 3"
    );
}

#[test]
fn with_checkpointing_a_pair_before_the_last_segment_is_priced_with_its_segment_not_the_loss() {
    let b = 4u64;
    let (rows, t) = (16u64, 16u64);
    let state = rows * t * 4;
    let sum = |sizes: &[crate::memory::sizes::Size]| sizes.iter().map(|s| s.at(b).unwrap()).sum::<u64>();
    // two segments: blk1_mlp (hidden state 1) in the first, blk2_mlp (state 2) in the last
    let ckpt = TRANSFORMER.replace("family = \"transformer\"\n[", "family = \"transformer\"\ncheckpointing = 2\n[");
    let base = model(&ckpt);
    let starts: Vec<usize> = (0..base.student.layers.len()).filter(|&j| base.student.layers[j].segment_start).collect();
    let at = |id: &str| base.student.layers.iter().position(|l| l.id == id).unwrap();
    let (early, late) = (at("blk1_mlp"), at("blk2_mlp"));
    assert_eq!(starts.len(), 2);
    assert!(early < starts[1] && late >= starts[1], "{starts:?}: {early} in the first segment, {late} in the last");
    let first_end = starts[1] - 1;
    for (loss, own_saved) in [("mse", state), ("cosine", state + 2 * rows * 4)] {
        let paired = model(&with_pair(1, 2, loss).replace(TRANSFORMER, &ckpt));
        let (p, q) = (&paired.student.layers, &base.student.layers);
        // nothing of the term at the loss but the mask [S] fp32
        assert_eq!(paired.saved_bytes(b).unwrap() - base.saved_bytes(b).unwrap(), b * rows * 4, "{loss}");
        assert_eq!(sum(&paired.student.loss.grads), sum(&base.student.loss.grads), "{loss}");
        // its saved tensors with the recomputed segment, its transients and gradients at the
        // segment's last layer's backward
        assert_eq!(sum(&p[early].recompute) - sum(&q[early].recompute), b * own_saved, "{loss}");
        assert_eq!(sum(&p[first_end].backward_scratch) - sum(&q[first_end].backward_scratch), b * 4 * state);
        // the no-grad forward keeps blk1_mlp's output [S, 8] fp32 to the segment's end, and
        // makes the value's two fp32 [S, 16] at its last layer
        let live = |l: &[crate::memory::compiled::LayerPlan], i: usize| sum(&l[i].checkpoint_forward_live);
        let kept = (early..starts[1]).map(|i| live(p, i) - live(q, i)).sum::<u64>();
        let after = (starts[1] - early - 1) as u64;
        assert_eq!(kept, b * (after * rows * 8 * 4 + 2 * state), "{loss}");
    }
    // a pair in the last segment stays with the loss, as without checkpointing
    let last = model(&format!("{ckpt}[[kd.hidden]]\nstudent_layer = 2\nteacher_layer = 2\n"));
    assert_eq!(last.saved_bytes(b).unwrap() - base.saved_bytes(b).unwrap(), b * (state + rows * 4));
    assert_eq!(sum(&last.student.layers[late].recompute), sum(&base.student.layers[late].recompute));
}
