//! The defaults of the cfg.toml keys that serde fills in (`#[serde(default = "...")]`).

pub(crate) fn yes() -> bool {
    true
}
pub(crate) fn one() -> f64 {
    1.0
}
pub(crate) fn one_u64() -> u64 {
    1
}
pub(crate) fn default_fragmentation() -> f64 {
    0.10
}
pub(crate) fn default_safety_margin() -> f64 {
    0.05
}
/// Whether `v` is 3, the default conv kernel (serde's `skip_serializing_if` takes a reference).
pub(crate) fn is_three(v: &u64) -> bool {
    *v == 3
}

/// Whether `v` is 0 (an unset count, left out of a written cfg.toml).
pub(crate) fn is_zero(v: &u64) -> bool {
    *v == 0
}

pub(crate) fn three() -> u64 {
    3
}
pub(crate) fn four() -> f64 {
    4.0
}
pub(crate) fn ten() -> u64 {
    10
}
pub(crate) fn hundred() -> u64 {
    100
}
pub(crate) fn fifty() -> u64 {
    50
}
pub(crate) fn point_nine() -> f64 {
    0.9
}
/// 256, not larger: a no-grad pass is bound by memory traffic on a CPU, and bigger batches
/// spill each layer's output out of the caches. Caching the teacher's outputs on 2 cores
/// (2026-12-01): the Fashion-MNIST teacher CNN over 60,000 images took 6.4-8.2 s at 128-256
/// against 15-20 s at 1024; all-MiniLM-L6-v2 over 20,000 sentences 535-568 sentences/s at 256
/// against 342-369 at 1024. A GPU keeps its speed at this size.
pub(crate) fn default_eval_batch() -> u64 {
    256
}
pub(crate) fn default_lr() -> f64 {
    1e-3
}
pub(crate) fn default_weight_decay() -> f64 {
    0.01
}
pub(crate) fn default_betas() -> [f64; 2] {
    [0.9, 0.999]
}
pub(crate) fn default_eps() -> f64 {
    1e-8
}
pub(crate) fn norm_eps() -> f64 {
    1e-5
}
