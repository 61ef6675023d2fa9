#!/usr/bin/env bash
# The tensor requests of a real `distill` run on the CPU, replayed on the model of PyTorch's CUDA
# caching allocator: checks the plan's order of requests (estimator-wasm/src/memory/alloc_trace.rs)
# against the trainer's own, without a GPU.
#   bench/alloc_trace/run.sh REQUESTS DISTILL_ARGS...
# builds shim.c (cc) and the release `distill`, runs it with DISTILL_ARGS (add --device cpu;
# paths are taken from the folder you run it in) under the shim, writes the request stream to
# REQUESTS, and prints what replay_requests makes of it (segments of 10 MiB and more).
# CUDA-only requests (cuBLAS workspaces, CUDA kernels' own temporaries) are not in a CPU run,
# and a few CPU kernels ask for buffers a CUDA kernel would not.
# docs/memory-model.md section 7c has what it found.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: bench/alloc_trace/run.sh REQUESTS DISTILL_ARGS..." >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
requests=$(realpath -m "$1"); shift
export LIBTORCH="${LIBTORCH:-$root/.venv/libtorch}" LIBTORCH_CXX11_ABI=1
target=$(realpath -m "${CARGO_TARGET_DIR:-$root/target}")
cargo build -q --release --manifest-path "$root/Cargo.toml" -p distill --bin distill
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cc -O2 -shared -fPIC -o "$work/shim.so" "$root/bench/alloc_trace/shim.c" -ldl -lpthread
ALLOC_TRACE="$requests" LD_PRELOAD="$work/shim.so" "$target/release/distill" "$@"
cargo run -q --release --manifest-path "$root/Cargo.toml" -p estimator-wasm --example replay_requests -- \
  "$requests" --segments 10
