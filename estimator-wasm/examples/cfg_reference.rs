//! Prints the cfg.toml reference, generated from the schema's source:
//! `cargo run -p estimator-wasm --example cfg_reference > docs/cfg-reference.md`.
#[path = "../reference/generate.rs"]
mod generate;

fn main() {
    print!("{}", generate::reference(std::path::Path::new(env!("CARGO_MANIFEST_DIR"))));
}
