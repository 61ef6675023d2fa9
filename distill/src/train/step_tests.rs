use super::*;
use estimator_wasm::schema::arch::checkpoint_segments;
use estimator_wasm::schema::{Checkpointing, Config};
use tch::nn::VarStore;

/// A CNN (conv -> BN -> act -> pool blocks, then flatten and hidden blocks) and MLPs over an
/// image input (a leading `flatten`): segments of parameter-free blocks at every position.
const STUDENTS: [&str; 3] = [
    "family = \"cnn\"\nchannels = [4, 6]\nhidden = [12, 8]\nnorm = \"batch\"",
    "family = \"mlp\"\nhidden = [12, 8]\nnorm = \"batch\"",
    "family = \"mlp\"\nhidden = [12]\nnorm = \"layer\"",
];

/// One loss the config can build: the student, its dropout, alpha and an L1 weight.
#[derive(Clone, Copy, Debug)]
struct Case {
    student: &'static str,
    dropout: f64,
    alpha: f64,
    l1: f64,
}

fn setup(case: Case) -> (VarStore, Student, Vec<String>) {
    let text = format!(
        "[data]\ninput_shape = [1, 8, 8]\nclasses = 5\n[student]\n{}\ndropout = {}\n",
        case.student, case.dropout
    );
    let spec = Config::from_toml_str(&text).unwrap();
    tch::manual_seed(11);
    let vs = VarStore::new(Device::Cpu);
    let student = Student::new(&vs.root(), &spec).unwrap();
    let mut names: Vec<String> =
        vs.variables().into_iter().filter(|(_, t)| t.requires_grad()).map(|(n, _)| n).collect();
    names.sort();
    (vs, student, names)
}

/// Blocks of the test student; under the RNG lock, since building it reseeds the global
/// generator that a concurrent test may be drawing from.
fn block_count(case: Case) -> usize {
    let _guard = crate::torch::test_rng::lock();
    setup(case).1.block_count()
}

/// Gradients (and BN running statistics after the step) of one batch.
fn grads(case: Case, segments: &[Range<usize>], recompute: bool) -> (Vec<Tensor>, Vec<Tensor>) {
    let _guard = crate::torch::test_rng::lock();
    let (vs, student, names) = setup(case);
    let vars = vs.variables();
    let params: Vec<Tensor> = names.iter().map(|n| vars[n].shallow_clone()).collect();
    let refs: Vec<&Tensor> = params.iter().collect();
    let cfg = StepConfig {
        device: Device::Cpu,
        precision: Precision::Fp32,
        objective: &crate::train::objective::LogitKd::forward_kl(2.0, case.alpha),
        seed: 3,
        segments,
        param_segment: &param_segments(&student, &names, segments, None),
        recompute,
        ddp: None,
        sync_batch_norm: None,
        loss_chunk: None,
        fused_head: None,
        hidden: None,
    };
    let x = Tensor::linspace(-1.0, 1.0, 6 * 64, (Kind::Float, Device::Cpu)).reshape([6, 1, 8, 8]).sin() * 3.0;
    let y = Tensor::from_slice(&[0i64, 1, 2, 3, 4, 0]);
    let soft = Tensor::linspace(-2.0, 2.0, 30, (Kind::Float, Device::Cpu)).reshape([6, 5]);
    let input = ModelInput::new(x);
    let batch =
        StepBatch { input: &input, labels: Some(&y), soft: Some(&soft), step: 7, weight: 1.0, teacher_hidden: &[] };
    // L1 of every conv/linear weight, as `prune.l1` builds it: a term with a graph straight
    // to parameters of every segment, not through the logits.
    let l1 = || {
        let weights = refs.iter().filter(|w| w.dim() >= 2);
        (case.l1 > 0.0).then(|| weights.map(|w| w.abs().sum(Kind::Float)).reduce(|a, b| a + b).unwrap() * case.l1)
    };
    let out = forward_backward(&cfg, &student, &refs, &batch, None, &l1).unwrap();
    (out.grads, student.running_stats(0..student.block_count()).iter().map(|t| t.copy()).collect())
}

fn max_diff(a: &[Tensor], b: &[Tensor]) -> f64 {
    a.iter().zip(b).map(|(a, b)| (a - b).abs().max().double_value(&[])).fold(0.0, f64::max)
}

/// Checks `case` under each of `modes` against one unsegmented step keeping the whole graph
/// (also with dropout: the masks must not depend on the segmentation): the same gradients,
/// and BatchNorm statistics that move once; segmenting without recomputing, too.
fn check(case: Case, modes: &[Checkpointing]) {
    let n = block_count(case);
    #[allow(clippy::single_range_in_vec_init)]
    let (g_ref, bn_ref) = grads(case, &[0..n], false);
    for &mode in modes {
        let segments = checkpoint_segments(n, mode).unwrap();
        for recompute in [true, false] {
            let (g, bn) = grads(case, &segments, recompute);
            assert!(g.iter().all(Tensor::defined), "{case:?} {mode:?}: every parameter gets a gradient");
            let diff = max_diff(&g, &g_ref);
            let k = segments.len();
            assert!(diff < 1e-6, "{case:?} {mode:?} ({k} segments, recompute {recompute}): grads differ by {diff}");
            assert!(max_diff(&bn, &bn_ref) < 1e-7, "{case:?} {mode:?}: BN statistics must move once");
        }
    }
}

/// Every segment count from 1 to two more than the blocks, and "sqrt", so that segments
/// hold every run of parameter-free blocks (flatten, pool, activation, dropout); with the
/// KD, CE and L1 terms, with and without dropout.
#[test]
fn checkpointed_gradients_equal_full_backprop_for_every_segment_count() {
    for student in STUDENTS {
        for dropout in [0.0, 0.3] {
            let case = Case { student, dropout, alpha: 0.5, l1: 0.01 };
            let n = block_count(case) as u64;
            let modes: Vec<Checkpointing> =
                (1..=n + 2).map(Checkpointing::Segments).chain([Checkpointing::Sqrt]).collect();
            check(case, &modes);
        }
    }
}

/// The dropout that the test above checks is live: it changes the gradients.
#[test]
fn dropout_changes_the_gradients() {
    let with = Case { student: STUDENTS[0], dropout: 0.3, alpha: 0.5, l1: 0.01 };
    let without = Case { dropout: 0.0, ..with };
    #[allow(clippy::single_range_in_vec_init)]
    let whole = |case| grads(case, &[0..block_count(case)], false).0;
    // Dropout blocks only exist with dropout: compare the parameters, which both share.
    assert!(max_diff(&whole(with), &whole(without)) > 1e-4);
}

/// Every loss the config can build: alpha 0 (CE only), 1 (KD only), with and without L1.
#[test]
fn checkpointed_gradients_equal_full_backprop_for_every_loss() {
    for student in STUDENTS {
        for (alpha, l1) in [(0.0, 0.01), (1.0, 0.01), (0.5, 0.0), (1.0, 0.0)] {
            let case = Case { student, dropout: 0.0, alpha, l1 };
            let n = block_count(case) as u64;
            check(case, &[Checkpointing::Segments(2), Checkpointing::Sqrt, Checkpointing::Segments(n)]);
        }
    }
}

#[test]
fn the_l1_term_reaches_the_first_segment() {
    // With and without L1, the first layer's weight gradient differs by exactly
    // l1 * sign(w) (no weight is 0), also when that layer's segment is recomputed.
    let case = Case { student: STUDENTS[1], dropout: 0.0, alpha: 0.5, l1: 0.01 };
    let n = block_count(case);
    let segments = checkpoint_segments(n, Checkpointing::Segments(2)).unwrap();
    assert_eq!(segments[0], 0..n / 2, "fc1 lies in the first of two segments");
    let (with, _) = grads(case, &segments, true);
    let (without, _) = grads(Case { l1: 0.0, ..case }, &segments, true);
    let (vs, _, names) = {
        let _guard = crate::torch::test_rng::lock();
        setup(case)
    };
    let i = names.iter().position(|n| n == "fc1.weight").unwrap();
    let sign = vs.variables()["fc1.weight"].sign();
    let diff = (&with[i] - &without[i] - sign * 0.01).abs().max().double_value(&[]);
    assert!(diff < 1e-7, "fc1.weight misses its L1 gradient by {diff}");
}

/// `[[kd.hidden]]` under checkpointing: an MSE pair through a projection on the first hidden
/// block's output and a cosine pair on the second's, with dropout. Every segment count gives
/// the loss parts and the gradients (the projection's included) of one whole graph, and the
/// total is the objective's mix plus the pairs' term.
#[test]
fn hidden_pairs_give_the_whole_graphs_loss_and_gradients_under_checkpointing() {
    use crate::train::objective::hidden_kd::HiddenKd;
    let _guard = crate::torch::test_rng::lock();
    let base = "[data]\ninput_shape = [1, 8, 8]\nclasses = 5\n[student]\nfamily = \"mlp\"\nhidden = [12, 8]\nnorm = \"layer\"\ndropout = 0.2\n[kd]\nalpha = 0.25\n";
    let plain = Config::from_toml_str(base).unwrap();
    let layers = estimator_wasm::schema::arch::layers(&plain.student, &plain.data).unwrap();
    let at = |id: &str| layers.iter().position(|l| l.id == id).unwrap();
    let (first, second) = (at("fc1_act"), at("fc2_act"));
    let text = format!(
        "{base}[[kd.hidden]]\nstudent_layer = {first}\nteacher_layer = 0\n\
         [[kd.hidden]]\nstudent_layer = {second}\nteacher_layer = 1\nloss = \"cosine\"\nweight = 0.5\n"
    );
    let spec = Config::from_toml_str(&text).unwrap();
    tch::manual_seed(11);
    let vs = VarStore::new(Device::Cpu);
    let student = Student::new(&vs.root(), &spec).unwrap();
    let kd = HiddenKd::new(&vs.root(), &spec, &[16, 8]).unwrap().unwrap();
    let mut names: Vec<String> =
        vs.variables().into_iter().filter(|(_, t)| t.requires_grad()).map(|(n, _)| n).collect();
    names.sort();
    assert!(names.contains(&"kd_hidden.0.weight".to_string()) && !names.contains(&"kd_hidden.1.weight".to_string()));
    let vars = vs.variables();
    let params: Vec<Tensor> = names.iter().map(|n| vars[n].shallow_clone()).collect();
    let refs: Vec<&Tensor> = params.iter().collect();
    let x = Tensor::linspace(-1.0, 1.0, 6 * 64, (Kind::Float, Device::Cpu)).reshape([6, 1, 8, 8]).sin() * 3.0;
    let y = Tensor::from_slice(&[0i64, 1, 2, 3, 4, 0]);
    let soft = Tensor::linspace(-2.0, 2.0, 30, (Kind::Float, Device::Cpu)).reshape([6, 5]);
    let teacher = kd.prepare_teacher(vec![
        Tensor::linspace(-1.0, 1.0, 6 * 16, (Kind::Float, Device::Cpu)).reshape([6, 16]).sin(),
        Tensor::linspace(-1.0, 1.0, 6 * 8, (Kind::Float, Device::Cpu)).reshape([6, 8]).cos(),
    ]);
    let input = ModelInput::new(x);
    let batch = StepBatch {
        input: &input,
        labels: Some(&y),
        soft: Some(&soft),
        step: 7,
        weight: 1.0,
        teacher_hidden: &teacher,
    };
    let objective = crate::train::objective::LogitKd::forward_kl(2.0, 0.25);
    let run = |segments: &[Range<usize>], recompute: bool| {
        let cfg = StepConfig {
            device: Device::Cpu,
            precision: Precision::Fp32,
            objective: &objective,
            seed: 3,
            segments,
            param_segment: &param_segments(&student, &names, segments, Some(&kd)),
            recompute,
            ddp: None,
            sync_batch_norm: None,
            loss_chunk: None,
            fused_head: None,
            hidden: Some(&kd),
        };
        forward_backward(&cfg, &student, &refs, &batch, None, &|| None).unwrap()
    };
    let n = student.block_count();
    #[allow(clippy::single_range_in_vec_init)]
    let whole = run(&[0..n], false);
    let parts = |g: &Gradients| {
        let v = g.loss.values();
        [v.loss, v.kd, v.ce, v.hidden.expect("pairs log their term")]
    };
    let [loss, kd_term, ce, hidden] = parts(&whole);
    assert!(hidden > 0.05, "{hidden}");
    assert!((loss - (0.25 * kd_term + 0.75 * ce + hidden)).abs() < 1e-6, "{:?}", parts(&whole));
    for k in 2..=n as u64 {
        let segments = checkpoint_segments(n, Checkpointing::Segments(k)).unwrap();
        let out = run(&segments, true);
        for (a, b) in parts(&whole).iter().zip(parts(&out)) {
            assert!((a - b).abs() < 1e-6, "{k} segments: {:?} against {:?}", parts(&out), parts(&whole));
        }
        assert!(out.grads.iter().all(Tensor::defined), "{k} segments: every parameter gets a gradient");
        let diff = max_diff(&out.grads, &whole.grads);
        assert!(diff < 1e-6, "{k} segments: gradients differ by {diff}");
    }
}
