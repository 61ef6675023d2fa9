#!/usr/bin/env bash
# Packs what bench/text/gpu_check.sh needs on a GPU host that has PyTorch but no cargo, no
# network and none of this machine's data, into BUNDLE (default .gpu, which this script adds to
# .git/info/exclude), small enough to travel with the working tree (the device tool's 64 MiB):
#   distill.xz    target/release/distill, xz-compressed (it finds libtorch there through
#                 LD_LIBRARY_PATH: the host's torch 2.11.0+cu130 is the version it was built on);
#   minilm/       all-MiniLM-L6-v2's config.json and tokenizer.json, and its model.safetensors
#                 with the weights rounded to fp16 (45 MB instead of 90); make_teacher.py turns
#                 them back into fp32 there and runs its model-card checks on them;
#   text.tar.xz   data/minilm's train.txt, train-large.txt, test.txt and retrieval.tsv.
# It prints what the rounding costs the teacher: the cosine of each held-out sentence's
# embedding under the rounded weights with its fp32 one (the lowest and the mean).
# Run after scripts/setup, scripts/prepare-text and cargo build --release -p distill:
#   bench/text/gpu_pack.sh [BUNDLE]
set -euo pipefail
cd "$(dirname "$0")/../.."
bundle="${1:-.gpu}"
py=.venv/bin/python
for f in target/release/distill data/minilm/train.txt data/minilm/train-large.txt data/minilm/test.txt \
  data/minilm/retrieval.tsv; do
  [ -f "$f" ] || { echo "gpu_pack: $f is missing: run scripts/setup, scripts/prepare-text and cargo build --release -p distill" >&2; exit 2; }
done
grep -qxF "/$bundle/" .git/info/exclude 2>/dev/null || echo "/$bundle/" >>.git/info/exclude
rm -rf "$bundle" && mkdir -p "$bundle/minilm"
xz -T2 -6 -c target/release/distill >"$bundle/distill.xz"
"$py" - "$bundle/minilm" <<'PY'
import os, shutil, sys

import torch
from safetensors.torch import load_file, save_file

from distill_tools.minilm.make_teacher import encode, load_model, model_dir, tokenizer_of

src, dest = model_dir(), sys.argv[1]
tensors = load_file(os.path.join(src, "model.safetensors"))
half = {k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in tensors.items()}
save_file(half, os.path.join(dest, "model.safetensors"))
for f in ("config.json", "tokenizer.json"):
    shutil.copyfile(os.path.join(src, f), os.path.join(dest, f))
# what the rounding costs: each held-out sentence's embedding, rounded weights against fp32
tok = tokenizer_of(src)
with open("data/minilm/test.txt", encoding="utf-8") as f:
    lines = [l for l in f.read().splitlines() if l.strip()][:512]
exact, rounded = load_model(src), load_model(dest)
with torch.no_grad():
    cos = torch.cat([(exact(*encode(tok, b)) * rounded(*encode(tok, b))).sum(1)
                     for b in (lines[i:i + 64] for i in range(0, len(lines), 64))])
print(f"gpu_pack: fp16-rounded teacher against fp32 on {len(lines)} test sentences: "
      f"cosine min {cos.min():.6f}, mean {cos.mean():.6f}")
PY
tar -C data/minilm -cJf "$bundle/text.tar.xz" train.txt train-large.txt test.txt retrieval.tsv
tracked=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
packed=$(du -cb "$bundle" | tail -1 | cut -f1)
total=$((tracked + packed))
echo "gpu_pack: $bundle holds $((packed / 1048576)) MiB; with the tracked files $((total / 1048576)) MiB of 64"
[ "$total" -lt $((64 * 1048576)) ] || { echo "gpu_pack: over the device tool's 64 MiB" >&2; exit 2; }
