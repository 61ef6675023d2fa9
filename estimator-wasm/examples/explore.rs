//! Prints the explorer's sweep (`estimator_wasm::explorer::sweep`) for a form given as JSON,
//! natively: the reference the browser end-to-end test compares the page's numbers with.
//!
//! `cargo run -p estimator-wasm --features explorer --example explore -- '{"teacher": "gpt2", "batch": 4}' [--cfg]`
//! (`-` reads the JSON from stdin; `--cfg` prints the chosen student's cfg.toml instead).
use std::io::Read;

use estimator_wasm::explorer::sweep::sweep;
use estimator_wasm::explorer::ExplorerForm;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(arg) = args.iter().find(|a| !a.starts_with("--")) else {
        eprintln!("usage: explore <form JSON | -> [--cfg]");
        std::process::exit(2);
    };
    let mut json = arg.clone();
    if arg == "-" {
        json.clear();
        if let Err(e) = std::io::stdin().read_to_string(&mut json) {
            eprintln!("stdin: {e}");
            std::process::exit(2);
        }
    }
    let form: ExplorerForm = serde_json::from_str(&json).unwrap_or_else(|e| {
        eprintln!("form JSON: {e}");
        std::process::exit(2)
    });
    let out = if args.iter().any(|a| a == "--cfg") {
        form.cfg_toml().map(|t| t.to_string())
    } else {
        sweep(&form).map(|s| serde_json::to_string_pretty(&s).unwrap_or_default())
    };
    match out {
        Ok(text) => println!("{text}"),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1)
        }
    }
}
