#!/usr/bin/env bash
# Rebuilds estimator-wasm/fidelity/gpu/h200-2026-12-04/ from the H200 session's logs (extracted to
# $1) with the data subsets the GPU host trained on: Fashion-MNIST's shapes as stand-in .npz files
# (the plan reads only their headers), the first 20,000 lines of data/minilm/train.txt and every
# 4th line of data/smollm2/train.txt (scripts/prepare-text and scripts/prepare-lm make them).
set -euo pipefail
cd "$(dirname "$0")/../.."
L=$1; D=${DISTILL:-target/release/distill}; T=$(mktemp -d)
.venv/bin/python -c "
import numpy as np
for n, k in (('train', 60000), ('test', 10000)):
    np.savez('$T/fm-' + n + '.npz', x=np.zeros((k, 1, 28, 28), np.uint8), y=np.zeros(k, np.int64))"
head -n 20000 data/minilm/train.txt >"$T/minilm.txt"
awk 'NR%4==1' data/smollm2/train.txt >"$T/smollm2.txt"
FM="train=$T/fm-train.npz,test=$T/fm-test.npz"
python3 bench/gpu/make_truth_fixture.py "$D" "$L" estimator-wasm/fidelity/gpu/h200-2026-12-04.new \
  digits-mlp=dp/anchor digits-cnn-bn=dp/bn-anchor digits-mlp-torchrun=dp1-gloo \
  fm-fp32=fm-fp32:$FM fm-bf16=fm-bf16:$FM fm-fp16=fm-fp16:$FM text-fixture=fx-text lm-fixture=fx-lm \
  minilm-bf16=mini-bf16:train=$T/minilm.txt minilm-fp32=mini-fp32:train=$T/minilm.txt \
  minilm-b4096=mini-b4096:train=$T/minilm.txt smollm2-chunked=lm-chunked:train=$T/smollm2.txt \
  smollm2-whole=lm-naive:train=$T/smollm2.txt >/dev/null
rm -rf "$T"
echo "wrote estimator-wasm/fidelity/gpu/h200-2026-12-04.new/ (add the [provenance] table of the old runs.toml)"
