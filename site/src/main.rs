//! The explorer's entry point: `explorer::run()` mounts the Yew app on `<body>`.

/// talc instead of Rust's dlmalloc: a smaller wasm for the same speed (site/Cargo.toml).
#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOCATOR: talc::wasm::WasmDynamicTalc = talc::wasm::new_wasm_dynamic_allocator();

fn main() {
    explorer::run();
}
