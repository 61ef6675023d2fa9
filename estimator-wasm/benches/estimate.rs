//! Speed of the estimator: full estimates of a 10-layer MLP plan, and a sweep of 64 batch sizes
//! x 32 student widths (each width compiled once). Run: `cargo bench -p estimator-wasm`.
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use estimator_wasm::{Config, Inputs, MemoryModel};

/// An MLP of `linear` Linear layers (`linear - 1` hidden of `width`, then the head).
fn mlp(width: u64, linear: usize, student: &str, teacher: &str) -> Config {
    let hidden = vec![width.to_string(); linear - 1].join(", ");
    Config::from_toml_str(&format!(
        "[data]\ninput_shape = [1, 28, 28]\nclasses = 10\n\
         [student]\nfamily = \"mlp\"\nhidden = [{hidden}]\n{student}\n\
         [teacher]\npreset = \"fashion-mnist-cnn\"\n{teacher}\n\
         [train]\nbatch_size = 128\n[estimate]\ngpu = \"A100-80GB\"\n"
    ))
    .expect("a valid config")
}

fn estimates(c: &mut Criterion) {
    let config = mlp(512, 10, "", "");
    let model = MemoryModel::new(&config, &Inputs::default()).expect("model");
    let mut b = 0u64;
    // every figure of the step: all phases and moments, the peak, allocator segments,
    // fragmentation, context and total (the per-layer table and category split excluded)
    c.bench_function("mlp10/totals", |bench| {
        bench.iter(|| {
            b = b % 4096 + 1;
            black_box(model.totals(black_box(b)).expect("estimate"))
        })
    });
    // the whole Plan: phases broken down by category, per-layer rows, fit
    c.bench_function("mlp10/plan", |bench| {
        bench.iter(|| {
            b = b % 4096 + 1;
            black_box(model.plan(black_box(b)).expect("estimate"))
        })
    });
    // compile the config (validate, expand and price layers, teacher, stages) once
    c.bench_function("mlp10/compile", |bench| {
        bench.iter(|| black_box(MemoryModel::new(black_box(&config), &Inputs::default()).expect("model")))
    });
    // heavier: LayerNorm and dropout in every block (42 layers), the teacher run every step
    let heavy = mlp(512, 10, "norm = \"layer\"\ndropout = 0.1", "cache_logits = false");
    let heavy = MemoryModel::new(&heavy, &Inputs::default()).expect("model");
    c.bench_function("mlp10-layernorm-dropout-live-teacher/totals", |bench| {
        bench.iter(|| {
            b = b % 4096 + 1;
            black_box(heavy.totals(black_box(b)).expect("estimate"))
        })
    });
    let configs: Vec<Config> = (1..=32).map(|i| mlp(32 * i, 10, "", "")).collect();
    c.bench_function("sweep/64 batches x 32 widths", |bench| {
        bench.iter(|| {
            let mut worst = 0u64;
            for config in &configs {
                let model = MemoryModel::new(config, &Inputs::default()).expect("model");
                for batch in 1..=64u64 {
                    worst = worst.max(model.totals(batch * 16).expect("estimate").total);
                }
            }
            black_box(worst)
        })
    });
}

criterion_group!(benches, estimates);
criterion_main!(benches);
