//! Times `MemoryModel::totals` for the benchmark's 10-Linear-layer MLP in a tight loop (for perf):
//! `cargo run --release -p estimator-wasm --example speed -- [iterations]`.
use std::hint::black_box;
use std::time::Instant;

use estimator_wasm::{Config, Inputs, MemoryModel};

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(2_000_000);
    let hidden = ["512"; 9].join(", ");
    let config = Config::from_toml_str(&format!(
        "[data]\ninput_shape = [1, 28, 28]\nclasses = 10\n[student]\nfamily = \"mlp\"\nhidden = [{hidden}]\n\
         [teacher]\npreset = \"fashion-mnist-cnn\"\n[train]\nbatch_size = 128\n[estimate]\ngpu = \"A100-80GB\"\n"
    ))
    .expect("config");
    let model = MemoryModel::new(&config, &Inputs::default()).expect("model");
    let start = Instant::now();
    let mut worst = 0;
    for i in 0..n {
        worst = worst.max(model.totals(black_box(i % 4096 + 1)).expect("estimate").total);
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{n} estimates in {secs:.3} s: {:.0} ns each, {:.2} M/s ({worst})",
        secs * 1e9 / n as f64,
        n as f64 / secs / 1e6
    );
}
