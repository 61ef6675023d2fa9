//! A factorised language-model head (`student.transformer.head_rank = r`) fitted to the
//! teacher's head on the student's own hidden states, before training.
//!
//! The teacher's head W [V, d] costs d x V multiply-adds a token (SmolLM2: 576 x 49,152, as much
//! as 8 of its 30 layers). The student's head is `up(down(h))`, `down` [r, d] and `up` [V, r].
//! Truncating W's singular values alone ruins it: a language model's head and hidden states are
//! anisotropic, and the directions W stretches most are not those h occupies (SmolLM2 at
//! r = 192: held-out perplexity 20 becomes ~100,000). Instead the rank-r map M [d, V] that
//! minimises the logits' error over the hidden states h [N, d] the head will see,
//! `E ||h W^T - h M||^2`, is taken. With C = E[h^T h] (d x d), that error is
//! `||C^(1/2) (W^T - M)||_F^2`, so by Eckart-Young M = C^(-1/2) [C^(1/2) W^T]_r, the best
//! rank-r approximation of the whitened head. W's rows are first centred on their mean: softmax
//! ignores a shift of all of a token's logits, so the rank is spent on what tells tokens apart (the idea of activation-aware SVD compression:
//! ASVD, Yuan et al. 2023, arXiv:2312.05821; SVD-LLM, Wang et al. 2024, arXiv:2403.07378).
//!
//! Computed in float64 from d x d matrices only: G = W^T W; C is damped by 1% of its mean
//! diagonal (GPTQ's default, Frantar et al. 2022, arXiv:2210.17323), so directions the sample
//! barely visits (fewer tokens than the rank) keep well-scaled factors; the eigenvectors U_r and
//! values s_r^2 (largest r) of C^(1/2) G C^(1/2); then `down^T = C^(-1/2) U_r diag(s_r)^(1/2)`
//! and `up = W C^(1/2) U_r diag(s_r)^(-1/2)`, which splits the singular values evenly between
//! the factors. `down^T up^T = P W^T` with `P = C^(-1/2) U_r U_r^T C^(1/2)`: W^T itself when
//! r = d. Reported: the share of the logits' variance over the sample (about their mean over
//! its tokens, which even rank 1 reproduces) that the factorised head keeps, computed on the
//! undamped C: `1 - tr(C (I - P) G (I - P)^T) / tr((C - m m^T) G)`, m the mean hidden state.
//!
//! The hidden states are the student's after its teacher initialisation (embedding and copied
//! layers), at the non-padding positions of the first [`HEAD_FIT_WINDOWS`] training windows:
//! the same on every build of the student, so a run and its resume start alike.
use tch::nn::VarStore;
use tch::{Device, Kind, Tensor};

use super::Student;
use crate::host::error::{DistillError, Result};
use crate::inputs::data::ModelInput;

/// Training windows whose hidden states the head is fitted on (64 x 128 = 8,192 tokens for the
/// SmolLM2 example: C is 576 x 576).
pub const HEAD_FIT_WINDOWS: i64 = 64;

/// Windows per no-grad forward while collecting the hidden states, at most (fewer when the
/// run's micro-batch or evaluation batch is smaller).
const CHUNK: i64 = 8;

/// The damping added to C's diagonal, as a share of its mean diagonal.
const DAMPING: f64 = 0.01;

/// What the fit did, for the run's progress line.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadFit {
    /// The head's rank r.
    pub rank: i64,
    /// Non-padding tokens whose hidden states were used.
    pub tokens: i64,
    /// The share of the variance of the teacher head's logits on those hidden states (about
    /// their mean over the tokens, each token's logits centred over the vocabulary) that the
    /// factorised head keeps: 1 - its squared error / that variance (at most 1).
    pub kept: f64,
}

/// Fits `head.down.weight` [r, d] and `head.up.weight` [V, r] of `student` (variables `vs`) to
/// the teacher's head `teacher_head` [V, d] on the student's hidden states over `sample` (token
/// ids [N, S] and their mask), under `no_grad`, the body run on `pass_rows` windows at a time.
///
/// # Errors
/// [`DistillError::Usage`] when the student has no factorised head, or `teacher_head` is not
/// [V, d] of the student's vocabulary and width.
pub fn fit_head(
    student: &Student,
    vs: &VarStore,
    teacher_head: &Tensor,
    sample: &ModelInput,
    pass_rows: i64,
) -> Result<HeadFit> {
    let vars = vs.variables();
    let (Some(down), Some(up)) = (vars.get("head.down.weight"), vars.get("head.up.weight")) else {
        return Err(DistillError::Usage("student.transformer.head_rank: the student has no factorised head".into()));
    };
    let (rank, d, v) = (down.size()[0], down.size()[1], up.size()[0]);
    if teacher_head.size() != [v, d] {
        return Err(DistillError::Usage(format!(
            "student.transformer.head_rank: the teacher's head is {:?} but the student's vocab and d_model give [{v}, {d}]: set them to the teacher's",
            teacher_head.size()
        )));
    }
    let (moments, tokens) = tch::no_grad(|| hidden_moments(student, sample, d, pass_rows));
    let (down_w, up_w, kept) = factorise(teacher_head, &moments, rank);
    tch::no_grad(|| {
        down.shallow_clone().copy_(&down_w.to_kind(down.kind()).to_device(down.device()));
        up.shallow_clone().copy_(&up_w.to_kind(up.kind()).to_device(up.device()));
    });
    Ok(HeadFit { rank, tokens, kept })
}

/// The second moment and mean of hidden states h [N, d]: `E[h^T h]` [d, d] and `E[h]` [d].
pub struct Moments {
    pub second: Tensor,
    pub mean: Tensor,
}

impl Moments {
    /// The moments of the rows of `h` [N, d] (float64).
    pub fn of(h: &Tensor) -> Moments {
        let n = h.size()[0].max(1) as f64;
        Moments { second: h.tr().matmul(h) / n, mean: h.sum_dim_intlist(0, false, None) / n }
    }
}

/// The [`Moments`] (float64, CPU) of the student's last hidden states (the input of its head
/// block) at the mask's non-padding positions of `sample`, and the number of those positions.
/// The body runs on at most `pass_rows` windows at a time (no more than the batches the memory
/// plan prices) and the sums are accumulated, so neither the device nor the host holds the
/// hidden states of the whole sample.
fn hidden_moments(student: &Student, sample: &ModelInput, d: i64, pass_rows: i64) -> (Moments, i64) {
    let net = student.net();
    let body = 0..net.block_count() - 1;
    let rows = sample.rows();
    let step = pass_rows.clamp(1, CHUNK);
    let mut second = Tensor::zeros([d, d], (Kind::Double, Device::Cpu));
    let mut sum = Tensor::zeros([d], (Kind::Double, Device::Cpu));
    let mut tokens = 0;
    let mut start = 0;
    while start < rows {
        let part = sample.narrow(start, step.min(rows - start));
        let h = net.forward_blocks(&part.x, body.clone(), part.mask.as_ref(), false).to_kind(Kind::Double);
        let h = h.reshape([-1, d]).to_device(Device::Cpu);
        let h = match &part.mask {
            Some(mask) => h.index_select(0, &mask.reshape([-1]).to_device(Device::Cpu).nonzero().squeeze_dim(1)),
            None => h,
        };
        second += h.tr().matmul(&h);
        sum += h.sum_dim_intlist(0, false, None);
        tokens += h.size()[0];
        start += step;
    }
    let n = tokens.max(1) as f64;
    (Moments { second: second / n, mean: sum / n }, tokens)
}

/// The factors (`down` [r, d], `up` [V, r], float64) of the rank-r map closest to `w`^T [d, V]
/// (its rows centred) under the damped second moment of `m`, and the share of the logits'
/// variance they keep (see the module docs).
pub fn factorise(w: &Tensor, m: &Moments, rank: i64) -> (Tensor, Tensor, f64) {
    let w = w.to_kind(Kind::Double).to_device(Device::Cpu);
    // softmax ignores a shift of all of a token's logits: fit the head's rows about their mean
    let w = &w - w.mean_dim(0, true, None);
    let c = &m.second;
    let d = c.size()[0];
    let eye = Tensor::eye(d, (Kind::Double, Device::Cpu));
    let mean_diagonal = f64::try_from(c.trace()).unwrap_or(0.0) / d as f64;
    let damped = c + &eye * (DAMPING * mean_diagonal).max(1e-30);
    let (lambda, q) = damped.linalg_eigh("L");
    let root = lambda.clamp_min(1e-300).sqrt();
    let c_half = q.matmul(&(root.unsqueeze(1) * q.tr()));
    let c_inv_half = q.matmul(&(root.reciprocal().unsqueeze(1) * q.tr()));
    let g = w.tr().matmul(&w);
    let b = c_half.matmul(&g).matmul(&c_half);
    let b = (&b + b.tr()) / 2.0; // symmetric to the last bit, for eigh
    let (s2, u) = b.linalg_eigh("L"); // ascending
    let top = Tensor::arange_start_step(d - 1, d - 1 - rank, -1, (Kind::Int64, Device::Cpu));
    let (s2_r, u_r) = (s2.index_select(0, &top).clamp_min(1e-300), u.index_select(1, &top));
    let s_quarter = s2_r.sqrt().sqrt(); // s^(1/2)
    let down = c_inv_half.matmul(&u_r) * s_quarter.unsqueeze(0); // [d, r]
    let up = w.matmul(&c_half.matmul(&u_r)) / s_quarter.unsqueeze(0); // [V, r]

    // what is kept, on the undamped moments: the error of P W^T against W^T over the variance
    let rest = &eye - c_inv_half.matmul(&u_r).matmul(&u_r.tr()).matmul(&c_half); // I - P
    let error = f64::try_from(c.matmul(&rest).matmul(&g).matmul(&rest.tr()).trace()).unwrap_or(0.0);
    let centred = c - m.mean.unsqueeze(1).matmul(&m.mean.unsqueeze(0));
    let variance = f64::try_from(centred.matmul(&g).trace()).unwrap_or(0.0);
    let kept = 1.0 - error / variance.max(1e-300);
    (down.tr().contiguous(), up, kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `E ||h w^T - h down^T up^T||^2` over the rows of `h`.
    fn error(h: &Tensor, w: &Tensor, down: &Tensor, up: &Tensor) -> f64 {
        let full = h.matmul(&w.tr());
        let low = h.matmul(&down.tr()).matmul(&up.tr());
        f64::try_from((full - low).square().sum(Kind::Double)).unwrap() / h.size()[0] as f64
    }

    /// `E ||(h - mean h) w^T||^2`: the variance of the logits over the rows of `h`.
    fn variance(h: &Tensor, w: &Tensor) -> f64 {
        let logits = h.matmul(&w.tr());
        let about = &logits - logits.mean_dim(0, true, None);
        f64::try_from(about.square().sum(Kind::Double)).unwrap() / h.size()[0] as f64
    }

    #[test]
    fn full_rank_reproduces_the_head_and_rank_r_reports_what_it_misses() {
        let _rng = crate::torch::test_rng::lock();
        tch::manual_seed(0);
        let (n, d, v): (i64, i64, i64) = (400, 6, 20);
        // anisotropic hidden states with a mean: the columns scaled 10, 5, 2, 1, 0.5, 0.1, plus 3
        let scales = Tensor::from_slice(&[10.0, 5.0, 2.0, 1.0, 0.5, 0.1]).to_kind(Kind::Double);
        let h = Tensor::randn([n, d], (Kind::Double, Device::Cpu)) * scales.unsqueeze(0) + 3.0;
        let w = Tensor::randn([v, d], (Kind::Double, Device::Cpu));
        let m = Moments::of(&h);
        let (down, up, kept) = factorise(&w, &m, d);
        let w = &w - w.mean_dim(0, true, None); // the fit is to the centred rows
        assert!(error(&h, &w, &down, &up) < 1e-12 * variance(&h, &w));
        assert!((kept - 1.0).abs() < 1e-12);
        // rank 2: the reported share is the one missed on these states, exactly; plain
        // truncation of w's singular values does worse on them
        let (down, up, kept) = factorise(&w, &m, 2);
        let err = error(&h, &w, &down, &up);
        assert!((err / variance(&h, &w) - (1.0 - kept)).abs() < 1e-9, "{err} against {kept}");
        let (u, s, right) = w.svd(true, true);
        let plain = u.narrow(1, 0, 2).matmul(&s.narrow(0, 0, 2).diag(0)).matmul(&right.narrow(1, 0, 2).tr());
        let identity = Tensor::eye(d, (Kind::Double, Device::Cpu));
        assert!(err < 0.5 * error(&h, &w, &identity, &plain), "{err} against plain truncation");
        assert_eq!((down.size(), up.size()), (vec![2, d], vec![v, 2]));
    }

    /// Fewer tokens (3) than the rank (5): the directions the sample never visits get damped
    /// variance, so `down`'s rows stay within a few times of one another (undamped, a 1e-10
    /// ridge gave rows ~300x the others, and training blew up on them).
    #[test]
    fn a_sample_smaller_than_the_rank_gives_well_scaled_factors() {
        let _rng = crate::torch::test_rng::lock();
        tch::manual_seed(1);
        let h = Tensor::randn([3, 6], (Kind::Double, Device::Cpu));
        let w = Tensor::randn([20, 6], (Kind::Double, Device::Cpu));
        let (down, _, kept) = factorise(&w, &Moments::of(&h), 5);
        let norms = down.norm_scalaropt_dim(2, [1], false);
        let ratio = f64::try_from(norms.max() / norms.min()).unwrap();
        assert!(ratio < 10.0, "row norms {norms:?}");
        assert!(kept > 0.99, "{kept}"); // 3 states span 3 directions: rank 5 keeps them
    }
}
