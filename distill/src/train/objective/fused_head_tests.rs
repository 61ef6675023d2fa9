//! The fused head and loss against the unfused path (the head's logits [1, N, V] scored by
//! [`LogitKd`] and back-propagated by autograd), for every divergence, at temperature 1 (where
//! the chunk's one softmax serves CE and the soft term) and another, padding rows and chunks that do and do not divide the rows; a tied head; and a
//! hand-computed case.
use tch::{Device, Kind, Tensor};

use super::*;
use crate::train::objective::Objective;

const ALL: [Divergence; 8] = [
    Divergence::ForwardKl,
    Divergence::ReverseKl,
    Divergence::Jsd { beta: 0.5 },
    Divergence::Jsd { beta: 0.1 },
    Divergence::Jsd { beta: 0.9 },
    Divergence::Jsd { beta: 0.0 },
    Divergence::Jsd { beta: 1.0 },
    Divergence::Tvd,
];

fn value(x: &Tensor) -> f64 {
    x.double_value(&[])
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    value(&(a - b).abs().max())
}

/// A smooth deterministic [rows, cols] fp32 tensor (no generator: tests run in parallel).
fn wave(rows: i64, cols: i64, phase: f64, scale: f64) -> Tensor {
    let n = rows * cols;
    (Tensor::arange(n, (Kind::Float, Device::Cpu)) * 0.73 + phase).sin().reshape([rows, cols]) * scale
}

/// N = 10 rows of H = 6 hidden states, a head of V = 7 tokens with a bias, the teacher's
/// logits, and labels whose rows 3 and 8 are padding (-100); those rows' hidden states and
/// teacher logits are absurd, so that counting them would show.
fn batch() -> (Tensor, Tensor, Tensor, Tensor, Tensor) {
    let hidden = wave(10, 6, 0.2, 1.5);
    let weight = wave(7, 6, 1.1, 0.8);
    let bias = wave(1, 7, 2.3, 0.5).reshape([7]);
    let teacher = wave(10, 7, 0.7, 3.0);
    for row in [3, 8] {
        let _ = hidden.get(row).fill_(40.0);
        let _ = teacher.get(row).fill_(-60.0);
    }
    let labels = Tensor::from_slice(&[0i64, 6, 2, -100, 5, 1, 3, 4, -100, 2]);
    (hidden, weight, bias, teacher, labels)
}

/// Leaves requiring grad, copies of `x`.
fn leaf(x: &Tensor) -> Tensor {
    x.detach().copy().set_requires_grad(true)
}

#[test]
fn loss_and_gradients_equal_the_unfused_path_for_every_divergence() {
    let (hidden, weight, bias, teacher, labels) = batch();
    for (divergence, temperature) in ALL.iter().flat_map(|&d| [(d, 2.5), (d, 1.0)]) {
        for alpha in [0.3, 1.0, 0.0] {
            let kd = LogitKd { temperature, alpha, divergence };
            // unfused: the whole [1, N, V] logits, LogitKd's token path, autograd
            let (h, w, b) = (leaf(&hidden), leaf(&weight), leaf(&bias));
            let logits = h.linear(&w, Some(&b)).unsqueeze(0);
            let want = kd.loss(&logits, Some(&teacher.unsqueeze(0)), Some(&labels.unsqueeze(0)));
            want.loss.backward();
            for chunk in [1, 3, 4, 10, 64] {
                let (fh, fw, fb) = (leaf(&hidden), leaf(&weight), leaf(&bias));
                let head = Head { weight: &fw, bias: Some(&fb) };
                let (got, predictions) = fused_head_loss(&fh, head, Some(&teacher), &labels, &kd, chunk);
                let case = format!("{divergence:?} T {temperature} alpha {alpha} chunk {chunk}");
                for (name, g, w) in
                    [("loss", &got.loss, &want.loss), ("kd", &got.kd, &want.kd), ("ce", &got.ce, &want.ce)]
                {
                    assert!((value(g) - value(w)).abs() < 1e-5, "{case}: {name} {} != {}", value(g), value(w));
                }
                got.loss.backward();
                for (name, g, w) in [("hidden", &fh, &h), ("weight", &fw, &w), ("bias", &fb, &b)] {
                    let diff = max_diff(&g.grad(), &w.grad());
                    assert!(diff < 1e-5, "{case}: d loss / d {name} off by {diff}");
                }
                assert_eq!(predictions, logits.squeeze_dim(0).argmax(-1, false), "{case}");
            }
        }
    }
}

/// The loss's gradient is not trivially zero on these inputs (the check above has teeth), and
/// the padding rows get none.
#[test]
fn the_gradients_are_live_and_padding_rows_get_none() {
    let (hidden, weight, bias, teacher, labels) = batch();
    let kd = LogitKd { temperature: 2.5, alpha: 0.3, divergence: Divergence::Jsd { beta: 0.5 } };
    let g = fused_head_grads(&hidden, Head { weight: &weight, bias: Some(&bias) }, Some(&teacher), &labels, &kd, 4);
    assert!(value(&g.grad_weight.abs().max()) > 1e-2 && value(&g.grad_bias.unwrap().abs().max()) > 1e-2);
    for row in 0..10 {
        let norm = value(&g.grad_hidden.get(row).abs().sum(Kind::Float));
        match row {
            3 | 8 => assert_eq!(norm, 0.0, "padding row {row}"),
            _ => assert!(norm > 1e-3, "row {row}: {norm}"),
        }
    }
}

/// A tied head: the weight is also the token embedding the hidden states come from, so its
/// gradient is the sum of both paths, as autograd gives it unfused.
#[test]
fn a_tied_head_gets_both_gradients() {
    let (_, weight, _, teacher, labels) = batch();
    let ids = Tensor::from_slice(&[0i64, 3, 6, 2, 2, 5, 1, 0, 4, 3]);
    let mix = wave(6, 6, 0.4, 0.5);
    let body = |w: &Tensor| w.index_select(0, &ids).matmul(&mix).tanh();
    let kd = LogitKd { temperature: 2.0, alpha: 0.5, divergence: Divergence::ReverseKl };
    let w = leaf(&weight);
    let logits = body(&w).linear::<Tensor>(&w, None).unsqueeze(0);
    kd.loss(&logits, Some(&teacher.unsqueeze(0)), Some(&labels.unsqueeze(0))).loss.backward();
    let fw = leaf(&weight);
    let (got, _) = fused_head_loss(&body(&fw), Head { weight: &fw, bias: None }, Some(&teacher), &labels, &kd, 3);
    got.loss.backward();
    let diff = max_diff(&fw.grad(), &w.grad());
    assert!(diff < 1e-5, "tied weight's gradient off by {diff}");
}

/// One row by hand: h = (1, 0), W = [[ln 3, 0], [0, 0]], no bias, so z = (ln 3, 0) and
/// q = (3/4, 1/4) at T = 1; the teacher's logits (0, 0), p = (1/2, 1/2); label 1; alpha 1/2.
/// KL(p || q) = 1/2 ln(2/3) + 1/2 ln 2 = 1/2 ln(4/3); CE = -ln(1/4) = ln 4;
/// loss = 1/4 ln(4/3) + 1/2 ln 4. dL/dz = 1/2 (q - p) + 1/2 (q - e_1) = 1/2 (1/4, -1/4) +
/// 1/2 (3/4, -3/4) = (1/2, -1/2); dL/dh = dL/dz W = (ln 3 / 2, 0); dL/dW = dL/dz^T h =
/// [[1/2, 0], [-1/2, 0]]. A second row, padding, changes nothing.
#[test]
fn one_row_by_hand() {
    let ln3 = 3f64.ln();
    let hidden = Tensor::from_slice(&[1.0f64, 0.0, 7.0, -9.0]).reshape([2, 2]);
    let weight = Tensor::from_slice(&[ln3, 0.0, 0.0, 0.0]).reshape([2, 2]);
    let teacher = Tensor::from_slice(&[0.0f64, 0.0, 50.0, -50.0]).reshape([2, 2]);
    let labels = Tensor::from_slice(&[1i64, -100]);
    let kd = LogitKd { temperature: 1.0, alpha: 0.5, divergence: Divergence::ForwardKl };
    for chunk in [1, 2] {
        let g = fused_head_grads(&hidden, Head { weight: &weight, bias: None }, Some(&teacher), &labels, &kd, chunk);
        let kl = 0.5 * (4.0f64 / 3.0).ln();
        assert!((value(&g.loss.kd) - kl).abs() < 1e-12, "{}", value(&g.loss.kd));
        assert!((value(&g.loss.ce) - 4f64.ln()).abs() < 1e-12);
        assert!((value(&g.loss.loss) - (0.5 * kl + 0.5 * 4f64.ln())).abs() < 1e-12);
        let want_h = Tensor::from_slice(&[ln3 / 2.0, 0.0, 0.0, 0.0]).reshape([2, 2]);
        assert!(max_diff(&g.grad_hidden, &want_h) < 1e-12, "{}", g.grad_hidden);
        let want_w = Tensor::from_slice(&[0.5f64, 0.0, -0.5, 0.0]).reshape([2, 2]);
        assert!(max_diff(&g.grad_weight, &want_w) < 1e-12, "{}", g.grad_weight);
        assert_eq!(Vec::<i64>::try_from(&g.predictions).unwrap(), [0, 0]);
    }
}

/// At T = 2 the same row: q = softmax((ln 3 / 2, 0)) = (a, 1 - a) with a = sqrt3 / (1 + sqrt3),
/// p = (1/2, 1/2); alpha 1 (soft term only): loss = 4 KL(p || q) = 2 ln(1 / (4 a (1 - a))),
/// dL/dz = T (q - p) = 2 (a - 1/2, 1/2 - a).
#[test]
fn one_row_by_hand_at_temperature_two() {
    let ln3 = 3f64.ln();
    let a = 3f64.sqrt() / (1.0 + 3f64.sqrt());
    let hidden = Tensor::from_slice(&[1.0f64, 0.0]).reshape([1, 2]);
    let weight = Tensor::from_slice(&[ln3, 0.0, 0.0, 0.0]).reshape([2, 2]);
    let teacher = Tensor::from_slice(&[0.0f64, 0.0]).reshape([1, 2]);
    let kd = LogitKd { temperature: 2.0, alpha: 1.0, divergence: Divergence::ForwardKl };
    let labels = Tensor::from_slice(&[0i64]);
    let g = fused_head_grads(&hidden, Head { weight: &weight, bias: None }, Some(&teacher), &labels, &kd, 1);
    let want = 2.0 * (1.0 / (4.0 * a * (1.0 - a))).ln();
    assert!((value(&g.loss.loss) - want).abs() < 1e-12, "{} != {want}", value(&g.loss.loss));
    let dz = 2.0 * (a - 0.5);
    let want_w = Tensor::from_slice(&[dz, 0.0, -dz, 0.0]).reshape([2, 2]);
    assert!(max_diff(&g.grad_weight, &want_w) < 1e-12, "{}", g.grad_weight);
}

/// Every label -100: the loss parts and gradients are 0, not NaN (as the unfused path).
#[test]
fn a_batch_without_a_predicting_row_scores_zero() {
    let (hidden, weight, bias, teacher, _) = batch();
    let labels = Tensor::full([10], -100, (Kind::Int64, Device::Cpu));
    let kd = LogitKd { temperature: 2.0, alpha: 0.5, divergence: Divergence::Tvd };
    let (h, w) = (leaf(&hidden), leaf(&weight));
    let (parts, _) = fused_head_loss(&h, Head { weight: &w, bias: Some(&bias) }, Some(&teacher), &labels, &kd, 4);
    assert_eq!([value(&parts.loss), value(&parts.kd), value(&parts.ce)], [0.0; 3]);
    parts.loss.backward();
    assert_eq!(value(&h.grad().abs().sum(Kind::Float)), 0.0);
    assert_eq!(value(&w.grad().abs().sum(Kind::Float)), 0.0);
}
