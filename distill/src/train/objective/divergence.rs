//! The soft term of logit distillation under each divergence `[kd] divergence` names, between
//! the teacher's softened distribution `p = softmax(t/T)` and the student's `q = softmax(s/T)`
//! (rows [K, C]: samples, or a language model's predicting tokens):
//!
//! * `forward_kl`: `KL(p || q)` (Hinton, Vinyals & Dean 2015, arXiv:1503.02531);
//! * `reverse_kl`: `KL(q || p)` (MiniLLM: Gu et al. 2024, arXiv:2306.08543);
//! * `jsd`: GKD's generalised Jensen-Shannon divergence (Agarwal et al. 2024, arXiv:2306.13649),
//!   `M = beta p + (1 - beta) q`, `JSD_beta = beta KL(p || M) + (1 - beta) KL(q || M)`; at
//!   `beta = 0` and `1`, where `JSD_beta` vanishes for every `p` and `q`, its limits scaled by
//!   the vanishing weight: forward KL at 0, reverse KL at 1 (as Hugging Face TRL's GKD trainer);
//! * `tvd`: the total variation distance `0.5 * sum |p - q|`.
//!
//! Each is summed over the classes, averaged over the rows (PyTorch's `batchmean`) and
//! multiplied by `T^2`, the convention of Hinton's forward KL: for the three smooth divergences
//! the gradient in the logits is then of the same order at every T (for forward KL exactly
//! `T (q - p) / K`); the total variation's gradient shrinks only as `1 / T`, so under `T^2` it
//! grows as `T` (use it at T = 1). All of it in fp32 whatever the training precision (f64
//! logits, as the tests' finite differences use, stay f64), from fused log-softmaxes, so that
//! no `0 * log 0` and no epsilon enter.
use estimator_wasm::schema::{KdDivergence, KdSpec};
use tch::{Kind, Reduction, Tensor};

/// The divergence of the soft term, with JSD's teacher weight.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Divergence {
    ForwardKl,
    ReverseKl,
    /// `beta` in [0, 1], the teacher's weight in the mixture.
    Jsd {
        beta: f64,
    },
    Tvd,
}

impl Divergence {
    /// The divergence `[kd]` asks for (`divergence`, and `beta` for JSD).
    pub fn of(kd: &KdSpec) -> Divergence {
        match kd.soft_divergence() {
            KdDivergence::ForwardKl => Divergence::ForwardKl,
            KdDivergence::ReverseKl => Divergence::ReverseKl,
            KdDivergence::Jsd => Divergence::Jsd { beta: kd.jsd_beta() },
            KdDivergence::Tvd => Divergence::Tvd,
        }
    }

    /// The divergence as computed: JSD's endpoints are the two KLs (see the module's
    /// documentation), beta 0 forward and beta 1 reverse; every other one itself.
    pub fn resolved(self) -> Divergence {
        match self {
            Divergence::Jsd { beta } if beta <= 0.0 => Divergence::ForwardKl,
            Divergence::Jsd { beta } if beta >= 1.0 => Divergence::ReverseKl,
            d => d,
        }
    }
}

/// `T^2 * D(softmax(t/T), softmax(s/T))` of student logits `student` and teacher logits
/// `teacher` [K, C] (any float kind), summed over the C classes and averaged over the K rows:
/// a 0-dim fp32 tensor with the student's graph. Forward KL is [`forward_kl`] itself.
pub fn soft_loss(student: &Tensor, teacher: &Tensor, temperature: f64, divergence: Divergence) -> Tensor {
    let divergence = divergence.resolved();
    let rows = student.size()[0].max(1) as f64;
    let scale = temperature * temperature / rows;
    let kind = compute_kind(student);
    let softened = |x: &Tensor| x.to_kind(kind) / temperature;
    let log_probs = || (softened(student).log_softmax(-1, kind), softened(teacher).log_softmax(-1, kind));
    // kl_div(input, target, log_target) = sum exp(target) (target - input) = KL(target || input)
    match divergence {
        Divergence::ForwardKl => forward_kl(student, teacher, temperature),
        Divergence::ReverseKl => {
            let (s_logp, t_logp) = log_probs();
            t_logp.kl_div(&s_logp, Reduction::Sum, true) * scale
        }
        Divergence::Jsd { beta } => {
            let (s_logp, t_logp) = log_probs();
            // log M = log(beta p + (1 - beta) q), in log space: no underflow to log 0
            let log_m = (&t_logp + beta.ln()).logaddexp(&(&s_logp + (1.0 - beta).ln()));
            let to_teacher = log_m.kl_div(&t_logp, Reduction::Sum, true) * beta;
            let to_student = log_m.kl_div(&s_logp, Reduction::Sum, true) * (1.0 - beta);
            (to_teacher + to_student) * scale
        }
        Divergence::Tvd => {
            let q = softened(student).softmax(-1, kind);
            let p = softened(teacher).softmax(-1, kind);
            (q - p).abs().sum(kind) * (0.5 * scale)
        }
    }
}

/// `T^2 * KL(softmax(t/T) || softmax(s/T))`, summed over classes, averaged over rows: the
/// forward KL of Hinton et al., as it has always been computed here.
pub fn forward_kl(student: &Tensor, teacher: &Tensor, temperature: f64) -> Tensor {
    let rows = student.size()[0].max(1) as f64;
    let kind = compute_kind(student);
    let s_logp = (student.to_kind(kind) / temperature).log_softmax(-1, kind);
    let t_logp = (teacher.to_kind(kind) / temperature).log_softmax(-1, kind);
    s_logp.kl_div(&t_logp, Reduction::Sum, true) * (temperature * temperature / rows)
}

/// The kind the soft term is computed in: f64 for f64 logits, else fp32.
fn compute_kind(student: &Tensor) -> Kind {
    match student.kind() {
        Kind::Double => Kind::Double,
        _ => Kind::Float,
    }
}

#[cfg(test)]
#[path = "divergence_tests.rs"]
mod tests;
