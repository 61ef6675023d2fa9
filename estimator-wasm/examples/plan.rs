//! Prints the estimator's plan for a cfg.toml as JSON (or a table with `--table`):
//! `cargo run -p estimator-wasm --example plan -- cfg.toml [batch] [--table]`.
use estimator_wasm::{estimate, Config, Inputs};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: plan <cfg.toml> [batch]");
        std::process::exit(2);
    };
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        eprintln!("{path}: {e}");
        std::process::exit(2)
    });
    let config = Config::from_toml_str(&text).unwrap_or_else(|e| {
        eprintln!("{path}: {e}");
        std::process::exit(2)
    });
    let inputs = Inputs { batch: args.get(2).and_then(|b| b.parse().ok()), ..Inputs::default() };
    match estimate(&config, &inputs) {
        Ok(plan) if args.iter().any(|a| a == "--table") => print!("{}", plan.to_table()),
        Ok(plan) => println!("{}", serde_json::to_string_pretty(&plan).unwrap_or_default()),
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(1)
        }
    }
}
