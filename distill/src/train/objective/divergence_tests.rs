//! The divergences against plain f64 arithmetic written here (not the code under test), their
//! gradients against central finite differences in f64, JSD's endpoints and limits, and the
//! token and class paths of [`LogitKd`] with each divergence.
use tch::{Kind, Tensor};

use super::*;
use crate::train::objective::{LogitKd, Objective};

/// `softmax(z / temperature)` in f64.
fn softmax(z: &[f64], temperature: f64) -> Vec<f64> {
    let top = z.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
    let e: Vec<f64> = z.iter().map(|v| ((v - top) / temperature).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.iter().map(|v| v / sum).collect()
}

/// `KL(a || b) = sum a ln(a / b)`.
fn kl(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * (x / y).ln()).sum()
}

/// The divergence of one row's teacher `p` and student `q`, by its definition.
fn by_hand(p: &[f64], q: &[f64], divergence: Divergence) -> f64 {
    match divergence {
        Divergence::ForwardKl => kl(p, q),
        Divergence::ReverseKl => kl(q, p),
        Divergence::Jsd { beta } => {
            let m: Vec<f64> = p.iter().zip(q).map(|(a, b)| beta * a + (1.0 - beta) * b).collect();
            beta * kl(p, &m) + (1.0 - beta) * kl(q, &m)
        }
        Divergence::Tvd => 0.5 * p.iter().zip(q).map(|(a, b)| (a - b).abs()).sum::<f64>(),
    }
}

/// `T^2 x` the mean over rows of [`by_hand`].
fn reference(student: &[Vec<f64>], teacher: &[Vec<f64>], temperature: f64, divergence: Divergence) -> f64 {
    let sum: f64 = student
        .iter()
        .zip(teacher)
        .map(|(s, t)| by_hand(&softmax(t, temperature), &softmax(s, temperature), divergence))
        .sum();
    temperature * temperature * sum / student.len() as f64
}

fn tensor(rows: &[Vec<f64>], kind: Kind) -> Tensor {
    let flat: Vec<f64> = rows.iter().flatten().copied().collect();
    Tensor::from_slice(&flat).reshape([rows.len() as i64, rows[0].len() as i64]).to_kind(kind)
}

fn value(x: &Tensor) -> f64 {
    x.double_value(&[])
}

const ALL: [Divergence; 6] = [
    Divergence::ForwardKl,
    Divergence::ReverseKl,
    Divergence::Jsd { beta: 0.5 },
    Divergence::Jsd { beta: 0.1 },
    Divergence::Jsd { beta: 0.9 },
    Divergence::Tvd,
];

fn student_rows() -> Vec<Vec<f64>> {
    vec![vec![0.3, -1.2, 2.0, 0.1], vec![1.0, 0.0, -0.5, 0.7], vec![-2.0, 0.4, 0.4, 1.1]]
}

fn teacher_rows() -> Vec<Vec<f64>> {
    vec![vec![1.5, 0.2, -0.7, 0.0], vec![-1.0, 2.5, 0.0, 0.3], vec![0.5, 0.5, -1.5, 2.0]]
}

#[test]
fn two_classes_by_hand() {
    // s = [0, 0] -> q = (1/2, 1/2); t = [ln 3, 0] -> p = (3/4, 1/4), at T = 1
    let (s, t) = (tensor(&[vec![0.0, 0.0]], Kind::Float), tensor(&[vec![3f64.ln(), 0.0]], Kind::Float));
    // KL(q || p) = 1/2 ln(2/3) + 1/2 ln 2 = 1/2 ln(4/3)
    let reverse = 0.5 * (4.0f64 / 3.0).ln();
    // M = (5/8, 3/8): 1/2 [3/4 ln(6/5) + 1/4 ln(2/3)] + 1/2 [1/2 ln(4/5) + 1/2 ln(4/3)]
    let jsd =
        0.5 * (0.75 * 1.2f64.ln() + 0.25 * (2.0f64 / 3.0).ln()) + 0.5 * (0.5 * 0.8f64.ln() + 0.5 * (4.0f64 / 3.0).ln());
    for (divergence, want) in
        [(Divergence::ReverseKl, reverse), (Divergence::Jsd { beta: 0.5 }, jsd), (Divergence::Tvd, 0.25)]
    {
        let got = value(&soft_loss(&s, &t, 1.0, divergence));
        assert!((got - want).abs() < 1e-7, "{divergence:?}: {got} against {want}");
    }
    // at T = 2 the total variation of p = (sqrt 3, 1) / (1 + sqrt 3) from (1/2, 1/2), times 4
    let a = 3f64.sqrt() / (1.0 + 3f64.sqrt());
    let got = value(&soft_loss(&s, &t, 2.0, Divergence::Tvd));
    assert!((got - 4.0 * (a - 0.5)).abs() < 1e-6, "{got}");
}

#[test]
fn each_divergence_matches_f64_arithmetic_at_several_temperatures() {
    let (s, t) = (student_rows(), teacher_rows());
    for temperature in [1.0, 2.5, 8.0] {
        for divergence in ALL {
            let want = reference(&s, &t, temperature, divergence);
            for kind in [Kind::Float, Kind::Double] {
                let got = soft_loss(&tensor(&s, kind), &tensor(&t, kind), temperature, divergence);
                let tol = if kind == Kind::Double { 1e-12 } else { 2e-6 * (1.0 + want.abs()) };
                assert_eq!(got.kind(), kind);
                assert!(
                    (value(&got) - want).abs() < tol,
                    "{divergence:?} at T = {temperature} in {kind:?}: {} against {want}",
                    value(&got)
                );
            }
        }
    }
}

#[test]
fn gradients_match_central_finite_differences_in_f64() {
    let (s, t) = (student_rows(), teacher_rows());
    let h = 1e-6;
    for temperature in [1.0, 3.0] {
        for divergence in ALL {
            let x = tensor(&s, Kind::Double).set_requires_grad(true);
            let te = tensor(&t, Kind::Double);
            soft_loss(&x, &te, temperature, divergence).backward();
            let grad = Vec::<Vec<f64>>::try_from(x.grad()).unwrap();
            for i in 0..s.len() {
                for j in 0..s[0].len() {
                    let moved = |d: f64| {
                        let mut m = s.clone();
                        m[i][j] += d;
                        value(&soft_loss(&tensor(&m, Kind::Double), &te, temperature, divergence))
                    };
                    let numeric = (moved(h) - moved(-h)) / (2.0 * h);
                    assert!(
                        (grad[i][j] - numeric).abs() < 1e-7,
                        "{divergence:?} at T = {temperature}, [{i}][{j}]: autograd {} against {numeric}",
                        grad[i][j]
                    );
                }
            }
        }
    }
    // forward KL's gradient in closed form: T (q - p) / rows
    let x = tensor(&s, Kind::Double).set_requires_grad(true);
    soft_loss(&x, &tensor(&t, Kind::Double), 3.0, Divergence::ForwardKl).backward();
    let grad = Vec::<Vec<f64>>::try_from(x.grad()).unwrap();
    for (i, row) in grad.iter().enumerate() {
        let (p, q) = (softmax(&t[i], 3.0), softmax(&s[i], 3.0));
        for j in 0..row.len() {
            assert!((row[j] - 3.0 * (q[j] - p[j]) / 3.0).abs() < 1e-12);
        }
    }
}

#[test]
fn forward_kl_is_todays_loss_bit_for_bit() {
    let (s, t) = (tensor(&student_rows(), Kind::Float), tensor(&teacher_rows(), Kind::Float));
    for temperature in [1.0, 4.0] {
        let today = forward_kl(&s, &t, temperature);
        assert!(soft_loss(&s, &t, temperature, Divergence::ForwardKl).equal(&today));
        // the objective `[kd]` builds by default
        let spec = estimator_wasm::schema::KdSpec { temperature, alpha: 1.0, ..Default::default() };
        let parts = crate::train::objective::from_spec(&spec).loss(&s, Some(&t), None);
        assert!(parts.kd.equal(&today) && parts.loss.equal(&today));
    }
    // the value as it was computed before divergences existed (two_class_closed_form)
    let kl = 0.75 * 1.5f64.ln() + 0.25 * 0.5f64.ln();
    let got = value(&soft_loss(
        &tensor(&[vec![0.0, 0.0]], Kind::Float),
        &tensor(&[vec![3f64.ln(), 0.0]], Kind::Float),
        1.0,
        Divergence::ForwardKl,
    ));
    assert!((got - kl).abs() < 1e-7);
}

#[test]
fn jsd_endpoints_are_the_two_kls_and_their_limits() {
    let (s, t) = (tensor(&student_rows(), Kind::Double), tensor(&teacher_rows(), Kind::Double));
    let at = |d: Divergence| soft_loss(&s, &t, 2.0, d);
    assert!(at(Divergence::Jsd { beta: 0.0 }).equal(&at(Divergence::ForwardKl)));
    assert!(at(Divergence::Jsd { beta: 1.0 }).equal(&at(Divergence::ReverseKl)));
    // JSD_beta / beta -> KL(p || q) as beta -> 0; JSD_beta / (1 - beta) -> KL(q || p) as beta -> 1
    let (forward, reverse) = (value(&at(Divergence::ForwardKl)), value(&at(Divergence::ReverseKl)));
    for eps in [1e-4, 1e-6] {
        let near_zero = value(&at(Divergence::Jsd { beta: eps })) / eps;
        let near_one = value(&at(Divergence::Jsd { beta: 1.0 - eps })) / eps;
        assert!((near_zero - forward).abs() < 20.0 * eps * forward, "{eps}: {near_zero} against {forward}");
        assert!((near_one - reverse).abs() < 20.0 * eps * reverse, "{eps}: {near_one} against {reverse}");
    }
    // beta = 1/2 is symmetric in teacher and student, and at most ln 2 at T = 1
    let half = Divergence::Jsd { beta: 0.5 };
    let (a, b) = (value(&soft_loss(&s, &t, 1.0, half)), value(&soft_loss(&t, &s, 1.0, half)));
    assert!((a - b).abs() < 1e-14 && a > 0.0 && a < 2f64.ln(), "{a} {b}");
}

#[test]
fn identical_distributions_score_zero_under_every_divergence() {
    let s = tensor(&student_rows(), Kind::Float);
    for divergence in ALL {
        assert!(value(&soft_loss(&s, &(&s + 3.0), 2.0, divergence)).abs() < 1e-6, "{divergence:?}");
    }
}

#[test]
fn token_logits_exclude_positions_without_a_next_token_under_every_divergence() {
    // B = 1, S = 3, V = 4; position 1 has no next token and absurd logits, which would show
    let (s, t) = (student_rows(), teacher_rows());
    let mut s3 = s.clone();
    s3[1] = vec![80.0, -80.0, 0.0, 0.0];
    let tokens = |rows: &[Vec<f64>]| tensor(rows, Kind::Float).reshape([1, 3, 4]);
    let y = Tensor::from_slice(&[2i64, -100, 0]).reshape([1, 3]);
    let kept = |rows: &[Vec<f64>]| vec![rows[0].clone(), rows[2].clone()];
    for divergence in ALL {
        let kd = LogitKd { temperature: 2.0, alpha: 0.25, divergence };
        let parts = kd.loss(&tokens(&s3), Some(&tokens(&t)), Some(&y));
        let want = reference(&kept(&s), &kept(&t), 2.0, divergence);
        assert!((value(&parts.kd) - want).abs() < 2e-6, "{divergence:?}: {} against {want}", value(&parts.kd));
        // CE over the two kept tokens at T = 1, and the mix
        let ce = -(softmax(&s[0], 1.0)[2].ln() + softmax(&s[2], 1.0)[0].ln()) / 2.0;
        assert!((value(&parts.ce) - ce).abs() < 2e-6, "{divergence:?}: ce {}", value(&parts.ce));
        assert!((value(&parts.loss) - (0.25 * want + 0.75 * ce)).abs() < 2e-6, "{divergence:?}");
    }
}
