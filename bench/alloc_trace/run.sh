#!/usr/bin/env bash
# The tensor requests of a real `distill` run on the CPU, replayed on the model of PyTorch's CUDA
# caching allocator: checks the plan's order of requests (estimator-wasm/src/memory/alloc_trace.rs)
# against the trainer's own, without a GPU.
#   bench/alloc_trace/run.sh REQUESTS DISTILL_ARGS...
# builds shim.c (cc), runs the release `distill` with DISTILL_ARGS (add --device cpu) under it,
# writes the request stream to REQUESTS, and prints what replay_requests makes of it (segments of
# 10 MiB and more). CUDA-only requests (cuBLAS workspaces, CUDA kernels' own temporaries) are
# not in a CPU run, and a few CPU kernels ask for buffers a CUDA kernel would not.
# docs/memory-model.md section 7c has what it found.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] || { echo "usage: bench/alloc_trace/run.sh REQUESTS DISTILL_ARGS..." >&2; exit 2; }
requests=$(realpath -m "$1"); shift
export LIBTORCH="${LIBTORCH:-$PWD/.venv/libtorch}" LIBTORCH_CXX11_ABI=1
target=${CARGO_TARGET_DIR:-target}
cargo build -q --release -p distill --bin distill
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cc -O2 -shared -fPIC -o "$work/shim.so" bench/alloc_trace/shim.c -ldl -lpthread
ALLOC_TRACE="$requests" LD_PRELOAD="$work/shim.so" "$target/release/distill" "$@"
cargo run -q --release -p estimator-wasm --example replay_requests -- "$requests" --segments 10
