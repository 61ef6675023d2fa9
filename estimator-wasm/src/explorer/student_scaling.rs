//! The form's size levers applied to a config: the input size (image height or sequence
//! length) and the student's width and depth multipliers.
use crate::schema::limits::MAX_BLOCKS;
use crate::schema::{Config, Family, StudentSpec};

/// The form's input size for `config`: image height, sequence length or feature count.
pub(crate) fn base_input(config: &Config) -> u64 {
    match config.data.input_shape.as_slice() {
        [_, h, _] => *h,
        [d] => *d,
        _ => 1,
    }
}

/// Sets the input size: `[C, H, W]` becomes `[C, n, W * n / H]` (aspect kept), `[d]` becomes `[n]`.
pub(crate) fn set_input(config: &mut Config, n: u64) {
    let shape = &mut config.data.input_shape;
    match shape.as_mut_slice() {
        [_, h, w] if *h != n => {
            *w = scaled(*w, n as f64 / *h as f64);
            *h = n;
        }
        [d] => *d = n,
        _ => {}
    }
}

/// `v * f` rounded, at least 1 (saturating far beyond any real size).
fn scaled(v: u64, f: f64) -> u64 {
    ((v as f64) * f).round().clamp(1.0, 1e15) as u64
}

/// Resizes a list of widths to `round(n * depth)` entries (at least 1 when it had any),
/// growing with `grow(last)`. Never cut short: a list past [`MAX_BLOCKS`] is the schema's to
/// refuse with its key and bound, not to be priced as a shorter one. At most 16 x
/// [`MAX_BLOCKS`] entries (the depth multiplier is at most 16) plus one.
fn resize(list: &mut Vec<u64>, depth: f64, grow: impl Fn(u64) -> u64) {
    if list.is_empty() {
        return;
    }
    let n = scaled(list.len() as u64, depth).min(16 * MAX_BLOCKS as u64 + 1) as usize;
    while list.len() < n {
        let next = grow(*list.last().unwrap_or(&1));
        list.push(next);
    }
    list.truncate(n);
}

/// Scales a student: widths by `width`, block or layer counts by `depth`. A transformer keeps
/// its head size and its query-to-key/value head ratio; its MLP width follows the width. Teacher
/// layers initialise a student only at its own width and depth: a transformer scaled to another
/// `d_model` or layer count drops `init_from_teacher` (it starts from random weights).
pub fn scale_student(s: &mut StudentSpec, width: f64, depth: f64) {
    match s.family {
        Family::Cnn => resize(&mut s.channels, depth, |c| c.saturating_mul(2).min(1 << 16)),
        Family::Mlp => resize(&mut s.hidden, depth, |w| w),
        Family::Transformer => {}
    }
    for w in s.channels.iter_mut().chain(s.hidden.iter_mut()) {
        *w = scaled(*w, width);
    }
    if let Some(t) = &mut s.transformer {
        let before = (t.d_model, t.layers);
        let head_dim = (t.d_model / t.heads.max(1)).max(1);
        let ratio = (t.heads / t.kv_heads().max(1)).max(1);
        let heads = scaled(t.heads, width);
        t.d_model = heads.saturating_mul(head_dim);
        if t.kv_heads.is_some() {
            // the largest divisor of `heads` not above heads / ratio
            let target = (heads / ratio).max(1);
            t.kv_heads = (1..=target).rev().find(|k| heads % k == 0);
        }
        t.heads = heads;
        t.mlp_width = t.mlp_width.map(|m| scaled(m, width));
        let layers = scaled(t.layers, depth);
        let resized = (t.d_model, layers) != before;
        t.layers = layers;
        if resized {
            s.init_from_teacher.clear();
        }
    }
}
