//! The hidden-state terms against hand-computed values, masking by value, the projection's
//! presence by width, and one training step whose gradients reach the projection and the
//! student layer.
use estimator_wasm::schema::arch;
use estimator_wasm::schema::hidden_spec::student_hidden_states;
use estimator_wasm::schema::{Config, Precision};
use tch::{nn::VarStore, Device, Kind, Tensor};

use super::*;
use crate::inputs::data::ModelInput;
use crate::student::{trainable, Student};
use crate::train::optim::Optimizer;
use crate::train::step::{forward_backward, StepBatch, StepConfig};

fn t3(v: &[f32], s: i64) -> Tensor {
    Tensor::from_slice(v).reshape([1, s, -1])
}

fn value(t: &Tensor) -> f64 {
    t.double_value(&[])
}

/// p = [(1, 2), (3, 4), (0, 0)], h = [(0, 2), (1, 1), (9, 9)], the third token padding.
fn case() -> (Tensor, Tensor, Tensor) {
    let p = t3(&[1.0, 2.0, 3.0, 4.0, 0.0, 0.0], 3);
    let h = t3(&[0.0, 2.0, 1.0, 1.0, 9.0, 9.0], 3);
    let mask = Tensor::from_slice(&[1i64, 1, 0]).reshape([1, 3]);
    (p, h, mask)
}

#[test]
fn mse_is_the_mean_squared_error_over_the_real_tokens_elements() {
    let (p, h, mask) = case();
    // (1 + 0) + (4 + 9) over 2 tokens x 2 elements; without the mask (81 + 81) joins, over 6
    assert!((value(&mse_term(&p, &h, Some(&mask))) - 14.0 / 4.0).abs() < 1e-6);
    assert!((value(&mse_term(&p, &h, None)) - 176.0 / 6.0).abs() < 1e-5);
    // padding never counts: any values at the padded token leave it unchanged
    let (p2, h2) = (t3(&[1.0, 2.0, 3.0, 4.0, -50.0, 7.0], 3), t3(&[0.0, 2.0, 1.0, 1.0, 0.5, 1e3], 3));
    assert_eq!(value(&mse_term(&p2, &h2, Some(&mask))), value(&mse_term(&p, &h, Some(&mask))));
}

#[test]
fn cosine_is_one_minus_the_cosine_averaged_over_the_real_tokens() {
    let (p, h, mask) = case();
    // token 0: (1, 2).(0, 2) / (sqrt 5 * 2); token 1: (3, 4).(1, 1) / (5 * sqrt 2)
    let want = ((1.0 - 4.0 / (5f64.sqrt() * 2.0)) + (1.0 - 7.0 / (5.0 * 2f64.sqrt()))) / 2.0;
    let got = value(&cosine_term(&p, &normalised(&h), Some(&mask)));
    assert!((got - want).abs() < 1e-6, "{got} against {want}");
    let (p2, h2) = (t3(&[1.0, 2.0, 3.0, 4.0, -50.0, 7.0], 3), t3(&[0.0, 2.0, 1.0, 1.0, 0.5, 1e3], 3));
    assert!((value(&cosine_term(&p2, &normalised(&h2), Some(&mask))) - want).abs() < 1e-6);
    // a zero vector (the padded p) has cosine 0 by eps, not NaN: unmasked it adds 1 over 3
    let all = value(&cosine_term(&p, &normalised(&h), None));
    assert!((all - (2.0 * want + 1.0) / 3.0).abs() < 1e-6, "{all}");
}

/// An mlp student (4 -> 6 -> 3) and one pair on the output of `fc1_act` (6 wide).
fn mlp(extra: &str) -> Config {
    let text = format!(
        "[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\nhidden = [6]\nnorm = \"none\"\ndropout = 0.0\n[kd]\nalpha = 0.5\n{extra}"
    );
    Config::from_toml_str(&text).unwrap()
}

fn act_state(spec: &Config) -> (u64, usize) {
    let layers = arch::layers(&spec.student, &spec.data).unwrap();
    let states = student_hidden_states(&layers);
    let k = states.iter().position(|s| layers[s.layer].id == "fc1_act").unwrap();
    (k as u64, states[k].layer)
}

#[test]
fn a_projection_exists_only_where_the_widths_differ() {
    let (k, block) = act_state(&mlp(""));
    let pairs = format!(
        "[[kd.hidden]]\nstudent_layer = {k}\nteacher_layer = 2\n[[kd.hidden]]\nstudent_layer = {k}\nteacher_layer = 0\nloss = \"cosine\"\nweight = 0.5\n"
    );
    let spec = mlp(&pairs);
    let vs = VarStore::new(Device::Cpu);
    let kd = HiddenKd::new(&vs.root(), &spec, &[6, 10]).unwrap().unwrap();
    assert_eq!(kd.terms.len(), 2);
    assert!(kd.terms[0].projection.is_none(), "equal widths (6 and 6): no projection");
    assert_eq!(kd.terms[1].projection.as_ref().unwrap().size(), [10, 6]);
    assert_eq!((kd.terms[0].block, kd.terms[1].block), (block, block));
    assert_eq!(kd.teacher_layers(), [2, 0]);
    let names: Vec<String> = trainable(&vs).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["kd_hidden.1.weight"]);
    assert!(HiddenKd::new(&vs.root(), &mlp(""), &[]).unwrap().is_none());
}

#[test]
fn one_step_moves_the_projection_and_the_student_layer_by_the_hidden_term() {
    let _guard = crate::torch::test_rng::lock();
    let (k, block) = act_state(&mlp(""));
    let spec = mlp(&format!("[[kd.hidden]]\nstudent_layer = {k}\nteacher_layer = 1\nweight = 2.0\n"));
    tch::manual_seed(5);
    let vs = VarStore::new(Device::Cpu);
    let student = Student::new(&vs.root(), &spec).unwrap();
    let kd = HiddenKd::new(&vs.root(), &spec, &[5]).unwrap().unwrap();
    let named = trainable(&vs);
    let names: Vec<String> = named.iter().map(|(n, _)| n.clone()).collect();
    let mut opt = Optimizer::new(
        named.iter().map(|(n, t)| (n.clone(), t.shallow_clone())).collect(),
        &crate::config::TrainSettings::resolved(&spec.train, 1),
    );
    let params: Vec<Tensor> = opt.params().into_iter().map(Tensor::shallow_clone).collect();
    let refs: Vec<&Tensor> = params.iter().collect();
    let x = Tensor::linspace(-1.0, 1.0, 8 * 4, (Kind::Float, Device::Cpu)).reshape([8, 4]).sin();
    let input = ModelInput::new(x.shallow_clone());
    let soft = Tensor::linspace(-1.0, 1.0, 24, (Kind::Float, Device::Cpu)).reshape([8, 3]);
    let teacher = kd.prepare_teacher(vec![Tensor::linspace(0.0, 2.0, 40, (Kind::Float, Device::Cpu)).reshape([8, 5])]);
    let objective = crate::train::objective::LogitKd::forward_kl(2.0, 1.0);
    #[allow(clippy::single_range_in_vec_init)] // one segment spanning every block
    let segments = [0..student.block_count()];
    let step = |hidden: Option<&HiddenKd>| {
        let cfg = StepConfig {
            device: Device::Cpu,
            precision: Precision::Fp32,
            objective: &objective,
            seed: 3,
            segments: &segments,
            param_segment: &vec![0; refs.len()],
            recompute: false,
            ddp: None,
            sync_batch_norm: None,
            loss_chunk: None,
            fused_head: None,
            hidden,
        };
        let batch = StepBatch {
            input: &input,
            labels: None,
            soft: Some(&soft),
            step: 0,
            weight: 1.0,
            teacher_hidden: &teacher,
        };
        forward_backward(&cfg, &student, &refs, &batch, None, &|| None).unwrap()
    };
    let (with, without) = (step(Some(&kd)), step(None));
    // the loss is the objective's plus 2 x the MSE of the projected fc1_act output, by hand
    let h = tch::no_grad(|| student.forward_blocks(&x, 0..block + 1, None, true));
    let w = &kd.terms[0].projection.as_ref().unwrap().detach();
    let want = 2.0 * value(&mse_term(&h.linear::<&Tensor>(w, None), &teacher[0], None));
    assert!(want > 0.01);
    let got = value(&with.loss.loss) - value(&without.loss.loss);
    assert!((got - want).abs() < 1e-5, "{got} against {want}");
    assert_eq!(value(&with.loss.kd), value(&without.loss.kd));
    let grad = |out: &crate::train::step::Gradients, name: &str| {
        out.grads[names.iter().position(|n| n == name).unwrap()].shallow_clone()
    };
    // the projection gets a gradient only from the hidden term; fc1 gets the term's on top
    let g = grad(&with, "kd_hidden.0.weight");
    assert!(value(&g.abs().sum(Kind::Float)) > 1e-4);
    assert!(!grad(&without, "kd_hidden.0.weight").defined());
    let fc1 = (grad(&with, "fc1.weight") - grad(&without, "fc1.weight")).abs().max();
    assert!(value(&fc1) > 1e-5, "the hidden term reaches fc1");
    // and the optimiser's step moves the projection
    let before = w.copy();
    opt.step(1e-2, &with.grads).unwrap();
    let moved = value(&(kd.terms[0].projection.as_ref().unwrap() - &before).abs().max());
    assert!(moved > 1e-4, "{moved}");
}
